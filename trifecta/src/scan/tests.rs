#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::graph::Channel;

fn scan(files: &[(&str, &str)], manifest: Option<&str>) -> Scan {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect();
    scan_source(&files, manifest).unwrap()
}

/// `tool: effect/channel@host ...` lines, one per tool, for compact asserts.
fn summary(scan: &Scan) -> Vec<String> {
    scan.graph
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Tool)
        .map(|n| {
            let mut caps: Vec<String> = n
                .capabilities
                .iter()
                .map(|c| {
                    let host = c
                        .destination
                        .as_ref()
                        .and_then(|d| d.host.clone())
                        .map(|h| format!("@{h}"))
                        .unwrap_or_default();
                    format!("{:?}/{}{host}", c.effect, c.channel)
                })
                .collect();
            caps.sort();
            caps.dedup();
            format!("{}: {}", n.id, caps.join(" "))
        })
        .collect()
}

#[test]
fn langchain_tool_with_helper_hop() {
    let s = scan(
        &[(
            "agent/tools.py",
            r#"
import os
import requests
from langchain_core.tools import tool

API = "https://api.github.com"

def _token():
    return os.environ["GITHUB_TOKEN"]

@tool
def read_issue(number: int) -> str:
    """Reads an issue."""
    r = requests.get(f"{API}/repos/acme/app/issues/{number}")
    return r.json()["body"]

@tool("post_comment")
def comment(number: int, body: str) -> str:
    """Comments."""
    headers = {"Authorization": f"Bearer {_token()}"}
    requests.post(f"https://api.github.com/repos/acme/app/issues/{number}/comments", json={"body": body}, headers=headers)
    return "ok"
"#,
        )],
        None,
    );
    assert_eq!(
        summary(&s),
        vec![
            "post_comment: Egress/http@api.github.com ReadsSecret/env",
            "read_issue: UntrustedInput/http@api.github.com",
        ]
    );
    let read = s.graph.node("read_issue").unwrap();
    assert_eq!(
        read.source.as_ref().unwrap().to_string(),
        "agent/tools.py:12"
    );
    // LangChain tools run in the agent's process, not over MCP.
    assert_eq!(read.mcp, None);
    let cap = &read.capabilities[0];
    assert_eq!(cap.call.as_deref(), Some("requests.get"));
    assert_eq!(cap.source.as_ref().unwrap().line, 14);
    let d = cap.destination.as_ref().unwrap();
    assert_eq!(d.method.as_deref(), Some("GET"));
    assert_eq!(d.path.as_deref(), Some("/repos/acme/app/issues/**"));
    // __llm__ first, edges in both directions.
    assert_eq!(s.graph.nodes[0].id, LLM);
    assert_eq!(s.graph.edges.len(), 6);
}

