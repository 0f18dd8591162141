//! An index from host names to the endpoints whose host glob could match
//! them, so the runtime matcher looks at a handful of endpoints instead of
//! every rule of a large policy. It only narrows: every candidate is still
//! matched in full by `matcher`, in policy order, so an indexed decision is
//! the unindexed one (a property test checks it).
//!
//! Host globs have wildcards only in their first label (docs/policy-semantics.md
//! §3), so each glob is keyed by what follows its first label:
//! - a literal host by itself;
//! - a first label with `*` (one label) by the rest: a host is looked up by
//!   what follows its own first label;
//! - a first label `**` (one or more labels) by the rest: a host is looked
//!   up by each of its proper suffixes;
//! - a bare `*` or `**` is a candidate for every host.

use std::collections::HashMap;

use crate::compile::CompiledPolicy;

/// (rule index, endpoint index) in the compiled policy.
pub type EndpointRef = (usize, usize);

/// Endpoints by the literal part of their host glob.
#[derive(Debug, Clone, Default)]
pub struct HostIndex {
    exact: HashMap<String, Vec<EndpointRef>>,
    one_label: HashMap<String, Vec<EndpointRef>>,
    any_labels: HashMap<String, Vec<EndpointRef>>,
    every_host: Vec<EndpointRef>,
}

impl HostIndex {
    /// Indexes every endpoint of `policy`. Use it only with that policy.
    pub fn build(policy: &CompiledPolicy) -> HostIndex {
        let mut index = HostIndex::default();
        for (r, rule) in policy.rules.iter().enumerate() {
            for (e, endpoint) in rule.endpoints.iter().enumerate() {
                let pattern = endpoint.host.as_str();
                let at = (r, e);
                match pattern.split_once('.') {
                    None if pattern.contains('*') => index.every_host.push(at),
                    Some(("**", rest)) => {
                        index
                            .any_labels
                            .entry(rest.to_string())
                            .or_default()
                            .push(at);
                    }
                    Some((first, rest)) if first.contains('*') => {
                        index
                            .one_label
                            .entry(rest.to_string())
                            .or_default()
                            .push(at);
                    }
                    _ => index.exact.entry(pattern.to_string()).or_default().push(at),
                }
            }
        }
        index
    }

    /// The endpoints whose host glob could match `host`, in policy order.
    pub fn candidates(&self, host: &str) -> Vec<EndpointRef> {
        let mut out: Vec<EndpointRef> = self.every_host.clone();
        if let Some(v) = self.exact.get(host) {
            out.extend_from_slice(v);
        }
        let mut rest = host;
        let mut first = true;
        while let Some((_, suffix)) = rest.split_once('.') {
            if first && let Some(v) = self.one_label.get(suffix) {
                out.extend_from_slice(v);
            }
            if let Some(v) = self.any_labels.get(suffix) {
                out.extend_from_slice(v);
            }
            first = false;
            rest = suffix;
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}
