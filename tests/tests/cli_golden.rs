//! Golden tests of the documentation: every ```console block of docs/cli.md
//! and of README.md is run from the repository root and its output and exit
//! code compared, so neither can drift from the binary. Timings are
//! normalised.
//!
//! docs/cli.md shows only `agentgate` commands. README.md also shows what a
//! cluster answers; those commands run offline against the webhook's own
//! router in process (the admission path `kubectl` reaches), over caches
//! holding the examples (tests/src/fuzz.rs): `kubectl apply -f FILE`,
//! `agentgate ... | kubectl apply -f -` and `kubectl run NAME -n NS
//! --image=IMAGE`. kubectl's own framing of an answer ("Error from server
//! (Forbidden): ...", "KIND.GROUP/NAME created") is written here, the
//! message inside it comes from the webhook. An image abbreviated with `…`
//! stands for the one image in examples/ that starts so. A README command
//! no runner here understands fails the test; commands shown in ```sh
//! blocks (`make demo`, `make test`, rendering with kustomize or helm) are
//! not run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use agentgate_api::crd::AgentScan;
use agentgate_tests::fuzz::Webhook;
use serde_json::{Value, json};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `agentgate` binary (target/<profile>/agentgate, next to this test's
/// deps/ directory). `cargo test` does not build another package's binary,
/// so `make test` builds it first; run `cargo build -p agentgate` before
/// running this test by hand.
fn binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = profile_dir.join("agentgate");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p agentgate` first (make test does)",
        bin.display()
    );
    bin
}

/// Replaces the number before " ms" and after `"solverMillis":` with `<ms>`.
fn normalise(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut line = line.to_string();
        if let Some(i) = line.find("\"solverMillis\":") {
            let start = i + "\"solverMillis\":".len();
            let end = line[start..]
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .map_or(line.len(), |e| start + e);
            line.replace_range(start..end, "<ms>");
        }
        if let Some(end) = line.find(" ms") {
            let start = line[..end]
                .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
                .map_or(0, |s| s + 1);
            if start < end {
                line.replace_range(start..end, "<ms>");
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// One `$ command` of a ```console block, with the output and the
/// `[exit N]` line shown under it.
struct Example {
    /// `docs/cli.md:N`, the command's line.
    place: String,
    command: String,
    expected: String,
    exit: Option<i32>,
}

/// Every `$ command` of every ```console block of `markdown`.
fn examples(doc: &str, markdown: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    // Inside a block: the number of examples before it.
    let mut block: Option<usize> = None;
    for (n, line) in markdown.lines().enumerate() {
        let Some(before) = block else {
            if line.trim() == "```console" {
                block = Some(out.len());
            }
            continue;
        };
        if line == "```" {
            block = None;
        } else if let Some(command) = line.strip_prefix("$ ") {
            out.push(Example {
                place: format!("{doc}:{}", n + 1),
                command: command.to_string(),
                expected: String::new(),
                exit: None,
            });
        } else {
            let started = out.len() > before;
            let example = out
                .last_mut()
                .filter(|_| started)
                .unwrap_or_else(|| panic!("{doc}:{}: a console block starts with `$ `", n + 1));
            if let Some(code) = line
                .strip_prefix("[exit ")
                .and_then(|l| l.strip_suffix(']'))
            {
                example.exit = Some(code.parse().unwrap());
            } else {
                example.expected.push_str(line);
                example.expected.push('\n');
            }
        }
    }
    out
}

/// Runs `agentgate args` from the repository root: stdout, stderr, exit code.
fn run_binary(args: &[String]) -> (String, String, i32) {
    let output = Command::new(binary())
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        output.status.code().unwrap_or(-1),
    )
}

/// Compares an `agentgate` example with the binary; `None` when it matches.
fn check_binary_example(ex: &Example, args: &[String]) -> Option<String> {
    let Some(exit) = ex.exit else {
        return Some(format!(
            "{}: `{}` has no [exit N] line",
            ex.place, ex.command
        ));
    };
    let (stdout, stderr, code) = run_binary(args);
    let actual = format!("{stdout}{stderr}");
    (normalise(&actual) != normalise(&ex.expected) || code != exit).then(|| {
        format!(
            "{}: {}\n--- expected (exit {exit})\n{}--- actual (exit {code})\n{actual}",
            ex.place, ex.command, ex.expected
        )
    })
}