#[test]
fn fastmcp_annotations_are_cross_checked() {
    let s = scan(
        &[(
            "server.py",
            r#"
from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations
import httpx

app = FastMCP("notes")

@app.tool(name="sync_notes", annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
async def sync(note: str) -> str:
    async with httpx.AsyncClient() as client:
        await client.put("https://notes.example.com/api/notes", json={"n": note})
    return "ok"

@app.tool(annotations={"readOnlyHint": True})
def count() -> int:
    return 3
"#,
        )],
        None,
    );
    assert_eq!(
        summary(&s),
        vec!["count: ", "sync_notes: Egress/http@notes.example.com"]
    );
    let sync = s.graph.node("sync_notes").unwrap();
    assert_eq!(sync.mcp.as_ref().and_then(|m| m.host.as_deref()), None);
    let cap = &sync.capabilities[0];
    assert_eq!(cap.call.as_deref(), Some("httpx.AsyncClient().put"));
    // A FastMCP server's tools are called over MCP, by their served name.
    assert_eq!(
        sync.mcp.as_ref().map(|m| m.name.as_str()),
        Some("sync_notes")
    );
    assert!(s.graph.node("count").unwrap().mcp.is_some());
    assert_eq!(s.diagnostics.len(), 2, "{:#?}", s.diagnostics);
    assert!(s.diagnostics[0].message.contains("readOnlyHint"));
    assert!(
        s.diagnostics[0]
            .message
            .contains("httpx.AsyncClient().put at line 11")
    );
    assert!(s.diagnostics[1].message.contains("openWorldHint"));
}

#[test]
fn lowlevel_dispatch_makes_one_tool_per_branch() {
    let s = scan(
        &[(
            "srv.py",
            r#"
import subprocess, sqlite3
from mcp.server import Server
server = Server("x")

def run_query(sql):
    conn = sqlite3.connect("/data/app.db")
    return conn.execute(sql).fetchall()

@server.call_tool()
async def call_tool(name: str, arguments: dict):
    if name == "query":
        return run_query(arguments["sql"])
    elif name in ("shell", "sh"):
        return subprocess.run(arguments["cmd"], shell=True)
    match name:
        case "fetch_feed":
            import feedparser
            return feedparser.parse("https://blog.example.org/rss")
    raise ValueError(name)
"#,
        )],
        None,
    );
    assert_eq!(
        summary(&s),
        vec![
            "fetch_feed: UntrustedInput/feed@blog.example.org",
            "query: ReadsInternal/database",
            "sh: Egress/exec",
            "shell: Egress/exec",
        ]
    );
    assert!(s.graph.nodes[1..].iter().all(|n| n.mcp.is_some()));
}

#[test]
fn basetool_and_function_tool() {
    let s = scan(
        &[(
            "crew.py",
            r#"
import smtplib
from crewai.tools import BaseTool
from agents import function_tool
from tavily import TavilyClient

class MailTool(BaseTool):
    name: str = "send_mail"
    description: str = "Sends mail"

    def _run(self, to: str, body: str) -> str:
        return self._send(to, body)

    def _send(self, to, body):
        with smtplib.SMTP("smtp.example.com", 587) as s:
            s.sendmail("bot@example.com", to, body)

@function_tool(name_override="web_search")
def search(q: str) -> str:
    return TavilyClient().search(q)
"#,
        )],
        None,
    );
    assert_eq!(
        summary(&s),
        vec![
            "send_mail: Egress/mail@smtp.example.com",
            "web_search: UntrustedInput/search",
        ]
    );
    let mail = s.graph.node("send_mail").unwrap();
    assert_eq!(
        mail.capabilities[0].destination.as_ref().unwrap().port,
        Some(587)
    );
}

#[test]
fn typescript_conventions() {
    let s = scan(
        &[(
            "src/server.ts",
            r##"
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { CallToolRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { WebClient } from "@slack/web-api";
import { exec } from "node:child_process";
import pg from "pg";

const server = new McpServer({ name: "x", version: "1" });
const slack = new WebClient(process.env.SLACK_TOKEN);
const pool = new pg.Pool();

async function lookup(id: string) {
  const res = await pool.query("select * from customers where id = $1", [id]);
  return res.rows;
}

server.tool("read_page", "reads", { url: z.string() }, async ({ url }) => {
  const res = await fetch(`https://docs.example.com/${url}`);
  return { content: [{ type: "text", text: await res.text() }] };
});

server.registerTool("notify", { description: "n", annotations: { readOnlyHint: true } }, async ({ text }) => {
  await slack.chat.postMessage({ channel: "#ops", text });
  return { content: [] };
});

server.server.setRequestHandler(CallToolRequestSchema, async (request) => {
  switch (request.params.name) {
    case "customer":
      return { content: await lookup(request.params.arguments.id) };
    case "run":
    case "exec": {
      exec(String(request.params.arguments.cmd));
      return { content: [] };
    }
    default:
      throw new Error("unknown");
  }
});
"##,
        )],
        None,
    );
    assert_eq!(
        summary(&s),
        vec![
            "customer: ReadsInternal/database",
            "exec: Egress/exec",
            "notify: Egress/chat",
            "read_page: UntrustedInput/http@docs.example.com",
            "run: Egress/exec",
        ]
    );
    assert_eq!(s.diagnostics.len(), 1, "{:#?}", s.diagnostics);
    assert!(s.diagnostics[0].message.contains("notify"));
}

#[test]
fn manifest_adds_tools_agents_and_flags() {
    let s = scan(
        &[(
            "a.py",
            r#"
from langchain_core.tools import tool
import requests

@tool
def web_search(q: str) -> str:
    return requests.get("https://search.example.com", params={"q": q}).text

@tool
def redact(text: str) -> str:
    return text
"#,
        )],
        Some(
            r#"
tools:
  - name: crm_lookup
    capabilities: [{effect: readsInternal, channel: database, destination: {host: crm.internal}}]
loadBearing: [crm_lookup]
declassifiers: [{tool: redact, channels: [mail]}]
agents: [{name: researcher, tools: [web_search]}]
"#,
        ),
    );
    let ids: Vec<&str> = s.graph.nodes.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(
        ids,
        vec![
            LLM,
            "crm_lookup",
            "redact",
            "researcher/__llm__",
            "web_search"
        ]
    );
    assert!(s.graph.node("crm_lookup").unwrap().load_bearing);
    assert_eq!(
        s.graph.node("redact").unwrap().declassifies,
        vec![Channel::Mail]
    );
    let has = |f: &str, t: &str, k: EdgeKind| {
        s.graph
            .edges
            .iter()
            .any(|e| e.from == f && e.to == t && e.kind == k)
    };
    assert!(has("web_search", "researcher/__llm__", EdgeKind::Data));
    assert!(has("researcher/__llm__", "web_search", EdgeKind::Control));
    assert!(has(LLM, "researcher/__llm__", EdgeKind::Control));
    assert!(has("researcher/__llm__", LLM, EdgeKind::Data));
    assert!(!has("web_search", LLM, EdgeKind::Data));
    s.graph.indexed().unwrap();
}

#[test]
fn manifest_errors_name_the_problem() {
    let files = vec![("a.py".to_string(), String::new())];
    let e = scan_source(&files, Some("loadBearing: [ghost]\n")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "agentgate.yaml: loadBearing names unknown tool \"ghost\""
    );
    let e = scan_source(&files, Some("agent: []\n")).unwrap_err();
    assert!(e.to_string().starts_with("agentgate.yaml: "), "{e}");
    assert!(e.to_string().contains("agent"), "{e}");
}

#[test]
fn syntax_errors_are_diagnostics() {
    let s = scan(
        &[
            ("bad.py", "def broken(:\n    pass\n"),
            (
                "ok.py",
                "from langchain_core.tools import tool\n@tool\ndef t() -> str:\n    return 'x'\n",
            ),
        ],
        None,
    );
    assert_eq!(summary(&s), vec!["t: "]);
    assert_eq!(s.diagnostics.len(), 1);
    assert_eq!(s.diagnostics[0].level, NoteLevel::Warning);
    assert_eq!(s.diagnostics[0].source.as_ref().unwrap().file, "bad.py");
}

#[test]
fn output_is_independent_of_input_order() {
    let a = (
        "a.py",
        "from langchain_core.tools import tool\nimport os\n@tool\ndef x() -> str:\n    return os.getenv('HOME')\n",
    );
    let b = (
        "b.ts",
        "server.tool('y', async () => { await fetch('https://b.io/x', { method: 'POST' }); });\n",
    );
    assert_eq!(scan(&[a, b], None), scan(&[b, a], None));
    assert_eq!(
        summary(&scan(&[a, b], None)),
        vec!["x: ReadsInternal/env", "y: Egress/http@b.io"]
    );
}

#[test]
fn scan_path_walks_and_skips() {
    let dir = std::env::temp_dir().join(format!("agentgate-scan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("pkg")).unwrap();
    std::fs::create_dir_all(dir.join("node_modules/x")).unwrap();
    std::fs::write(
        dir.join("pkg/t.py"),
        "from langchain_core.tools import tool\nimport os\n@tool\ndef leak() -> str:\n    return os.system('curl x')\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("node_modules/x/i.ts"),
        "server.tool('z', async () => {});\n",
    )
    .unwrap();
    std::fs::write(dir.join("agentgate.yaml"), "loadBearing: [leak]\n").unwrap();
    let s = scan_path(&dir).unwrap();
    assert_eq!(s.files, 1);
    assert_eq!(summary(&s), vec!["leak: Egress/exec"]);
    assert_eq!(
        s.graph.node("leak").unwrap().source.as_ref().unwrap().file,
        "pkg/t.py"
    );
    let single = scan_path(&dir.join("pkg/t.py")).unwrap();
    assert_eq!(
        single
            .graph
            .node("leak")
            .unwrap()
            .source
            .as_ref()
            .unwrap()
            .file,
        "t.py"
    );
    std::fs::write(dir.join("agentgate.yaml"), "loadBearing: [nope]\n").unwrap();
    assert!(scan_path(&dir).is_err());
    assert!(scan_path(&dir.join("missing")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn notes_print_like_compiler_diagnostics() {
    let note = Note {
        level: NoteLevel::Error,
        message: "not UTF-8, not scanned".into(),
        source: Some(SourceLocation {
            file: "x.py".into(),
            line: 3,
        }),
    };
    assert_eq!(note.to_string(), "x.py:3: error: not UTF-8, not scanned");
}

#[test]
fn typescript_env_destructuring_and_constant_names() {
    let s = scan(
        &[(
            "a.ts",
            r#"
const NAME = "deploy";
server.tool(NAME, async () => {
  const { DEPLOY_TOKEN, REGION: region } = process.env;
  return { content: [] };
});
"#,
        )],
        None,
    );
    assert_eq!(
        summary(&s),
        vec!["deploy: ReadsInternal/env ReadsSecret/env"]
    );
}

#[test]
fn deeply_nested_sources_do_not_overflow() {
    let depth = 50_000;
    let py = format!(
        "from langchain_core.tools import tool\n@tool\ndef deep() -> str:\n    return requests.get({}\"https://a.io\"{})\n",
        "(".repeat(depth),
        ")".repeat(depth)
    );
    let ts = format!(
        "server.tool(\"deep_ts\", async () => {{ return {}fetch(\"https://b.io\"){}; }});\n",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let s = scan(&[("deep.py", &py), ("deep.ts", &ts)], None);
    assert_eq!(s.graph.nodes.len(), 3);
}

#[test]
fn init_state_resolves_self_attributes() {
    let s = scan(
        &[(
            "t.py",
            r#"
import requests
from langchain_core.tools import BaseTool

class Poster(BaseTool):
    name: str = "poster"

    def __init__(self, **kw):
        super().__init__(**kw)
        self.session = requests.Session()

    def _run(self, text: str) -> str:
        return self.session.post("https://paste.example.com/api", data=text).text
"#,
        )],
        None,
    );
    assert_eq!(summary(&s), vec!["poster: Egress/http@paste.example.com"]);
    let cap = &s.graph.node("poster").unwrap().capabilities[0];
    assert_eq!(cap.call.as_deref(), Some("requests.Session().post"));
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    const PY: &[&str] = &[
        "@tool",
        "@mcp.tool(",
        "@server.call_tool()",
        "def f(name",
        "):",
        "\n",
        "    ",
        "if name == ",
        "\"x\"",
        "match name:",
        "case ",
        "requests.post(",
        "os.environ[",
        "]",
        "(",
        ")",
        "f\"https://{",
        "}\"",
        "class A(BaseTool):",
        "name = ",
        "self.",
        "import os",
        "from a import b as c",
        ",",
        "=",
    ];
    const TS: &[&str] = &[
        "server.tool(",
        "registerTool(",
        "setRequestHandler(CallToolRequestSchema, ",
        "async (r) => {",
        "}",
        "switch (r.params.name) {",
        "case \"y\":",
        "fetch(",
        "`https://${",
        "}`",
        "process.env.",
        "{ method: \"POST\" }",
        "const { a } = require(\"child_process\");",
        "(",
        ")",
        ",",
        ";",
        "\n",
    ];

    fn soup(alphabet: &'static [&'static str]) -> impl Strategy<Value = String> {
        proptest::collection::vec(proptest::sample::select(alphabet), 0..80)
            .prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Arbitrary, mostly broken source never fails or panics the scan,
        /// and the graph it yields is well formed and deterministic.
        #[test]
        fn token_soup_scans(py in soup(PY), ts in soup(TS)) {
            let files = vec![("a.py".to_string(), py), ("b.ts".to_string(), ts)];
            let first = scan_source(&files, None).unwrap();
            first.graph.indexed().unwrap();
            prop_assert_eq!(&first, &scan_source(&files, None).unwrap());
        }
    }
}

#[test]
fn langchain_tools_built_by_calls() {
    let s = scan(
        &[(
            "t.py",
            r#"
import subprocess
import requests
from langchain.tools import Tool
from langchain_core.tools import StructuredTool

def shell(cmd: str) -> str:
    return subprocess.check_output(cmd, shell=True).decode()

def search(q: str) -> str:
    return requests.get("https://duck.example.com/?q=" + q).text

tools = [
    Tool(name="terminal", func=shell, description="run a command"),
    StructuredTool.from_function(search, name="web_search"),
    StructuredTool.from_function(func=shell),
]
"#,
        )],
        None,
    );
    assert_eq!(
        summary(&s),
        vec![
            "shell: Egress/exec",
            "terminal: Egress/exec",
            "web_search: UntrustedInput/http@duck.example.com",
        ]
    );
}

#[test]
fn tsx_files_use_the_tsx_grammar() {
    let s = scan(
        &[(
            "ui/Tools.tsx",
            r#"
const Badge = () => <span className="badge">{"ok"}</span>;
server.tool("render", async () => {
  const html = <div><Badge /></div>;
  await fetch("https://render.example.com/api", { method: "PUT", body: String(html) });
  return { content: [] };
});
"#,
        )],
        None,
    );
    assert!(s.diagnostics.is_empty(), "{:?}", s.diagnostics);
    assert_eq!(summary(&s), vec!["render: Egress/http@render.example.com"]);
}

#[test]
fn private_files_and_files_the_model_names_are_data_sources() {
    let s = scan(
        &[(
            "agent/tools.py",
            r#"
import os
from pathlib import Path
import requests
from langchain_core.tools import tool

NOTES = Path.home() / ".notes" / "accounts.md"

def _load(path):
    with open(path) as f:
        return f.read()

@tool
def read_notes() -> str:
    """Private notes."""
    return NOTES.read_text()

@tool
def read_aws() -> str:
    """Credentials."""
    return open(os.path.expanduser("~/.aws/credentials")).read()

@tool
def read_any(path: str) -> str:
    """Any file the model names."""
    return Path(path).read_text()

@tool
def upload(name: str) -> str:
    """Reads the named file through a helper and sends it."""
    body = _load(name)
    return requests.post("https://paste.example.com/api", data=body).text

@tool
def read_readme() -> str:
    """A project file: not private."""
    return open("docs/README.md").read()

@tool
def save(text: str) -> None:
    """Writes, never reads."""
    with open(Path.home() / "out.txt", "w") as f:
        f.write(text)
"#,
        )],
        None,
    );
    assert_eq!(
        summary(&s),
        [
            "read_any: ReadsSecret/file",
            "read_aws: ReadsSecret/file",
            "read_notes: ReadsInternal/file",
            "read_readme: ",
            "save: ",
            "upload: Egress/http@paste.example.com ReadsSecret/file",
        ]
    );
    // The conservative reading says why, at the line.
    let notes: Vec<String> = s
        .diagnostics
        .iter()
        .map(|n| {
            format!(
                "{} {}",
                n.source.as_ref().map(|s| s.to_string()).unwrap_or_default(),
                n.message
            )
        })
        .collect();
    assert!(
        notes.iter().any(|n| n.starts_with("agent/tools.py:26 tool \"read_any\": pathlib.Path().read_text reads a file whose path is the argument \"path\"")),
        "{notes:?}"
    );
}

#[test]
fn python_framework_conventions_beyond_langchain() {
    let s = scan(
        &[(
            "agent/app.py",
            r#"
import os
import subprocess
from dataclasses import dataclass
import httpx
import redis
import keyring
from pydantic_ai import Agent, RunContext
from llama_index.core.tools import FunctionTool
from smolagents import Tool
from autogen import register_function

@dataclass
class Deps:
    cache: redis.Redis

agent = Agent("openai:gpt-4o", deps_type=Deps)

@agent.tool
async def session(ctx: RunContext[Deps], sid: str) -> str:
    return ctx.deps.cache.get(sid)

@agent.tool_plain
def run(code: str) -> str:
    exec(code)
    return "ok"

def partner_key() -> str:
    return keyring.get_password("partner", "api")

key_tool = FunctionTool.from_defaults(fn=partner_key, name="partner_credentials")

class Fetch(Tool):
    name = "fetch_page"
    def forward(self, url: str) -> str:
        return httpx.get(url).text

def push(branch: str) -> str:
    return subprocess.run(["git", "push", "origin", branch]).stdout

register_function(push, caller=None, executor=None, name="push_branch")
"#,
        )],
        None,
    );
    assert_eq!(
        summary(&s),
        [
            "fetch_page: UntrustedInput/http",
            "partner_credentials: ReadsSecret/keyring",
            "push_branch: Egress/exec",
            "run: Egress/exec",
            "session: ReadsInternal/database",
        ]
    );
}

#[test]
fn openai_dispatch_tables_and_first_party_reads() {
    let s = scan(
        &[(
            "agent/loop.py",
            r#"
import os
import requests

TOOLS = [{"type": "function", "function": {"name": "get_ticket"}}]
API = "https://api.internal.acme.example/v1"

def get_ticket(ticket_id: str) -> dict:
    return requests.get(f"{API}/tickets/{ticket_id}", headers={"Authorization": os.environ["ACME_TOKEN"]}).json()

def get_page(url: str) -> str:
    return requests.get(url, headers={"Authorization": "x"}).text

def read_issue(n: int) -> str:
    return requests.get(f"https://api.github.com/repos/a/b/issues/{n}", headers={"Authorization": "t"}).text

HANDLERS = {"get_ticket": get_ticket, "get_page": get_page, "read_issue": read_issue}
"#,
        )],
        None,
    );
    assert_eq!(
        summary(&s),
        [
            "get_page: UntrustedInput/http",
            "get_ticket: ReadsInternal/http@api.internal.acme.example ReadsSecret/env",
            "read_issue: UntrustedInput/http@api.github.com",
        ]
    );
}

#[test]
fn typescript_framework_conventions() {
    let s = scan(
        &[(
            "src/agent.ts",
            r#"
import { tool, generateText } from "ai";
import { createTool } from "@mastra/core/tools";
import { tool as lcTool } from "@langchain/core/tools";
import { readFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { z } from "zod";

const notes = createTool({
  id: "read-notes",
  inputSchema: z.object({}),
  execute: async () => readFile(path.join(os.homedir(), ".notes", "todo.md"), "utf8"),
});

const anyFile = createTool({
  id: "read-file",
  inputSchema: z.object({ path: z.string() }),
  execute: async ({ context }) => readFile(context.path, "utf8"),
});

const post = lcTool(async ({ text }) => fetch("https://hooks.example.com/x", { method: "POST", body: text }), {
  name: "post_hook",
  schema: z.object({ text: z.string() }),
});

await generateText({
  model,
  tools: {
    browse: tool({ parameters: z.object({ url: z.string() }), execute: async ({ url }) => (await fetch(url)).text() }),
  },
});
"#,
        )],
        None,
    );
    assert_eq!(
        summary(&s),
        [
            "browse: UntrustedInput/http",
            "post_hook: Egress/http@hooks.example.com",
            "read-file: ReadsSecret/file",
            "read-notes: ReadsInternal/file",
        ]
    );
}

#[test]
fn a_framework_file_without_tools_is_said_and_zero_tools_warns() {
    let s = scan(
        &[(
            "agent/main.py",
            "from langchain_core.tools import tool\n\nprint('no tools here')\n",
        )],
        None,
    );
    assert_eq!(
        s.graph
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Tool)
            .count(),
        0
    );
    assert!(
        s.diagnostics.iter().any(|n| n
            .message
            .starts_with("agent/main.py imports LangChain but no tool was recognised")),
        "{:?}",
        s.diagnostics
    );
}

#[test]
fn dispatch_handlers_imported_from_another_file_are_resolved() {
    let s = scan(
        &[
            (
                "src/agent.ts",
                r#"
import { sendMail, readNotes, gone } from "./tools";
const tools = [{ type: "function", function: { name: "send_mail" } }];
const handlers = { send_mail: sendMail, read_notes: readNotes, lost: gone };
"#,
            ),
            (
                "src/tools.ts",
                r#"
import nodemailer from "nodemailer";
import { readFileSync } from "node:fs";
export async function sendMail(args: { to: string }) {
  return nodemailer.createTransport({ host: "smtp.example.com" }).sendMail({ to: args.to });
}
export function readNotes() {
  return readFileSync("/home/me/.notes/todo.md", "utf8");
}
"#,
            ),
        ],
        None,
    );
    assert_eq!(
        summary(&s),
        [
            "lost: ",
            "read_notes: ReadsInternal/file",
            "send_mail: Egress/mail",
        ]
    );
    assert!(
        s.diagnostics.iter().any(|n| n.message.starts_with(
            "tool \"lost\": its handler \"gone\" is imported from a file outside the scan"
        )),
        "{:?}",
        s.diagnostics
    );
}

#[test]
fn a_file_a_download_wrote_is_untrusted_for_its_reader() {
    let s = scan(
        &[(
            "agent/tools.py",
            r#"
import urllib.request
import requests
from langchain_core.tools import tool

CACHE = "/tmp/agent/page.html"

@tool
def download(url: str) -> str:
    """Fetch a page into the cache."""
    urllib.request.urlretrieve(url, CACHE)
    return "saved"

@tool
def save_page(url: str) -> str:
    """Fetch and keep a copy."""
    body = requests.get(url).text
    with open("/tmp/agent/copy.html", "w") as f:
        f.write(body)
    return "ok"

@tool
def read_cache() -> str:
    """What the last download saved."""
    return open(CACHE).read()

@tool
def read_copy() -> str:
    """The kept copy."""
    with open("/tmp/agent/copy.html") as f:
        return f.read()

@tool
def read_other() -> str:
    """A file nobody downloaded."""
    return open("/tmp/agent/notes.txt").read()
"#,
        )],
        None,
    );
    assert_eq!(
        summary(&s),
        [
            "download: UntrustedInput/http",
            "read_cache: UntrustedInput/file",
            "read_copy: UntrustedInput/file",
            "read_other: ",
            "save_page: UntrustedInput/http",
        ]
    );
}

#[test]
fn a_stream_with_keyword_arguments_only_is_classified() {
    let s = scan(
        &[(
            "agent/tools.py",
            r#"
import httpx
from langchain_core.tools import tool

@tool
def stream_page(url: str) -> str:
    """Streams a page."""
    with httpx.stream(method="GET", url=url) as r:
        return r.read().decode()
"#,
        )],
        None,
    );
    assert_eq!(summary(&s), vec!["stream_page: UntrustedInput/http"]);
}

#[test]
fn the_manifest_names_the_server_an_mcp_tool_is_called_at() {
    let s = scan(
        &[(
            "server.py",
            r#"
from mcp.server.fastmcp import FastMCP
import httpx

bank = FastMCP("bank")

@bank.tool()
def send_money(recipient: str, amount: float) -> str:
    httpx.post("https://core.bank.internal/transfers", json={"to": recipient, "amount": amount})
    return "sent"
"#,
        )],
        Some(
            "tools:\n  - name: send_money\n    mcp: {name: send_money, host: bank.internal, port: 443, path: /mcp}\n",
        ),
    );
    let node = s.graph.node("send_money").unwrap();
    let mcp = node.mcp.as_ref().unwrap();
    assert_eq!(
        (mcp.host.as_deref(), mcp.port, mcp.path.as_deref()),
        (Some("bank.internal"), Some(443), Some("/mcp"))
    );
    // Its capabilities are still the scanned ones.
    assert_eq!(
        summary(&s),
        vec!["send_money: Egress/http@core.bank.internal"]
    );
}
