//! Who may write what (docs/webhook.md, "Trust model"), as pure functions
//! of the request's identity and the objects. Every check here answers the
//! attacker's question "who else can write the object this decision
//! reads?": status is the operator's alone, an agent never writes the
//! objects that bound it, a review is given once by someone else, and only
//! trusted writers publish scans.

use std::collections::BTreeSet;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_core::ResourceExt;

use crate::pod_template::agent_identities;
use agentgate_api::crd::{
    AgentSandbox, AgentScan, HeldCall, Phase, PolicyProposal, REVIEW_CONDITIONS,
    review_message_prefix,
};

/// The identity behind an admission request.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    /// `userInfo.username`.
    pub username: &'a str,
    /// `userInfo.groups`.
    pub groups: &'a [String],
}

impl<'a> Requester<'a> {
    /// The requester of an admission request, as its `userInfo` says.
    pub fn of(user: &'a UserInfo) -> Self {
        Requester {
            username: user.username.as_deref().unwrap_or_default(),
            groups: user.groups.as_deref().unwrap_or_default(),
        }
    }

    /// Whether the requester is named by one of `entries`: a user name, or
    /// `group:NAME` for a group.
    pub fn listed_in(&self, entries: &[String]) -> bool {
        entries
            .iter()
            .any(|entry| match entry.strip_prefix("group:") {
                Some(group) => self.groups.iter().any(|g| g == group),
                None => entry == self.username,
            })
    }

    /// `(namespace, name)` when the requester is a ServiceAccount.
    pub fn service_account(&self) -> Option<(&str, &str)> {
        self.username
            .strip_prefix("system:serviceaccount:")?
            .split_once(':')
    }
}

/// Why `requester` may not create, change or delete an AgentSandbox (its
/// `old` and/or `new` version): agents propose, they never write the object
/// that bounds them. Refused: the sandbox's own agent identities, and any
/// other ServiceAccount of the sandbox's namespace unless it is a listed
/// trusted deployer (GitOps controllers normally live in their own
/// namespace). `None`: allowed as far as this rule goes.
pub fn sandbox_writer_refusal(
    requester: &Requester<'_>,
    old: Option<&AgentSandbox>,
    new: Option<&AgentSandbox>,
    trusted_deployers: &[String],
) -> Option<String> {
    let sandbox = new.or(old)?;
    let name = sandbox.name_any();
    let namespace = sandbox.namespace().unwrap_or_default();
    let user = requester.username;
    let own = old
        .into_iter()
        .chain(new)
        .any(|s| agent_identities(s).contains(user));
    if own {
        return Some(format!(
            "agentsandbox {name:?}: {user:?} is this sandbox's agent and may not write the sandbox that governs it; file a PolicyProposal (kubectl agentgate why explains the answer)"
        ));
    }
    match requester.service_account() {
        Some((ns, _)) if ns == namespace && !requester.listed_in(trusted_deployers) => {
            Some(format!(
                "agentsandbox {name:?}: ServiceAccounts of namespace {namespace:?} may not write its AgentSandboxes (an agent there could widen its own authority); file a PolicyProposal"
            ))
        }
        _ => None,
    }
}

/// Why `requester` may not write `what` (e.g. `maximumpolicy "m"`): the
/// agent identity of any sandbox never writes a ceiling, nor another
/// agent's sandbox. `sandboxes` are the webhook's cache.
pub fn agent_writer_refusal<'a>(
    requester: &Requester<'_>,
    what: &str,
    mut sandboxes: impl Iterator<Item = &'a AgentSandbox>,
) -> Option<String> {
    let user = requester.username;
    let sandbox = sandboxes.find(|s| agent_identities(s).contains(user))?;
    Some(format!(
        "{what}: {user:?} is the agent of sandbox {}/{}, and agents never write sandboxes or MaximumPolicies; file a PolicyProposal",
        sandbox.namespace().unwrap_or_default(),
        sandbox.name_any()
    ))
}

