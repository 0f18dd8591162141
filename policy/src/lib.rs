//! The policy language (docs/policy-semantics.md): documents, globs, validation,
//! compilation and the runtime matcher. Pure logic, no I/O: the operator
//! proves with it, and the data plane (`agentgate-proxy`, `agentgate-exec`)
//! enforces with it, so both read policies the same way. How an enforcement
//! point reads what an agent sends and states its refusals (MCP messages,
//! findings and their citations, refusal bodies, held calls, request values,
//! the policy stream's messages) is `agentgate-judgement`, above this crate.
#![warn(missing_docs)]

pub mod action;
pub mod canonical;
pub mod compile;
pub mod compose;
pub mod credentials;
pub mod error;
pub mod fields;
pub mod glob;
pub mod index;
pub mod load;
pub mod matcher;
pub mod mcp;
pub mod model;
pub mod names;
pub mod openshell;
pub mod provenance;
pub mod query;
pub mod strict_json;
#[cfg(feature = "testing")]
pub mod testing;

pub use action::{Action, FilesystemAction, Layer, McpAction, McpKind, NetworkAction};
pub use compile::{CompiledPolicy, CompiledRegion, Limits, Role, compile, compile_region};
pub use error::{Reason, ReasonCode};
pub use model::PolicyDocument;