#[test]
fn docs_cli_examples_match_the_binary() {
    let root = repo_root();
    let markdown = std::fs::read_to_string(root.join("docs/cli.md")).unwrap();
    let examples = examples("docs/cli.md", &markdown);
    assert!(
        examples.len() >= 10,
        "expected the documented examples, found {}",
        examples.len()
    );
    let mut failures = Vec::new();
    for ex in &examples {
        let args: Vec<String> = ex
            .command
            .strip_prefix("agentgate ")
            .unwrap_or_else(|| panic!("{}: a console block shows `$ agentgate ...`", ex.place))
            .split_whitespace()
            .map(str::to_string)
            .collect();
        failures.extend(check_binary_example(ex, &args));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// How a README command runs offline.
#[derive(Debug, PartialEq)]
enum Offline {
    /// `agentgate ARGS`
    Binary(Vec<String>),
    /// `agentgate ARGS | kubectl apply -f -`
    BinaryIntoApply(Vec<String>),
    /// `kubectl apply -f FILE`
    Apply(String),
    /// `kubectl run NAME -n NAMESPACE --image=IMAGE`
    RunPod {
        name: String,
        namespace: String,
        image: String,
    },
}

/// The runner for `command`, or why there is none.
fn offline(command: &str) -> Result<Offline, String> {
    let words =
        |text: &str| -> Vec<String> { text.split_whitespace().map(str::to_string).collect() };
    if let Some((left, right)) = command.split_once(" | ") {
        return match (left.strip_prefix("agentgate "), right.trim()) {
            (Some(args), "kubectl apply -f -") => Ok(Offline::BinaryIntoApply(words(args))),
            _ => Err("only `agentgate ... | kubectl apply -f -` is piped".into()),
        };
    }
    if let Some(args) = command.strip_prefix("agentgate ") {
        return Ok(Offline::Binary(words(args)));
    }
    if let Some(file) = command.strip_prefix("kubectl apply -f ") {
        return Ok(Offline::Apply(file.trim().to_string()));
    }
    if let Some(args) = command.strip_prefix("kubectl run ") {
        if let [name, flag, namespace, image] = words(args).as_slice()
            && flag == "-n"
            && let Some(image) = image.strip_prefix("--image=")
        {
            return Ok(Offline::RunPod {
                name: name.clone(),
                namespace: namespace.clone(),
                image: image.to_string(),
            });
        }
        return Err("`kubectl run` is run as `kubectl run NAME -n NAMESPACE --image=IMAGE`".into());
    }
    Err("no offline runner for it".into())
}

/// Every image named by digest in examples/ (`REPO@sha256:<64 hex>`).
fn example_images() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                let text = std::fs::read_to_string(&path).unwrap();
                for word in text.split(|c: char| c.is_whitespace() || c == '"' || c == '\'') {
                    if word.contains("@sha256:") && !out.iter().any(|w| w == word) {
                        out.push(word.to_string());
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo_root().join("examples"), &mut out);
    out
}

/// `word` with an image abbreviated as `PREFIX…` written out: the one image
/// of `images` that starts with PREFIX.
fn expand_image(word: &str, images: &[String]) -> Result<String, String> {
    let Some(cut) = word.find('…') else {
        return Ok(word.to_string());
    };
    let (head, tail) = (&word[..cut], &word[cut + '…'.len_utf8()..]);
    let start = head.rfind(['=', ' ']).map_or(0, |i| i + 1);
    let prefix = &head[start..];
    let matches: Vec<&String> = images.iter().filter(|i| i.starts_with(prefix)).collect();
    match matches.as_slice() {
        [image] => Ok(format!("{}{image}{tail}", &head[..start])),
        _ => Err(format!(
            "`{prefix}…` matches {} images in examples/, not one",
            matches.len()
        )),
    }
}

/// The webhook that `kubectl` reaches: its router in process, rebuilt with
/// every scan the README applied so far; the README's user is a cluster
/// admin (`system:masters`, the chart's default scan writer).
struct Cluster {
    scans: Vec<AgentScan>,
    webhook: Option<Webhook>,
}

const ADMIN_GROUPS: [&str; 2] = ["system:masters", "system:authenticated"];

impl Cluster {
    fn webhook(&mut self) -> &Webhook {
        let scans = self.scans.clone();
        self.webhook
            .get_or_insert_with(|| Webhook::with_scans(scans, &["group:system:masters"]))
    }

    /// The webhook's answer to creating `object`: admitted, or the refusal.
    fn create(&mut self, object: &Value) -> Result<(), String> {
        let kind = object["kind"].as_str().unwrap_or_default();
        let (group, version) = match object["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .split_once('/')
        {
            Some((group, version)) => (group.to_string(), version.to_string()),
            None => (
                String::new(),
                object["apiVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            ),
        };
        let mut request = json!({
            "uid": "2f1b6c0e-0000-4000-8000-000000000001",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": plural(kind)},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": plural(kind)},
            "name": object["metadata"]["name"],
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ADMIN_GROUPS},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": null,
        });
        if let Some(namespace) = object["metadata"]["namespace"].as_str() {
            request["namespace"] = json!(namespace);
        }
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
        let endpoint = format!("/validate/{}", plural(kind));
        let (allowed, message) = self
            .webhook()
            .admission_answer(&endpoint, serde_json::to_vec(&review).unwrap())
            .unwrap();
        if !allowed {
            return Err(message);
        }
        if kind == "AgentScan" {
            self.scans
                .push(serde_json::from_value(object.clone()).unwrap());
            self.webhook = None;
        }
        Ok(())
    }
}

/// The resource name of the kinds the README creates.
fn plural(kind: &str) -> String {
    match kind {
        "AgentSandbox" => "agentsandboxes".into(),
        "MaximumPolicy" => "maximumpolicies".into(),
        "PolicyProposal" => "policyproposals".into(),
        other => format!("{}s", other.to_lowercase()),
    }
}

/// kubectl's line for a created object: `agentscan.agentgate.dev/NAME created`.
fn created_line(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or_default().to_lowercase();
    let group = object["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .map_or(String::new(), |(group, _)| format!(".{group}"));
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    format!("{kind}{group}/{name} created")
}

/// The webhook's name in the chart for `kind` (`{plural}.agentgate.dev`).
fn webhook_name(kind: &str) -> String {
    format!("{}.agentgate.dev", plural(kind))
}

/// The YAML documents of `text`, empty ones dropped.
fn documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_str_multiple::<Value, Vec<Value>>(text)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// What kubectl prints applying `objects` from `source` (a file, or `-`).
fn apply(cluster: &mut Cluster, source: &str, objects: &[Value]) -> (String, i32) {
    let mut printed = String::new();
    let mut exit = 0;
    for object in objects {
        match cluster.create(object) {
            Ok(()) => printed.push_str(&format!("{}\n", created_line(object))),
            Err(message) => {
                exit = 1;
                printed.push_str(&format!(
                    "Error from server (Forbidden): error when creating {source:?}: admission webhook {:?} denied the request: {message}\n",
                    webhook_name(object["kind"].as_str().unwrap_or_default())
                ));
            }
        }
    }
    (printed, exit)
}

/// Runs one README example offline; `None` when it matches.
fn check_readme_example(ex: &Example, cluster: &mut Cluster, images: &[String]) -> Option<String> {
    let command = match ex
        .command
        .split(' ')
        .map(|w| expand_image(w, images))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(words) => words.join(" "),
        Err(e) => return Some(format!("{}: `{}`: {e}", ex.place, ex.command)),
    };
    let runner = match offline(&command) {
        Ok(runner) => runner,
        Err(e) => {
            return Some(format!(
                "{}: `{}`: {e}; add a runner to tests/tests/cli_golden.rs, or show it in a ```sh block, which is not run",
                ex.place, ex.command
            ));
        }
    };
    let (actual, code) = match runner {
        Offline::Binary(args) => return check_binary_example(ex, &args),
        Offline::BinaryIntoApply(args) => {
            let (stdout, stderr, code) = run_binary(&args);
            if code != 0 {
                return Some(format!("{}: agentgate exited {code}: {stderr}", ex.place));
            }
            apply(cluster, "-", &documents(&stdout))
        }
        Offline::Apply(file) => {
            let text = std::fs::read_to_string(repo_root().join(&file)).unwrap();
            apply(cluster, &file, &documents(&text))
        }
        Offline::RunPod {
            name,
            namespace,
            image,
        } => {
            // What `kubectl run` creates: one container named after the pod.
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": {"run": name}},
                "spec": {"containers": [{"name": name, "image": image}]}
            });
            match cluster.create(&pod) {
                Ok(()) => (format!("pod/{name} created\n"), 0),
                Err(message) => (
                    format!(
                        "Error from server (Forbidden): admission webhook \"pods.agentgate.dev\" denied the request: {message}\n"
                    ),
                    1,
                ),
            }
        }
    };
    let exit_differs = ex.exit.is_some_and(|exit| exit != code);
    (actual != ex.expected || exit_differs).then(|| {
        format!(
            "{}: {}\n--- expected\n{}--- actual (exit {code})\n{actual}",
            ex.place, ex.command, ex.expected
        )
    })
}

#[test]
fn readme_examples_match_the_binary_and_the_webhook() {
    let markdown = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let examples = examples("README.md", &markdown);
    // The proof of a candidate, of files of a repository, a refused
    // apply, a scan applied and a refused pod: each kind of runner.
    assert!(
        examples.len() >= 5,
        "expected README.md's examples, found {}",
        examples.len()
    );
    let images = example_images();
    let mut cluster = Cluster {
        scans: Vec::new(),
        webhook: None,
    };
    let failures: Vec<String> = examples
        .iter()
        .filter_map(|ex| check_readme_example(ex, &mut cluster, &images))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn readme_commands_are_recognised_or_refused() {
    let args = |text: &str| {
        text.split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        offline("agentgate verify a.yaml"),
        Ok(Offline::Binary(args("verify a.yaml")))
    );
    assert_eq!(
        offline("agentgate scan d -o yaml | kubectl apply -f -"),
        Ok(Offline::BinaryIntoApply(args("scan d -o yaml")))
    );
    assert_eq!(
        offline("kubectl run bot -n enforced --image=x@sha256:1"),
        Ok(Offline::RunPod {
            name: "bot".into(),
            namespace: "enforced".into(),
            image: "x@sha256:1".into()
        })
    );
    assert!(offline("kustomize build clusters/prod | agentgate verify -").is_err());
    assert!(offline("kubectl run bot --image=x").is_err());
    assert!(offline("helm install agentgate charts/agentgate").is_err());
}

#[test]
fn abbreviated_images_expand_to_the_one_example_image() {
    let images = vec![
        "ghcr.io/acme/bot@sha256:4f1c00".to_string(),
        "ghcr.io/acme/bot@sha256:4f2d00".to_string(),
    ];
    assert_eq!(
        expand_image("--image=ghcr.io/acme/bot@sha256:4f1…", &images),
        Ok("--image=ghcr.io/acme/bot@sha256:4f1c00".to_string())
    );
    assert_eq!(expand_image("plain", &images), Ok("plain".to_string()));
    assert!(expand_image("ghcr.io/acme/bot@sha256:4f…", &images).is_err());
}

#[test]
fn normalise_hides_only_timings() {
    assert_eq!(
        normalise("proved in 12.5 ms (2 checks)"),
        "proved in <ms> ms (2 checks)\n"
    );
    assert_eq!(
        normalise(r#"{"solverMillis":3.25}"#),
        "{\"solverMillis\":<ms>}\n"
    );
    assert_eq!(normalise("cost 7"), "cost 7\n");
}
