//! What the tests that run in a network namespace of their own share: the
//! tools they need (never skipped), the pinned venv's python
//! (hack/install-mcp-sdk.sh: the MCP SDK and the `websockets` library),
//! and a fresh directory holding a sandbox CA.

use std::path::{Path, PathBuf};
use std::process::Command;

use agentgate_proxy::testkit::TestCa;

/// The venv's python, installed by hack/install-mcp-sdk.sh.
pub fn venv_python() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hack/install-mcp-sdk.sh");
    let out = Command::new(script).arg("--print").output().unwrap();
    assert!(
        out.status.success(),
        "the venv is missing and could not be installed (hack/install-mcp-sdk.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A namespaced test's setup: the venv's python and its realpath (the
/// binary a policy names), and a fresh directory with a sandbox CA.
pub struct Setup {
    pub python: String,
    pub real_python: String,
    pub dir: PathBuf,
}

/// Checks the network tools (a missing one fails the test: make test
/// installs them) and prepares a fresh directory named after `name`.
pub fn setup(name: &str) -> Setup {
    for tool in ["unshare", "ip", "curl"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .status()
            .unwrap();
        assert!(
            found.success(),
            "{tool} is missing: run hack/install-netns-tools.sh (make test does); this test never skips"
        );
    }
    let python = venv_python();
    let out = Command::new(&python)
        .args([
            "-c",
            "import os,sys; print(os.path.realpath(sys.executable))",
        ])
        .output()
        .unwrap();
    let real_python = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let dir = std::env::temp_dir().join(format!("agentgate-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sandbox_ca = TestCa::new(&format!("{name} sandbox CA")).unwrap();
    std::fs::write(dir.join("sandbox-ca.pem"), &sandbox_ca.cert_pem).unwrap();
    std::fs::write(dir.join("sandbox-ca.key"), &sandbox_ca.key_pem).unwrap();
    Setup {
        python,
        real_python,
        dir,
    }
}
