//! `agentgate-exec --policy FILE [--policy-mount DIR] [--best-effort]
//! [--proxy-uid UID] [--placeholders DIR] [--mcp HOST:PORT/PATH] -- COMMAND
//! [ARGS]...`: restrict
//! this process's files to the policy with Landlock, then exec COMMAND,
//! whose exit code and output are then its own. With `--mcp`, COMMAND is a
//! stdio MCP server: it runs as a child (under the same restriction) and
//! every line its client writes is judged as a message to the policy's
//! `mcp` endpoint HOST:PORT/PATH before it is passed on (`mcp` module).
//! With `--placeholders`, COMMAND's environment holds this Pod's
//! credential placeholders (docs/policy-semantics.md §9.4), never a secret.
//!
//! Exit codes of its own: 2 for usage or an invalid policy (nothing is
//! executed), 126 when the restriction cannot be applied or COMMAND cannot
//! be executed, 127 when COMMAND is not found.
//!
//! Hand-parsed arguments, not clap: the binary is linked statically into
//! every agent image and its whole interface is six flags and `--`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use agentgate_sandbox::mcp::{Relay, StdioServer, parent_binary, relay_client, relay_server};
use agentgate_sandbox::{Grant, grants, load_policy, may_execute, placeholders, restrict_self};
use landlock::RulesetStatus;

const USAGE: &str = "usage: agentgate-exec --policy FILE [--policy-mount DIR] [--best-effort] [--proxy-uid UID] [--placeholders DIR] [--mcp HOST:PORT/PATH] -- COMMAND [ARGS]...";

struct Args {
    policy: PathBuf,
    /// The directory the policy is mounted in (the Pod's ConfigMap
    /// volume), readable beyond the policy's own grants.
    policy_mount: Option<PathBuf>,
    best_effort: bool,
    proxy_uid: Option<u32>,
    /// This Pod's credential placeholders, one file per credential.
    placeholders: Option<PathBuf>,
    /// Judge COMMAND's stdin as MCP messages to this server.
    mcp: Option<StdioServer>,
    command: Vec<OsString>,
}

fn parse(mut args: impl Iterator<Item = OsString>) -> Result<Args, String> {
    let mut policy = None;
    let mut policy_mount = None;
    let mut best_effort = false;
    let mut proxy_uid = None;
    let mut placeholders = None;
    let mut mcp = None;
    let uid = |value: Option<OsString>| -> Result<u32, String> {
        value
            .and_then(|v| v.to_str().and_then(|v| v.parse().ok()))
            .ok_or_else(|| "--proxy-uid needs a numeric UID".to_string())
    };
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--policy") => {
                policy = Some(PathBuf::from(args.next().ok_or("--policy needs a FILE")?))
            }
            Some(flag) if flag.starts_with("--policy=") => {
                policy = Some(PathBuf::from(&flag["--policy=".len()..]))
            }
            Some("--policy-mount") => {
                let dir = args.next().ok_or("--policy-mount needs a DIR")?;
                set_mount(&mut policy_mount, PathBuf::from(dir))?
            }
            Some(flag) if flag.starts_with("--policy-mount=") => set_mount(
                &mut policy_mount,
                PathBuf::from(&flag["--policy-mount=".len()..]),
            )?,
            Some("--best-effort") => best_effort = true,
            Some("--placeholders") => {
                let dir = args.next().ok_or("--placeholders needs a DIR")?;
                placeholders = Some(PathBuf::from(dir));
            }
            Some(flag) if flag.starts_with("--placeholders=") => {
                placeholders = Some(PathBuf::from(&flag["--placeholders=".len()..]));
            }
            Some("--mcp") => {
                let server = args.next().ok_or("--mcp needs HOST:PORT/PATH")?;
                let server = server.to_str().ok_or("--mcp needs HOST:PORT/PATH")?;
                mcp = Some(StdioServer::parse(server)?);
            }
            Some("--proxy-uid") => proxy_uid = Some(uid(args.next())?),
            Some(flag) if flag.starts_with("--proxy-uid=") => {
                proxy_uid = Some(uid(Some(flag["--proxy-uid=".len()..].into()))?)
            }
            Some("--version") => {
                return Err(format!("agentgate-exec {}", env!("CARGO_PKG_VERSION")));
            }
            Some("-h" | "--help") => return Err(USAGE.to_string()),
            Some("--") => {
                let command: Vec<OsString> = args.collect();
                if command.is_empty() {
                    return Err("no COMMAND after --".into());
                }
                let policy = policy.ok_or("--policy FILE is required")?;
                if let Some(dir) = &policy_mount {
                    check_mount(&policy, dir)?;
                }
                return Ok(Args {
                    policy,
                    policy_mount,
                    best_effort,
                    proxy_uid,
                    placeholders,
                    mcp,
                    command,
                });
            }
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    Err("missing -- COMMAND".into())
}

