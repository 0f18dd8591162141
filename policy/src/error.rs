//! Reason codes (docs/policy-semantics.md §5) and policy errors that carry them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why an answer is Unsupported or Inconclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    /// The input uses a surface the model does not cover.
    UnsupportedPolicyShape,
    /// A pattern is not a valid glob.
    InvalidGlob,
    /// The solver ran out of time.
    SolverTimeout,
    /// The solver answered unknown.
    SolverUnknown,
    /// A size limit was reached.
    ResourceLimit,
    /// A counterexample did not replay through the matcher.
    InvalidWitness,
}

impl ReasonCode {
    /// The code as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::UnsupportedPolicyShape => "unsupported_policy_shape",
            ReasonCode::InvalidGlob => "invalid_glob",
            ReasonCode::SolverTimeout => "solver_timeout",
            ReasonCode::SolverUnknown => "solver_unknown",
            ReasonCode::ResourceLimit => "resource_limit",
            ReasonCode::InvalidWitness => "invalid_witness",
        }
    }

    /// Unsupported codes describe the input; the others describe the proof.
    pub fn is_unsupported(self) -> bool {
        matches!(
            self,
            ReasonCode::UnsupportedPolicyShape | ReasonCode::InvalidGlob
        )
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reason with the field it concerns, as `verify --output json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
pub struct Reason {
    /// Machine-readable code.
    pub code: ReasonCode,
    /// Field path such as `network[2].endpoints[0].host`, when one applies.
    pub field: Option<String>,
    /// One line a person can act on.
    pub message: String,
}

impl Reason {
    /// A reason about a field.
    pub fn at(code: ReasonCode, field: impl Into<String>, message: impl Into<String>) -> Reason {
        Reason {
            code,
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// A reason that concerns no single field.
    pub fn general(code: ReasonCode, message: impl Into<String>) -> Reason {
        Reason {
            code,
            field: None,
            message: message.into(),
        }
    }

    /// Prefixes the field path (for nested documents, e.g. `spec.policy`).
    pub fn within(mut self, prefix: &str) -> Reason {
        self.field = Some(match self.field {
            Some(field) if !prefix.is_empty() => format!("{prefix}.{field}"),
            Some(field) => field,
            None => prefix.to_string(),
        });
        self
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{field}: {} ({})", self.message, self.code),
            None => write!(f, "{} ({})", self.message, self.code),
        }
    }
}
