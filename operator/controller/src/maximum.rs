//! MaximumPolicy reconciler: validates the ceiling, proves it does not
//! itself allow anything inside its own invariants (`Consistent`, with the
//! witness in the message), counts the sandboxes it governs and sums it up
//! in `Ready` (with `Stalled` when it is invalid or inconsistent).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::{Context, ControllerError};
use agentgate_api::conditions::{self, Status, Summary};
use agentgate_api::crd::{AgentSandbox, MaximumPolicy};
use agentgate_governance::maximum::{Assessment, assess};
use agentgate_governance::selector::governs;
use agentgate_k8s::k8s::cache::{reflect_spec_changes, until_ready};

/// Watch caches of what the governed count reads, filled by the watches
/// that trigger the recount (a sandbox or namespace created, deleted or
/// relabelled; a status write changes no count and triggers nothing). It
/// reads these instead of listing every sandbox from the API server each
/// time; the count grants nothing, so a recent view is enough.
#[derive(Clone)]
pub struct Views {
    sandboxes: Store<PartialObjectMeta<AgentSandbox>>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
}

/// How many sandboxes `maximum` governs, in the cached view.
async fn governed_count(maximum: &MaximumPolicy, views: &Views) -> Result<u32, ControllerError> {
    if !(until_ready(&views.sandboxes).await && until_ready(&views.namespaces).await) {
        return Err(ControllerError::Conflict(
            "the sandbox cache has not synced: its watch ended".into(),
        ));
    }
    let labels: BTreeMap<String, BTreeMap<String, String>> = views
        .namespaces
        .state()
        .iter()
        .map(|ns| (ns.name_any(), ns.labels().clone()))
        .collect();
    let mut count = 0;
    let empty = BTreeMap::new();
    for sandbox in views.sandboxes.state() {
        let ns_labels = sandbox
            .namespace()
            .and_then(|ns| labels.get(&ns))
            .unwrap_or(&empty);
        if governs(&maximum.spec, ns_labels, sandbox.labels())? {
            count += 1;
        }
    }
    Ok(count)
}

async fn reconcile(
    maximum: Arc<MaximumPolicy>,
    ctx: Arc<Context>,
    views: Views,
) -> Result<Action, ControllerError> {
    let name = maximum.name_any();
    let prover = ctx.prover.clone();
    let subject = maximum.clone();
    let assessment = ctx.solve(move || assess(&subject, &prover)).await?;
    let generation = maximum.meta().generation;
    let mut status = maximum.status.clone().unwrap_or_default();
    let before = status.clone();
    let now = super::now();
    let mut events = Vec::new();
    let summary = match &assessment {
        Assessment::Invalid(reason) => {
            conditions::set(
                &mut status.conditions,
                "Consistent",
                Status::Unknown,
                "InvalidPolicy",
                "the ceiling does not compile",
                generation,
                &now,
            );
            events.push((EventType::Warning, "InvalidPolicy", reason.to_string()));
            Summary::stalled("InvalidPolicy", reason.to_string())
        }
        Assessment::Valid {
            inconsistent,
            unproven,
        } => {
            let counted = match governed_count(&maximum, &views).await {
                Ok(count) => {
                    status.governed_sandboxes = Some(count);
                    Summary::ready("Validated", format!("governs {count} sandbox(es)"))
                }
                Err(ControllerError::Selector(e)) => {
                    events.push((EventType::Warning, "InvalidSelector", e.to_string()));
                    Summary::stalled("InvalidSelector", e.to_string())
                }
                Err(e) => return Err(e),
            };
            match (inconsistent, unproven) {
                (Some((invariant, witness)), _) => {
                    let message =
                        format!("invariant {invariant:?}: the ceiling itself allows {witness}");
                    conditions::set(
                        &mut status.conditions,
                        "Consistent",
                        Status::False,
                        "IntersectsInvariant",
                        &message,
                        generation,
                        &now,
                    );
                    events.push((EventType::Warning, "IntersectsInvariant", message.clone()));
                    // A ceiling that allows what it forbids is not in its
                    // desired state until a person fixes one or the other.
                    Summary::stalled("IntersectsInvariant", message)
                }
                (None, Some((invariant, reason))) => {
                    let message = format!("invariant {invariant:?} could not be proved: {reason}");
                    conditions::set(
                        &mut status.conditions,
                        "Consistent",
                        Status::Unknown,
                        "Unproven",
                        &message,
                        generation,
                        &now,
                    );
                    events.push((EventType::Warning, "Unproven", message));
                    // Still a ceiling every governed sandbox is proved
                    // within; Consistent=Unknown says what was not proved.
                    counted
                }
                (None, None) => {
                    conditions::set(
                        &mut status.conditions,
                        "Consistent",
                        Status::True,
                        "Proved",
                        "the ceiling allows nothing inside its invariants",
                        generation,
                        &now,
                    );
                    counted
                }
            }
        }
    };
    conditions::summarize(&mut status.conditions, &summary, generation, &now);
    status.observed_generation = generation;
    if status != before {
        super::apply_status(
            &Api::<MaximumPolicy>::all(ctx.client.clone()),
            maximum.as_ref(),
            &status,
        )
        .await?;
        super::publish(&ctx, maximum.as_ref(), "Verify", events).await;
    }
    tracing::info!(maximum = %name, ?assessment, "reconciled");
    // Everything the status depends on is watched; the resync is a safety net.
    Ok(Action::requeue(super::RESYNC))
}

fn error_policy(maximum: Arc<MaximumPolicy>, error: &ControllerError, ctx: Arc<Context>) -> Action {
    super::retry_with_backoff("maximumpolicy", maximum.as_ref(), error, &ctx)
}

/// Runs the MaximumPolicy controller until shutdown. Sandboxes and
/// namespaces changing re-count every maximum's governed sandboxes.
pub async fn run(ctx: Arc<Context>) {
    let maximums: Api<MaximumPolicy> = Api::all(ctx.client.clone());
    let controller = Controller::new(maximums, watcher::Config::default());
    let store = controller.store();
    let all = move || {
        store
            .state()
            .iter()
            .map(|m| ObjectRef::from_obj(m.as_ref()))
            .collect::<Vec<_>>()
    };
    let all_for_namespaces = all.clone();
    let (sandboxes, sandbox_changes) = reflect_spec_changes(watcher(
        Api::<PartialObjectMeta<AgentSandbox>>::all(ctx.client.clone()),
        watcher::Config::default(),
    ));
    let (namespaces, namespace_changes) = reflect_spec_changes(watcher(
        Api::<PartialObjectMeta<Namespace>>::all(ctx.client.clone()),
        watcher::Config::default(),
    ));
    let views = Views {
        sandboxes,
        namespaces,
    };
    let counted = move |maximum, ctx| {
        let views = views.clone();
        super::counted("maximumpolicy", maximum, ctx, |m, c| reconcile(m, c, views))
    };
    super::drive(
        controller
            .watches_stream(sandbox_changes, move |_| all())
            .watches_stream(namespace_changes, move |_| all_for_namespaces()),
        counted,
        error_policy,
        ctx,
    )
    .await;
}
