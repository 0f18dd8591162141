//! Counterexample-guided revocation (DESIGN.md §5): the largest part of a
//! policy, rule by rule and filesystem entry by entry, that is proved
//! inside every governing maximum and outside their invariants. Pure and
//! blocking (it runs the prover).

use crate::policy::action::Action;
use crate::policy::compile::{Limits, Role, compile};
use std::sync::Arc;

use crate::policy::load::CompiledDocument;
use crate::policy::matcher::{decide_network, path_is_under};
use crate::policy::model::PolicyDocument;
use crate::prover::{Outcome, Prover};

/// The result of checking a policy against its governing maximums.
#[derive(Debug, Clone, PartialEq)]
pub struct Revocation {
    /// The part of the policy that is proved within every maximum.
    pub kept: PolicyDocument,
    /// Grants taken out, e.g. `network rule "github-write"`, with the reason.
    pub revoked: Vec<(String, String)>,
}

/// Checks `policy` against every `(name, maximum)`; grants that let an action
/// escape a maximum or enter an invariant are revoked, one counterexample at
/// a time, until what is left is proved. If a proof cannot be completed,
/// everything is revoked (fail closed).
pub fn revoke_until_within(
    policy: &PolicyDocument,
    maximums: &[(String, Arc<CompiledDocument>)],
    prover: &Prover,
) -> Revocation {
    let mut kept = policy.clone();
    let mut revoked = Vec::new();
    // Each round removes at least one rule or entry, so this terminates.
    let bound = policy.network.len()
        + policy.filesystem.read_only.len()
        + policy.filesystem.read_write.len()
        + 1;
    for _ in 0..=bound {
        let compiled = match compile(&kept, Role::Sandbox, &Limits::default()) {
            Ok(c) => c,
            Err(reason) => {
                revoked.push((
                    "the whole policy".into(),
                    format!("it does not compile: {reason}"),
                ));
                return Revocation {
                    kept: PolicyDocument::default(),
                    revoked,
                };
            }
        };
        let mut escape: Option<(Action, String)> = None;
        'maximums: for (name, maximum) in maximums {
            let proof = prover.containment(&compiled, &maximum.policy);
            match proof.outcome {
                Outcome::Within => {}
                Outcome::Exceeds { counterexample } => {
                    let why =
                        format!("exceeds MaximumPolicy {name:?}: {counterexample} is not allowed");
                    escape = Some((counterexample, why));
                    break 'maximums;
                }
                Outcome::Unsupported { reason } | Outcome::Inconclusive { reason } => {
                    revoked.push((
                        "the whole policy".into(),
                        format!("cannot prove containment in MaximumPolicy {name:?}: {reason}"),
                    ));
                    return Revocation {
                        kept: PolicyDocument::default(),
                        revoked,
                    };
                }
            }
            for inv in &maximum.invariants {
                match prover.intersection(&compiled, &inv.region).outcome {
                    Outcome::Within => {}
                    Outcome::Exceeds { counterexample } => {
                        let why = format!(
                            "violates invariant {:?} of MaximumPolicy {name:?}: {counterexample} is allowed",
                            inv.name
                        );
                        escape = Some((counterexample, why));
                        break 'maximums;
                    }
                    Outcome::Unsupported { reason } | Outcome::Inconclusive { reason } => {
                        revoked.push((
                            "the whole policy".into(),
                            format!(
                                "cannot prove invariant {:?} of MaximumPolicy {name:?}: {reason}",
                                inv.name
                            ),
                        ));
                        return Revocation {
                            kept: PolicyDocument::default(),
                            revoked,
                        };
                    }
                }
            }
        }
        let Some((action, why)) = escape else {
            return Revocation { kept, revoked };
        };
        let before = revoked.len();
        match &action {
            Action::Network(a) => {
                // Every rule with an endpoint that allows the action goes.
                let allowing: Vec<String> = compiled
                    .rules
                    .iter()
                    .filter(|rule| {
                        let single = crate::policy::compile::CompiledPolicy {
                            filesystem: Default::default(),
                            rules: vec![(*rule).clone()],
                        };
                        decide_network(&single, a).allow
                    })
                    .map(|rule| rule.name.clone())
                    .collect();
                kept.network.retain(|r| !allowing.contains(&r.name));
                revoked.extend(
                    allowing
                        .into_iter()
                        .map(|n| (format!("network rule {n:?}"), why.clone())),
                );
            }
            Action::Filesystem(f) => {
                for (list, kind) in [
                    (&mut kept.filesystem.read_only, "readOnly"),
                    (&mut kept.filesystem.read_write, "readWrite"),
                ] {
                    let (gone, stay): (Vec<String>, Vec<String>) = list
                        .drain(..)
                        .partition(|entry| path_is_under(&f.path, entry));
                    *list = stay;
                    revoked.extend(
                        gone.into_iter()
                            .map(|e| (format!("filesystem.{kind} {e}"), why.clone())),
                    );
                }
            }
        }
        if revoked.len() == before {
            // The counterexample is allowed by nothing we can name: fail closed.
            revoked.push(("the whole policy".into(), why));
            return Revocation {
                kept: PolicyDocument::default(),
                revoked,
            };
        }
    }
    revoked.push((
        "the whole policy".into(),
        "revocation did not converge".into(),
    ));
    Revocation {
        kept: PolicyDocument::default(),
        revoked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::load::load_document;

    fn maximum(yaml: &str) -> Arc<CompiledDocument> {
        Arc::new(
            load_document(yaml, &Limits::default())
                .unwrap()
                .compile(Role::Maximum, &Limits::default())
                .unwrap(),
        )
    }

    fn policy(yaml: &str) -> PolicyDocument {
        load_document(yaml, &Limits::default()).unwrap().policy
    }

    const CEILING: &str = "kind: MaximumPolicy\nmetadata: {name: m}\nspec:\n  policy:\n    filesystem: {readWrite: [/sandbox]}\n    network:\n      - {name: gh, endpoints: [{host: api.github.com, ports: [443], protocol: rest, access: read-only}]}\n      - {name: web, endpoints: [{host: \"**\", ports: [80]}]}\n  invariants:\n    - {name: no-metadata, match: {hosts: [\"169.254.169.254\"]}}\n";

    #[test]
    fn keeps_what_is_within_and_names_what_is_revoked() {
        let sandbox = policy(
            "filesystem: {readWrite: [/sandbox, /etc]}\nnetwork:\n  - {name: read, endpoints: [{host: api.github.com, ports: [443], protocol: rest, access: read-only}]}\n  - {name: write, endpoints: [{host: api.github.com, ports: [443], protocol: rest, access: read-write}]}\n  - {name: meta, endpoints: [{host: \"169.254.169.254\", ports: [80]}]}\n",
        );
        let out = revoke_until_within(
            &sandbox,
            &[("m".into(), maximum(CEILING))],
            &Prover::default(),
        );
        let names: Vec<&str> = out.kept.network.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["read"]);
        assert_eq!(out.kept.filesystem.read_write, ["/sandbox"]);
        let revoked: Vec<&str> = out.revoked.iter().map(|(g, _)| g.as_str()).collect();
        assert!(revoked.contains(&"network rule \"write\""), "{revoked:?}");
        assert!(revoked.contains(&"network rule \"meta\""), "{revoked:?}");
        assert!(
            revoked.contains(&"filesystem.readWrite /etc"),
            "{revoked:?}"
        );
        let meta = out
            .revoked
            .iter()
            .find(|(g, _)| g == "network rule \"meta\"")
            .unwrap();
        assert!(meta.1.contains("invariant \"no-metadata\""), "{}", meta.1);
    }

    #[test]
    fn a_policy_within_is_kept_whole() {
        let sandbox = policy(
            "network: [{name: read, endpoints: [{host: api.github.com, ports: [443], protocol: rest, access: read-only}]}]",
        );
        let out = revoke_until_within(
            &sandbox,
            &[("m".into(), maximum(CEILING))],
            &Prover::default(),
        );
        assert_eq!(out.kept, sandbox);
        assert!(out.revoked.is_empty());
    }
}
