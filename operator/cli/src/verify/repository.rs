//! `agentgate verify PATH...`: everything in a repository or rendered
//! stream, judged as the operator would judge it once applied. Each
//! AgentSandbox is proved against the MaximumPolicies whose selectors
//! govern it (namespace labels from the Namespaces in the input, a labels
//! file or the cluster), each MaximumPolicy against its own invariants, and
//! each PolicyProposal gets the verdict the reconciler would give it. No
//! Kubernetes I/O here: `--cluster` reads are done by the caller.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::manifests::{BadInput, Manifest};
use agentgate_api::crd::{AgentSandbox, MaximumPolicy, PolicyProposal};
use agentgate_api::documents::load_value;
use agentgate_governance::governing::{CompiledMaximums, Governance, Governing, governing_from};
use agentgate_governance::governing::{prove_declared, sandbox_refusal};
use agentgate_governance::maximum::{Assessment, assess};
use agentgate_governance::proposal::{Judgement, ProposalCase, judge};
use agentgate_governance::verdict::{Decision, Requester};
use agentgate_policy::action::Action;
use agentgate_policy::compile::{CompiledPolicy, Limits, Role, compile};
use agentgate_policy::error::Reason;
use agentgate_policy::matcher::{decide_mcp, decide_network, path_is_under};
use agentgate_policy::model::PolicyDocument;
use agentgate_prover::{Outcome, Prover};

/// The API group of agentgate's kinds and the one version this build reads.
const GROUP_VERSION: &str = "agentgate.dev/v1alpha1";
/// The label the API server puts on every Namespace (selectors may use it).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Labels by namespace name.
pub type NamespaceLabels = BTreeMap<String, BTreeMap<String, String>>;

/// What is judged, besides the manifests.
#[derive(Default)]
pub struct Context {
    /// Namespace labels from `--namespace-labels` or the cluster; a
    /// Namespace manifest in the input takes precedence.
    pub namespace_labels: NamespaceLabels,
    /// Whether `namespace_labels` is the complete list (the cluster's): a
    /// namespace missing from it does not exist yet and has only its name label.
    pub namespaces_complete: bool,
    /// Live MaximumPolicies (`--cluster`); one of the same name in the input
    /// replaces it.
    pub live_maximums: Vec<MaximumPolicy>,
    /// Live AgentSandboxes (`--cluster`), for proposals whose sandbox is not
    /// in the input; their committed effective policy is the current one.
    pub live_sandboxes: Vec<AgentSandbox>,
    /// The namespace of objects that name none (kubectl's `-n`).
    pub default_namespace: String,
    /// Sandboxes no maximum governs are allowed (the operator's flag).
    pub allow_unmanaged: bool,
}

/// How one object fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Inside every governing maximum; consistent; a proposal that would
    /// be applied or wait for approval.
    Holds,
    /// Would be refused: a concrete action escapes a ceiling, or the
    /// object breaks a rule the operator enforces (no governing maximum, a
    /// mode no maximum allows, a proposal that would be rejected).
    Exceeds,
    /// Outside the modelled language (fails closed).
    Unsupported,
    /// Could not be decided (timeout, limit, missing namespace labels).
    Inconclusive,
}

impl Status {
    /// `holds`, `exceeds`, `unsupported` or `inconclusive`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Holds => "holds",
            Status::Exceeds => "exceeds",
            Status::Unsupported => "unsupported",
            Status::Inconclusive => "inconclusive",
        }
    }
}

