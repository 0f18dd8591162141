//! `POST /validate/agentsandboxes`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;

use crate::state::WebhookState;
use crate::validate::envelope::{Review, answer, object_name, status_answer};
use agentgate_api::crd::AgentSandbox;
use agentgate_governance::admission::{
    Answer, accepted_findings_changed, review_sandbox, runtime_trifecta_weakened,
    tool_labels_lowered,
};
use agentgate_governance::authority::{Requester, sandbox_writer_refusal};
use agentgate_governance::governing::{dropped_governance, governing_from};
use agentgate_governance::pod_template::template_escapes;

pub(crate) async fn validate_sandbox(
    State(state): State<Arc<WebhookState>>,
    review: Review,
) -> Json<AdmissionReview<DynamicObject>> {
    let s = state.clone();
    answer(&state, "agentsandboxes", "AgentSandbox", review, |request, new: Option<AgentSandbox>, old| async move {
        let name = object_name(new.as_ref(), old.as_ref());
        if request.sub_resource.as_deref() == Some("status") {
            return status_answer(&s, &request, "agentsandbox", &name);
        }
        let who = Requester::of(&request.user_info);
        let user = who.username;
        if !s.by_operator(&request) {
            let mut refusal = sandbox_writer_refusal(&who, old.as_ref(), new.as_ref(), &s.trusted_deployers);
            if refusal.is_none() {
                // Nor the agent of any other sandbox.
                refusal = s.agent_refusal(&who, &format!("agentsandbox {name:?}")).await;
            }
            if let Some(message) = refusal {
                return Answer::Deny(message);
            }
        }
        let Some(sandbox) = new else {
            return Answer::allow(); // a delete: the pod and every grant go with it
        };
        let namespace = request.namespace.clone().unwrap_or_default();
        let template_changed = old.as_ref().is_none_or(|o| {
            o.spec.template != sandbox.spec.template
                || o.spec.agent_service_account != sandbox.spec.agent_service_account
        });
        if template_changed {
            let escapes = template_escapes(&sandbox.spec);
            if !escapes.is_empty() {
                return Answer::Deny(format!(
                    "agentsandbox {name:?}: the pod template could step around the sandbox's enforcement: {}",
                    escapes.join("; ")
                ));
            }
            if sandbox.spec.template.is_some()
                && let Some(message) = s.template_author_refusal(&request, &sandbox).await
            {
                return Answer::Deny(message);
            }
        }
        let accepting = if accepted_findings_changed(old.as_ref(), &sandbox) {
            Some("changing spec.acceptedFindings (or the images they cover)")
        } else if runtime_trifecta_weakened(old.as_ref(), &sandbox) {
            Some("setting spec.runtimeTrifecta to audit")
        } else if tool_labels_lowered(old.as_ref(), &sandbox) {
            Some("lowering a tool's label in spec.toolLabels (trusted, internal or public)")
        } else {
            None
        };
        if let Some(what) = accepting {
            match s.may_approve(&request, &namespace, "").await {
                Ok(true) => {}
                Ok(false) => {
                    return Answer::Deny(format!(
                        "agentsandbox {name:?}: {what} accepts risk and needs the approve verb on policyproposals.agentgate.dev in namespace {namespace:?}, which {user:?} does not hold"
                    ));
                }
                Err(e) => return Answer::Deny(format!("agentsandbox {name:?}: {e}")),
            }
        }
        let ns_labels = match s.namespace_labels(&namespace).await {
            Ok(l) => l,
            Err(e) => return Answer::Deny(format!("agentsandbox {name:?}: {e}")),
        };
        let maximums = s.maximums.state();
        if let Some(old) = &old {
            let dropped = dropped_governance(
                maximums.iter().map(|m| m.as_ref()),
                (&ns_labels, old.labels()),
                (&ns_labels, sandbox.labels()),
            );
            if !dropped.is_empty() {
                match s.may_approve(&request, &namespace, "").await {
                    Ok(true) => {}
                    Ok(false) => {
                        return Answer::Deny(format!(
                            "agentsandbox {name:?}: the new labels take it out of MaximumPolicy {}; stepping out of a ceiling needs the approve verb on policyproposals.agentgate.dev in namespace {namespace:?}, which {user:?} does not hold",
                            dropped.join(", ")
                        ));
                    }
                    Err(e) => return Answer::Deny(format!("agentsandbox {name:?}: {e}")),
                }
            }
        }
        let allow_unmanaged = s.allow_unmanaged;
        let identities_changed = old.as_ref().is_none_or(|o| {
            o.spec.agent_service_account != sandbox.spec.agent_service_account
                || template_changed
        });
        // The agent-power reviews run while the solver proves the policy.
        let powers = async {
            if identities_changed {
                s.agent_power_warnings(&sandbox).await
            } else {
                Vec::new()
            }
        };
        let judged = sandbox.clone();
        let cached = s.clone();
        let proof = s.with_deadline("agentsandbox", move |prover| {
            let governance = governing_from(
                maximums.iter().map(|m| m.as_ref()),
                &ns_labels,
                judged.labels(),
                allow_unmanaged,
                &cached.compiled_maximums,
            );
            review_sandbox(&judged, &governance, &prover, allow_unmanaged)
        });
        let (powers, answer) = tokio::join!(powers, proof);
        match answer {
            Answer::Allow(mut warnings) => {
                warnings.extend(powers);
                Answer::Allow(warnings)
            }
            other => other,
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testkit::{
        AGENT, ALICE, Cluster, OPERATOR, SANDBOXES, assert_allowed, assert_denied, example_sandbox,
        namespace, pod, review, status_review,
    };

    const ENDPOINT: &str = "/validate/agentsandboxes";

    fn accepting(mut sandbox: Value) -> Value {
        sandbox["spec"]["acceptedFindings"] = json!([{
            "id": "AG-TRIFECTA", "reason": "reviewed by security",
            "expires": "2099-01-01T00:00:00Z"
        }]);
        sandbox
    }

    fn with_template(mut sandbox: Value) -> Value {
        sandbox["spec"]["template"] = json!({"spec": {"containers": [{"name": "agent", "image": "registry.example/agent:1"}]}});
        sandbox
    }

    #[tokio::test]
    async fn a_sandbox_inside_its_ceiling_is_admitted_after_checking_its_agent() {
        let harness = Cluster::example().serve();
        let sandbox = example_sandbox();
        let create = review(&SANDBOXES, "CREATE", ALICE, Some(&sandbox), None);
        assert_allowed(&harness.admit(ENDPOINT, &create).await);
        // The agent's power to create pods and to impersonate was asked.
        assert_eq!(harness.api.calls_to("/subjectaccessreviews"), 2);
        assert_eq!(harness.admissions_counted("agentsandboxes", true), 1);
    }

    #[tokio::test]
    async fn an_agent_that_may_create_pods_is_admitted_with_a_warning() {
        let harness = Cluster::example().grant(AGENT, "create", "pods").serve();
        let sandbox = example_sandbox();
        let create = review(&SANDBOXES, "CREATE", ALICE, Some(&sandbox), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert!(response.allowed, "{}", response.result.message);
        let warnings = response.warnings.unwrap_or_default();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains(&format!(
                "its agent {AGENT:?} may create pods in namespace \"agents\", which steps around any sandbox"
            )),
            "{warnings:?}"
        );
    }

    #[tokio::test]
    async fn a_policy_beyond_its_ceiling_is_refused() {
        let harness = Cluster::example().serve();
        let old = example_sandbox();
        let mut widened = old.clone();
        widened["spec"]["policy"]["network"][0]["endpoints"][0]["host"] =
            json!("exfil.example.org");
        let update = review(&SANDBOXES, "UPDATE", ALICE, Some(&widened), Some(&old));
        let response = harness.admit(ENDPOINT, &update).await;
        assert_denied(
            &response,
            &[
                "agentsandbox \"triage-bot\" exceeds MaximumPolicy \"org-ceiling\"",
                "exfil.example.org",
            ],
        );
        assert_eq!(harness.admissions_counted("agentsandboxes", false), 1);
    }

    #[tokio::test]
    async fn a_sandbox_in_an_ungoverned_namespace_is_refused() {
        let mut cluster = Cluster::example();
        // Created a moment ago: not cached, read from the API server.
        cluster.api.namespaces = vec![namespace("lab", json!({}))];
        let harness = cluster.serve();
        let mut sandbox = example_sandbox();
        sandbox["metadata"]["namespace"] = json!("lab");
        let create = review(&SANDBOXES, "CREATE", ALICE, Some(&sandbox), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &["agentsandbox \"triage-bot\": no MaximumPolicy governs this sandbox"],
        );
        assert_eq!(harness.api.calls_to("/api/v1/namespaces/lab"), 1);
    }

    #[tokio::test]
    async fn a_namespace_the_api_server_does_not_know_is_refused() {
        let harness = Cluster::example().serve();
        let mut sandbox = example_sandbox();
        sandbox["metadata"]["namespace"] = json!("nowhere");
        let create = review(&SANDBOXES, "CREATE", ALICE, Some(&sandbox), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &["agentsandbox \"triage-bot\": cannot read namespace \"nowhere\""],
        );
    }

    #[tokio::test]
    async fn the_sandboxs_own_agent_may_not_write_it() {
        let harness = Cluster::example().serve();
        let sandbox = example_sandbox();
        let update = review(&SANDBOXES, "UPDATE", AGENT, Some(&sandbox), Some(&sandbox));
        let response = harness.admit(ENDPOINT, &update).await;
        assert_denied(
            &response,
            &["is this sandbox's agent and may not write the sandbox that governs it"],
        );
    }

    #[tokio::test]
    async fn the_agent_of_one_sandbox_may_not_write_another() {
        let harness = Cluster::example().serve();
        let mut other = example_sandbox();
        other["metadata"]["name"] = json!("other-bot");
        other["metadata"]["namespace"] = json!("team2");
        other["spec"]["agentServiceAccount"] = json!("other-bot");
        let create = review(&SANDBOXES, "CREATE", AGENT, Some(&other), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &[
                "agentsandbox \"other-bot\"",
                "is the agent of sandbox agents/triage-bot",
            ],
        );
    }

    #[tokio::test]
    async fn only_the_operator_writes_a_sandboxs_status() {
        let harness = Cluster::example().serve();
        let sandbox = example_sandbox();
        let mut committed = sandbox.clone();
        committed["status"] = json!({"revision": 9});
        let by_alice = status_review(&SANDBOXES, ALICE, &committed, &sandbox);
        assert_denied(
            &harness.admit(ENDPOINT, &by_alice).await,
            &["agentsandbox \"triage-bot\": only the agentgate operator writes status"],
        );
        let by_operator = status_review(&SANDBOXES, OPERATOR, &committed, &sandbox);
        assert_allowed(&harness.admit(ENDPOINT, &by_operator).await);
    }

    #[tokio::test]
    async fn accepting_a_finding_needs_the_approve_verb() {
        let old = example_sandbox();
        let new = accepting(old.clone());
        let update = review(&SANDBOXES, "UPDATE", ALICE, Some(&new), Some(&old));

        let refused = Cluster::example().serve().admit(ENDPOINT, &update).await;
        assert_denied(
            &refused,
            &[
                "changing spec.acceptedFindings",
                "needs the approve verb on policyproposals.agentgate.dev in namespace \"agents\"",
                "which \"alice\" does not hold",
            ],
        );

        let reviewer = Cluster::example().grant(ALICE, "approve", "policyproposals");
        let admitted = reviewer.serve().admit(ENDPOINT, &update).await;
        assert!(admitted.allowed, "{}", admitted.result.message);
    }

    #[tokio::test]
    async fn lowering_a_tool_label_needs_the_approve_verb_and_raising_one_does_not() {
        let old = example_sandbox();
        let labelled = |label: serde_json::Value| {
            let mut new = old.clone();
            new["spec"]["toolLabels"] = json!([label]);
            review(&SANDBOXES, "UPDATE", ALICE, Some(&new), Some(&old))
        };
        let raise = labelled(json!({"tool": "fetch_issue", "integrity": "untrusted"}));
        let admitted = Cluster::example().serve().admit(ENDPOINT, &raise).await;
        assert!(admitted.allowed, "{}", admitted.result.message);
        let lower = labelled(json!({"tool": "fetch_issue", "integrity": "trusted"}));
        assert_denied(
            &Cluster::example().serve().admit(ENDPOINT, &lower).await,
            &[
                "lowering a tool's label in spec.toolLabels",
                "needs the approve verb on policyproposals.agentgate.dev",
            ],
        );
        let reviewer = Cluster::example().grant(ALICE, "approve", "policyproposals");
        let admitted = reviewer.serve().admit(ENDPOINT, &lower).await;
        assert!(admitted.allowed, "{}", admitted.result.message);
    }

    #[tokio::test]
    async fn an_unanswered_access_review_refuses_the_acceptance() {
        let mut cluster = Cluster::example();
        cluster.api.reviews_unavailable = true;
        let old = example_sandbox();
        let new = accepting(old.clone());
        let update = review(&SANDBOXES, "UPDATE", ALICE, Some(&new), Some(&old));
        let response = cluster.serve().admit(ENDPOINT, &update).await;
        assert_denied(
            &response,
            &["agentsandbox \"triage-bot\": cannot check the approve policyproposals permission"],
        );
    }

    #[tokio::test]
    async fn a_template_author_must_be_able_to_run_the_pod_themselves() {
        let sandbox = with_template(example_sandbox());
        let create = review(&SANDBOXES, "CREATE", ALICE, Some(&sandbox), None);

        let nobody = Cluster::example().serve().admit(ENDPOINT, &create).await;
        assert_denied(
            &nobody,
            &[
                "\"alice\" may not create pods in namespace \"agents\", so may not have agentgate run this pod template",
            ],
        );

        let creator = Cluster::example().grant(ALICE, "create", "pods");
        let no_impersonation = creator.serve().admit(ENDPOINT, &create).await;
        assert_denied(
            &no_impersonation,
            &[
                "\"alice\" may not impersonate ServiceAccount agents/triage-bot (the pod runs as it)",
            ],
        );

        let runner = Cluster::example().grant(ALICE, "create", "pods").grant(
            ALICE,
            "impersonate",
            "serviceaccounts",
        );
        let admitted = runner.serve().admit(ENDPOINT, &create).await;
        assert!(admitted.allowed, "{}", admitted.result.message);
    }

    #[tokio::test]
    async fn a_template_that_escapes_the_enforced_shape_is_refused() {
        let harness = Cluster::example().serve();
        let mut sandbox = with_template(example_sandbox());
        sandbox["spec"]["template"]["spec"]["hostNetwork"] = json!(true);
        let create = review(&SANDBOXES, "CREATE", ALICE, Some(&sandbox), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &[
                "the pod template could step around the sandbox's enforcement",
                "hostNetwork",
            ],
        );
        // Refused before any access review was asked.
        assert_eq!(harness.api.calls_to("/subjectaccessreviews"), 0);
    }

    #[tokio::test]
    async fn a_delete_is_admitted() {
        let harness = Cluster::example().serve();
        let sandbox = example_sandbox();
        let delete = review(&SANDBOXES, "DELETE", ALICE, None, Some(&sandbox));
        assert_allowed(&harness.admit(ENDPOINT, &delete).await);
    }

    #[tokio::test]
    async fn a_pod_sent_as_a_sandbox_is_refused_as_unreadable() {
        let harness = Cluster::example().serve();
        let pod = pod("agents", "registry.example/agent:1");
        let create = review(&SANDBOXES, "CREATE", ALICE, Some(&pod), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &["cannot read the AgentSandbox: missing field `agentServiceAccount`"],
        );
    }
}
