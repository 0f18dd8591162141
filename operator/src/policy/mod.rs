//! The policy language (POLICY-SEMANTICS.md): documents, globs, validation,
//! compilation and the runtime matcher. Pure logic, no I/O.

pub mod action;
pub mod compile;
pub mod compose;
pub mod error;
pub mod glob;
pub mod load;
pub mod matcher;
pub mod model;
pub mod openshell;

pub use action::{Action, FilesystemAction, Layer, NetworkAction};
pub use compile::{CompiledPolicy, CompiledRegion, Limits, Role, compile, compile_region};
pub use error::{Reason, ReasonCode};
pub use model::PolicyDocument;
