//! `agentgate-exec --mcp`: a stdio MCP server's client messages judged one
//! line at a time (docs/policy-semantics.md §8.4), with the same judgment
//! and refusals as the egress proxy ([`agentgate_judgement::mcp_messages`]).
//! A refused message never reaches the server; the wrapper answers it on
//! the client's stdout. The server's answers to `*/list` requests are
//! filtered on the way back.

use std::io::{BufRead, Write};
use std::sync::Mutex;

use agentgate_judgement::findings::CompiledFindings;
use agentgate_judgement::mcp_messages::{
    Judge, Judged, ListRequest, filter_lists, forget_answered,
};
use agentgate_policy::action::request_path;
use agentgate_policy::compile::CompiledPolicy;
use agentgate_policy::index::HostIndex;
use agentgate_policy::matcher::{Binary, McpServer};
use serde_json::Value;

/// The server a stdio MCP server stands for in the policy: the `mcp`
/// endpoint whose entries govern it (`HOST:PORT/PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioServer {
    /// Canonical host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Canonical path.
    pub path: String,
}

impl StdioServer {
    /// Parses `HOST:PORT/PATH` (`bank.internal:443/mcp`).
    pub fn parse(text: &str) -> Result<StdioServer, String> {
        let usage =
            || format!("--mcp {text:?}: expected HOST:PORT/PATH, e.g. bank.internal:443/mcp");
        let (authority, path) = text.split_at(text.find('/').ok_or_else(usage)?);
        let (host, port) = authority.rsplit_once(':').ok_or_else(usage)?;
        let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(usage)?;
        agentgate_policy::action::check_host(host).map_err(|e| format!("{}: {e}", usage()))?;
        let path = request_path(path).map_err(|e| format!("{}: {e}", usage()))?;
        Ok(StdioServer {
            host: host.to_string(),
            port,
            path,
        })
    }
}

/// What one relay judges with.
pub struct Relay {
    policy: CompiledPolicy,
    index: HostIndex,
    findings: CompiledFindings,
    /// The client's executable (the process that started the wrapper).
    binary: Binary,
    server: StdioServer,
    /// List requests forwarded and not answered yet.
    pending: Mutex<Vec<ListRequest>>,
}

impl Relay {
    /// A relay for `server` under `policy`, for messages from `binary`.
    pub fn new(policy: CompiledPolicy, binary: Option<String>, server: StdioServer) -> Relay {
        let index = HostIndex::build(&policy);
        Relay {
            policy,
            index,
            findings: CompiledFindings::default(),
            binary: Binary(binary),
            server,
            pending: Mutex::new(Vec::new()),
        }
    }

    fn judge(&self) -> Judge<'_> {
        Judge {
            policy: &self.policy,
            index: &self.index,
            caller: self.binary.caller(),
            shown: self.binary.shown(),
            findings: &self.findings,
            server: McpServer {
                host: &self.server.host,
                port: self.server.port,
                path: &self.server.path,
            },
            // A stdio wrapper sees no model requests: no record (§8.3).
            record: None,
            credential: None,
        }
    }

    /// Judges one line from the client: `Ok(line)` to forward to the
    /// server, or `Err(answer)` to write back to the client instead (`None`
    /// when there is nothing to answer: refused notifications). Refusals
    /// are logged on stderr.
    pub fn from_client(&self, line: &str) -> Result<String, Option<String>> {
        let judged = match self.judge().body(line.as_bytes()) {
            // Held calls are put to a person by the egress proxy alone
            // (docs/proxy.md, "Held calls"); here they are refused.
            Judged::Hold(held) => held.refused(agentgate_judgement::held::unavailable(
                &held,
                "agentgate-exec --mcp (stdio) cannot put a call to a person; only the egress proxy holds calls",
            )),
            judged => judged,
        };
        match judged {
            Judged::Hold(_) => Err(None),
            Judged::Forward { lists, .. } => {
                if let Ok(mut pending) = self.pending.lock() {
                    pending.extend(lists);
                }
                Ok(line.to_string())
            }
            Judged::Answer {
                status,
                body,
                refusal,
            } => {
                eprintln!(
                    "agentgate-exec: refused ({}): {}",
                    refusal.code.as_str(),
                    refusal.reason
                );
                Err((status != 403).then_some(body))
            }
        }
    }

    /// Filters one line from the server before the client reads it.
    pub fn from_server(&self, line: &str) -> String {
        let Ok(mut pending) = self.pending.lock() else {
            return line.to_string();
        };
        if pending.is_empty() {
            return line.to_string();
        }
        let Ok(mut message) = serde_json::from_str::<Value>(line) else {
            return line.to_string();
        };
        let judge = self.judge();
        let removed = filter_lists(&mut message, &pending, &|query| judge.listed(query));
        forget_answered(&mut pending, &message);
        if removed == 0 {
            line.to_string()
        } else {
            message.to_string()
        }
    }
}

