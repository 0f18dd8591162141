//! `agentgate-exec` as a process: real commands under real Landlock rules
//! (this kernel has Landlock; without it these tests fail, as they should:
//! the agent would run unconfined). And a differential property test: on
//! random filesystem sections over a small tree, every read and write a
//! child process attempts succeeds exactly when the policy matcher
//! (docs/policy-semantics.md §4) allows it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use agentgate_policy::action::{Access, FilesystemAction};
use agentgate_policy::compile::{Limits, Role, compile};
use agentgate_policy::matcher::allows_filesystem;
use agentgate_policy::model::{Filesystem, PolicyDocument};
use proptest::prelude::*;

/// What any command needs to start: the shell, coreutils and their libraries.
const SYSTEM: &[&str] = &["/usr", "/bin", "/lib", "/lib64", "/etc"];

struct Tree {
    root: PathBuf,
}

impl Tree {
    fn new(name: &str) -> Tree {
        let root = std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("agentgate-exec-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for dir in ["a/b", "c", "ab", "rw", "ro"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        for file in [
            "a/b/f", "a/g", "c/h", "ab/i", "secret", "ro/file", "rw/file",
        ] {
            std::fs::write(root.join(file), "content\n").unwrap();
        }
        Tree { root }
    }

    fn policy_dir(&self) -> PathBuf {
        self.root.with_extension("policies")
    }

    fn path(&self, rel: &str) -> String {
        self.root.join(rel).display().to_string()
    }

