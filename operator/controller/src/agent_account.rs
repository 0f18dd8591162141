//! The agent's ServiceAccount (`spec.agentServiceAccount`): the identity the
//! sandbox's Pod runs as and whose proposals count as the agent's. The API
//! server refuses a Pod whose ServiceAccount does not exist, so the operator
//! creates a missing one, owned by the sandbox like its other objects.
//!
//! The sandbox's writer chooses the name, so the operator's rights must not
//! become theirs: a ServiceAccount that exists and is not this sandbox's
//! (the namespace's `default`, a CI deployer's, another sandbox's) is used
//! as is, never modified, adopted or deleted. Removal is the garbage
//! collector's, through the owner reference; the operator may only get,
//! list, watch and create ServiceAccounts.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::events::EventType;

use crate::{Context, ControllerError, Note, owned, publish};
use agentgate_api::crd::AgentSandbox;
use agentgate_governance::governing::is_service_account_name;
use agentgate_k8s::FIELD_MANAGER;

/// The account every namespace gets from the ServiceAccount controller.
const NAMESPACE_DEFAULT: &str = "default";

/// What the reconciler does about a sandbox's agent ServiceAccount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountPlan {
    /// Missing: create it, controlled by the sandbox.
    Create,
    /// This sandbox controls it (the operator created it): nothing to do.
    Owned,
    /// It exists without a controller (someone made it): used as is.
    Unowned,
    /// Another object controls it (`Kind/name`, another sandbox perhaps):
    /// used as is, never taken over.
    ControlledBy(String),
    /// `default`, missing: the ServiceAccount controller makes it; owned by
    /// a sandbox it would be deleted with it, and with it the tokens of
    /// every pod that runs as it.
    NamespaceDefault,
    /// Not a ServiceAccount name (admission refuses such a sandbox; one
    /// stored without the webhook gets no account the API would refuse).
    NotAName,
}

/// The decision for ServiceAccount `name`, given its metadata when it
/// exists and the sandbox's uid. Only a controller owner reference with the
/// sandbox's uid makes it the sandbox's: uids are never reused, so neither
/// a sandbox of the same name re-created nor a copied reference without
/// `controller` takes over an account.
pub fn plan(name: &str, existing: Option<&ObjectMeta>, sandbox_uid: &str) -> AccountPlan {
    if !is_service_account_name(name) {
        return AccountPlan::NotAName;
    }
    let Some(meta) = existing else {
        return if name == NAMESPACE_DEFAULT {
            AccountPlan::NamespaceDefault
        } else {
            AccountPlan::Create
        };
    };
    let controller = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match controller {
        Some(o) if !sandbox_uid.is_empty() && o.uid == sandbox_uid => AccountPlan::Owned,
        Some(o) => AccountPlan::ControlledBy(format!("{}/{}", o.kind, o.name)),
        None => AccountPlan::Unowned,
    }
}

/// What a person should hear about an account the sandbox uses but does
/// not own.
fn not_owned_note(name: &str, plan: &AccountPlan) -> Option<Note> {
    match plan {
        AccountPlan::Unowned => Some((
            EventType::Normal,
            "ServiceAccountNotOwned",
            format!(
                "ServiceAccount {name:?} already exists and is not this sandbox's: the agent runs as it unchanged, with whatever it is bound to, and it stays when the sandbox is deleted"
            ),
        )),
        AccountPlan::ControlledBy(owner) => Some((
            EventType::Warning,
            "ServiceAccountOwnedElsewhere",
            format!(
                "ServiceAccount {name:?} is controlled by {owner}: the agent runs as it unchanged, and it is deleted with {owner}"
            ),
        )),
        _ => None,
    }
}

