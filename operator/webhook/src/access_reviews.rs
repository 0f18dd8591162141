//! What the API server says a user may do, asked on the webhook's behalf:
//! SubjectAccessReviews for the admission handlers (approve, template
//! authorship, agent powers), the TokenReview and SubjectAccessReview
//! behind `/v1/decide`'s caller check (both cached), and the
//! SelfSubjectReview that tells the webhook who the operator is.

use std::time::Instant;

use axum::http::HeaderMap;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview};
use kube::api::{Api, PostParams};
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};

use crate::caller::{
    ALLOWED_TTL, AUTHENTICATED_TTL, CallerRefusal, DENIED_TTL, REFUSED_TTL, access_key,
    bearer_token, is_agent, read_sandbox, token_key,
};
use crate::decide::DecideRequest;
use crate::state::WebhookState;
use agentgate_api::crd::AgentSandbox;
use agentgate_governance::access::{access_review, approve_proposals, core_resource};
use agentgate_governance::authority::Requester;
use agentgate_governance::pod_template::{agent_identities, pod_service_account};

impl WebhookState {
    /// Whether `user` may do `attributes` (a SubjectAccessReview on their
    /// behalf, with their groups).
    pub(super) async fn may(
        &self,
        user: &UserInfo,
        attributes: ResourceAttributes,
    ) -> Result<bool, String> {
        let what = format!(
            "{} {}",
            attributes.verb.clone().unwrap_or_default(),
            attributes.resource.clone().unwrap_or_default()
        );
        Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access_review(user, attributes))
            .await
            .map(|r| r.status.is_some_and(|s| s.allowed))
            .map_err(|e| format!("cannot check the {what} permission: {e}"))
    }

    /// Whether the requesting user holds `approve` on policyproposals in
    /// `namespace` (on `name`, when given).
    pub(super) async fn may_approve(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        namespace: &str,
        name: &str,
    ) -> Result<bool, String> {
        let name = (!name.is_empty()).then_some(name);
        self.may(&request.user_info, approve_proposals(namespace, name))
            .await
    }

    /// Warnings when a sandbox's agent identities hold rights that step
    /// around any sandbox: creating pods of their own, or acting as another
    /// ServiceAccount (a SubjectAccessReview as each identity). Warnings,
    /// not refusals: the sandbox is not what grants them, RBAC is.
    pub(super) async fn agent_power_warnings(&self, sandbox: &AgentSandbox) -> Vec<String> {
        let namespace = sandbox.namespace().unwrap_or_default();
        let name = sandbox.name_any();
        let checks = agent_identities(sandbox).into_iter().flat_map(|user| {
            let agent = UserInfo {
                username: Some(user),
                groups: Some(vec![
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{namespace}"),
                    "system:authenticated".to_string(),
                ]),
                ..UserInfo::default()
            };
            [("create", "pods"), ("impersonate", "serviceaccounts")].map(|(verb, resource)| {
                let (agent, name, namespace) = (agent.clone(), &name, &namespace);
                async move {
                    let user = agent.username.as_deref().unwrap_or_default();
                    let attributes = core_resource(verb, resource, namespace, None);
                    match self.may(&agent, attributes).await {
                        Ok(true) => Some(format!(
                            "agentsandbox {name:?}: its agent {user:?} may {verb} {resource} in namespace {namespace:?}, which steps around any sandbox; bind it to the agentgate-agent ClusterRole instead of edit"
                        )),
                        Ok(false) => None,
                        Err(e) => Some(format!(
                            "agentsandbox {name:?}: could not check what its agent {user:?} may do: {e}"
                        )),
                    }
                }
            })
        });
        futures::future::join_all(checks)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// Whether the author of a sandbox's pod template could run that pod
    /// themselves: create pods in the namespace, and act as the account it
    /// runs as (`impersonate` on that ServiceAccount; the pod would carry
    /// its token). The operator creates the pod with its own rights, so
    /// without this it would lend them to anyone who may write a sandbox.
    pub(super) async fn template_author_refusal(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        sandbox: &AgentSandbox,
    ) -> Option<String> {
        let namespace = sandbox.namespace().unwrap_or_default();
        let user = request.user_info.username.clone().unwrap_or_default();
        let account = pod_service_account(&sandbox.spec);
        let checks = [
            (
                core_resource("create", "pods", &namespace, None),
                format!("create pods in namespace {namespace:?}"),
            ),
            (
                core_resource("impersonate", "serviceaccounts", &namespace, Some(&account)),
                format!("impersonate ServiceAccount {namespace}/{account} (the pod runs as it)"),
            ),
        ];
        for (attributes, what) in checks {
            match self.may(&request.user_info, attributes).await {
                Ok(true) => {}
                Ok(false) => {
                    return Some(format!(
                        "agentsandbox {:?}: {user:?} may not {what}, so may not have agentgate run this pod template",
                        sandbox.name_any()
                    ));
                }
                Err(e) => return Some(format!("agentsandbox {:?}: {e}", sandbox.name_any())),
            }
        }
        None
    }

    /// The sandbox whose Pod a projected token is bound to, if the token's
    /// ServiceAccount is that sandbox's agent (the Pod is named after its
    /// sandbox), with the Pod's name and uid; `what` says what only such a
    /// Pod does, for the refusal.
    pub(super) fn pod_sandbox(
        &self,
        user: &UserInfo,
        what: &str,
    ) -> Result<PodSandbox, CallerRefusal> {
        let username = user.username.as_deref().unwrap_or_default();
        let requester = Requester {
            username,
            groups: &[],
        };
        let (namespace, _) = requester.service_account().ok_or_else(|| {
            CallerRefusal::Forbidden(format!(
                "{username:?} is not a ServiceAccount: only a sandbox's Pod {what}"
            ))
        })?;
        let extra = |key: &str| {
            user.extra
                .as_ref()
                .and_then(|extra| extra.get(key))
                .and_then(|values| values.first())
                .cloned()
        };
        let pod = extra(POD_NAME_EXTRA).ok_or_else(|| {
            CallerRefusal::Forbidden(format!(
                "{username:?} sent a token bound to no Pod: the proxy's projected token is bound to its sandbox's Pod"
            ))
        })?;
        let key = ObjectRef::new(&pod).within(namespace);
        match self.sandboxes.get(&key) {
            Some(sandbox) if is_agent(user, agent_identities(&sandbox).iter()) => Ok(PodSandbox {
                sandbox,
                pod_uid: extra(POD_UID_EXTRA),
                pod,
            }),
            _ => Err(CallerRefusal::Forbidden(format!(
                "{username:?} in Pod {namespace}/{pod} is not the agent of an AgentSandbox of that name"
            ))),
        }
    }

    /// Who sent the bearer token, by a TokenReview (cached by the token's
    /// hash for [`AUTHENTICATED_TTL`], refusals for [`REFUSED_TTL`]).
    pub(super) async fn authenticate(
        &self,
        headers: &HeaderMap,
    ) -> Result<UserInfo, CallerRefusal> {
        self.authenticate_for(headers, None).await
    }

    /// [`Self::authenticate`] for a token that must carry `audience` (a
    /// projected ServiceAccount token minted for this endpoint alone), or
    /// the API server's own audiences when `None`.
    pub(super) async fn authenticate_for(
        &self,
        headers: &HeaderMap,
        audience: Option<&str>,
    ) -> Result<UserInfo, CallerRefusal> {
        let token = bearer_token(headers)?;
        // The audience is part of the key: a token good for one endpoint
        // is not thereby good for another.
        let key = match audience {
            None => token_key(token),
            Some(audience) => token_key(&format!("{audience}\n{token}")),
        };
        if let Some(known) = self.tokens.get(&key, Instant::now()) {
            return known.map_err(CallerRefusal::Unauthenticated);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: audience.map(|a| vec![a.to_string()]),
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| CallerRefusal::Unavailable(format!("cannot review the token: {e}")))?;
        let status = answer.status.unwrap_or_default();
        // An audience asked for must be one the token was minted for.
        let for_us = audience.is_none_or(|a| {
            status
                .audiences
                .as_ref()
                .is_some_and(|list| list.iter().any(|x| x == a))
        });
        let outcome = match (status.authenticated, status.user) {
            (Some(true), _) if !for_us => Err(format!(
                "the token is not for audience {:?}: mount a projected ServiceAccount token with that audience",
                audience.unwrap_or_default()
            )),
            (Some(true), Some(user)) if user.username.as_deref().is_some_and(|u| !u.is_empty()) => {
                Ok(user)
            }
            _ => Err(format!(
                "the token is not valid: {}",
                status
                    .error
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| "the API server did not authenticate it".into())
            )),
        };
        let ttl = if outcome.is_ok() {
            AUTHENTICATED_TTL
        } else {
            REFUSED_TTL
        };
        self.tokens
            .insert(key, outcome.clone(), ttl, Instant::now());
        outcome.map_err(CallerRefusal::Unauthenticated)
    }

    /// Whether `user` may ask about the request's sandbox: its own agent,
    /// or a subject that may `get` the AgentSandbox (a SubjectAccessReview,
    /// cached for [`ALLOWED_TTL`] / [`DENIED_TTL`]).
    pub(super) async fn may_ask(
        &self,
        user: &UserInfo,
        request: &DecideRequest,
    ) -> Result<(), CallerRefusal> {
        let key = ObjectRef::new(&request.sandbox).within(&request.namespace);
        if let Some(sandbox) = self.sandboxes.get(&key)
            && is_agent(user, agent_identities(&sandbox).iter())
        {
            return Ok(());
        }
        let cache_key = access_key(user, &request.namespace, &request.sandbox);
        let allowed = match self.sandbox_readers.get(&cache_key, Instant::now()) {
            Some(allowed) => allowed,
            None => {
                let allowed = self
                    .may(user, read_sandbox(&request.namespace, &request.sandbox))
                    .await
                    .map_err(CallerRefusal::Unavailable)?;
                let ttl = if allowed { ALLOWED_TTL } else { DENIED_TTL };
                self.sandbox_readers
                    .insert(cache_key, allowed, ttl, Instant::now());
                allowed
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(CallerRefusal::Forbidden(format!(
                "{:?} is not the agent of agentsandbox {}/{} and may not get it",
                user.username.as_deref().unwrap_or_default(),
                request.namespace,
                request.sandbox
            )))
        }
    }
}

/// This process's user name as the API server sees it (SelfSubjectReview).
/// `None` when it cannot be learnt (yet): until it is, no pod borrows a
/// sandbox's proofs or acceptances and nobody writes status (fail closed).
pub(super) async fn whoami(client: &Client) -> Option<String> {
    let review = SelfSubjectReview::default();
    match Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
    {
        Ok(answer) => {
            let user = answer
                .status
                .and_then(|s| s.user_info)
                .and_then(|u| u.username);
            tracing::info!(user = ?user, "webhook: the operator's identity, trusted for sandbox pods");
            user
        }
        Err(e) => {
            tracing::warn!(error = %e, "webhook: cannot learn the operator's identity; sandbox pods borrow no proofs");
            None
        }
    }
}

/// The TokenReview extra naming the Pod a token is bound to.
const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// The TokenReview extra with that Pod's uid.
const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";

/// A sandbox's Pod, as its projected token names it.
pub(crate) struct PodSandbox {
    /// The sandbox.
    pub sandbox: std::sync::Arc<AgentSandbox>,
    /// The Pod's name (the sandbox's).
    pub pod: String,
    /// The Pod's uid, when the token carries it.
    pub pod_uid: Option<String>,
}
