#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a panic is a failed test
//! The Argo CD resource health checks in `charts/agentgate/argocd/`, laid
//! out as Argo CD's own `resource_customizations` (`agentgate.dev/<Kind>/`
//! with `health.lua`, `health_test.yaml` and `testdata/`), run in a real
//! Lua interpreter the way Argo CD runs them: the object as the global
//! `obj`, the script's returned table read as `status` and `message`. Every
//! case of each `health_test.yaml` must give its status and message. The
//! `live-*.yaml` testdata are objects as the operator wrote them in the
//! kstatus e2e test (e2e/tests/kstatus.rs), so the Lua and the operator's
//! conditions are checked against each other, not against a copy.
//!
//! The four scripts are generated from one template,
//! `charts/agentgate/argocd/health.lua.tmpl`, and what each kind adds to it
//! ([`CHECKS`]); `argocd-cm.yaml` (the `resource.customizations.health.*`
//! keys to paste into Argo CD's ConfigMap) must hold exactly the `.lua`
//! files. `AGENTGATE_UPDATE_ARGOCD=1 cargo test -p agentgate-tests --test
//! argocd_health` writes both anew.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use mlua::{Lua, LuaSerdeExt, SerializeOptions, Table};
use serde::Deserialize;

const KINDS: [&str; 4] = [
    "AgentSandbox",
    "PolicyProposal",
    "MaximumPolicy",
    "AgentScan",
];
const GROUP: &str = "agentgate.dev";

/// What one kind's health check adds to the template.
struct Check {
    kind: &'static str,
    /// The script's own comment, without the `-- `.
    about: &'static str,
    /// Conditions that make it Degraded when `False` (after `Stalled`):
    /// an operator from before `Stalled` said so with these only.
    degraded_when_false: &'static [&'static str],
    /// Lua run after `Stalled` and the conditions above, before
    /// `Reconciling`.
    degraded: &'static str,
    /// Lua run after `Reconciling`, before `Ready`.
    progressing: &'static str,
    /// The message while `Ready` is not `True`.
    waiting: &'static str,
}

const CHECKS: [Check; 4] = [
    Check {
        kind: "AgentSandbox",
        about: "Argo CD health of an agentgate.dev AgentSandbox (agentgate's docs/status.md).
Degraded when Stalled=True, WithinMaximum=False (grants revoked, the
sandbox refused or unmanaged) or FindingsClear=False (unfixed trifecta
findings, an unscanned image), and when the template cannot run confined;
Progressing until the operator has observed the current generation, or
while Reconciling=True or Ready is not True; Healthy otherwise. The message
is the deciding condition's. Lua 5.1 as Argo CD runs it.",
        degraded_when_false: &["WithinMaximum", "FindingsClear"],
        degraded: "",
        progressing: "",
        waiting: "Waiting for the sandbox to be Ready",
    },
    Check {
        kind: "PolicyProposal",
        about: "Argo CD health of an agentgate.dev PolicyProposal (agentgate's docs/status.md).
Degraded when the proposal is Rejected (Stalled=True, or phase Rejected);
Progressing until the operator has observed the current generation, while
it awaits a reviewer's approval (Reconciling=True, or phase
AwaitingApproval) or its sandbox, or while Ready is not True; Healthy once
Applied. The message is the deciding condition's (the verdict's reason).
Lua 5.1 as Argo CD runs it.",
        degraded_when_false: &[],
        degraded: r#"if status.phase == "Rejected" then
  hs.status = "Degraded"
  hs.message = status.reason or "Rejected"
  return hs
end
"#,
        progressing: r#"if status.phase == "AwaitingApproval" or status.phase == "Pending" then
  hs.status = "Progressing"
  hs.message = status.reason or status.phase
  return hs
