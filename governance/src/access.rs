//! SubjectAccessReviews as the webhook and the reconcilers ask them: who
//! may do what, on a user's behalf. Pure builders; the callers send them.

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};

use agentgate_api::crd::APPROVE_VERB;

/// A SubjectAccessReview asking whether `user` (name, groups, uid, extra)
/// may do `attributes`.
pub fn access_review(user: &UserInfo, attributes: ResourceAttributes) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(attributes),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

/// `verb` on core-group `resource` in `namespace` (on `name`, when given).
pub fn core_resource(
    verb: &str,
    resource: &str,
    namespace: &str,
    name: Option<&str>,
) -> ResourceAttributes {
    ResourceAttributes {
        verb: Some(verb.into()),
        resource: Some(resource.into()),
        namespace: Some(namespace.into()),
        name: name.map(str::to_string),
        ..ResourceAttributes::default()
    }
}

/// `approve` on the heldcalls of a namespace (one, when named): who may
/// decide a held tool call.
pub fn approve_held_calls(namespace: &str, name: Option<&str>) -> ResourceAttributes {
    ResourceAttributes {
        group: Some("agentgate.dev".into()),
        ..core_resource(APPROVE_VERB, "heldcalls", namespace, name)
    }
}

/// The `approve` verb on `policyproposals.agentgate.dev` in `namespace`
/// (on proposal `name`, when given): what a reviewer holds.
pub fn approve_proposals(namespace: &str, name: Option<&str>) -> ResourceAttributes {
    ResourceAttributes {
        group: Some("agentgate.dev".into()),
        ..core_resource(APPROVE_VERB, "policyproposals", namespace, name)
    }
}