fn set_mount(slot: &mut Option<PathBuf>, dir: PathBuf) -> Result<(), String> {
    if dir.as_os_str().is_empty() {
        return Err("--policy-mount needs a DIR".into());
    }
    if slot.replace(dir).is_some() {
        // One policy, one mount: a second would grant something else.
        return Err("--policy-mount given twice".into());
    }
    Ok(())
}

/// `--policy-mount` names the directory the policy is mounted in, so the
/// policy must lie beneath it (compared as written: in a ConfigMap volume
/// the file is a symlink out of the mount into `..data`). `..` is refused
/// in both, since a lexical comparison cannot see through it.
fn check_mount(policy: &Path, dir: &Path) -> Result<(), String> {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (policy, dir) = (absolute(policy), absolute(dir));
    let dotdot = |p: &Path| p.components().any(|c| c == std::path::Component::ParentDir);
    if dotdot(&policy) || dotdot(&dir) || policy == dir || !policy.starts_with(&dir) {
        return Err(format!(
            "--policy {} is not beneath --policy-mount {} (no ..): the mount is the directory the policy is mounted in",
            policy.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// The real, effective, saved and filesystem uids of this process, from
/// /proc/self/status (empty when it cannot be read).
fn running_uids() -> Vec<u32> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|uids| {
                    uids.split_whitespace()
                        .filter_map(|u| u.parse().ok())
                        .collect()
                })
        })
        .unwrap_or_default()
}

/// COMMAND as exec would find it: a path, or the first match on PATH.
fn locate(command: &Path) -> Option<PathBuf> {
    if command.as_os_str().to_string_lossy().contains('/') {
        return command.exists().then(|| command.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(command))
        .find(|p| p.is_file())
}

fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("agentgate-exec: {message}");
    ExitCode::from(code)
}

/// Runs COMMAND as a stdio MCP server behind the judging relay; exits with
/// its exit code once it ends (or once the client closes its input and the
/// server then ends).
fn serve_mcp(
    policy: agentgate_policy::compile::CompiledPolicy,
    server: StdioServer,
    client: Option<String>,
    command: &[OsString],
    environment: &agentgate_sandbox::Placeholders,
) -> ExitCode {
    let mut child = match with_placeholders(Command::new(&command[0]), environment)
        .args(&command[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return fail(
                code,
                format!("cannot execute {}: {e}", Path::new(&command[0]).display()),
            );
        }
    };
    let (Some(mut to_server), Some(from_server)) = (child.stdin.take(), child.stdout.take()) else {
        return fail(126, "the MCP server's stdin and stdout could not be piped");
    };
    let relay = Relay::new(policy, client, server);
    let client = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let input = std::io::stdin().lock();
            if let Err(e) = relay_client(&relay, input, &mut to_server, &client) {
                eprintln!("agentgate-exec: reading the client's messages failed: {e}");
            }
            // The client is gone: the server reads end of input, as it would unwrapped.
            drop(to_server);
        });
        let output = std::io::BufReader::new(from_server);
        if let Err(e) = relay_server(&relay, output, &client) {
            eprintln!("agentgate-exec: relaying the server's messages failed: {e}");
        }
    });
    match child.wait() {
        Ok(status) => ExitCode::from(status.code().map_or(1, |c| c.clamp(0, 255) as u8)),
        Err(e) => fail(126, format!("waiting for the MCP server failed: {e}")),
    }
}