/// What verify found about one object, with where it is written (a line of
/// the report: a SARIF result, a JUnit test case).
#[derive(Debug, Clone)]
pub struct ObjectReport {
    /// `AgentSandbox`, `MaximumPolicy` or `PolicyProposal`.
    pub kind: &'static str,
    /// Its namespace (none for a MaximumPolicy).
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// The file it came from.
    pub file: Arc<str>,
    /// The line the finding points at: the granting rule, the failing
    /// field, or the object.
    pub line: usize,
    /// The field the finding points at, when one is to blame.
    pub field: Option<String>,
    /// The outcome.
    pub status: Status,
    /// One line a person can act on.
    pub message: String,
    /// A proposal's verdict.
    pub decision: Option<Decision>,
    /// The maximum concerned.
    pub maximum: Option<String>,
    /// The invariant concerned.
    pub invariant: Option<String>,
    /// The concrete action behind an `exceeds`.
    pub counterexample: Option<Action>,
    /// Why it is unsupported or inconclusive.
    pub reason: Option<Reason>,
    /// The maximums that govern the sandbox (or the proposal's sandbox).
    pub governed_by: Vec<String>,
    /// Milliseconds of proofs.
    pub solver_millis: f64,
}

impl ObjectReport {
    /// `Kind namespace/name` or `Kind name`.
    pub fn object(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }
}

/// What the input holds, typed.
pub struct Repository {
    maximums: Vec<(Manifest, MaximumPolicy)>,
    sandboxes: Vec<(Manifest, AgentSandbox)>,
    proposals: Vec<(Manifest, PolicyProposal)>,
    namespaces: NamespaceLabels,
    /// Objects of other kinds, passed over.
    pub ignored: usize,
}

impl Repository {
    /// How many objects are judged.
    pub fn len(&self) -> usize {
        self.maximums.len() + self.sandboxes.len() + self.proposals.len()
    }

    /// Whether nothing is judged.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn typed<T: DeserializeOwned>(manifest: &Manifest) -> Result<T, BadInput> {
    serde_path_to_error::deserialize(&manifest.value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { String::new() } else { path };
        manifest.bad(&field, e.into_inner().to_string())
    })
}

/// `labels` as selectors see them in namespace `name`: with the
/// `kubernetes.io/metadata.name` label the API server sets on every Namespace.
pub fn with_name_label(
    name: &str,
    mut labels: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    labels.insert(NAMESPACE_NAME_LABEL.into(), name.to_string());
    labels
}

/// A Namespace manifest's name and labels (with [`with_name_label`]).
pub fn namespace_labels(
    manifest: &Manifest,
) -> Result<(String, BTreeMap<String, String>), BadInput> {
    let ns: Namespace = typed(manifest)?;
    let name = ns.name_any();
    if name.is_empty() {
        return Err(manifest.bad("metadata.name", "every Namespace needs a name"));
    }
    let labels = with_name_label(&name, ns.metadata.labels.unwrap_or_default());
    Ok((name, labels))
}

/// Picks out the kinds verify judges and reads them typed. Every document
/// that cannot be read is reported (all of them, not just the first).
pub fn classify(
    manifests: Vec<Manifest>,
    default_namespace: &str,
) -> Result<Repository, Vec<BadInput>> {
    let mut repo = Repository {
        maximums: Vec::new(),
        sandboxes: Vec::new(),
        proposals: Vec::new(),
        namespaces: BTreeMap::new(),
        ignored: 0,
    };
    let mut bad = Vec::new();
    let mut seen: HashMap<(String, String, String), String> = HashMap::new();
    for manifest in manifests {
        let api_version = manifest.api_version().to_string();
        let kind = manifest.kind().to_string();
        let ours = api_version.starts_with("agentgate.dev/");
        let judged = matches!(
            kind.as_str(),
            "MaximumPolicy" | "AgentSandbox" | "PolicyProposal"
        );
        if ours && api_version != GROUP_VERSION {
            bad.push(manifest.bad(
                "apiVersion",
                format!("{api_version} is not served by this agentgate; it reads {GROUP_VERSION}"),
            ));
            continue;
        }
        let namespace_kind = api_version == "v1" && kind == "Namespace";
        if !(ours && judged || namespace_kind) {
            repo.ignored += 1;
            continue;
        }
        if manifest.name().is_empty() {
            bad.push(manifest.bad("metadata.name", "every object needs a name"));
            continue;
        }
        let namespace = match kind.as_str() {
            "MaximumPolicy" | "Namespace" => String::new(),
            _ => manifest
                .value
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or(default_namespace)
                .to_string(),
        };
        let key = (kind.clone(), namespace.clone(), manifest.name().to_string());
        let here = format!("{}:{}", manifest.file, manifest.line_of(""));
        if let Some(first) = seen.get(&key) {
            bad.push(manifest.bad(
                "metadata.name",
                format!(
                    "a second {kind} named {:?} (the first is at {first})",
                    key.2
                ),
            ));
            continue;
        }
        seen.insert(key, here.clone());
        match kind.as_str() {
            "Namespace" => match namespace_labels(&manifest) {
                Ok((name, labels)) => {
                    repo.namespaces.insert(name, labels);
                }
                Err(e) => bad.push(e),
            },
            "MaximumPolicy" => match typed::<MaximumPolicy>(&manifest) {
                Ok(mut m) => {
                    // A stable identity for the compiled-maximum cache: the
                    // same object is compiled once however many sandboxes
                    // it governs.
                    m.metadata.uid = Some(format!("input:{here}"));
                    m.metadata.generation = Some(1);
                    repo.maximums.push((manifest, m));
                }
                Err(e) => bad.push(e),
            },
            "AgentSandbox" => match typed::<AgentSandbox>(&manifest) {
                Ok(mut s) => {
                    s.metadata.namespace = Some(namespace);
                    repo.sandboxes.push((manifest, s));
                }
                Err(e) => bad.push(e),
            },
            _ => match typed::<PolicyProposal>(&manifest) {
                Ok(mut p) => {
                    p.metadata.namespace = Some(namespace);
                    repo.proposals.push((manifest, p));
                }
                Err(e) => bad.push(e),
            },
        }
    }
    if bad.is_empty() { Ok(repo) } else { Err(bad) }
}

