//! Shared helpers for agentgate's integration tests and benchmarks.

pub mod fuzz;

use agentgate_policy::compile::{CompiledPolicy, Limits, Role, compile};
use agentgate_policy::load::load_document;

/// Compiles a policy from YAML text; panics with the reason on failure
/// (test inputs are fixed and known to be valid).
pub fn policy(yaml: &str, role: Role) -> CompiledPolicy {
    let loaded = match load_document(yaml, &Limits::default()) {
        Ok(loaded) => loaded,
        Err(e) => panic!("test policy does not load: {e}\n{yaml}"),
    };
    match compile(&loaded.policy, role, &Limits::default()) {
        Ok(p) => p,
        Err(e) => panic!("test policy does not compile: {e}\n{yaml}"),
    }
}