/// `command` with the placeholders set (over whatever the image set) and
/// the variables of credentials without one removed.
fn with_placeholders(
    mut command: Command,
    environment: &agentgate_sandbox::Placeholders,
) -> Command {
    for (name, value) in &environment.set {
        command.env(name, value);
    }
    for name in &environment.unset {
        command.env_remove(name);
    }
    command
}

fn main() -> ExitCode {
    let args = match parse(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(message) if message.starts_with("agentgate-exec ") || message == USAGE => {
            println!("{message}");
            return ExitCode::SUCCESS;
        }
        Err(message) => return fail(2, format!("{message}\n{USAGE}")),
    };
    if let Some(proxy) = args.proxy_uid {
        let uids = running_uids();
        if uids.is_empty() {
            return fail(
                126,
                "cannot read this process's uids from /proc/self/status to check that it is not the proxy's; refusing to run",
            );
        }
        if uids.contains(&proxy) {
            return fail(
                126,
                format!(
                    "refusing to run as uid {proxy}, the egress proxy's uid, whose connections are not redirected through the proxy; run the container as another user"
                ),
            );
        }
    }
    let policy = match load_policy(&args.policy) {
        Ok(policy) => policy,
        Err(e) => return fail(2, format!("{e}; nothing was executed")),
    };
    let command = Path::new(&args.command[0]);
    let Some(located) = locate(command) else {
        return fail(127, format!("{}: command not found", command.display()));
    };
    // Checked before restricting, to say why instead of a bare EACCES.
    let resolved = std::fs::canonicalize(&located).unwrap_or(located.clone());
    if !may_execute(&policy, &resolved.to_string_lossy()) {
        return fail(
            126,
            format!(
                "{} is not under a filesystem grant of the policy, so it could not be executed (add its directory to filesystem.readOnly)",
                resolved.display()
            ),
        );
    }
    // Read before the restriction, which leaves /proc unreadable.
    let client = args.mcp.as_ref().and_then(|_| parent_binary());
    // Read before the restriction too: the placeholders directory is no
    // grant of the agent's.
    let environment = args
        .placeholders
        .as_deref()
        .map(|dir| placeholders(&args.policy, dir))
        .unwrap_or_default();
    for warning in &environment.warnings {
        eprintln!("agentgate-exec: warning: {warning}");
    }
    let mut grants = grants(&policy);
    // A placeholder file holds nothing worth keeping from the agent: it is
    // readable wherever the credential puts it (outside the model, like
    // the policy mount below).
    for file in &environment.files {
        grants.push((file.clone(), Grant::Read));
    }
    // Only when asked: the policy mount (the pod's /agentgate/policy: the
    // policy, findings.json and the CA bundle every TLS client needs) is
    // readable, outside the model (docs/policy-semantics.md §7). Without the
    // flag nothing is added, not even the policy file: it was read above,
    // before the restriction, and nothing under it reads it again.
    // The mount as named, not canonicalised: the kubelet swaps `..data` to
    // a fresh `..<timestamp>` directory on every update and deletes the
    // old one, so a rule on the resolved path would go stale, while
    // everything new appears beneath the mount point.
    if let Some(dir) = &args.policy_mount {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
        grants.push((dir.display().to_string(), Grant::Read));
    }
    let restriction = match restrict_self(&grants, args.best_effort) {
        Ok(restriction) => restriction,
        Err(e) => return fail(126, format!("{e}; refusing to run {}", command.display())),
    };
    if !restriction.missing.is_empty() {
        eprintln!(
            "agentgate-exec: warning: granted paths that do not exist here were skipped: {}",
            restriction.missing.join(", ")
        );
    }
    if restriction.status == RulesetStatus::NotEnforced {
        eprintln!(
            "agentgate-exec: WARNING: Landlock is not available: --best-effort runs {} WITHOUT any filesystem restriction",
            command.display()
        );
    }
    if let Some(server) = args.mcp {
        return serve_mcp(policy, server, client, &args.command, &environment);
    }
    let error = with_placeholders(Command::new(&args.command[0]), &environment)
        .args(&args.command[1..])
        .exec();
    let code = if error.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    fail(
        code,
        format!("cannot execute {}: {error}", command.display()),
    )
}