/// Creates the sandbox's agent ServiceAccount in its namespace when it is
/// missing, as declared (`account`: the sandbox's label and controller
/// owner reference), behind the leader fence. An existing account is only read.
/// `announce`: the sandbox's status changed in this reconcile, so an
/// account it does not own is reported (logged at info, an Event) then,
/// rather than at every reconcile.
pub async fn ensure(
    sandbox: &AgentSandbox,
    account: &ServiceAccount,
    ctx: &Context,
    announce: bool,
) -> Result<(), ControllerError> {
    let name = sandbox.spec.agent_service_account.as_str();
    let namespace = sandbox.namespace().unwrap_or_default();
    let sandbox_name = sandbox.name_any();
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &namespace);
    let uid = sandbox.uid().unwrap_or_default();
    // The account this sandbox already owns, as the watch shows it, needs
    // no read: that answer does nothing, and a deleted account's watch
    // event (which updates the view first) brings the sandbox back.
    let owned_in_view = owned::in_view::<ServiceAccount>(ctx, &namespace, name)
        .is_some_and(|account| plan(name, Some(&account.metadata), &uid) == AccountPlan::Owned);
    if owned_in_view {
        return Ok(());
    }
    let existing = if is_service_account_name(name) {
        api.get_metadata_opt(name).await?.map(|m| m.metadata)
    } else {
        None
    };
    let decision = plan(name, existing.as_ref(), &uid);
    match &decision {
        AccountPlan::Create => {}
        AccountPlan::Owned => return Ok(()),
        AccountPlan::NamespaceDefault | AccountPlan::NotAName => {
            tracing::debug!(sandbox = %sandbox_name, namespace = %namespace, service_account = %name, plan = ?decision, "agent ServiceAccount not created");
            return Ok(());
        }
        AccountPlan::Unowned | AccountPlan::ControlledBy(_) => {
            if announce {
                tracing::info!(sandbox = %sandbox_name, namespace = %namespace, service_account = %name, plan = ?decision, "agent ServiceAccount exists and is not the sandbox's; used as is");
                let notes = not_owned_note(name, &decision).into_iter().collect();
                publish(ctx, sandbox, "UseServiceAccount", notes).await;
            }
            return Ok(());
        }
    }
    ctx.fence(&format!("ServiceAccount {namespace}/{name}"))
        .await?;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match api.create(&params, account).await {
        Ok(_) => {
            tracing::info!(sandbox = %sandbox_name, namespace = %namespace, service_account = %name, "agent ServiceAccount created");
            let notes = vec![(
                EventType::Normal,
                "ServiceAccountCreated",
                format!("created ServiceAccount {name:?} for the agent, owned by this sandbox"),
            )];
            publish(ctx, sandbox, "CreateServiceAccount", notes).await;
            Ok(())
        }
        // Created meanwhile by someone else: a create never overwrites, and
        // the next reconcile reads whose it is.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            tracing::info!(sandbox = %sandbox_name, namespace = %namespace, service_account = %name, "agent ServiceAccount appeared meanwhile; used as is");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn meta(owners: &[(&str, &str, Option<bool>)]) -> ObjectMeta {
        ObjectMeta {
            name: Some("triage-bot".into()),
            owner_references: Some(
                owners
                    .iter()
                    .map(|(kind, uid, controller)| OwnerReference {
                        api_version: "agentgate.dev/v1alpha1".into(),
                        kind: (*kind).into(),
                        name: "bot".into(),
                        uid: (*uid).into(),
                        controller: *controller,
                        block_owner_deletion: Some(true),
                    })
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_missing_account_is_created_except_default_and_non_names() {
        assert_eq!(plan("triage-bot", None, "u1"), AccountPlan::Create);
        assert_eq!(plan("default", None, "u1"), AccountPlan::NamespaceDefault);
        for bad in ["", "Triage", "bot/x", "-bot"] {
            assert_eq!(plan(bad, None, "u1"), AccountPlan::NotAName, "{bad:?}");
        }
    }

    #[test]
    fn only_this_sandboxs_controller_reference_makes_it_owned() {
        let ours = meta(&[("AgentSandbox", "u1", Some(true))]);
        assert_eq!(plan("triage-bot", Some(&ours), "u1"), AccountPlan::Owned);
        // Somebody's own account, or one that copied our reference without
        // `controller`: theirs, used as is.
        assert_eq!(
            plan("triage-bot", Some(&meta(&[])), "u1"),
            AccountPlan::Unowned
        );
        let copied = meta(&[("AgentSandbox", "u1", None)]);
        assert_eq!(
            plan("triage-bot", Some(&copied), "u1"),
            AccountPlan::Unowned
        );
        // Another sandbox's (or this name's earlier sandbox, re-created with
        // a new uid): never taken over.
        assert_eq!(
            plan("triage-bot", Some(&ours), "u2"),
            AccountPlan::ControlledBy("AgentSandbox/bot".into())
        );
        assert_eq!(
            plan("default", Some(&meta(&[])), "u1"),
            AccountPlan::Unowned
        );
        // A sandbox without a uid owns nothing.
        let empty = meta(&[("AgentSandbox", "", Some(true))]);
        assert_eq!(
            plan("triage-bot", Some(&empty), ""),
            AccountPlan::ControlledBy("AgentSandbox/bot".into())
        );
    }

    #[test]
    fn an_account_not_owned_is_reported_with_its_owner() {
        let (kind, reason, message) =
            not_owned_note("ci", &AccountPlan::ControlledBy("Deployment/ci".into())).unwrap();
        assert_eq!(
            (kind, reason),
            (EventType::Warning, "ServiceAccountOwnedElsewhere")
        );
        assert!(message.contains("Deployment/ci"), "{message}");
        let (kind, reason, _) = not_owned_note("ci", &AccountPlan::Unowned).unwrap();
        assert_eq!(
            (kind, reason),
            (EventType::Normal, "ServiceAccountNotOwned")
        );
        assert!(not_owned_note("ci", &AccountPlan::Owned).is_none());
        assert!(not_owned_note("ci", &AccountPlan::Create).is_none());
    }
}
