//! Source-scanner throughput: writes 10,000 realistic Python tool modules
//! (LangChain `@tool`, `BaseTool`, FastMCP, low-level MCP dispatch, OpenAI
//! Agents, helpers; 40-80 lines each) into a temporary directory, then times
//! `scan_path` over it (walk, read, parse, classify, graph). Prints numbers;
//! asserts nothing about speed, but exits non-zero unless the scan finds
//! every file and every generated tool, some capabilities and no
//! diagnostics. `cargo run --release -p agentgate-bench --bin bench-scan
//! [FILES]`; `AGENTGATE_BENCH_SMOKE=1` (`make bench-smoke`) defaults to 50
//! files, whose numbers are not results.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use agentgate_trifecta::scan::scan_path;

const DEFAULT_FILES: usize = 10_000;
const SMOKE_FILES: usize = 50;

/// A small deterministic generator (xorshift), so every run scans the same
/// tree.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const BODIES: &[&str] = &[
    "    resp = requests.get(f\"https://api{n}.example.com/v1/items/{{item_id}}\", timeout=10)\n    resp.raise_for_status()\n    return resp.text\n",
    "    resp = requests.post(\"https://hooks.example.com/t{n}\", json={{\"text\": text}}, timeout=5)\n    return \"ok\" if resp.ok else \"failed\"\n",
    "    token = os.environ[\"SERVICE_{n}_TOKEN\"]\n    return token[:4]\n",
    "    conn = sqlite3.connect(\"/data/db{n}.sqlite\")\n    rows = conn.execute(\"SELECT * FROM t WHERE id = ?\", (item_id,)).fetchall()\n    return str(rows)\n",
    "    out = subprocess.run([\"/usr/bin/tool{n}\", text], capture_output=True)\n    return out.stdout.decode()\n",
    "    feed = feedparser.parse(\"https://blog{n}.example.org/rss\")\n    return \"\\n\".join(e.title for e in feed.entries[:5])\n",
    "    return _helper_{n}(text)\n",
    "    words = text.split()\n    counts = {{}}\n    for w in words:\n        counts[w] = counts.get(w, 0) + 1\n    return str(sorted(counts.items())[:10])\n",
];

fn header(out: &mut String) {
    out.push_str(
        "\"\"\"Generated agent tools for the scan benchmark.\"\"\"\nimport os\nimport sqlite3\nimport subprocess\n\nimport feedparser\nimport httpx\nimport requests\nfrom langchain_core.tools import BaseTool, tool\nfrom mcp.server.fastmcp import FastMCP\nfrom agents import function_tool\n\nmcp = FastMCP(\"bench\")\nBASE = \"https://internal.example.com/api\"\n\n",
    );
}

fn body(rng: &mut Rng, n: usize) -> String {
    BODIES[rng.below(BODIES.len())].replace("{n}", &n.to_string())
}

