//! `agentgate-exec --mcp` with the official MCP Python SDK: the SDK's client
//! starts a real stdio server (FastMCP) through the wrapper. Granted calls
//! reach the server; refused ones never do (the server's call log) and come
//! back as errors the client reads; `tools/list` shows the granted tools.
//!
//! Needs the SDK's virtualenv (hack/install-mcp-sdk.sh, which `make test`
//! runs): `#[ignore]`d so that a plain `cargo test` leaves it out; `make
//! test` runs it with `--include-ignored`, and a missing SDK fails it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn sdk_python() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hack/install-mcp-sdk.sh");
    let out = Command::new(script).arg("--print").output().unwrap();
    assert!(
        out.status.success(),
        "the MCP SDK is missing and could not be installed (hack/install-mcp-sdk.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
#[ignore = "needs the MCP SDK from PyPI: make test runs it (--include-ignored)"]
fn a_stdio_server_behind_the_wrapper_gets_only_the_granted_calls() {
    let python = sdk_python();
    let out = Command::new(&python)
        .args([
            "-c",
            "import os,sys; print(os.path.realpath(sys.executable)); print(os.path.realpath(sys.base_prefix))",
        ])
        .output()
        .unwrap();
    let found = String::from_utf8(out.stdout).unwrap();
    let mut found = found.lines();
    let real_python = found.next().unwrap_or_default().to_string();
    // Where the interpreter and its standard library live (a pyenv build
    // is outside /usr).
    let prefix = found.next().unwrap_or_default().to_string();
    let dir = std::env::temp_dir()
        .canonicalize()
        .unwrap()
        .join(format!("agentgate-mcp-stdio-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let policy = format!(
        r#"filesystem:
  readOnly: [/usr, /bin, /lib, /lib64, /etc, {prefix}, {home}/.cache/agentgate, {support}]
  readWrite: [{dir}, /dev/null]
network:
  - name: files
    binaries: [{real_python}]
    endpoints:
      - host: files.stdio
        ports: [1]
        protocol: mcp
        path: /
        tools:
          - name: read_file
            arguments:
              path: {{glob: "/reports/*"}}
"#,
        dir = dir.display(),
        support = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/support")
            .display(),
    );
    std::fs::write(dir.join("policy.yaml"), &policy).unwrap();
    let calls = dir.join("calls.log");
    let support = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support");
    let out = Command::new(&python)
        .arg(support.join("mcp_stdio_client.py"))
        .arg(env!("CARGO_BIN_EXE_agentgate-exec"))
        .args(["--policy", dir.join("policy.yaml").to_str().unwrap()])
        .args(["--mcp", "files.stdio:1/", "--"])
        .arg(&python)
        .arg(support.join("mcp_files_server.py"))
        .arg(&calls)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let context = format!("{stdout}\n--- stderr ---\n{stderr}");
    let steps: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("{l}: {context}")))
        .collect();
    let step = |name: &str| {
        steps
            .iter()
            .find(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("no step {name}: {context}"))
    };
    assert_eq!(
        step("list")["tools"],
        serde_json::json!(["read_file"]),
        "{context}"
    );
    assert_eq!(step("read")["text"], "contents of /reports/q3", "{context}");
    for refused in ["read-secret", "write"] {
        let s = step(refused);
        assert_eq!(s["ok"], false, "{context}");
        let message = s["error"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("refused by agentgate: tools/call"),
            "{context}"
        );
        assert_eq!(s["data"]["code"], "no_rule", "{context}");
    }
    let log = std::fs::read_to_string(&calls).unwrap_or_default();
    assert_eq!(
        log.lines().count(),
        1,
        "only the granted call reached the server: {log}\n{context}"
    );
    assert!(
        stderr.contains("agentgate-exec: refused (no_rule)"),
        "{context}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