end
"#,
        waiting: "Waiting for the proposal to be decided",
    },
    Check {
        kind: "MaximumPolicy",
        about: "Argo CD health of an agentgate.dev MaximumPolicy (agentgate's docs/status.md).
Degraded when Stalled=True or Consistent=False (the ceiling allows something
inside its own invariants; or an invalid policy or selector); Progressing
until the operator has observed the current generation, or while
Reconciling=True or Ready is not True; Healthy otherwise. The message
is the deciding condition's. Lua 5.1 as Argo CD runs it.",
        degraded_when_false: &["Consistent"],
        degraded: "",
        progressing: "",
        waiting: "Waiting for the ceiling to be Ready",
    },
    Check {
        kind: "AgentScan",
        about: "Argo CD health of an agentgate.dev AgentScan (agentgate's docs/status.md).
Degraded when Stalled=True or FindingsClear=False (the image carries trifecta
findings; or an invalid graph); Progressing until the operator has observed
the current generation, or while Reconciling=True or Ready is not True;
Healthy otherwise. The message is the deciding condition's. Lua 5.1 as
Argo CD runs it.",
        degraded_when_false: &["FindingsClear"],
        degraded: "",
        progressing: "",
        waiting: "Waiting for the scan to be analysed",
    },
];

/// `check`'s script: the template with its placeholders filled in.
fn generated(template: &str, check: &Check) -> String {
    // The template's own comment ends at its first blank line.
    let (_, body) = template
        .split_once("\n\n")
        .expect("health.lua.tmpl: its comment, a blank line, then the script");
    let about: String = check.about.lines().map(|l| format!("-- {l}\n")).collect();
    let mut degraded = String::new();
    if !check.degraded_when_false.is_empty() {
        let kinds: Vec<String> = check
            .degraded_when_false
            .iter()
            .map(|k| format!("{k:?}"))
            .collect();
        degraded.push_str(&format!(
            "-- An operator from before Stalled said it with the domain conditions only.\n\
             for _, kind in ipairs({{ {} }}) do\n  \
               local c = condition(conditions, kind, \"False\")\n  \
               if c ~= nil then\n    \
                 hs.status = \"Degraded\"\n    \
                 hs.message = c.message\n    \
                 return hs\n  \
               end\n\
             end\n",
            kinds.join(", ")
        ));
    }
    degraded.push_str(check.degraded);
    body.replace("{{ABOUT}}\n", &about)
        .replace("{{DEGRADED}}\n", &degraded)
        .replace("{{PROGRESSING}}\n", check.progressing)
        .replace("{{WAITING}}", check.waiting)
}

#[test]
fn every_health_check_is_the_template_filled_in() {
    let template = read(&argocd_dir().join("health.lua.tmpl"));
    assert_eq!(
        CHECKS.map(|c| c.kind),
        KINDS,
        "one check per kind, in the order of KINDS"
    );
    for check in &CHECKS {
        let want = generated(&template, check);
        assert!(
            !want.contains("{{"),
            "{}: a placeholder left unfilled:\n{want}",
            check.kind
        );
        let path = kind_dir(check.kind).join("health.lua");
        if std::env::var_os("AGENTGATE_UPDATE_ARGOCD").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        assert!(
            read(&path) == want,
            "{} is not health.lua.tmpl filled in for {}; edit the template (or CHECKS) and regenerate: AGENTGATE_UPDATE_ARGOCD=1 cargo test -p agentgate-tests --test argocd_health",
            path.display(),
            check.kind
        );
    }
}

fn argocd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/agentgate/argocd")
}

fn kind_dir(kind: &str) -> PathBuf {
    argocd_dir().join(GROUP).join(kind)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Argo CD's `health_test.yaml`.
#[derive(Deserialize)]
struct HealthTests {
    tests: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Case {
    health_status: Health,
    input_path: String,
}

#[derive(Deserialize, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct Health {
    status: String,
    message: String,
}

/// Runs `script` on `obj` as Argo CD does (a fresh interpreter per object;
/// YAML nulls are Lua nils, as in Argo CD's JSON-to-Lua conversion).
fn health(script: &str, name: &str, obj: &serde_json::Value) -> Result<Health, mlua::Error> {
    let lua = Lua::new();
    let options = SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false)
        .set_array_metatable(false);
    lua.globals().set("obj", lua.to_value_with(obj, options)?)?;
    let hs: Table = lua.load(script).set_name(name).eval()?;
    Ok(Health {
        status: hs.get("status")?,
        message: hs.get("message")?,
    })
}

