//! What the API server counted, by request kind, from its own metrics
//! (`apiserver_request_total`, `apiserver_response_sizes_sum`,
//! `apiserver_request_duration_seconds_sum`): count before cutting, for
//! `make bench-requests` and the real node's fleet figure.

use std::collections::BTreeMap;

use crate::ControlPlane;

/// What the API server counted for one kind of request.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Row {
    /// Requests.
    pub requests: f64,
    /// Of them, answered 409 Conflict.
    pub conflicts: f64,
    /// Bytes answered.
    pub response_bytes: f64,
    /// Seconds the API server spent on them.
    pub seconds: f64,
}

impl Row {
    /// What was counted from `before` to this row.
    pub fn since(&self, before: &Row) -> Row {
        Row {
            requests: self.requests - before.requests,
            conflicts: self.conflicts - before.conflicts,
            response_bytes: self.response_bytes - before.response_bytes,
            seconds: self.seconds - before.seconds,
        }
    }
}

/// A kind of request: (verb, group, resource, subresource).
pub type Key = (String, String, String, String);

/// The API server's counters now, by kind of request; non-resource
/// requests (discovery, `/metrics` itself) are left out.
pub fn counted(cp: &ControlPlane) -> Result<BTreeMap<Key, Row>, String> {
    let text = cp
        .run(&["get", "--raw", "/metrics"])
        .map_err(|e| e.to_string())?;
    Ok(rows(&text))
}

/// The rows of a `/metrics` text.
fn rows(text: &str) -> BTreeMap<Key, Row> {
    let mut rows: BTreeMap<Key, Row> = BTreeMap::new();
    for line in text.lines() {
        let field: fn(&mut Row) -> &mut f64 = if line.starts_with("apiserver_request_total{") {
            |r| &mut r.requests
        } else if line.starts_with("apiserver_response_sizes_sum{") {
            |r| &mut r.response_bytes
        } else if line.starts_with("apiserver_request_duration_seconds_sum{") {
            |r| &mut r.seconds
        } else {
            continue;
        };
        let resource = label(line, "resource");
        if resource.is_empty() {
            continue;
        }
        let key = (
            label(line, "verb"),
            label(line, "group"),
            resource,
            label(line, "subresource"),
        );
        let row = rows.entry(key).or_default();
        *field(row) += value(line);
        if line.starts_with("apiserver_request_total{") && label(line, "code") == "409" {
            row.conflicts += value(line);
        }
    }
    rows
}

/// The kinds of request counted from `before` to `after`, most API server
/// time first, as `VERB resource[/subresource] N (T ms)`, the `n` first.
pub fn busiest(before: &BTreeMap<Key, Row>, after: &BTreeMap<Key, Row>, n: usize) -> String {
    let mut rows: Vec<(&Key, Row)> = after
        .iter()
        .map(|(key, row)| {
            (
                key,
                row.since(&before.get(key).cloned().unwrap_or_default()),
            )
        })
        .filter(|(_, row)| row.requests >= 0.5)
        .collect();
    rows.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
    rows.iter()
        .take(n)
        .map(|((verb, _, resource, subresource), row)| {
            let path = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            format!(
                "{verb} {path} {:.0} ({:.0} ms)",
                row.requests,
                row.seconds * 1000.0
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A label's value in a Prometheus text line.
fn label(line: &str, name: &str) -> String {
    line.split(&format!("{name}=\""))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
        .to_string()
}

fn value(line: &str) -> f64 {
    line.rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counters_add_up_by_kind_and_the_busiest_come_first() {
        let at = |puts: u64, gets: u64| {
            rows(&format!(
                "# HELP apiserver_request_total x\n\
                 apiserver_request_total{{code=\"200\",group=\"agentgate.dev\",resource=\"agentsandboxes\",subresource=\"status\",verb=\"PUT\"}} {puts}\n\
                 apiserver_request_total{{code=\"409\",group=\"agentgate.dev\",resource=\"agentsandboxes\",subresource=\"status\",verb=\"PUT\"}} 1\n\
                 apiserver_request_duration_seconds_sum{{group=\"agentgate.dev\",resource=\"agentsandboxes\",subresource=\"status\",verb=\"PUT\"}} {}\n\
                 apiserver_request_total{{code=\"200\",group=\"\",resource=\"secrets\",subresource=\"\",verb=\"GET\"}} {gets}\n\
                 apiserver_request_duration_seconds_sum{{group=\"\",resource=\"secrets\",subresource=\"\",verb=\"GET\"}} {}\n\
                 apiserver_request_total{{code=\"200\",path=\"/metrics\",verb=\"GET\"}} 9\n",
                puts as f64 * 0.01,
                gets as f64 * 0.001
            ))
        };
        let before = at(10, 5);
        let after = at(110, 105);
        let put = &after[&(
            "PUT".to_string(),
            "agentgate.dev".to_string(),
            "agentsandboxes".to_string(),
            "status".to_string(),
        )];
        assert_eq!((put.requests, put.conflicts), (111.0, 1.0));
        assert_eq!(after.len(), 2, "the non-resource request is left out");
        assert_eq!(
            busiest(&before, &after, 5),
            "PUT agentsandboxes/status 100 (1000 ms), GET secrets 100 (100 ms)"
        );
    }
}