/// A finding about `manifest` with everything else empty.
fn finding(manifest: &Manifest, kind: &'static str, namespace: Option<String>) -> ObjectReport {
    ObjectReport {
        kind,
        namespace,
        name: manifest.name().to_string(),
        file: manifest.file.clone(),
        line: manifest.line_of(""),
        field: None,
        status: Status::Holds,
        message: String::new(),
        decision: None,
        maximum: None,
        invariant: None,
        counterexample: None,
        reason: None,
        governed_by: Vec::new(),
        solver_millis: 0.0,
    }
}

impl ObjectReport {
    fn at(mut self, manifest: &Manifest, field: Option<String>) -> ObjectReport {
        if let Some(field) = field {
            self.line = manifest.line_of(&field);
            self.field = Some(field);
        }
        self
    }

    fn unproven(self, manifest: &Manifest, reason: Reason, message: String) -> ObjectReport {
        let status = match Outcome::from_reason(reason.clone()) {
            Outcome::Unsupported { .. } => Status::Unsupported,
            _ => Status::Inconclusive,
        };
        let mut f = self.at(manifest, reason.field.clone());
        f.status = status;
        f.message = message;
        f.reason = Some(reason);
        f
    }
}

/// The rule or filesystem entry of `policy` that allows `action`, as a
/// field path under `spec.policy`, so a finding points at the line to change.
fn granting_field(
    policy: &PolicyDocument,
    compiled: &CompiledPolicy,
    action: &Action,
) -> Option<String> {
    match action {
        Action::Network(_) | Action::Mcp(_) => {
            // The runtime matcher names the rule that allows it.
            let rule = match action {
                Action::Mcp(t) => decide_mcp(compiled, t).rule?,
                Action::Network(a) => decide_network(compiled, a).rule?,
                Action::Filesystem(_) => return None,
            };
            let i = policy.network.iter().position(|r| r.name == rule)?;
            Some(format!("spec.policy.network[{i}]"))
        }
        Action::Filesystem(f) => {
            for (list, key) in [
                (&policy.filesystem.read_write, "readWrite"),
                (&policy.filesystem.read_only, "readOnly"),
            ] {
                if let Some(i) = list.iter().position(|entry| path_is_under(&f.path, entry)) {
                    return Some(format!("spec.policy.filesystem.{key}[{i}]"));
                }
            }
            None
        }
    }
}