#[test]
fn every_health_check_gives_each_of_its_cases() {
    for kind in KINDS {
        let dir = kind_dir(kind);
        let script = read(&dir.join("health.lua"));
        let cases: HealthTests = serde_saphyr::from_str(&read(&dir.join("health_test.yaml")))
            .unwrap_or_else(|e| panic!("{kind}/health_test.yaml: {e}"));
        let mut used = BTreeSet::new();
        let mut statuses = BTreeSet::new();
        for case in &cases.tests {
            let path = dir.join(&case.input_path);
            let obj: serde_json::Value = serde_saphyr::from_str(&read(&path))
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(obj["kind"], kind, "{}", path.display());
            assert_eq!(
                obj["apiVersion"],
                format!("{GROUP}/v1alpha1"),
                "{}",
                path.display()
            );
            let got = health(&script, &format!("{kind}/health.lua"), &obj)
                .unwrap_or_else(|e| panic!("{kind}/health.lua on {}: {e}", case.input_path));
            assert_eq!(got, case.health_status, "{kind} {}", case.input_path);
            used.insert(case.input_path.clone());
            statuses.insert(got.status);
        }
        // Every testdata file is a case; every outcome is covered.
        let testdata: BTreeSet<String> = std::fs::read_dir(dir.join("testdata"))
            .unwrap()
            .map(|e| format!("testdata/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        assert_eq!(
            testdata, used,
            "{kind}: testdata without a case, or the reverse"
        );
        let all: BTreeSet<String> = ["Degraded", "Healthy", "Progressing"]
            .map(String::from)
            .into();
        assert_eq!(statuses, all, "{kind}: not every health status is tested");
        assert!(
            used.iter().any(|p| p.starts_with("testdata/live-")),
            "{kind}: no case is an object the operator wrote (testdata/live-*.yaml)"
        );
    }
}

#[test]
fn a_script_that_fails_is_reported_not_passed() {
    // The harness itself: a Lua error surfaces, a wrong answer is seen.
    let obj = serde_json::json!({"metadata": {"generation": 2}, "status": null});
    assert!(health("return obj.status.conditions", "bad", &obj).is_err());
    let script = read(&kind_dir("AgentSandbox").join("health.lua"));
    let got = health(&script, "AgentSandbox", &obj).unwrap();
    assert_eq!(got.status, "Progressing", "a null status is no status");
}

/// The `argocd-cm` keys for every kind, from the `.lua` files.
fn argocd_cm() -> String {
    let mut out = String::from(
        "# Argo CD health checks for agentgate's custom resources, to merge into the\n\
         # argocd-cm ConfigMap (docs/status.md). Generated from\n\
         # agentgate.dev/<Kind>/health.lua by tests/tests/argocd_health.rs; do not edit\n\
         # (AGENTGATE_UPDATE_ARGOCD=1 cargo test -p agentgate-tests --test argocd_health).\n\
         apiVersion: v1\n\
         kind: ConfigMap\n\
         metadata:\n  name: argocd-cm\n  namespace: argocd\n  labels:\n    app.kubernetes.io/name: argocd-cm\n    app.kubernetes.io/part-of: argocd\n\
         data:\n",
    );
    for kind in KINDS {
        out.push_str(&format!(
            "  resource.customizations.health.{GROUP}_{kind}: |\n"
        ));
        for line in read(&kind_dir(kind).join("health.lua")).lines() {
            if line.is_empty() {
                out.push('\n');
            } else {
                out.push_str(&format!("    {line}\n"));
            }
        }
    }
    out
}

#[test]
fn the_argocd_cm_snippet_holds_exactly_the_lua_files() {
    let path = argocd_dir().join("argocd-cm.yaml");
    let want = argocd_cm();
    if std::env::var_os("AGENTGATE_UPDATE_ARGOCD").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = read(&path);
    assert!(
        have == want,
        "{} differs from the health.lua files; regenerate it: AGENTGATE_UPDATE_ARGOCD=1 cargo test -p agentgate-tests --test argocd_health",
        path.display()
    );
    // And it reads back, as YAML, to the very scripts.
    let cm: serde_json::Value = serde_saphyr::from_str(&have).unwrap();
    for kind in KINDS {
        let key = format!("resource.customizations.health.{GROUP}_{kind}");
        assert_eq!(
            cm["data"][&key].as_str(),
            Some(read(&kind_dir(kind).join("health.lua")).as_str()),
            "{key}"
        );
    }
}
