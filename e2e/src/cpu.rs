//! Where the machine's CPU went during a window, by process name: count
//! before cutting. The e2e processes (API server, etcd, kubelet, the
//! operator's replicas, every container) run on this machine, so
//! `/proc/<pid>/stat` sees them all; a process's own time is counted while
//! it lives, and what its exited children used (curl in an agent's loop)
//! is counted to it (`cutime`, `cstime`).

use std::collections::BTreeMap;

/// Clock ticks per second of `/proc`'s times (`sysconf(_SC_CLK_TCK)`,
/// 100 on Linux's every mainstream architecture).
const TICKS_PER_SECOND: f64 = 100.0;

/// The CPU times of every process at one moment.
#[derive(Debug, Clone, Default)]
pub struct CpuSample {
    /// pid → (name, own ticks, exited children's ticks).
    processes: BTreeMap<u32, (String, u64, u64)>,
    /// The machine's busy ticks (`/proc/stat`, all but idle and iowait).
    busy: u64,
    /// The machine's ticks in all.
    total: u64,
}

impl CpuSample {
    /// Reads `/proc` now; processes that vanish while it reads are left out.
    pub fn now() -> CpuSample {
        let mut sample = CpuSample::default();
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for entry in entries.flatten() {
                let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                    continue;
                };
                if let Some(times) = std::fs::read_to_string(entry.path().join("stat"))
                    .ok()
                    .and_then(|stat| times(&stat))
                {
                    sample.processes.insert(pid, times);
                }
            }
        }
        if let Some((busy, total)) = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|stat| machine(&stat))
        {
            sample.busy = busy;
            sample.total = total;
        }
        sample
    }

    /// CPU seconds per process name from `before` to this sample, most
    /// first, and the machine's busy share of the window (0–1).
    pub fn since(&self, before: &CpuSample) -> (Vec<(String, f64)>, f64) {
        let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
        for (pid, (name, own, children)) in &self.processes {
            // The same pid is the same process (an exec keeps its times;
            // a pid reused within a window would only be under-counted).
            let (own_before, children_before) = before
                .processes
                .get(pid)
                .map_or((0, 0), |(_, own, children)| (*own, *children));
            let used = own.saturating_sub(own_before) + children.saturating_sub(children_before);
            *by_name.entry(name.clone()).or_default() += used;
        }
        let mut used: Vec<(String, f64)> = by_name
            .into_iter()
            .filter(|(_, ticks)| *ticks > 0)
            .map(|(name, ticks)| (name, ticks as f64 / TICKS_PER_SECOND))
            .collect();
        used.sort_by(|a, b| b.1.total_cmp(&a.1));
        let total = self.total.saturating_sub(before.total);
        let busy = self.busy.saturating_sub(before.busy);
        let share = if total == 0 {
            0.0
        } else {
            busy as f64 / total as f64
        };
        (used, share)
    }
}

/// The `n` heaviest names of `used`, as `name 1.23 s, …`.
pub fn heaviest(used: &[(String, f64)], n: usize) -> String {
    used.iter()
        .take(n)
        .map(|(name, seconds)| format!("{name} {seconds:.2} s"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// (name, utime + stime, cutime + cstime) of a `/proc/<pid>/stat` line;
/// the name is between the first `(` and the last `)` (it may hold both).
fn times(stat: &str) -> Option<(String, u64, u64)> {
    let name = &stat[stat.find('(')? + 1..stat.rfind(')')?];
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // After the name: state is field 3, utime 14, stime 15, cutime 16,
    // cstime 17 (proc(5)).
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    Some((
        name.to_string(),
        field(14)? + field(15)?,
        field(16)? + field(17)?,
    ))
}

/// (busy, total) ticks of `/proc/stat`'s `cpu` line: idle and iowait are
/// not busy.
fn machine(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4)?;
    Some((total - idle, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_own_and_children_ticks() {
        let stat = "4242 (agentgate (x)) S 1 2 3 4 5 6 7 8 9 10 120 30 7 3 20 0 1 0 100 0 0";
        assert_eq!(times(stat), Some(("agentgate (x)".to_string(), 150, 10)));
        assert_eq!(times("garbage"), None);
    }

    #[test]
    fn a_window_counts_what_each_name_used_in_it() {
        let at = |entries: &[(u32, &str, u64, u64)], busy, total| CpuSample {
            processes: entries
                .iter()
                .map(|(pid, name, own, children)| (*pid, (name.to_string(), *own, *children)))
                .collect(),
            busy,
            total,
        };
        let before = at(&[(1, "etcd", 100, 0), (2, "bash", 10, 50)], 1000, 4000);
        let after = at(
            &[
                (1, "etcd", 150, 0),
                (2, "bash", 12, 90),
                (3, "kube-apiserver", 200, 0),
            ],
            1600,
            4800,
        );
        let (used, share) = after.since(&before);
        assert_eq!(
            used,
            vec![
                ("kube-apiserver".to_string(), 2.0),
                ("etcd".to_string(), 0.5),
                ("bash".to_string(), 0.42)
            ]
        );
        assert!((share - 0.75).abs() < 1e-9);
        assert_eq!(heaviest(&used, 2), "kube-apiserver 2.00 s, etcd 0.50 s");
    }

    #[test]
    fn the_machine_line_counts_idle_and_iowait_as_not_busy() {
        let stat = "cpu  10 0 20 60 10 0 0 0 0 0\ncpu0 5 0 10 30 5 0 0 0 0 0\n";
        assert_eq!(machine(stat), Some((30, 100)));
    }
}
