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
//! Also: `argocd-cm.yaml` (the `resource.customizations.health.*` keys to
//! paste into Argo CD's ConfigMap) must hold exactly the `.lua` files.
//! `AGENTGATE_UPDATE_ARGOCD=1 cargo test -p agentgate-tests --test
//! argocd_health` writes it anew.

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