/// Why `requester` may not write a status subresource: only the operator
/// writes status (a reviewer's `Approved`/`Denied` condition on a proposal
/// is checked by [`review_change`] instead).
pub fn status_writer_refusal(
    requester: &Requester<'_>,
    operator: Option<&str>,
    kind: &str,
    name: &str,
) -> Option<String> {
    if operator == Some(requester.username) {
        return None;
    }
    Some(format!(
        "{kind} {name:?}: only the agentgate operator writes status; {:?} may not{}",
        requester.username,
        if operator.is_none() {
            " (the webhook could not learn the operator's identity, so nobody may: fail closed)"
        } else {
            ""
        }
    ))
}

/// Why `requester` may not write an AgentScan: the findings come from the
/// graph, so only listed writers (CI) publish or change one. A listed
/// writer may do anything; the operator writes only status.
pub fn scan_writer_refusal(
    requester: &Requester<'_>,
    writers: &[String],
    old: Option<&AgentScan>,
    new: Option<&AgentScan>,
) -> Option<String> {
    if requester.listed_in(writers) {
        return None;
    }
    let name = new.or(old).map(|s| s.name_any()).unwrap_or_default();
    let shrinks = match (old, new) {
        (Some(old), Some(new)) => graph_shrinks(old, new),
        _ => false,
    };
    let what = if shrinks {
        "removes nodes or edges of the scan's graph, which would hide findings; "
    } else {
        ""
    };
    Some(format!(
        "agentscan {name:?}: {what}{:?} is not a trusted scan writer; scans are published by the identities in the chart's webhook.scanWriters (CI)",
        requester.username
    ))
}

/// Whether `new`'s graph lacks a node or edge of `old`'s.
pub fn graph_shrinks(old: &AgentScan, new: &AgentScan) -> bool {
    let nodes: BTreeSet<&str> = new.spec.graph.nodes.iter().map(|n| n.id.as_str()).collect();
    let edges: BTreeSet<(&str, &str)> = new
        .spec
        .graph
        .edges
        .iter()
        .map(|e| (e.from.as_str(), e.to.as_str()))
        .collect();
    old.spec
        .graph
        .nodes
        .iter()
        .any(|n| !nodes.contains(n.id.as_str()))
        || old
            .spec
            .graph
            .edges
            .iter()
            .any(|e| !edges.contains(&(e.from.as_str(), e.to.as_str())))
}

/// What a status write to a PolicyProposal by someone other than the
/// operator amounts to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewChange {
    /// Nothing a reviewer owns changed (and nothing else did).
    Unchanged,
    /// A review is being given: needs `approve`, and not by the requester.
    Review,
    /// Refused with this message.
    Refused(String),
}

/// An object a reviewer decides by setting its `Approved` or `Denied`
/// condition: a PolicyProposal or a HeldCall.
pub trait Reviewed {
    /// The kind as messages name it (`policyproposal`).
    const KIND: &'static str;
    /// What to do instead once it is decided.
    const INSTEAD: &'static str;
    /// Its conditions.
    fn conditions(&self) -> &[Condition];
    /// Its status without the review conditions (only the operator writes
    /// it), as JSON.
    fn status_besides_review(&self) -> serde_json::Value;
    /// Why a review would change nothing any more, if it would not.
    fn closed(&self) -> Option<String>;
    /// `metadata.generation`.
    fn generation(&self) -> Option<i64>;
    /// The object's name.
    fn object_name(&self) -> String;
}

fn besides_review<S: serde::Serialize + Default + Clone>(
    conditions: &[Condition],
    status: &Option<S>,
) -> serde_json::Value {
    let mut status = serde_json::to_value(status.clone().unwrap_or_default()).unwrap_or_default();
    let rest: Vec<&Condition> = conditions
        .iter()
        .filter(|c| !REVIEW_CONDITIONS.contains(&c.type_.as_str()))
        .collect();
    if let Some(object) = status.as_object_mut() {
        object.insert(
            "conditions".into(),
            serde_json::to_value(rest).unwrap_or_default(),
        );
    }
    status
}

