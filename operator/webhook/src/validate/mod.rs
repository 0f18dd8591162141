//! The admission handlers, one module per kind: each decodes its kind
//! through the shared [`envelope`], asks the caches and the API server
//! what it needs, and leaves the decision to the pure checks in
//! `webhook::admission`, `webhook::authority` and `webhook::pods`.

pub(super) mod envelope;
pub(super) mod held_calls;
pub(super) mod maximums;
pub(super) mod namespaces;
pub(super) mod pods;
pub(super) mod proposals;
pub(super) mod sandboxes;
pub(super) mod scans;