/// Relays newline-delimited messages until the client closes its input:
/// client lines judged, then written to `server` or answered on `client`.
pub fn relay_client(
    relay: &Relay,
    input: impl BufRead,
    server: &mut impl Write,
    client: &Mutex<impl Write>,
) -> std::io::Result<()> {
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match relay.from_client(&line) {
            Ok(forward) => {
                server.write_all(forward.as_bytes())?;
                server.write_all(b"\n")?;
                server.flush()?;
            }
            Err(Some(answer)) => write_line(client, &answer)?,
            Err(None) => {}
        }
    }
    Ok(())
}

/// Relays the server's lines to the client, filtering list results.
pub fn relay_server(
    relay: &Relay,
    input: impl BufRead,
    client: &Mutex<impl Write>,
) -> std::io::Result<()> {
    for line in input.lines() {
        write_line(client, &relay.from_server(&line?))?;
    }
    Ok(())
}

fn write_line(client: &Mutex<impl Write>, line: &str) -> std::io::Result<()> {
    let mut out = client
        .lock()
        .map_err(|_| std::io::Error::other("client output lock poisoned"))?;
    out.write_all(line.as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}

/// The client that started this process: its executable's path, if
/// readable.
pub fn parent_binary() -> Option<String> {
    let parent = std::os::unix::process::parent_id();
    std::fs::read_link(format!("/proc/{parent}/exe"))
        .ok()
        .map(|p| p.display().to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Cursor;

    use agentgate_policy::compile::{Limits, Role, compile};
    use serde_json::json;

    use super::*;

    fn relay() -> Relay {
        let doc = agentgate_policy::load::load_document(
            r#"
network:
  - name: files
    binaries: [/usr/bin/python3]
    endpoints:
      - host: files.stdio
        ports: [1]
        protocol: mcp
        path: /
        tools:
          - name: read_*
"#,
            &Limits::default(),
        )
        .unwrap();
        let policy = compile(&doc.policy, Role::Sandbox, &Limits::default()).unwrap();
        Relay::new(
            policy,
            Some("/usr/bin/python3".into()),
            StdioServer::parse("files.stdio:1/").unwrap(),
        )
    }

    #[test]
    fn servers_are_named_like_endpoints() {
        assert_eq!(
            StdioServer::parse("bank.internal:443/mcp").unwrap(),
            StdioServer {
                host: "bank.internal".into(),
                port: 443,
                path: "/mcp".into()
            }
        );
        for bad in [
            "bank.internal/mcp",
            "bank.internal:0/mcp",
            "bank.internal:443",
            ":443/x",
            "b:443/a/../b",
        ] {
            assert!(StdioServer::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn refused_lines_are_answered_and_never_reach_the_server() {
        let relay = relay();
        let lines = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "a"}}}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "write_file", "arguments": {}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/unknown"}),
        ];
        let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let mut server = Vec::new();
        let client = Mutex::new(Vec::new());
        relay_client(&relay, Cursor::new(input), &mut server, &client).unwrap();
        let forwarded = String::from_utf8(server).unwrap();
        assert_eq!(forwarded.lines().count(), 2, "{forwarded}");
        assert!(!forwarded.contains("write_file"));
        let answered = String::from_utf8(client.into_inner().unwrap()).unwrap();
        let answer: Value = serde_json::from_str(answered.trim()).unwrap();
        assert_eq!(answer["id"], 3);
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("write_file")
        );
        // The server's list answer is filtered; other lines pass as sent.
        let list = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "read_file"}, {"name": "write_file"}]}});
        let shown: Value = serde_json::from_str(&relay.from_server(&list.to_string())).unwrap();
        assert_eq!(shown["result"]["tools"], json!([{"name": "read_file"}]));
        let again = list.to_string();
        assert_eq!(
            relay.from_server(&again),
            again,
            "answered lists are no longer pending"
        );
    }

    /// A line two JSON readers could take differently never reaches the
    /// server: a name or an argument given twice, a byte order mark, a
    /// number some reader rounds (docs/policy-semantics.md §8.3).
    #[test]
    fn ambiguous_lines_are_refused_with_the_reason() {
        let relay = relay();
        for (line, why) in [
            (
                r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_file", "name": "write_file", "arguments": {}}}"#,
                "twice",
            ),
            (
                r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "a", "p\u0061th": "/etc/shadow"}}}"#,
                "twice",
            ),
            (
                "\u{feff}{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/list\"}",
                "byte order mark",
            ),
            (
                r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_file", "arguments": {"n": 123456789012345678901234}}}"#,
                "no exact 64-bit reading",
            ),
        ] {
            let answer = relay.from_client(line).expect_err(line).expect("answered");
            assert!(answer.contains(why), "{line}: {answer}");
        }
    }
}
