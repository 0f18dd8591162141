//! Pod admission (docs/design.md §6): every container image of a governed pod
//! must be pinned by digest and scanned, and its trifecta findings must be
//! severed by the owning sandbox's committed policy or accepted. Pure: the
//! server brings the caches and the time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::findings::{acceptance, short_image, unfixed_line};
use crate::sandbox_pod::{
    DataPlane, credential_exposures, is_data_plane_container, shape_problems,
};
use agentgate_api::crd::{AcceptedFinding, AgentSandbox, FindingState, ImageFindings};
use agentgate_trifecta::Finding;
use agentgate_trifecta::image::image_digest;

use crate::admission::Answer;

/// The namespace label that turns pod admission on.
pub const ENFORCE_LABEL: &str = "agentgate.dev/enforce";

use crate::pod_template::{
    owning_sandbox, pod_escapes, pod_service_account, spec_images, template_escapes,
};
use agentgate_api::crd::SANDBOX_LABEL;

/// What happens to a pod with problems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    /// Refuse it.
    Enforce,
    /// Admit it with a warning.
    Warn,
    /// Admit it and record the problems (log, metric, audit annotation).
    Audit,
}

impl Enforcement {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Enforce => "enforce",
            Enforcement::Warn => "warn",
            Enforcement::Audit => "audit",
        }
    }
}

/// The mode for a pod: the namespace label decides; a pod that belongs to a
/// sandbox is enforced when the namespace says nothing. An unknown label
/// value enforces (fail closed) and says so. `None`: the pod is not governed.
pub fn enforcement(
    namespace_labels: &BTreeMap<String, String>,
    belongs_to_sandbox: bool,
) -> Option<(Enforcement, Option<String>)> {
    match namespace_labels.get(ENFORCE_LABEL).map(String::as_str) {
        Some("enforce") => Some((Enforcement::Enforce, None)),
        Some("warn") => Some((Enforcement::Warn, None)),
        Some("audit") => Some((Enforcement::Audit, None)),
        Some(other) => Some((
            Enforcement::Enforce,
            Some(format!(
                "namespace label {ENFORCE_LABEL}={other:?} is not enforce, warn or audit; enforcing"
            )),
        )),
        None if belongs_to_sandbox => Some((Enforcement::Enforce, None)),
        None => None,
    }
}

/// True when the pod claims a sandbox by owner reference or label.
pub fn claims_sandbox(pod: &Pod) -> bool {
    claim_marks(pod) != (None, None)
}

/// The two marks by which a pod claims a sandbox: the name in its
/// controlling owner reference, and its `agentgate.dev/sandbox` label.
fn claim_marks(pod: &Pod) -> (Option<String>, Option<String>) {
    (
        owning_sandbox(pod).map(|(name, _)| name),
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SANDBOX_LABEL))
            .cloned(),
    )
}

/// Every container image of the pod (init, regular, ephemeral), unique, in
/// order of appearance.
pub fn images(pod: &Pod) -> Vec<String> {
    pod.spec.as_ref().map(spec_images).unwrap_or_default()
}

/// The images the agent runs: every image but those of the data plane's
/// own containers (the proxy and the init container are agentgate, not
/// the agent, and are trusted by image and shape, not by scan).
pub fn agent_images(pod: &Pod, data_plane: &DataPlane) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let mut agents = spec.clone();
    agents.init_containers = agents.init_containers.map(|list| {
        list.into_iter()
            .filter(|c| !is_data_plane_container(c, data_plane))
            .collect()
    });
    spec_images(&agents)
}

/// The sandbox a pod claims by owner reference or label: its name, or why
/// the claim is contradictory. `None`: the pod claims none.
pub fn claimed_sandbox(pod: &Pod) -> Option<Result<String, String>> {
    match claim_marks(pod) {
        (Some(owner), Some(label)) if owner != label => Some(Err(format!(
            "metadata: the owner reference names sandbox {owner:?} but the label {SANDBOX_LABEL} names {label:?}"
        ))),
        (Some(name), _) | (None, Some(name)) => Some(Ok(name)),
        (None, None) => None,
    }
}

