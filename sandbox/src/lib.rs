#![warn(missing_docs)]
//! The filesystem half of the data plane (docs/design.md §10): `agentgate-exec`
//! turns a policy's `filesystem` section into Landlock rules, restricts
//! itself (and so every process it starts) and execs the agent's command.
//! Landlock works on the hierarchy the kernel resolves, so a symlink or
//! `..` cannot lead out of a grant (docs/policy-semantics.md §7).

pub mod mcp;

use std::path::Path;

use agentgate_policy::action::{Access as FileAccess, FilesystemAction};
use agentgate_policy::compile::{CompiledPolicy, Limits, Role, compile};
use agentgate_policy::load::{DocumentKind, load_document};
use agentgate_policy::matcher::allows_filesystem;
use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, LandlockStatus, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
};

/// The ABI whose access rights are asked for: the newest this build knows.
/// Landlock grants what the running kernel offers of them (best effort is
/// per right, never per rule: an older kernel enforces fewer kinds of
/// access, never wider paths).
const REQUESTED_ABI: ABI = ABI::V10;

/// Device files every process may use, outside the model (§7).
pub const ALWAYS_READ_WRITE: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];
/// Device files every process may read, outside the model (§7).
pub const ALWAYS_READ: &[&str] = &["/dev/random", "/dev/urandom"];

/// What `agentgate-exec` could not do.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The policy file cannot be read or is not a valid policy.
    #[error("{0}")]
    Policy(String),
    /// The kernel offers no Landlock.
    #[error(
        "this kernel does not enforce Landlock ({0}): the agent would run with every file open to it"
    )]
    NoLandlock(String),
    /// Landlock refused the ruleset.
    #[error("Landlock: {0}")]
    Landlock(String),
}

/// How a path is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Read and execute (`readOnly`).
    Read,
    /// Every access right (`readWrite`).
    ReadWrite,
}

/// Reads a policy file (the effective policy document, YAML or JSON).
pub fn load_policy(path: &Path) -> Result<CompiledPolicy, SandboxError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SandboxError::Policy(format!("{}: {e}", path.display())))?;
    let limits = Limits::default();
    let loaded = load_document(&text, &limits)
        .map_err(|e| SandboxError::Policy(format!("{}: {e}", path.display())))?;
    if loaded.kind != DocumentKind::Bare {
        return Err(SandboxError::Policy(format!(
            "{}: expected the effective policy document (filesystem/network), found a manifest",
            path.display()
        )));
    }
    compile(&loaded.policy, Role::Sandbox, &limits)
        .map_err(|r| SandboxError::Policy(format!("{}: {r}", path.display())))
}

/// The grants of a policy: `readWrite` entries with every right, the other
/// read entries with read and execute.
pub fn grants(policy: &CompiledPolicy) -> Vec<(String, Grant)> {
    let mut out: Vec<(String, Grant)> = policy
        .filesystem
        .write
        .iter()
        .map(|p| (p.clone(), Grant::ReadWrite))
        .collect();
    for path in &policy.filesystem.read {
        if !policy.filesystem.write.contains(path) {
            out.push((path.clone(), Grant::Read));
        }
    }
    out
}

/// Whether the policy lets `path` be read (and so executed): the
/// matcher's read rule (§4).
pub fn may_execute(policy: &CompiledPolicy, path: &str) -> bool {
    allows_filesystem(
        policy,
        &FilesystemAction {
            access: FileAccess::Read,
            path: path.to_string(),
        },
    )
}

/// What `--placeholders` does to the agent's environment and grants
/// (docs/sandbox.md, docs/policy-semantics.md §9.4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placeholders {
    /// Variables set to a credential's placeholder (over any value the
    /// image set).
    pub set: Vec<(String, String)>,
    /// Variables removed: their credential has no valid placeholder, and
    /// a value the image set must not pass for one (it could be a real
    /// token).
    pub unset: Vec<String>,
    /// The credentials' `placeholder.file` paths, readable under Landlock:
    /// each holds only a placeholder, worthless outside the Pod.
    pub files: Vec<String>,
    /// One line each, for stderr.
    pub warnings: Vec<String>,
}

/// Reads `credentials.json` beside the policy file and this Pod's
/// placeholders in `dir` (the proxy writes `dir/NAME` for each declared
/// credential before the Pod's agent containers start). Without
/// `credentials.json` the sandbox declares none and nothing changes.
pub fn placeholders(policy: &Path, dir: &Path) -> Placeholders {
    use agentgate_policy::credentials::{Credential, is_placeholder};
    let mut out = Placeholders::default();
    let declarations = policy
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join("credentials.json");
    let text = match std::fs::read(&declarations) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return out,
        Err(e) => {
            out.warnings.push(format!(
                "{}: {e}; no placeholder is set",
                declarations.display()
            ));
            return out;
        }
    };
    let declared: Vec<Credential> = match serde_json::from_slice(&text) {
        Ok(declared) => declared,
        Err(e) => {
            out.warnings.push(format!(
                "{} is not a list of credentials ({e}); no placeholder is set",
                declarations.display()
            ));
            return out;
        }
    };
    for c in declared {
        if let Some(file) = &c.placeholder.file {
            out.files.push(file.clone());
        }
        let Some(env) = c.placeholder.env else {
            continue;
        };
        // A name is a file name under `dir`: nothing else is read.
        let value = agentgate_policy::action::check_credential_name(&c.name)
            .ok()
            .and_then(|()| std::fs::read_to_string(dir.join(&c.name)).ok())
            .filter(|v| is_placeholder(v));
        match value {
            Some(value) => out.set.push((env, value)),
            None => {
                out.warnings.push(format!(
                    "no valid placeholder for credential {} in {}; {env} is left unset",
                    c.name,
                    dir.display()
                ));
                out.unset.push(env);
            }
        }
    }
    out
}

