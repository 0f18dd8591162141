//! The docs/design.md §6 example agent as a graph, shared by the unit tests,
//! the integration tests and the documentation examples so they all speak
//! about the same agent: mail in (`read_email`, tools.py:42), customer
//! records (`query_customers`, db.py:10), mail out (`send_email`,
//! tools.py:77).

use super::graph::{Capability, Channel, Effect, Graph, Node, SourceLocation};

/// The mail agent of docs/design.md §6: one HIGH finding at `send_email`.
pub fn mail_agent() -> Graph {
    let tool = |id: &str, effect: Effect, channel: Channel, file: &str, call: u32, def: u32| {
        Node::tool(
            id,
            vec![Capability::new(
                effect,
                channel,
                SourceLocation::at(file, call),
            )],
            SourceLocation::at(file, def),
        )
    };
    Graph::single_agent(vec![
        tool(
            "read_email",
            Effect::UntrustedInput,
            Channel::Mail,
            "tools.py",
            42,
            40,
        ),
        tool(
            "query_customers",
            Effect::ReadsInternal,
            Channel::Database,
            "db.py",
            10,
            8,
        ),
        tool(
            "send_email",
            Effect::Egress,
            Channel::Mail,
            "tools.py",
            77,
            75,
        ),
    ])
}