/// One module of 40-80 lines with 2-4 tools of mixed conventions, and how
/// many tools the scanner must find in it (a dispatcher serves two).
fn module(rng: &mut Rng, file: usize) -> (String, usize) {
    let mut out = String::with_capacity(3000);
    header(&mut out);
    let _ = writeln!(
        out,
        "def _helper_{file}(text: str) -> str:\n    r = httpx.post(f\"{{BASE}}/notes\", json={{\"t\": text}})\n    return r.text\n\n"
    );
    let tools = 2 + rng.below(3);
    let mut names = 0;
    for t in 0..tools {
        let n = file * 10 + t;
        let b = body(rng, n).replace(&format!("_helper_{n}"), &format!("_helper_{file}"));
        let kind = rng.below(5);
        names += if kind == 4 { 2 } else { 1 };
        match kind {
            0 => {
                let _ = write!(
                    out,
                    "@tool\ndef tool_{n}(item_id: str, text: str = \"\") -> str:\n    \"\"\"Tool {n}.\"\"\"\n{b}\n\n"
                );
            }
            1 => {
                let _ = write!(
                    out,
                    "class Tool{n}(BaseTool):\n    name: str = \"tool_{n}\"\n    description: str = \"Tool {n}\"\n\n    def _run(self, item_id: str, text: str = \"\") -> str:\n{}\n\n",
                    b.lines().map(|l| format!("    {l}\n")).collect::<String>()
                );
            }
            2 => {
                let _ = write!(
                    out,
                    "@mcp.tool(name=\"tool_{n}\")\nasync def t{n}(item_id: str, text: str = \"\") -> str:\n    \"\"\"Tool {n}.\"\"\"\n{b}\n\n"
                );
            }
            3 => {
                let _ = write!(
                    out,
                    "@function_tool(name_override=\"tool_{n}\")\ndef ft{n}(item_id: str, text: str = \"\") -> str:\n{b}\n\n"
                );
            }
            _ => {
                let b2 = body(rng, n + 5);
                let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
                let _ = write!(
                    out,
                    "@server.call_tool()\nasync def dispatch_{n}(name: str, arguments: dict) -> str:\n    item_id = arguments.get(\"id\", \"\")\n    text = arguments.get(\"text\", \"\")\n    if name == \"tool_{n}\":\n{}    elif name == \"tool_{n}b\":\n{}    raise ValueError(name)\n\n",
                    indent(&b),
                    indent(&b2).replace(&format!("_helper_{}", n + 5), &format!("_helper_{file}"))
                );
            }
        }
    }
    // Pad with plain code so files span 40-80 lines like real modules.
    let lines = out.lines().count();
    let target = 40 + rng.below(41);
    for i in lines..target {
        let _ = writeln!(out, "CONSTANT_{i} = {i}  # configuration");
    }
    (out, names)
}

/// Writes the tree; returns how many tools it defines.
fn generate(dir: &Path, files: usize) -> std::io::Result<usize> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut tools = 0;
    for i in 0..files {
        let sub = dir.join(format!("pkg{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&sub)?;
        }
        let (text, names) = module(&mut rng, i);
        tools += names;
        std::fs::write(sub.join(format!("tools_{i}.py")), text)?;
    }
    Ok(tools)
}

fn main() -> ExitCode {
    let smoke = std::env::var("AGENTGATE_BENCH_SMOKE").is_ok_and(|v| v == "1");
    let files = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(if smoke { SMOKE_FILES } else { DEFAULT_FILES });
    let dir: PathBuf =
        std::env::temp_dir().join(format!("agentgate-bench-scan-{}", std::process::id()));
    let expected_tools = match generate(&dir, files) {
        Ok(tools) => tools,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            eprintln!("bench-scan: generating {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    };
    let lines: usize = std::fs::read_to_string(dir.join("pkg000/tools_0.py"))
        .map(|t| t.lines().count())
        .unwrap_or(0);
    let start = Instant::now();
    let result = scan_path(&dir);
    let seconds = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    let scan = match result {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bench-scan: {e}");
            return ExitCode::FAILURE;
        }
    };
    let capabilities: usize = scan.graph.nodes.iter().map(|n| n.capabilities.len()).sum();
    println!("files:        {}", scan.files);
    println!("lines (file 0): {lines}");
    println!("tools:        {}", scan.graph.nodes.len() - 1);
    println!("capabilities: {capabilities}");
    println!("diagnostics:  {}", scan.diagnostics.len());
    println!(
        "threads:      {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(2)
    );
    println!("seconds:      {seconds:.3}");
    println!("files/s:      {:.0}", scan.files as f64 / seconds);
    let tools = scan.graph.nodes.len().saturating_sub(1);
    let mut problems = Vec::new();
    if scan.files != files {
        problems.push(format!("scanned {} files, generated {files}", scan.files));
    }
    if tools != expected_tools {
        problems.push(format!("found {tools} tools, generated {expected_tools}"));
    }
    if capabilities == 0 {
        problems.push("found no capabilities".to_string());
    }
    if let Some(first) = scan.diagnostics.first() {
        problems.push(format!(
            "{} diagnostics on generated code, the first: {first:?}",
            scan.diagnostics.len()
        ));
    }
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        for p in &problems {
            eprintln!("bench-scan: {p}");
        }
        ExitCode::FAILURE
    }
}