    fn policy(&self, read_only: &[String], read_write: &[String]) -> PathBuf {
        let quote = |v: &[String]| {
            v.iter()
                .map(|p| format!("{p:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut ro: Vec<String> = SYSTEM.iter().map(|s| s.to_string()).collect();
        ro.extend(read_only.iter().cloned());
        // Beside the tree, not in it: a test that names the policy's
        // directory with --policy-mount opens it, and only it.
        let dir = self.policy_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("policy-{}.yaml", rand_suffix()));
        std::fs::write(
            &file,
            format!(
                "filesystem:\n  readOnly: [{}]\n  readWrite: [{}]\n",
                quote(&ro),
                quote(read_write)
            ),
        )
        .unwrap();
        file
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
        let _ = std::fs::remove_dir_all(self.policy_dir());
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn exec(policy: &Path, script: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentgate-exec"))
        .arg("--policy")
        .arg(policy)
        .args(["--", "/bin/sh", "-c", script])
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// A shell probe: prints `NAME ok` or `NAME denied`.
fn probe(name: &str, command: &str) -> String {
    format!("if {command} >/dev/null 2>&1; then echo '{name} ok'; else echo '{name} denied'; fi\n")
}

/// Runs `script` under `policy` with `--policy-mount dir`.
fn exec_mounted(policy: &Path, dir: &Path, script: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentgate-exec"))
        .arg("--policy")
        .arg(policy)
        .arg("--policy-mount")
        .arg(dir)
        .args(["--", "/bin/sh", "-c", script])
        .output()
        .unwrap()
}

#[test]
fn the_policy_mount_is_readable_only_when_named_and_the_proxy_uid_refused() {
    let t = Tree::new("trust");
    let policy = t.policy(&[], &[]);
    let bundle = t.policy_dir().join("sandbox-ca.pem");
    std::fs::write(&bundle, "bundle\n").unwrap();
    let script = [
        probe("bundle-read", &format!("cat {}", bundle.display())),
        probe(
            "bundle-write",
            &format!("sh -c 'echo x >> {}'", bundle.display()),
        ),
        probe("policy-read", &format!("cat {}", policy.display())),
        probe("tree-read", &format!("cat {}", t.path("secret"))),
    ]
    .concat();
    // Without the flag, the directory holding --policy is no grant: run as
    // `--policy ./policy.yaml` in a project, it would open the project.
    let out = exec(&policy, &script);
    assert_eq!(
        stdout(&out),
        "bundle-read denied\nbundle-write denied\npolicy-read denied\ntree-read denied\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = exec_mounted(&policy, &t.policy_dir(), &script);
    assert_eq!(
        stdout(&out),
        "bundle-read ok\nbundle-write denied\npolicy-read ok\ntree-read denied\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The mount must hold the policy: anything else is a usage error and
    // nothing runs.
    let marker = t.path("rw/marker");
    for mount in [t.root.join("ro"), t.policy_dir().join("..")] {
        let out = exec_mounted(&policy, &mount, &format!("touch {marker}"));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{mount:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("is not beneath --policy-mount"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(!Path::new(&marker).exists());
    // Running as the proxy's uid would take the agent's connections out of
    // the redirect: refused before anything runs.
    let uid = std::fs::metadata("/proc/self").unwrap();
    let uid = std::os::unix::fs::MetadataExt::uid(&uid);
    let marker = t.path("rw/marker");
    let out = Command::new(env!("CARGO_BIN_EXE_agentgate-exec"))
        .args(["--policy", &policy.display().to_string()])
        .args(["--proxy-uid", &uid.to_string()])
        .args(["--", "/bin/sh", "-c", &format!("touch {marker}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the egress proxy's uid"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!Path::new(&marker).exists());
    // Another uid runs.
    let out = Command::new(env!("CARGO_BIN_EXE_agentgate-exec"))
        .args(["--policy", &policy.display().to_string()])
        .args(["--proxy-uid", &(uid + 1).to_string()])
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ConfigMap volume's layout, as the kubelet's atomic writer keeps it:
/// every key a symlink through `..data` into a timestamped directory; an
/// update writes a new directory, renames a fresh `..data` symlink over
/// the old one and deletes the old directory. The grant is on the mount,
/// so what appears beneath it stays readable across the swap.
#[test]
fn the_policy_mount_stays_readable_across_a_config_map_update() {
    use std::io::{BufRead, Read};
    let t = Tree::new("configmap");
    let dir = t.policy_dir();
    let version = |n: u32, keys: &[&str]| {
        let v = dir.join(format!("..2026_01_01_00_00_0{n}.{n}"));
        std::fs::create_dir_all(&v).unwrap();
        std::fs::write(
            v.join("policy.yaml"),
            "filesystem:\n  readOnly: [/usr, /bin, /lib, /lib64, /etc]\n",
        )
        .unwrap();
        for key in keys {
            std::fs::write(v.join(key), format!("{key} {n}\n")).unwrap();
        }
        let link = dir.join("..data_tmp");
        std::os::unix::fs::symlink(v.file_name().unwrap(), &link).unwrap();
        std::fs::rename(&link, dir.join("..data")).unwrap();
        v
    };
    let first = version(1, &["sandbox-ca.pem"]);
    for key in ["policy.yaml", "sandbox-ca.pem"] {
        std::os::unix::fs::symlink(format!("..data/{key}"), dir.join(key)).unwrap();
    }
    let bundle = dir.join("sandbox-ca.pem");
    let findings = dir.join("findings.json");
    let marker = dir.join("swapped");
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentgate-exec"))
        .arg("--policy")
        .arg(dir.join("policy.yaml"))
        .arg("--policy-mount")
        .arg(&dir)
        .args(["--", "/bin/sh", "-c"])
        .arg(format!(
            "cat {b}; while [ ! -e {m} ]; do sleep 0.05; done; cat {b} {f}",
            b = bundle.display(),
            f = findings.display(),
            m = marker.display()
        ))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The agent has read the first version (under Landlock) before the swap.
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut before = String::new();
    lines.read_line(&mut before).unwrap();
    // The update: a new directory with a key that was not there before,
    // `..data` renamed over, the old directory gone.
    version(2, &["sandbox-ca.pem", "findings.json"]);
    std::os::unix::fs::symlink("..data/findings.json", &findings).unwrap();
    std::fs::remove_dir_all(first).unwrap();
    std::fs::write(&marker, "").unwrap();
    let mut after = String::new();
    lines.read_to_string(&mut after).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        (before.as_str(), after.as_str()),
        ("sandbox-ca.pem 1\n", "sandbox-ca.pem 2\nfindings.json 2\n"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success());
}

#[test]
fn reads_and_writes_inside_and_outside_every_kind_of_grant() {
    let t = Tree::new("grants");
    let policy = t.policy(&[t.path("ro")], &[t.path("rw")]);
    let script = [
        probe("ro-read", &format!("cat {}", t.path("ro/file"))),
        probe(
            "ro-write",
            &format!("sh -c 'echo x >> {}'", t.path("ro/file")),
        ),
        probe("ro-create", &format!("touch {}", t.path("ro/new"))),
        probe("rw-read", &format!("cat {}", t.path("rw/file"))),
        probe(
            "rw-write",
            &format!("sh -c 'echo x >> {}'", t.path("rw/file")),
        ),
        probe("rw-create", &format!("mkdir {}", t.path("rw/dir"))),
        probe(
            "rw-truncate",
            &format!("truncate -s 0 {}", t.path("rw/file")),
        ),
        probe(
            "rw-rename",
            &format!("mv {} {}", t.path("rw/dir"), t.path("rw/moved")),
        ),
        probe("outside-read", &format!("cat {}", t.path("secret"))),
        probe(
            "outside-write",
            &format!("sh -c 'echo x >> {}'", t.path("secret")),
        ),
        probe("dotdot", &format!("cat {}/rw/../secret", t.root.display())),
        probe("dev-null", "sh -c 'echo x > /dev/null'"),
        probe("urandom", "head -c 1 /dev/urandom"),
    ]
    .concat();
    let out = exec(&policy, &script);
    let text = stdout(&out);
    for expected in [
        "ro-read ok",
        "ro-write denied",
        "ro-create denied",
        "rw-read ok",
        "rw-write ok",
        "rw-create ok",
        "rw-truncate ok",
        "rw-rename ok",
        "outside-read denied",
        "outside-write denied",
        "dotdot denied",
        "dev-null ok",
        "urandom ok",
    ] {
        assert!(
            text.contains(expected),
            "{expected}:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_symlink_cannot_lead_out_of_a_grant() {
    let t = Tree::new("symlink");
    std::os::unix::fs::symlink(t.path("secret"), t.root.join("rw/link")).unwrap();
    let policy = t.policy(&[], &[t.path("rw")]);
    // The same run reads a file of the grant (the control) and the target
    // outside it through the link; unconfined, the link reads fine.
    let script = format!(
        "{}{}",
        probe("in-grant", &format!("cat {}", t.path("rw/file"))),
        probe("via-link", &format!("cat {}", t.path("rw/link")))
    );
    let out = exec(&policy, &script);
    assert_eq!(
        stdout(&out),
        "in-grant ok\nvia-link denied\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(t.path("rw/link")).unwrap(),
        "content\n"
    );
}

#[test]
fn children_inherit_the_restriction() {
    let t = Tree::new("children");
    let policy = t.policy(&[], &[t.path("rw")]);
    // A grandchild reads inside the grant (the control), not outside it.
    let script = format!(
        "{}{}",
        probe(
            "grandchild-in",
            &format!("sh -c \"sh -c 'cat {}'\"", t.path("rw/file")),
        ),
        probe(
            "grandchild",
            &format!("sh -c \"sh -c 'cat {}'\"", t.path("secret")),
        )
    );
    assert_eq!(
        stdout(&exec(&policy, &script)),
        "grandchild-in ok\ngrandchild denied\n"
    );
}

#[test]
fn missing_paths_are_skipped_with_one_warning() {
    let t = Tree::new("missing");
    let policy = t.policy(
        &[t.path("nowhere"), t.path("ro")],
        &[t.path("also-nowhere")],
    );
    let out = exec(
        &policy,
        &probe("ro-read", &format!("cat {}", t.path("ro/file"))),
    );
    assert_eq!(stdout(&out), "ro-read ok\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("nowhere") && warnings[0].contains("also-nowhere"),
        "{stderr}"
    );
}

#[test]
fn exit_codes_and_stderr_pass_through() {
    let t = Tree::new("exit");
    let policy = t.policy(&[], &[]);
    let out = exec(&policy, "echo to-stderr >&2; exit 42");
    assert_eq!(out.status.code(), Some(42));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "to-stderr\n");
}

#[test]
fn a_policy_that_does_not_parse_runs_nothing() {
    let t = Tree::new("badpolicy");
    let bad = t.root.join("bad.yaml");
    std::fs::write(&bad, "filesystem: {readOnly: [relative/path]}\n").unwrap();
    let marker = t.path("rw/ran");
    let out = exec(&bad, &format!("touch {marker}"));
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing was executed"));
    assert!(!Path::new(&marker).exists());
    std::fs::write(&bad, "filesystem: [").unwrap();
    assert_eq!(
        exec(&bad, &format!("touch {marker}")).status.code(),
        Some(2)
    );
    assert!(!Path::new(&marker).exists());
}

#[test]
fn a_command_outside_every_grant_is_refused_with_the_reason() {
    let t = Tree::new("nocommand");
    let file = t.root.join("p.yaml");
    std::fs::write(
        &file,
        format!("filesystem: {{readWrite: [{:?}]}}\n", t.path("rw")),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agentgate-exec"))
        .arg("--policy")
        .arg(&file)
        .args(["--", "/bin/sh", "-c", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126));
    assert!(String::from_utf8_lossy(&out.stderr).contains("filesystem.readOnly"));
    let missing = Command::new(env!("CARGO_BIN_EXE_agentgate-exec"))
        .arg("--policy")
        .arg(&file)
        .args(["--", "no-such-command-anywhere"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(127));
}

const GRANTABLE: &[&str] = &["a", "a/b", "a/b/f", "c", "ab"];
const FILES: &[&str] = &["a/b/f", "a/g", "c/h", "ab/i"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Landlock agrees with the semantics on every read and write of every
    /// file of the tree, for random readOnly/readWrite sections (prefix
    /// boundaries like `a` vs `ab`, files and directories as grants).
    #[test]
    fn landlock_agrees_with_the_matcher(
        read_only in proptest::sample::subsequence(GRANTABLE, 0..=3),
        read_write in proptest::sample::subsequence(GRANTABLE, 0..=2),
    ) {
        let t = Tree::new("differential");
        let ro: Vec<String> = read_only.iter().map(|p| t.path(p)).collect();
        let rw: Vec<String> = read_write.iter().map(|p| t.path(p)).collect();
        let policy_file = t.policy(&ro, &rw);
        let doc = PolicyDocument {
            filesystem: Filesystem { read_only: ro.clone(), read_write: rw.clone() },
            ..PolicyDocument::default()
        };
        let compiled = compile(&doc, Role::Sandbox, &Limits::default()).unwrap();
        let mut script = String::new();
        for f in FILES {
            script.push_str(&probe(&format!("{f}:read"), &format!("cat {}", t.path(f))));
            script.push_str(&probe(&format!("{f}:write"), &format!("sh -c 'echo x >> {}'", t.path(f))));
        }
        let out = exec(&policy_file, &script);
        let text = stdout(&out);
        for f in FILES {
            for (access, label) in [(Access::Read, "read"), (Access::Write, "write")] {
                let allowed = allows_filesystem(&compiled, &FilesystemAction { access, path: t.path(f) });
                let expected = format!("{f}:{label} {}", if allowed { "ok" } else { "denied" });
                prop_assert!(text.contains(&expected), "ro={:?} rw={:?}: expected {}\n{}", read_only, read_write, expected, text);
            }
        }
    }
}

/// `--placeholders DIR` (docs/sandbox.md): each credential's `placeholder.env`
/// holds this Pod's placeholder over whatever the image set, a credential
/// without a valid one has its variable removed (with a warning), and each
/// `placeholder.file` is readable under Landlock. Without the flag nothing
/// changes.
#[test]
fn placeholders_are_set_in_the_environment_and_their_files_readable() {
    let t = Tree::new("placeholders");
    let policy = t.policy(&[], &[]);
    let dir = t.root.join("placeholders");
    std::fs::create_dir_all(&dir).unwrap();
    let github = "agentgate-placeholder-0123456789abcdef0123456789abcdef";
    std::fs::write(dir.join("github-token"), github).unwrap();
    std::fs::write(dir.join("npm-token"), "not a placeholder").unwrap();
    // The file form: mounted by the operator from the same directory.
    let file = t.path("c/api-key");
    let api = "agentgate-placeholder-fedcba9876543210fedcba9876543210";
    std::fs::write(&file, api).unwrap();
    std::fs::write(
        t.policy_dir().join("credentials.json"),
        serde_json::json!([
            {"name": "github-token", "secretRef": {"name": "gh", "key": "token"},
             "placeholder": {"env": "GITHUB_TOKEN"},
             "attach": {"header": {"name": "Authorization", "format": "Bearer {}"}}},
            {"name": "npm-token", "secretRef": {"name": "npm", "key": "token"},
             "placeholder": {"env": "NPM_TOKEN"}, "attach": {"basic": {"username": "npm"}}},
            {"name": "api-key", "secretRef": {"name": "api", "key": "key"},
             "placeholder": {"file": file}, "attach": {"query": {"name": "key"}}},
        ])
        .to_string(),
    )
    .unwrap();
    let script = format!(
        "echo \"gh=$GITHUB_TOKEN\"; echo \"npm=${{NPM_TOKEN-unset}}\"; {}",
        probe("file-read", &format!("cat {file}"))
    );
    let run = |flag: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate-exec"));
        command.arg("--policy").arg(&policy);
        if flag {
            command.arg(format!("--placeholders={}", dir.display()));
        }
        command
            .args(["--", "/bin/sh", "-c", &script])
            // What the image set: replaced, or removed.
            .env("GITHUB_TOKEN", "from-the-image")
            .env("NPM_TOKEN", "ghp_a_real_token_in_the_image")
            .output()
            .unwrap()
    };
    let out = run(true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stdout(&out),
        format!("gh={github}\nnpm=unset\nfile-read ok\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("no valid placeholder for credential npm-token")
            && stderr.contains("NPM_TOKEN is left unset"),
        "{stderr}"
    );
    // Without the flag: the environment as the image set it, and the file
    // is no grant.
    let out = run(false);
    assert_eq!(
        stdout(&out),
        "gh=from-the-image\nnpm=ghp_a_real_token_in_the_image\nfile-read denied\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