/// What [`restrict_self`] achieved.
#[derive(Debug)]
pub struct Restriction {
    /// Fully or partially (an older kernel: fewer kinds of access) enforced,
    /// or not at all.
    pub status: RulesetStatus,
    /// The kernel's Landlock ABI, when it has one.
    pub kernel_abi: Option<i32>,
    /// Granted paths that do not exist here, skipped.
    pub missing: Vec<String>,
}

fn kernel_abi(status: &LandlockStatus) -> Option<i32> {
    match status {
        LandlockStatus::Available { effective_abi, .. } => Some(*effective_abi as i32),
        _ => None,
    }
}

/// Restricts this process (and every process it execs or forks from now
/// on) to the grants, plus the device files of §7, and sets
/// `no_new_privs`. With `best_effort` a kernel without Landlock is not an
/// error (the returned status says `NotEnforced`).
pub fn restrict_self(
    grants: &[(String, Grant)],
    best_effort: bool,
) -> Result<Restriction, SandboxError> {
    let ll = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    let all = AccessFs::from_all(REQUESTED_ABI);
    let read = AccessFs::from_read(REQUESTED_ABI);
    let file_rights = AccessFs::from_file(REQUESTED_ABI);
    let mut missing = Vec::new();
    let mut rules: Vec<PathBeneath<PathFd>> = Vec::new();
    let mut add =
        |path: &str, access: BitFlags<AccessFs>, missing: &mut Vec<String>| match PathFd::new(path)
        {
            Ok(fd) => {
                // Directory-only rights on a file are an error to Landlock.
                let is_dir = std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false);
                let access = if is_dir { access } else { access & file_rights };
                rules.push(PathBeneath::new(fd, access));
            }
            Err(_) => missing.push(path.to_string()),
        };
    for (path, grant) in grants {
        let access = match grant {
            Grant::Read => read,
            Grant::ReadWrite => all,
        };
        add(path, access, &mut missing);
    }
    let mut devices = Vec::new();
    for device in ALWAYS_READ_WRITE {
        add(
            device,
            AccessFs::ReadFile | AccessFs::WriteFile,
            &mut devices,
        );
    }
    for device in ALWAYS_READ {
        add(device, AccessFs::ReadFile.into(), &mut devices);
    }
    let ruleset = Ruleset::default()
        // Best effort per right: an older kernel handles fewer kinds of
        // access. Whether Landlock exists at all is checked below.
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(ll)?
        .create()
        .map_err(ll)?
        .no_new_privs(true)
        .add_rules(rules.into_iter().map(Ok::<_, landlock::RulesetError>))
        .map_err(ll)?;
    let status = ruleset.restrict_self().map_err(ll)?;
    let kernel_abi = kernel_abi(&status.landlock);
    if status.ruleset == RulesetStatus::NotEnforced && !best_effort {
        return Err(SandboxError::NoLandlock(format!("{:?}", status.landlock)));
    }
    Ok(Restriction {
        status: status.ruleset,
        kernel_abi,
        missing,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn placeholders_need_declarations_and_a_valid_file() {
        let root =
            std::env::temp_dir().join(format!("agentgate-placeholders-{}", std::process::id()));
        std::fs::create_dir_all(root.join("ph")).unwrap();
        let policy = root.join("policy.yaml");
        // No credentials.json: nothing declared, nothing changes.
        assert_eq!(
            placeholders(&policy, &root.join("ph")),
            Placeholders::default()
        );
        // Not a list of credentials: a warning, nothing set.
        std::fs::write(root.join("credentials.json"), "{").unwrap();
        let out = placeholders(&policy, &root.join("ph"));
        assert!(out.set.is_empty() && out.unset.is_empty());
        assert_eq!(out.warnings.len(), 1, "{out:?}");
        // A name that is not a DNS label never names a file to read.
        std::fs::write(
            root.join("credentials.json"),
            r#"[{"name": "../x", "secretRef": {"name": "s", "key": "k"},
                 "placeholder": {"env": "T"}, "attach": {"query": {"name": "t"}}}]"#,
        )
        .unwrap();
        std::fs::write(
            root.join("x"),
            "agentgate-placeholder-0123456789abcdef0123456789abcdef",
        )
        .unwrap();
        let out = placeholders(&policy, &root.join("ph"));
        assert_eq!(out.unset, vec!["T".to_string()]);
        let _ = std::fs::remove_dir_all(&root);
    }
}
