//! Composition of policies: a proposal's `add` and `remove` applied to the
//! current effective policy give the candidate of docs/design.md §4. Pure; the
//! reconciler and the webhook both use it.

use crate::error::{Reason, ReasonCode};
use crate::model::PolicyDocument;

fn conflict(field: String, message: String) -> Reason {
    Reason::at(ReasonCode::UnsupportedPolicyShape, field, message)
}

/// `current` with the rules named in `remove` taken out and `add`'s rules
/// and filesystem entries put in.
///
/// Removing a rule that does not exist, or adding one whose name is taken,
/// is an error naming the field: a typo must not silently change nothing,
/// and a name clash must not silently merge two grants. Filesystem entries
/// are a set: adding one that is present changes nothing.
pub fn apply_proposal(
    current: &PolicyDocument,
    add: Option<&PolicyDocument>,
    remove: &[String],
) -> Result<PolicyDocument, Reason> {
    let mut out = current.clone();
    for (i, name) in remove.iter().enumerate() {
        let Some(at) = out.network.iter().position(|r| &r.name == name) else {
            return Err(conflict(
                format!("remove.network[{i}]"),
                format!("the sandbox has no rule named {name:?}"),
            ));
        };
        out.network.remove(at);
    }
    let Some(add) = add else {
        return Ok(out);
    };
    for (i, rule) in add.network.iter().enumerate() {
        if out.network.iter().any(|r| r.name == rule.name) {
            return Err(conflict(
                format!("add.network[{i}].name"),
                format!(
                    "the sandbox already has a rule named {:?}; choose another name, or remove it in the same proposal",
                    rule.name
                ),
            ));
        }
        out.network.push(rule.clone());
    }
    for (list, added) in [
        (&mut out.filesystem.read_only, &add.filesystem.read_only),
        (&mut out.filesystem.read_write, &add.filesystem.read_write),
    ] {
        for path in added {
            if !list.contains(path) {
                list.push(path.clone());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::Limits;
    use crate::load::load_document;

    fn doc(yaml: &str) -> PolicyDocument {
        load_document(yaml, &Limits::default()).unwrap().policy
    }

    const CURRENT: &str = "filesystem: {readOnly: [/app]}\nnetwork:\n  - {name: a, endpoints: [{host: a.io, ports: [443]}]}\n  - {name: b, endpoints: [{host: b.io, ports: [443]}]}\n";

    #[test]
    fn adds_and_removes() {
        let add = doc(
            "filesystem: {readOnly: [/app, /data]}\nnetwork: [{name: c, endpoints: [{host: c.io, ports: [443]}]}]",
        );
        let out = apply_proposal(&doc(CURRENT), Some(&add), &["a".into()]).unwrap();
        let names: Vec<&str> = out.network.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["b", "c"]);
        assert_eq!(out.filesystem.read_only, ["/app", "/data"]);
    }

    #[test]
    fn replacing_a_rule_needs_removing_it() {
        let add = doc("network: [{name: a, endpoints: [{host: x.io, ports: [443]}]}]");
        let err = apply_proposal(&doc(CURRENT), Some(&add), &[]).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("add.network[0].name"));
        let out = apply_proposal(&doc(CURRENT), Some(&add), &["a".into()]).unwrap();
        assert_eq!(out.network.iter().filter(|r| r.name == "a").count(), 1);
    }

    #[test]
    fn removing_an_unknown_rule_is_an_error() {
        let err = apply_proposal(&doc(CURRENT), None, &["b".into(), "zz".into()]).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("remove.network[1]"));
    }
}
