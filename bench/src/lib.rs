//! What agentgate's benchmark programs (`src/bin`, one per `make bench-*`
//! target, docs/benchmarks.md) share: percentiles of one definition, the
//! generated REST policies several of them measure, and the helpers of
//! those that run on a local control plane ([`cluster`]).

pub mod cluster;

use std::time::Duration;

/// The nearest-rank `p`th percentile (`p` in 0..=100) of ascending
/// `sorted`: the smallest sample at or above `p` percent of them. `None`
/// when there are none.
pub fn nearest_rank<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied()
}

/// [`nearest_rank`] of seconds or milliseconds (NaN when there are none).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    nearest_rank(sorted, p).unwrap_or(f64::NAN)
}

/// [`nearest_rank`] of durations (zero when there are none).
pub fn percentile_duration(sorted: &[Duration], p: f64) -> Duration {
    nearest_rank(sorted, p).unwrap_or(Duration::ZERO)
}

/// The CPU time (user and system, in seconds) process `pid` has used so
/// far, from `/proc/<pid>/stat`; 0 when it cannot be read.
pub fn proc_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat; 12 and 13 after the
    // name. USER_HZ is 100 on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

/// `rules` REST rules for `/usr/local/bin/agent`, rule `i` named
/// `name(i)` and allowing `methods` on `path(i)` of `host(i)`:443: the
/// generated policies the containment, webhook, decision and fleet
/// benchmarks measure.
pub fn rest_rules(
    rules: usize,
    name: impl Fn(usize) -> String,
    host: impl Fn(usize) -> String,
    methods: &[&str],
    path: impl Fn(usize) -> String,
) -> Vec<serde_json::Value> {
    (0..rules)
        .map(|i| {
            serde_json::json!({
                "name": name(i),
                "binaries": ["/usr/local/bin/agent"],
                "endpoints": [{
                    "host": host(i),
                    "ports": [443],
                    "protocol": "rest",
                    "rules": [{"methods": methods, "path": path(i)}],
                }],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_rank_is_a_sample_at_or_above_the_share() {
        let samples: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&samples, 50.0), 10.0);
        assert_eq!(percentile(&samples, 99.0), 20.0);
        assert_eq!(percentile(&samples, 0.0), 1.0);
        assert!(percentile(&[], 50.0).is_nan());
        assert_eq!(
            percentile_duration(&[Duration::from_millis(3)], 99.0),
            Duration::from_millis(3)
        );
        assert_eq!(percentile_duration(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn generated_rules_are_a_valid_policy() {
        let network = rest_rules(
            3,
            |i| format!("svc-{i}"),
            |i| format!("api{i}.example.com"),
            &["GET"],
            |_| "/v1/**".to_string(),
        );
        let policy: agentgate_policy::model::PolicyDocument =
            serde_json::from_value(serde_json::json!({"network": network}))
                .expect("a policy document");
        agentgate_policy::compile::compile(
            &policy,
            agentgate_policy::compile::Role::Sandbox,
            &agentgate_policy::compile::Limits::default(),
        )
        .expect("generated rules compile");
    }
}