/// A scan as the pod review needs it, from the webhook's cache.
#[derive(Debug, Clone)]
pub struct CachedScan {
    /// AgentScan name.
    pub name: String,
    /// Its uid: a scan deleted and created again under the same name starts
    /// again at generation 1, so name and generation alone are not enough.
    pub uid: String,
    /// Its generation.
    pub generation: Option<i64>,
    /// Findings recomputed from its graph, or why they could not be.
    pub findings: Arc<Result<Vec<Finding>, String>>,
}

/// The outcome of reviewing a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodReview {
    /// The mode applied (`None`: not governed, admitted).
    pub mode: Option<Enforcement>,
    /// One line per problem image.
    pub problems: Vec<String>,
    /// Notes that are not problems (e.g. an unknown label value).
    pub notes: Vec<String>,
}

impl PodReview {
    /// The admission answer for the mode.
    pub fn answer(&self) -> Answer {
        let mut warnings = self.notes.clone();
        match self.mode {
            Some(Enforcement::Enforce) if !self.problems.is_empty() => {
                let mut lines = self.problems.clone();
                lines.extend(self.notes.iter().cloned());
                Answer::Deny(lines.join(" "))
            }
            Some(Enforcement::Warn) => {
                warnings.extend(self.problems.iter().cloned());
                Answer::Allow(warnings)
            }
            Some(Enforcement::Audit) if !self.problems.is_empty() => {
                Answer::Audit(self.problems.clone())
            }
            _ => Answer::Allow(warnings),
        }
    }
}

/// The findings of `scan` still open for a sandbox: not recorded
/// `Severed` in the sandbox's `record` for this image — which counts only
/// when the operator proved it for this very scan (name, uid, generation) —
/// and not covered by an acceptance unexpired at `now`. The caller checks
/// that the record belongs to the committed revision.
pub fn open_findings<'a>(
    findings: &'a [Finding],
    record: Option<&ImageFindings>,
    scan: &CachedScan,
    accepted: &[AcceptedFinding],
    now: Timestamp,
) -> Vec<&'a Finding> {
    let severed: BTreeSet<&str> = record
        .filter(|i| {
            i.scan.as_deref() == Some(scan.name.as_str())
                && i.scan_uid.as_deref() == Some(scan.uid.as_str())
                && i.scan_generation == scan.generation
        })
        .map(|i| {
            i.findings
                .iter()
                .filter(|r| r.state == FindingState::Severed)
                .map(|r| r.sink.as_str())
                .collect()
        })
        .unwrap_or_default();
    findings
        .iter()
        .filter(|f| !severed.contains(f.sink.as_str()))
        .filter(|f| acceptance(accepted, f, now).is_none())
        .collect()
}

/// How the webhook found the scan of a digest.
pub type ScanLookup = Result<Option<CachedScan>, String>;