/// Judges everything in `repo`.
pub fn judge_all(repo: &Repository, ctx: &Context, prover: &Prover) -> Vec<ObjectReport> {
    let cache = CompiledMaximums::default();
    // The repository's maximums replace live ones of the same name.
    let mut maximums: BTreeMap<String, &MaximumPolicy> = ctx
        .live_maximums
        .iter()
        .map(|m| (m.name_any(), m))
        .collect();
    for (_, m) in &repo.maximums {
        maximums.insert(m.name_any(), m);
    }
    let mut findings = Vec::with_capacity(repo.len());
    for (manifest, maximum) in &repo.maximums {
        findings.push(judge_maximum(manifest, maximum, prover));
    }
    let selects_namespaces = maximums.values().any(|m| {
        m.spec
            .selector
            .as_ref()
            .is_some_and(|s| s.namespace_selector.is_some())
    });
    let governance = |sandbox: &AgentSandbox| -> Result<Governance, String> {
        let namespace = sandbox.namespace().unwrap_or_default();
        let labels = match repo
            .namespaces
            .get(&namespace)
            .or_else(|| ctx.namespace_labels.get(&namespace))
        {
            Some(labels) => labels.clone(),
            None => {
                if selects_namespaces && !ctx.namespaces_complete {
                    return Err(format!(
                        "the labels of namespace {namespace:?} are unknown, and a MaximumPolicy selects by namespace: add its Namespace manifest, --namespace-labels FILE or --cluster"
                    ));
                }
                with_name_label(&namespace, BTreeMap::new())
            }
        };
        Ok(governing_from(
            maximums.values().copied(),
            &labels,
            sandbox.labels(),
            ctx.allow_unmanaged,
            &cache,
        ))
    };
    // Sandboxes are independent proofs: spread them over the cores (each
    // prover check makes its own Z3 context), keeping the input order.
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, 8);
    let chunk = repo.sandboxes.len().div_ceil(workers).max(1);
    let judged: Vec<Vec<ObjectReport>> = std::thread::scope(|scope| {
        let handles: Vec<_> = repo
            .sandboxes
            .chunks(chunk)
            .map(|part| {
                let governance = &governance;
                scope.spawn(move || {
                    part.iter()
                        .map(|(manifest, sandbox)| {
                            judge_sandbox(manifest, sandbox, governance, ctx, prover)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            // A panic in a worker is a panic here: never a sandbox that
            // silently goes unjudged.
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    findings.extend(judged.into_iter().flatten());
    for (manifest, proposal) in &repo.proposals {
        let namespace = proposal.namespace().unwrap_or_default();
        let target = &proposal.spec.sandbox_ref.name;
        let sandbox = repo
            .sandboxes
            .iter()
            .map(|(_, s)| s)
            .find(|s| s.namespace().as_deref() == Some(&namespace) && &s.name_any() == target)
            .map(|s| (s, s.spec.policy.clone()))
            .or_else(|| {
                ctx.live_sandboxes
                    .iter()
                    .find(|s| {
                        s.namespace().as_deref() == Some(&namespace) && &s.name_any() == target
                    })
                    .map(|s| {
                        let current = s
                            .status
                            .as_ref()
                            .and_then(|st| st.effective_policy.clone())
                            .unwrap_or_default();
                        (s, current)
                    })
            });
        findings.push(judge_proposal(
            manifest,
            proposal,
            sandbox,
            &governance,
            ctx,
            prover,
        ));
    }
    findings
}

fn judge_maximum(manifest: &Manifest, maximum: &MaximumPolicy, prover: &Prover) -> ObjectReport {
    let f = finding(manifest, "MaximumPolicy", None);
    // The loader's checks first: a misspelt field gets a hint.
    if let Err(reason) = load_value(&manifest.value) {
        let message = format!("not in the modelled language: {reason}");
        return f.unproven(manifest, reason, message);
    }
    if let Err(e) =
        agentgate_governance::selector::governs(&maximum.spec, &BTreeMap::new(), &BTreeMap::new())
    {
        let field = format!("spec.selector.{}", e.field);
        let mut f = f.at(manifest, Some(field.clone()));
        f.status = Status::Unsupported;
        f.message = format!(
            "{field}: {}; it would govern nothing until fixed, and sandboxes it should govern get nothing",
            e.message
        );
        return f;
    }
    let started = std::time::Instant::now();
    let assessment = assess(maximum, prover);
    let mut f = f;
    f.solver_millis = started.elapsed().as_secs_f64() * 1000.0;
    match assessment {
        Assessment::Invalid(reason) => {
            let message = format!("not in the modelled language: {reason}");
            f.unproven(manifest, reason, message)
        }
        Assessment::Valid {
            inconsistent: Some((invariant, witness)),
            ..
        } => {
            let i = maximum
                .spec
                .invariants
                .iter()
                .position(|inv| inv.name == invariant);
            let mut f = f.at(manifest, i.map(|i| format!("spec.invariants[{i}]")));
            f.status = Status::Exceeds;
            f.message = format!(
                "inconsistent: the ceiling itself allows {witness}, inside its invariant {invariant:?}; every sandbox it governs is refused"
            );
            f.invariant = Some(invariant);
            f
        }
        Assessment::Valid {
            unproven: Some((invariant, reason)),
            ..
        } => {
            let message =
                format!("cannot prove the ceiling outside its invariant {invariant:?}: {reason}");
            let mut f = f.unproven(manifest, reason, message);
            f.invariant = Some(invariant);
            f
        }
        Assessment::Valid { .. } => {
            let n = maximum.spec.invariants.len();
            f.message = format!(
                "consistent: outside its {n} invariant{}",
                if n == 1 { "" } else { "s" }
            );
            f
        }
    }
}

/// Governance of a sandbox: the maximums, or why it cannot be known.
type GovernanceOf<'a> = dyn Fn(&AgentSandbox) -> Result<Governance, String> + Sync + 'a;

/// The governing maximums, or the finding that governance was refused or
/// could not be known.
fn refused_governance(
    f: ObjectReport,
    manifest: &Manifest,
    governance: Result<Governance, String>,
) -> Result<Vec<Governing>, Box<ObjectReport>> {
    match governance {
        Err(message) => {
            let mut f = f.at(manifest, Some("metadata.namespace".into()));
            f.status = Status::Inconclusive;
            f.message = message;
            Err(Box::new(f))
        }
        Ok(Governance::Governed(g)) => Ok(g),
        Ok(Governance::Refused(code, message)) => {
            let mut f = f;
            f.status = if code == "Unmanaged" {
                Status::Exceeds
            } else {
                Status::Unsupported
            };
            f.message = message;
            Err(Box::new(f))
        }
    }
}

fn judge_sandbox(
    manifest: &Manifest,
    sandbox: &AgentSandbox,
    governance: &GovernanceOf<'_>,
    ctx: &Context,
    prover: &Prover,
) -> ObjectReport {
    let f = finding(manifest, "AgentSandbox", sandbox.namespace());
    if let Err(reason) = load_value(&manifest.value) {
        let message = format!("not in the modelled language: {reason}");
        return f.unproven(manifest, reason, message);
    }
    let governing = match refused_governance(f.clone(), manifest, governance(sandbox)) {
        Ok(g) => g,
        Err(f) => return *f,
    };
    let mut f = f;
    f.governed_by = governing.iter().map(|g| g.name.clone()).collect();
    if let Some(refusal) = sandbox_refusal(sandbox, &governing) {
        let mut f = f.at(manifest, Some(refusal.field));
        f.status = Status::Exceeds;
        f.message = refusal.message;
        return f;
    }
    let compiled = match compile(&sandbox.spec.policy, Role::Sandbox, &Limits::default()) {
        Ok(c) => c,
        Err(reason) => {
            let reason = reason.within("spec.policy");
            let message = format!("not in the modelled language: {reason}");
            return f.unproven(manifest, reason, message);
        }
    };
    let verdict = prove_declared(sandbox, &compiled, &governing, ctx.allow_unmanaged, prover);
    f.solver_millis = verdict.proofs.iter().map(|p| p.solver_millis).sum();
    f.maximum = verdict.maximum.clone();
    f.invariant = verdict.invariant.clone();
    if verdict.decision != Decision::Reject {
        f.message = match governing.len() {
            0 => "holds: no MaximumPolicy governs it (--allow-unmanaged)".to_string(),
            1 => format!("within MaximumPolicy {:?}", governing[0].name),
            n => format!(
                "within all {n} governing MaximumPolicies ({})",
                f.governed_by.join(", ")
            ),
        };
        return f;
    }
    if let Some(code) = verdict.code {
        let reason = Reason {
            code,
            field: None,
            message: verdict.reason.clone(),
        };
        let mut f = f.unproven(manifest, reason, verdict.reason.clone());
        f.line = manifest.line_of("spec.policy");
        return f;
    }
    let field = verdict
        .counterexample
        .as_ref()
        .and_then(|a| granting_field(&sandbox.spec.policy, &compiled, a))
        .or_else(|| Some("spec.policy".into()));
    let mut f = f.at(manifest, field);
    f.status = Status::Exceeds;
    f.message = verdict.reason;
    f.counterexample = verdict.counterexample;
    f
}

fn judge_proposal(
    manifest: &Manifest,
    proposal: &PolicyProposal,
    sandbox: Option<(&AgentSandbox, PolicyDocument)>,
    governance: &GovernanceOf<'_>,
    ctx: &Context,
    prover: &Prover,
) -> ObjectReport {
    let f = finding(manifest, "PolicyProposal", proposal.namespace());
    let Some((sandbox, current)) = sandbox else {
        let mut f = f.at(manifest, Some("spec.sandboxRef.name".into()));
        f.status = Status::Inconclusive;
        f.message = format!(
            "its sandbox {:?} is not in the input{}",
            proposal.spec.sandbox_ref.name,
            if ctx.live_sandboxes.is_empty() {
                " (add it, or use --cluster)"
            } else {
                " nor in the cluster"
            }
        );
        return f;
    };
    // Whatever stops a proposal before its verdict rejects it.
    let governing = match refused_governance(f.clone(), manifest, governance(sandbox)) {
        Ok(g) => g,
        Err(refused) => {
            let mut f = *refused;
            f.decision = Some(Decision::Reject);
            return f;
        }
    };
    let mut f = f;
    f.governed_by = governing.iter().map(|g| g.name.clone()).collect();
    // A manifest's status is whatever its author wrote: the API server
    // drops it on apply, and only the webhook decides who may set
    // `Approved`. So a proposal is judged as its requester's (the agent's)
    // here, never as approved; a human requester's own approve verb is not
    // known offline either. Such proposals show Ask where the operator
    // might apply them.
    let case = ProposalCase {
        proposal,
        sandbox,
        current: &current,
        governing: &governing,
        requester: Requester::Agent,
        allow_unmanaged: ctx.allow_unmanaged,
    };
    let verdict = match judge(&case, prover, 0) {
        Judgement::Refused(reason) => {
            let mut f = f.at(manifest, Some("spec".into()));
            f.status = Status::Exceeds;
            f.decision = Some(Decision::Reject);
            f.message = reason;
            return f;
        }
        Judgement::Decided { verdict, .. } => verdict,
    };
    f.solver_millis = verdict.proofs.iter().map(|p| p.solver_millis).sum();
    f.decision = Some(verdict.decision);
    f.maximum = verdict.maximum;
    f.invariant = verdict.invariant;
    f.counterexample = verdict.counterexample;
    f.message = verdict.reason;
    match (verdict.decision, verdict.code) {
        (Decision::Reject, Some(code)) => {
            let reason = Reason {
                code,
                field: None,
                message: f.message.clone(),
            };
            let message = f.message.clone();
            f.unproven(manifest, reason, message)
                .at(manifest, Some("spec.add".into()))
        }
        (Decision::Reject, None) => {
            f.status = Status::Exceeds;
            f.at(manifest, Some("spec.add".into()))
        }
        _ => f,
    }
}