impl Reviewed for PolicyProposal {
    const KIND: &'static str = "policyproposal";
    const INSTEAD: &'static str = "file a new proposal";
    fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default()
    }
    fn status_besides_review(&self) -> serde_json::Value {
        besides_review(self.conditions(), &self.status)
    }
    fn closed(&self) -> Option<String> {
        match self.status.as_ref().and_then(|s| s.phase) {
            Some(done @ (Phase::Applied | Phase::Rejected | Phase::Superseded)) => {
                Some(format!("{done:?}"))
            }
            _ => None,
        }
    }
    fn generation(&self) -> Option<i64> {
        self.metadata.generation
    }
    fn object_name(&self) -> String {
        self.name_any()
    }
}

impl Reviewed for HeldCall {
    const KIND: &'static str = "heldcall";
    const INSTEAD: &'static str = "the call was already answered; the agent may call again";
    fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default()
    }
    fn status_besides_review(&self) -> serde_json::Value {
        besides_review(self.conditions(), &self.status)
    }
    fn closed(&self) -> Option<String> {
        let expired = self
            .conditions()
            .iter()
            .any(|c| c.type_ == HELD_CALL_EXPIRED && c.status == "True");
        let answered = self.status.as_ref().and_then(|s| s.decision);
        match (expired, answered) {
            (true, _) => Some("expired".into()),
            (false, Some(decision)) => Some(format!("{decision:?}").to_lowercase()),
            (false, None) => None,
        }
    }
    fn generation(&self) -> Option<i64> {
        self.metadata.generation
    }
    fn object_name(&self) -> String {
        self.name_any()
    }
}

/// The operator's condition on a held call nobody decided in time.
pub const HELD_CALL_EXPIRED: &str = "Expired";

fn review_conditions<T: Reviewed>(p: &T) -> Vec<&Condition> {
    let mut list: Vec<&Condition> = p
        .conditions()
        .iter()
        .filter(|c| REVIEW_CONDITIONS.contains(&c.type_.as_str()))
        .collect();
    list.sort_by(|a, b| a.type_.cmp(&b.type_));
    list
}

