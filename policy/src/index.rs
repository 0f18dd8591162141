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

use std::borrow::Cow;
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
    /// Borrowed when one key holds them all (a decision on a policy of
    /// literal hosts allocates nothing here).
    pub fn candidates(&self, host: &str) -> Cow<'_, [EndpointRef]> {
        let mut candidates = Candidates::default();
        candidates.add(&self.every_host);
        if let Some(v) = self.exact.get(host) {
            candidates.add(v);
        }
        if !(self.one_label.is_empty() && self.any_labels.is_empty()) {
            let mut rest = host;
            let mut first = true;
            while let Some((_, suffix)) = rest.split_once('.') {
                if first && let Some(v) = self.one_label.get(suffix) {
                    candidates.add(v);
                }
                if let Some(v) = self.any_labels.get(suffix) {
                    candidates.add(v);
                }
                first = false;
                rest = suffix;
            }
        }
        candidates.finish()
    }
}

/// The candidate lists found for one host: the first borrowed, merged only
/// when a second one is found.
#[derive(Default)]
struct Candidates<'a> {
    first: &'a [EndpointRef],
    merged: Option<Vec<EndpointRef>>,
}

impl<'a> Candidates<'a> {
    fn add(&mut self, list: &'a [EndpointRef]) {
        if list.is_empty() {
            return;
        }
        if self.first.is_empty() {
            self.first = list;
            return;
        }
        self.merged
            .get_or_insert_with(|| self.first.to_vec())
            .extend_from_slice(list);
    }

    fn finish(self) -> Cow<'a, [EndpointRef]> {
        match self.merged {
            None => Cow::Borrowed(self.first),
            Some(mut out) => {
                out.sort_unstable();
                out.dedup();
                Cow::Owned(out)
            }
        }
    }
}
