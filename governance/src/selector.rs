//! Kubernetes label-selector matching (`metav1.LabelSelector`), used to find
//! the MaximumPolicies that govern a sandbox (docs/design.md §3). Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use agentgate_api::crd::MaximumPolicySpec;

/// A selector the API server would have refused, or that we cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SelectorError {
    /// Where in the selector.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// True when `labels` satisfy `selector` (an empty selector selects all).
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
    field: &str,
) -> Result<bool, SelectorError> {
    for (key, value) in selector.match_labels.iter().flatten() {
        if labels.get(key) != Some(value) {
            return Ok(false);
        }
    }
    for (i, expr) in selector.match_expressions.iter().flatten().enumerate() {
        let at = format!("{field}.matchExpressions[{i}]");
        let values = expr.values.as_deref().unwrap_or_default();
        let present = labels.get(&expr.key);
        let ok = match expr.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(SelectorError {
                    field: format!("{at}.values"),
                    message: format!("operator {} needs at least one value", expr.operator),
                });
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(SelectorError {
                    field: format!("{at}.values"),
                    message: format!("operator {} takes no values", expr.operator),
                });
            }
            "In" => present.is_some_and(|v| values.contains(v)),
            "NotIn" => present.is_none_or(|v| !values.contains(v)),
            "Exists" => present.is_some(),
            "DoesNotExist" => present.is_none(),
            other => {
                return Err(SelectorError {
                    field: format!("{at}.operator"),
                    message: format!(
                        "unknown operator {other:?} (In, NotIn, Exists, DoesNotExist)"
                    ),
                });
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// True when a MaximumPolicy governs a sandbox with these labels in a
/// namespace with these labels: both of its selectors match (an absent or
/// empty selector matches everything).
pub fn governs(
    maximum: &MaximumPolicySpec,
    namespace_labels: &BTreeMap<String, String>,
    sandbox_labels: &BTreeMap<String, String>,
) -> Result<bool, SelectorError> {
    let Some(selector) = &maximum.selector else {
        return Ok(true);
    };
    if let Some(ns) = &selector.namespace_selector
        && !matches(ns, namespace_labels, "spec.selector.namespaceSelector")?
    {
        return Ok(false);
    }
    match &selector.sandbox_selector {
        Some(sb) => matches(sb, sandbox_labels, "spec.selector.sandboxSelector"),
        None => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn selector(
        match_labels: &[(&str, &str)],
        exprs: Vec<LabelSelectorRequirement>,
    ) -> LabelSelector {
        LabelSelector {
            match_labels: (!match_labels.is_empty()).then(|| labels(match_labels)),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        }
    }

    #[test]
    fn empty_selects_all_and_match_labels_must_all_hold() {
        let l = labels(&[("team", "ml"), ("tier", "prod")]);
        assert!(matches(&LabelSelector::default(), &l, "s").unwrap());
        assert!(matches(&selector(&[("team", "ml")], vec![]), &l, "s").unwrap());
        assert!(
            !matches(
                &selector(&[("team", "ml"), ("tier", "dev")], vec![]),
                &l,
                "s"
            )
            .unwrap()
        );
    }

    #[test]
    fn expressions_follow_kubernetes() {
        let l = labels(&[("team", "ml")]);
        let check = |e| matches(&selector(&[], vec![e]), &l, "s").unwrap();
        assert!(check(expr("team", "In", &["ml", "web"])));
        assert!(!check(expr("team", "In", &["web"])));
        assert!(!check(expr("env", "In", &["prod"])));
        assert!(check(expr("team", "NotIn", &["web"])));
        assert!(
            check(expr("env", "NotIn", &["prod"])),
            "NotIn holds for an absent key"
        );
        assert!(check(expr("team", "Exists", &[])));
        assert!(check(expr("env", "DoesNotExist", &[])));
    }

    #[test]
    fn invalid_selectors_are_errors_with_their_field() {
        let l = labels(&[]);
        let err = matches(&selector(&[], vec![expr("a", "In", &[])]), &l, "spec.x").unwrap_err();
        assert_eq!(err.field, "spec.x.matchExpressions[0].values");
        let err = matches(
            &selector(&[], vec![expr("a", "Equals", &["b"])]),
            &l,
            "spec.x",
        )
        .unwrap_err();
        assert_eq!(err.field, "spec.x.matchExpressions[0].operator");
    }

    #[test]
    fn governs_needs_both_selectors() {
        let spec: MaximumPolicySpec = serde_json::from_value(serde_json::json!({
            "selector": {
                "namespaceSelector": {"matchLabels": {"team": "ml"}},
                "sandboxSelector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["sandbox"]}]}
            }
        }))
        .unwrap();
        let ml = labels(&[("team", "ml")]);
        assert!(governs(&spec, &ml, &labels(&[])).unwrap());
        assert!(!governs(&spec, &labels(&[("team", "web")]), &labels(&[])).unwrap());
        assert!(!governs(&spec, &ml, &labels(&[("tier", "sandbox")])).unwrap());
        let all: MaximumPolicySpec = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(governs(&all, &labels(&[]), &labels(&[])).unwrap());
    }
}
