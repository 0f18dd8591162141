//! Runtime judgement (docs/proxy.md): how an enforcement point — the egress
//! proxy, `agentgate-exec --mcp`, the operator's `/v1/decide` — reads what
//! an agent sends and states what it decides, over the policy language's
//! matcher (`agentgate-policy`). MCP's JSON-RPC messages become actions
//! and answers (`mcp_messages`), a REST request's values are read as
//! servers read them (`request_values`), trifecta findings are cited and
//! their runtime flows watched (`findings`), every refusal has one shape
//! (`refusal`), and held calls and the policy stream have their wire forms
//! (`held`, `delivery`). Pure logic, no I/O.
#![warn(missing_docs)]

pub mod delivery;
pub mod findings;
pub mod held;
pub mod mcp_messages;
pub mod refusal;
pub mod request_values;