/// Reviews a pod (and, for an update, the pod it replaces).
///
/// `sandbox` is the owning sandbox from the cache, lent only when the
/// request comes from the operator itself and the owner reference's uid
/// matches: anyone who can read a sandbox could copy its owner reference,
/// so a pod created by someone else gets no severance proofs and no
/// acceptances from it. The sandbox's pod also carries the sandbox's name.
/// `scan_for` finds the scan of an image digest (an error when several
/// scans claim it: fail closed). On update only images the old pod did not
/// run are checked, so finalizer removal and label patches of a running pod
/// are never blocked by a finding that appeared later.
#[allow(clippy::too_many_arguments)]
pub fn review_pod(
    pod: &Pod,
    old: Option<&Pod>,
    namespace_labels: &BTreeMap<String, String>,
    sandbox: Option<&AgentSandbox>,
    data_plane: &DataPlane,
    scan_for: &dyn Fn(&str) -> ScanLookup,
    now: Timestamp,
) -> PodReview {
    let claims = claims_sandbox(pod) || old.is_some_and(claims_sandbox);
    let Some((mode, note)) = enforcement(namespace_labels, claims) else {
        return PodReview {
            mode: None,
            problems: Vec::new(),
            notes: Vec::new(),
        };
    };
    let mut review = PodReview {
        mode: Some(mode),
        problems: Vec::new(),
        notes: note.into_iter().collect(),
    };
    // A pod that claims a sandbox runs in its enforced shape, or not at
    // all, whatever the namespace's mode: a finding counts as severed only
    // where the policy is enforced (docs/design.md §10).
    let trusted = |c: &Container| is_data_plane_container(c, data_plane);
    let mut shape = Vec::new();
    if let Some(claimed) = claimed_sandbox(pod) {
        let spec = pod.spec.clone().unwrap_or_default();
        match claimed {
            Ok(name) => shape = shape_problems(&spec, &name, data_plane),
            Err(problem) => shape.push(problem),
        }
        shape.extend(pod_escapes(&spec, "spec", &trusted));
        // The sandbox's credentials reach the proxy alone
        // (docs/policy-semantics.md §9.4).
        if let Some(sandbox) = sandbox {
            shape.extend(credential_exposures(
                &spec,
                &sandbox.spec.credentials,
                "spec",
            ));
        }
    }
    // A claim, once made, stays: the webhook sees a sandbox's pods by their
    // label, so an update that dropped it would take every later update
    // (a swapped proxy image) out of review.
    if let Some(old) = old
        && let ((old_owner, old_label), (owner, label)) = (claim_marks(old), claim_marks(pod))
        && ((old_owner.is_some() && owner != old_owner)
            || (old_label.is_some() && label != old_label))
    {
        shape.push(
            "metadata: an update may not remove or change the pod's sandbox claim (owner reference and agentgate.dev/sandbox label)".to_string(),
        );
    }
    if !shape.is_empty() {
        review.mode = Some(Enforcement::Enforce);
        review.problems.push(format!(
            "the pod claims an agent sandbox but is not in its enforced shape: {}.",
            shape.join("; ")
        ));
    }
    // Severance and acceptances are credited only to the sandbox's own pod
    // in the enforced shape: no host namespaces, privilege or host files,
    // running as the account the sandbox names.
    let sandbox = sandbox.filter(|s| {
        shape.is_empty()
            && pod.metadata.name.as_deref() == s.metadata.name.as_deref()
            && template_escapes(&s.spec).is_empty()
            && pod.spec.as_ref().is_some_and(|spec| {
                spec.service_account_name.as_deref() == Some(pod_service_account(&s.spec).as_str())
            })
    });
    let status = sandbox.and_then(|s| s.status.as_ref());
    let current = status.and_then(|s| {
        s.findings
            .as_ref()
            .filter(|f| f.revision == Some(s.revision))
    });
    let accepted = sandbox
        .map(|s| s.spec.accepted_findings.as_slice())
        .unwrap_or(&[]);
    let running: BTreeSet<String> = old
        .map(|p| agent_images(p, data_plane))
        .unwrap_or_default()
        .into_iter()
        .collect();
    for image in agent_images(pod, data_plane)
        .into_iter()
        .filter(|i| !running.contains(i))
    {
        let Some(digest) = image_digest(&image) else {
            review.problems.push(format!(
                "image {image:?} is not pinned by digest; use name@sha256:<64 hex digits>."
            ));
            continue;
        };
        let scan = match scan_for(digest) {
            Ok(Some(scan)) => scan,
            Ok(None) => {
                review.problems.push(format!(
                    "image {} has no AgentScan; scan it with `agentgate scan PATH --image {image} -o yaml | kubectl apply -f -`.",
                    short_image(&image)
                ));
                continue;
            }
            Err(problem) => {
                review
                    .problems
                    .push(format!("image {}: {problem}.", short_image(&image)));
                continue;
            }
        };
        let findings = match scan.findings.as_ref() {
            Ok(findings) => findings,
            Err(e) => {
                review.problems.push(format!(
                    "image {}: agentscan {} cannot be analysed ({e}).",
                    short_image(&image),
                    scan.name
                ));
                continue;
            }
        };
        let record = current.and_then(|f| f.images.iter().find(|i| i.image == image));
        let unfixed = open_findings(findings, record, &scan, accepted, now);
        if let Some(line) = unfixed_line(&image, &unfixed) {
            review.problems.push(line);
        }
    }
    review
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::str::FromStr;

    use super::*;
    use agentgate_api::crd::{
        AcceptedFinding, AgentSandboxSpec, AgentSandboxStatus, FindingRecord, FindingsSummary,
        ImageFindings,
    };
    use agentgate_trifecta::analyze;

    fn digest_image() -> String {
        format!("ghcr.io/acme/bot@sha256:{}", "ab12".repeat(16))
    }

    fn pod(image: &str, owned: bool) -> Pod {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "agents"},
            "spec": {"containers": [{"name": "bot", "image": image}]}
        }))
        .unwrap();
        if owned {
            // The operator names a sandbox's pod after the sandbox, runs it
            // as the sandbox's agent, in the enforced shape.
            pod.metadata.name = Some("bot".into());
            let mut template = pod.spec.clone().unwrap();
            template.containers[0].command = Some(vec!["/usr/local/bin/bot".into()]);
            let mut spec =
                crate::sandbox_pod::enforced_pod_spec("bot", &template, &data_plane(), &[])
                    .unwrap();
            spec.service_account_name = Some("bot".into());
            pod.spec = Some(spec);
            pod.metadata.owner_references = Some(vec![
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "agentgate.dev/v1alpha1", "kind": "AgentSandbox",
                    "name": "bot", "uid": "u1", "controller": true
                }))
                .unwrap(),
            ]);
        }
        pod
    }

    fn data_plane() -> DataPlane {
        DataPlane {
            image: "ghcr.io/agentgate-dev/agentgate:test".into(),
            pull_policy: None,
            approvals: None,
            policy_stream: None,
            hold_timeout_seconds: 120,
        }
    }

    fn findings() -> Arc<Result<Vec<Finding>, String>> {
        Arc::new(Ok(
            analyze(&agentgate_trifecta::fixtures::mail_agent()).unwrap()
        ))
    }

    fn scans(digest: &str) -> ScanLookup {
        Ok((digest.starts_with("sha256:ab12")).then(|| CachedScan {
            name: "bot-scan".into(),
            uid: "scan-uid".into(),
            generation: Some(1),
            findings: findings(),
        }))
    }

    fn labels(mode: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(ENFORCE_LABEL.to_string(), mode.to_string())])
    }

    fn now() -> Timestamp {
        Timestamp::from_str("2026-11-29T00:00:00Z").unwrap()
    }

    #[test]
    fn a_claimed_pod_needs_the_enforced_shape_and_keeps_its_claim() {
        // Someone else's pod claiming the sandbox by label, in an audit
        // namespace: refused all the same, field by field.
        let mut bare = pod(&digest_image(), false);
        bare.metadata.labels = Some(BTreeMap::from([(
            SANDBOX_LABEL.to_string(),
            "bot".to_string(),
        )]));
        let review = review_pod(
            &bare,
            None,
            &labels("audit"),
            None,
            &data_plane(),
            &scans,
            now(),
        );
        let Answer::Deny(message) = review.answer() else {
            panic!("admitted")
        };
        assert!(message.starts_with("the pod claims an agent sandbox but is not in its enforced shape: spec.shareProcessNamespace"), "{message}");
        // The operator's pod, with the label dropped by an update: refused.
        let owned = pod(&digest_image(), true);
        let mut labelled = owned.clone();
        labelled.metadata.labels = Some(BTreeMap::from([(
            SANDBOX_LABEL.to_string(),
            "bot".to_string(),
        )]));
        // Only the label dropped (the owner reference stays): the webhook
        // selects sandbox pods by the label, so this too is refused.
        let mut unlabelled = labelled.clone();
        unlabelled.metadata.labels = None;
        let review = review_pod(
            &unlabelled,
            Some(&labelled),
            &BTreeMap::new(),
            None,
            &data_plane(),
            &scans,
            now(),
        );
        assert!(
            matches!(review.answer(), Answer::Deny(m) if m.contains("may not remove or change the pod's sandbox claim"))
        );
        // Owner and label naming different sandboxes: refused.
        let mut split = labelled.clone();
        split.metadata.labels = Some(BTreeMap::from([(
            SANDBOX_LABEL.to_string(),
            "other".to_string(),
        )]));
        let review = review_pod(
            &split,
            None,
            &BTreeMap::new(),
            None,
            &data_plane(),
            &scans,
            now(),
        );
        assert!(
            matches!(review.answer(), Answer::Deny(m) if m.contains("names sandbox \"bot\" but the label"))
        );
    }

    #[test]
    fn unfixed_findings_deny_with_the_witness_and_the_fix() {
        let review = review_pod(
            &pod(&digest_image(), false),
            None,
            &labels("enforce"),
            None,
            &data_plane(),
            &scans,
            now(),
        );
        let Answer::Deny(message) = review.answer() else {
            panic!("admitted")
        };
        assert_eq!(
            message,
            "image ghcr.io/acme/bot@sha256:ab12ab12ab12… carries 1 unfixed trifecta finding: \
             AG-TRIFECTA → send_email; control: read_email → __llm__ → send_email (tools.py:42); \
             data: query_customers → __llm__ → send_email (db.py:10). Minimal fix: restrict tool send_email."
        );
        // Warn admits with the same line; audit admits silently.
        let warn = review_pod(
            &pod(&digest_image(), false),
            None,
            &labels("warn"),
            None,
            &data_plane(),
            &scans,
            now(),
        );
        assert_eq!(warn.answer(), Answer::Allow(vec![message]));
        let audit = review_pod(
            &pod(&digest_image(), false),
            None,
            &labels("audit"),
            None,
            &data_plane(),
            &scans,
            now(),
        );
        assert!(matches!(audit.answer(), Answer::Audit(p) if p.len() == 1));
        // Not governed: no label, no sandbox.
        let free = review_pod(
            &pod("nginx", false),
            None,
            &BTreeMap::new(),
            None,
            &data_plane(),
            &scans,
            now(),
        );
        assert_eq!(free.answer(), Answer::allow());
    }

    #[test]
    fn unpinned_and_unscanned_images_are_refused() {
        let review = review_pod(
            &pod("nginx:latest", true),
            None,
            &BTreeMap::new(),
            None,
            &data_plane(),
            &scans,
            now(),
        );
        assert!(matches!(review.answer(), Answer::Deny(m) if m.contains("not pinned by digest")));
        let other = format!("ghcr.io/acme/other@sha256:{}", "cd".repeat(32));
        let review = review_pod(
            &pod(&other, true),
            None,
            &BTreeMap::new(),
            None,
            &data_plane(),
            &scans,
            now(),
        );
        assert!(matches!(review.answer(), Answer::Deny(m) if m.contains("has no AgentScan")));
        let odd = review_pod(
            &pod(&other, false),
            None,
            &labels("strict"),
            None,
            &data_plane(),
            &scans,
            now(),
        );
        assert!(
            matches!(odd.answer(), Answer::Deny(m) if m.contains("is not enforce, warn or audit"))
        );
    }

    #[test]
    fn a_sandbox_severs_by_current_status_and_accepts_until_expiry() {
        let image = digest_image();
        let mut sandbox = AgentSandbox::new(
            "bot",
            AgentSandboxSpec {
                mode: None,
                agent_service_account: "bot".into(),
                template: None,
                policy: Default::default(),
                accepted_findings: Vec::new(),
                runtime_trifecta: None,
                tool_labels: Vec::new(),
                credentials: Vec::new(),
            },
        );
        let record = |state| FindingRecord {
            id: "AG-TRIFECTA".into(),
            sink: "send_email".into(),
            severity: agentgate_api::scan::Severity::High,
            state,
            message: String::new(),
            fix: String::new(),
            severed_by: vec!["send_email".into()],
            accepted_until: None,
        };
        sandbox.status = Some(AgentSandboxStatus {
            revision: 3,
            findings: Some(FindingsSummary {
                revision: Some(3),
                total: 1,
                unfixed: 0,
                images: vec![ImageFindings {
                    image: image.clone(),
                    scan: Some("bot-scan".into()),
                    scan_uid: Some("scan-uid".into()),
                    scan_generation: Some(1),
                    problem: None,
                    findings: vec![record(FindingState::Severed)],
                }],
            }),
            ..AgentSandboxStatus::default()
        });
        let owned = pod(&image, true);
        let judge = |pod: &Pod, sandbox: &AgentSandbox, at: Timestamp| {
            review_pod(
                pod,
                None,
                &BTreeMap::new(),
                Some(sandbox),
                &data_plane(),
                &scans,
                at,
            )
            .answer()
        };
        assert_eq!(judge(&owned, &sandbox, now()), Answer::allow());
        // A pod that could step around the enforcement is credited nothing.
        let mut escaping = owned.clone();
        escaping.spec.as_mut().unwrap().host_network = Some(true);
        assert!(matches!(judge(&escaping, &sandbox, now()), Answer::Deny(_)));
        let mut other_account = owned.clone();
        other_account.spec.as_mut().unwrap().service_account_name = Some("deployer".into());
        assert!(matches!(
            judge(&other_account, &sandbox, now()),
            Answer::Deny(_)
        ));
        // A stale proof (older revision) does not count.
        sandbox.status.as_mut().unwrap().revision = 4;
        assert!(matches!(judge(&owned, &sandbox, now()), Answer::Deny(_)));
        // An acceptance admits until it expires.
        sandbox.spec.accepted_findings = vec![AcceptedFinding {
            id: "AG-TRIFECTA".into(),
            sink: Some("send_email".into()),
            reason: "pilot".into(),
            expires: "2026-12-01T00:00:00Z".into(),
        }];
        assert_eq!(judge(&owned, &sandbox, now()), Answer::allow());
        // A pod by another name claiming the sandbox borrows nothing.
        let mut other = owned.clone();
        other.metadata.name = Some("copycat".into());
        assert!(matches!(judge(&other, &sandbox, now()), Answer::Deny(_)));
        let later = Timestamp::from_str("2026-12-02T00:00:00Z").unwrap();
        assert!(matches!(judge(&owned, &sandbox, later), Answer::Deny(_)));
    }

    #[test]
    fn updates_check_only_new_images_and_several_scans_fail_closed() {
        let image = digest_image();
        let running = pod(&image, false);
        // Same images (e.g. a finalizer removed): admitted even with a finding.
        let review = review_pod(
            &running,
            Some(&running),
            &labels("enforce"),
            None,
            &data_plane(),
            &scans,
            now(),
        );
        assert_eq!(review.answer(), Answer::allow());
        // A new image is checked.
        let unscanned = format!("ghcr.io/acme/other@sha256:{}", "cd".repeat(32));
        let mut changed = running.clone();
        if let Some(spec) = changed.spec.as_mut() {
            spec.containers[0].image = Some(unscanned);
        }
        let review = review_pod(
            &changed,
            Some(&running),
            &labels("enforce"),
            None,
            &data_plane(),
            &scans,
            now(),
        );
        assert!(matches!(review.answer(), Answer::Deny(m) if m.contains("has no AgentScan")));
        // An update that drops the sandbox label is still governed.
        let mut claimed = running.clone();
        claimed.metadata.labels = Some(BTreeMap::from([(
            SANDBOX_LABEL.to_string(),
            "bot".to_string(),
        )]));
        let review = review_pod(
            &changed,
            Some(&claimed),
            &BTreeMap::new(),
            None,
            &data_plane(),
            &scans,
            now(),
        );
        assert!(matches!(review.answer(), Answer::Deny(_)));
        // Two scans for one digest: refused until one is deleted.
        let several = |_: &str| -> ScanLookup {
            Err("several AgentScans (a, b) describe sha256:ab12…".into())
        };
        let review = review_pod(
            &running,
            None,
            &labels("enforce"),
            None,
            &data_plane(),
            &several,
            now(),
        );
        assert!(matches!(review.answer(), Answer::Deny(m) if m.contains("several AgentScans")));
    }
}
