#![warn(missing_docs)]
//! agentgate-proxy: the sandbox's egress proxy (docs/design.md §10). It judges
//! every connection and every HTTP request of an agent's processes by the
//! committed effective policy, with the same matcher the operator's proofs
//! are replayed through, and enforces the verdict. See docs/proxy.md.

pub mod approval;
mod credentials;
pub mod decide;
pub mod delivery;
pub mod identity;
pub mod idle;
pub mod mcp;
pub mod model_provider;
pub mod netinit;
mod operator_api;
pub mod policy_file;
pub mod resolve;
pub mod server;
pub mod session;
mod sniffing;
pub mod telemetry;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod tls;
pub mod trust;
