//! The scenarios' world: the addresses and names the runners (the pod
//! runner's network namespace, the real node's) set up and the probing
//! agent and its policies name, in one place so neither side imports the
//! other.

/// The upstream's address (an echo server on port 8080).
pub const UPSTREAM_IP: &str = "10.77.0.2";
/// The DNS server's address.
pub const DNS_IP: &str = "10.77.0.53";
/// Where the pod runner's network serves the official SDK's bank server
/// (`proxy/tests/support/mcp_bank_server.py`) to the agent's SDK client
/// (`e2e/support/mcp_agent.py`).
pub const SDK_BANK_HOST: &str = "bank.example.test";
/// The SDK bank server's port.
pub const SDK_BANK_PORT: u16 = 8931;