/// A non-operator's status write to a proposal or a held call: only the
/// `Approved` and `Denied` conditions may change; a decided review (either
/// condition True) is final; a new review's message starts "approved by
/// USER" or "denied by USER" with the reviewer's own name, so the record
/// can name who decided.
pub fn review_change<T: Reviewed>(old: &T, new: &T, username: &str) -> ReviewChange {
    let (kind, name) = (T::KIND, new.object_name());
    if old.status_besides_review() != new.status_besides_review() {
        return ReviewChange::Refused(format!(
            "{kind} {name:?}: only the agentgate operator writes the status; a reviewer may set only the Approved or Denied condition"
        ));
    }
    let (before, after) = (review_conditions(old), review_conditions(new));
    if before == after {
        return ReviewChange::Unchanged;
    }
    if let Some(decided) = before.iter().find(|c| c.status == "True") {
        return ReviewChange::Refused(format!(
            "{kind} {name:?} is already {} ({}); a decided review is final: {}",
            decided.type_.to_lowercase(),
            decided.message,
            T::INSTEAD
        ));
    }
    if let Some(done) = old.closed() {
        return ReviewChange::Refused(format!(
            "{kind} {name:?} is already {done}; a review would change nothing: {}",
            T::INSTEAD
        ));
    }
    if after.iter().filter(|c| c.status == "True").count() > 1 {
        return ReviewChange::Refused(format!(
            "{kind} {name:?}: Approved and Denied cannot both be True"
        ));
    }
    for condition in after.iter().filter(|c| c.status == "True") {
        let prefix = review_message_prefix(&condition.type_, username);
        let rest = condition.message.strip_prefix(&prefix);
        if !rest.is_some_and(|r| r.is_empty() || r.starts_with(':')) {
            return ReviewChange::Refused(format!(
                "{kind} {name:?}: the {} condition's message must begin with {prefix} (then \": reason\" if you like), so the record names its reviewer; kubectl agentgate approve|deny writes it",
                condition.type_
            ));
        }
        if condition.observed_generation != new.generation() {
            return ReviewChange::Refused(format!(
                "{kind} {name:?}: the {} condition's observedGeneration must be its generation {}, so the review covers exactly the spec that was read",
                condition.type_,
                new.generation().unwrap_or_default()
            ));
        }
    }
    ReviewChange::Review
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use agentgate_api::crd::reviewer_in;

    fn sandbox(namespace: &str, template_account: Option<&str>) -> AgentSandbox {
        let mut template =
            serde_json::json!({"spec": {"containers": [{"name": "a", "image": "x"}]}});
        if let Some(account) = template_account {
            template["spec"]["serviceAccountName"] = account.into();
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "agentgate.dev/v1alpha1", "kind": "AgentSandbox",
            "metadata": {"name": "bot", "namespace": namespace},
            "spec": {"agentServiceAccount": "bot", "template": template}
        }))
        .unwrap()
    }

    fn who<'a>(username: &'a str, groups: &'a [String]) -> Requester<'a> {
        Requester { username, groups }
    }

    #[test]
    fn agents_never_write_their_own_sandbox() {
        let s = sandbox("agents", Some("runner"));
        for user in [
            "system:serviceaccount:agents:bot",
            "system:serviceaccount:agents:runner",
            "system:serviceaccount:agents:ci",
        ] {
            let refusal = sandbox_writer_refusal(&who(user, &[]), Some(&s), Some(&s), &[]);
            assert!(
                refusal
                    .as_ref()
                    .is_some_and(|m| m.contains("PolicyProposal")),
                "{user}: {refusal:?}"
            );
        }
        // A listed deployer of that namespace, people and other namespaces' accounts may.
        let ci = "system:serviceaccount:agents:ci".to_string();
        assert!(
            sandbox_writer_refusal(&who(&ci, &[]), None, Some(&s), std::slice::from_ref(&ci))
                .is_none()
        );
        assert!(sandbox_writer_refusal(&who("alice", &[]), None, Some(&s), &[]).is_none());
        let argo = "system:serviceaccount:argocd:argocd-application-controller";
        assert!(sandbox_writer_refusal(&who(argo, &[]), None, Some(&s), &[]).is_none());
        // The agent of another namespace's sandbox is refused by name even when trusted.
        let elsewhere = sandbox("other", None);
        let bot = "system:serviceaccount:other:bot".to_string();
        assert!(
            sandbox_writer_refusal(
                &who(&bot, &[]),
                Some(&elsewhere),
                None,
                std::slice::from_ref(&bot)
            )
            .is_some()
        );
        // And no ceiling for any sandbox's agent.
        let ceiling = "maximumpolicy \"m\"";
        assert!(
            agent_writer_refusal(&who(&bot, &[]), ceiling, [&s, &elsewhere].into_iter()).is_some()
        );
        assert!(agent_writer_refusal(&who("alice", &[]), ceiling, [&s].into_iter()).is_none());
    }

    #[test]
    fn only_the_operator_writes_status_and_only_listed_writers_scans() {
        let operator = "system:serviceaccount:agentgate-system:agentgate";
        let op = Some(operator);
        assert!(status_writer_refusal(&who(operator, &[]), op, "agentsandbox", "b").is_none());
        assert!(status_writer_refusal(&who("mallory", &[]), op, "agentsandbox", "b").is_some());
        assert!(
            status_writer_refusal(&who("anyone", &[]), None, "agentsandbox", "b")
                .is_some_and(|m| m.contains("fail closed"))
        );
        let groups = vec!["ci-publishers".to_string()];
        let writers = vec!["group:ci-publishers".to_string(), "release-bot".to_string()];
        let scan = |nodes: serde_json::Value| -> AgentScan {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "agentgate.dev/v1alpha1", "kind": "AgentScan",
                "metadata": {"name": "s"},
                "spec": {"image": "x", "graph": {"nodes": nodes}}
            }))
            .unwrap()
        };
        let full = scan(serde_json::json!([{"id": "a"}, {"id": "b"}]));
        let empty = scan(serde_json::json!([]));
        assert!(scan_writer_refusal(&who("ci", &groups), &writers, None, Some(&full)).is_none());
        assert!(
            scan_writer_refusal(
                &who("release-bot", &[]),
                &writers,
                Some(&full),
                Some(&empty)
            )
            .is_none()
        );
        assert!(scan_writer_refusal(&who("mallory", &[]), &writers, None, Some(&empty)).is_some());
        assert!(
            scan_writer_refusal(&who("mallory", &[]), &writers, Some(&full), Some(&empty))
                .is_some_and(|m| m.contains("removes nodes or edges"))
        );
        assert!(graph_shrinks(&full, &empty) && !graph_shrinks(&empty, &full));
    }

    fn proposal(conditions: serde_json::Value, phase: &str) -> PolicyProposal {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "agentgate.dev/v1alpha1", "kind": "PolicyProposal",
            "metadata": {"name": "p", "namespace": "agents", "generation": 1},
            "spec": {"sandboxRef": {"name": "bot"}, "requestedBy": "bot"},
            "status": {"phase": phase, "conditions": conditions}
        }))
        .unwrap()
    }

    fn condition(type_: &str, message: &str) -> serde_json::Value {
        serde_json::json!({"type": type_, "status": "True", "reason": "Reviewer", "message": message,
            "observedGeneration": 1, "lastTransitionTime": "2026-11-30T00:00:00Z"})
    }

    #[test]
    fn a_review_is_given_once_by_name_and_touches_nothing_else() {
        let pending = proposal(serde_json::json!([]), "AwaitingApproval");
        let approved = proposal(
            serde_json::json!([condition("Approved", "approved by \"alice\": looks fine")]),
            "AwaitingApproval",
        );
        assert_eq!(
            review_change(&pending, &approved, "alice"),
            ReviewChange::Review
        );
        assert!(
            matches!(review_change(&pending, &approved, "bob"), ReviewChange::Refused(m) if m.contains("must begin with approved by \"bob\""))
        );
        assert_eq!(
            review_change(&approved, &approved, "bob"),
            ReviewChange::Unchanged
        );
        // Final: neither withdrawn nor turned into a denial.
        let denied = proposal(
            serde_json::json!([condition("Denied", "denied by \"bob\"")]),
            "AwaitingApproval",
        );
        assert!(
            matches!(review_change(&approved, &denied, "bob"), ReviewChange::Refused(m) if m.contains("final"))
        );
        assert!(matches!(
            review_change(&approved, &pending, "alice"),
            ReviewChange::Refused(_)
        ));
        // A review of another generation, or of a finished proposal, is refused.
        let mut stale = approved.clone();
        stale.metadata.generation = Some(2);
        assert!(
            matches!(review_change(&pending, &stale, "alice"), ReviewChange::Refused(m) if m.contains("observedGeneration"))
        );
        let applied = proposal(serde_json::json!([]), "Applied");
        let mut late = approved.clone();
        late.status.as_mut().unwrap().phase = Some(Phase::Applied);
        assert!(
            matches!(review_change(&applied, &late, "alice"), ReviewChange::Refused(m) if m.contains("already Applied"))
        );
        // The reviewer reads back from the message, whatever the name.
        assert_eq!(
            reviewer_in("Approved", "approved by \"alice\": looks fine").as_deref(),
            Some("alice")
        );
        let sa = review_message_prefix("Approved", "system:serviceaccount:ops:approver");
        assert_eq!(
            reviewer_in("Approved", &format!("{sa}: ok")).as_deref(),
            Some("system:serviceaccount:ops:approver")
        );
        assert_eq!(reviewer_in("Approved", "approved by alice"), None);
        // The phase is the operator's.
        let forged = proposal(serde_json::json!([]), "Applied");
        assert!(
            matches!(review_change(&pending, &forged, "alice"), ReviewChange::Refused(m) if m.contains("only the agentgate operator"))
        );
    }
}
