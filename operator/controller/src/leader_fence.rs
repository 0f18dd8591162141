//! Leader fencing. With leader election a replica runs the reconcilers
//! while the lease manager says it holds the Lease, but that view can be
//! stale: a leader paused (SIGSTOP, a long GC-like stall, a frozen VM)
//! longer than its Lease resumes with reconciles in flight while a
//! follower already leads. So immediately before each write that grants
//! authority (a proposal's commit, a sandbox's status, policy ConfigMap
//! and egress NetworkPolicy) the reconciler reads the Lease from the API
//! server (or reuses a read at most [`READ_REUSE`] old) and goes
//! on only if it is held under its own identity and renewed recently enough
//! to outlast a margin. Held by anyone else (or nobody): the write is
//! refused and the process exits with `EXIT_LOST_LEADERSHIP`. Held by us but
//! not renewed in time (the lease manager is late, e.g. after an API server
//! outage): the write waits for the renewal, at most one Lease duration,
//! and is then refused and retried, never made on a stale Lease.
//!
//! What this does not close: a pause between the check and the write
//! itself (one request). The sandbox's resourceVersion precondition
//! still refuses such a write when the new leader has committed to that
//! sandbox meanwhile.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};

use crate::ControllerError;

/// How many seconds before its Lease expires the lease manager renews it
/// (its `grace`): a third of the duration, at least one second.
pub fn grace_seconds(duration_seconds: u64) -> u64 {
    (duration_seconds / 3).max(1)
}

/// How much validity a Lease must have left for a write to go on: half the
/// renewal grace, so that a timely renewal is never waited for, and a
/// follower whose clock runs ahead by less than this cannot take over
/// while a write that passed the check is under way.
pub fn margin(duration_seconds: u64) -> Duration {
    Duration::from_secs(grace_seconds(duration_seconds)) / 2
}

/// Where this replica stands with respect to the Lease, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Held under our identity and valid for `remaining` beyond the margin.
    Ours {
        /// Validity left after the margin.
        remaining: Duration,
    },
    /// Held under our identity but not renewed recently enough to act on
    /// (expiring within the margin, expired, or without a renew time):
    /// wait for our renewal.
    Stale,
    /// Another replica holds it, or nobody does: this replica does not lead.
    Lost {
        /// The holder as read.
        holder: Option<String>,
    },
}

/// The fence's decision (pure): is the Lease, as read (`holder`,
/// `renewed`, `duration`), ours at `now` with `margin` to spare?
pub fn standing(
    holder: Option<&str>,
    me: &str,
    renewed: Option<SystemTime>,
    duration: Option<Duration>,
    now: SystemTime,
    margin: Duration,
) -> Standing {
    if holder != Some(me) {
        return Standing::Lost {
            holder: holder.map(str::to_string),
        };
    }
    let Some(expires) = renewed.zip(duration).and_then(|(r, d)| r.checked_add(d)) else {
        return Standing::Stale;
    };
    match expires
        .duration_since(now)
        .ok()
        .and_then(|left| left.checked_sub(margin))
    {
        Some(remaining) if !remaining.is_zero() => Standing::Ours { remaining },
        _ => Standing::Stale,
    }
}

/// Whether a read that found the Lease ours until `until`, made `age`
/// ago, still answers at `now`.
pub fn reusable(age: Duration, until: SystemTime, now: SystemTime) -> bool {
    age < READ_REUSE && now < until
}

/// The fence of a replica running with leader election.
pub struct LeaseFence {
    api: Api<Lease>,
    name: String,
    identity: String,
    margin: Duration,
    patience: Duration,
    lost: tokio::sync::watch::Sender<bool>,
    /// The last read that found the Lease ours: when it was made and until
    /// when (wall clock, less the margin) it stays ours.
    last_ours: std::sync::Mutex<Option<(tokio::time::Instant, SystemTime)>>,
}

/// How long one read of the Lease that found it ours serves the writes
/// after it. The Lease cannot pass to another replica before it expires,
/// which the read's answer already bounds; the reuse window bounds only
/// what the Lease protocol does not: someone deleting or overwriting the
/// Lease by hand. A storm of writes then costs one Lease read a second,
/// not one per write.
pub const READ_REUSE: Duration = Duration::from_secs(1);

impl LeaseFence {
    /// The fence on Lease `namespace/name` for `identity`, whose Lease lasts
    /// `duration_seconds`.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration_seconds: u64,
    ) -> LeaseFence {
        LeaseFence {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            margin: margin(duration_seconds),
            patience: Duration::from_secs(duration_seconds),
            lost: tokio::sync::watch::channel(false).0,
            last_ours: std::sync::Mutex::new(None),
        }
    }

    /// Becomes `true` once a check found the Lease held by someone else:
    /// the process must exit.
    pub fn lost(&self) -> tokio::sync::watch::Receiver<bool> {
        self.lost.subscribe()
    }

    /// Whether a read under [`READ_REUSE`] old found the Lease ours with
    /// time to spare still (by the wall clock, as a fresh read is judged:
    /// a replica paused past it reads again).
    fn recently_ours(&self) -> bool {
        let last = *self.last_ours.lock().unwrap_or_else(|e| e.into_inner());
        last.is_some_and(|(read_at, until)| reusable(read_at.elapsed(), until, SystemTime::now()))
    }

    /// Reads the Lease and returns `Ok` only while it is ours (see the
    /// module documentation); `what` names the write, for the log.
    pub async fn check(&self, what: &str) -> Result<(), ControllerError> {
        if self.recently_ours() {
            return Ok(());
        }
        let started = tokio::time::Instant::now();
        loop {
            let read_at = tokio::time::Instant::now();
            let spec = self.api.get(&self.name).await?.spec.unwrap_or_default();
            let found = standing(
                spec.holder_identity.as_deref(),
                &self.identity,
                spec.renew_time.map(|t| SystemTime::from(t.0)),
                spec.lease_duration_seconds
                    .and_then(|s| u64::try_from(s).ok())
                    .map(Duration::from_secs),
                SystemTime::now(),
                self.margin,
            );
            match found {
                Standing::Ours { remaining } => {
                    let until = SystemTime::now().checked_add(remaining);
                    *self.last_ours.lock().unwrap_or_else(|e| e.into_inner()) =
                        until.map(|until| (read_at, until));
                    return Ok(());
                }
                Standing::Lost { holder } => {
                    tracing::error!(
                        identity = %self.identity,
                        holder = holder.as_deref().unwrap_or("nobody"),
                        write = what,
                        "the Lease is no longer ours: write refused; exiting so that a restart waits for the Lease"
                    );
                    self.lost.send_replace(true);
                    return Err(ControllerError::Fenced(format!(
                        "{what} refused: the Lease is held by {}, not {}",
                        holder.as_deref().unwrap_or("nobody"),
                        self.identity
                    )));
                }
                Standing::Stale if started.elapsed() < self.patience => {
                    tracing::debug!(write = what, "the Lease is not renewed yet; waiting");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Standing::Stale => {
                    tracing::warn!(identity = %self.identity, write = what, "the Lease was not renewed in time: write refused, retried later");
                    return Err(ControllerError::Fenced(format!(
                        "{what} refused: the Lease of {} was not renewed within {:?}",
                        self.identity, self.patience
                    )));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_serves_writes_for_a_second_and_never_past_its_margin() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let until = now + Duration::from_secs(5);
        assert!(reusable(Duration::from_millis(10), until, now));
        assert!(!reusable(READ_REUSE, until, now));
        // A replica paused past the Lease's margin reads again, however
        // young its last read looks by a clock that stood still.
        assert!(!reusable(Duration::ZERO, until, until));
    }

    const MARGIN: Duration = Duration::from_millis(500);

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + seconds)
    }

    fn judge(holder: Option<&str>, renewed: Option<u64>, now_ms: u64) -> Standing {
        standing(
            holder,
            "me",
            renewed.map(at),
            Some(Duration::from_secs(4)),
            at(0) + Duration::from_millis(now_ms),
            MARGIN,
        )
    }

    #[test]
    fn a_fresh_lease_of_ours_lets_writes_through() {
        assert_eq!(
            judge(Some("me"), Some(0), 1000),
            Standing::Ours {
                remaining: Duration::from_millis(2500)
            }
        );
    }

    #[test]
    fn a_lease_expiring_within_the_margin_or_expired_is_stale() {
        assert_eq!(judge(Some("me"), Some(0), 3500), Standing::Stale);
        assert_eq!(judge(Some("me"), Some(0), 3600), Standing::Stale);
        assert_eq!(judge(Some("me"), Some(0), 4000), Standing::Stale);
        assert_eq!(judge(Some("me"), Some(0), 60_000), Standing::Stale);
        assert!(matches!(
            judge(Some("me"), Some(0), 3499),
            Standing::Ours { .. }
        ));
    }

    #[test]
    fn a_lease_without_renew_time_or_duration_is_stale() {
        assert_eq!(judge(Some("me"), None, 0), Standing::Stale);
        let without_duration = standing(Some("me"), "me", Some(at(0)), None, at(0), MARGIN);
        assert_eq!(without_duration, Standing::Stale);
    }

    #[test]
    fn held_by_another_or_nobody_is_lost_however_fresh() {
        assert_eq!(
            judge(Some("other"), Some(0), 0),
            Standing::Lost {
                holder: Some("other".into())
            }
        );
        assert_eq!(judge(None, Some(0), 0), Standing::Lost { holder: None });
        // A prefix of our name is not our name.
        assert!(matches!(
            judge(Some("m"), Some(0), 0),
            Standing::Lost { .. }
        ));
    }

    #[test]
    fn a_renewal_stamped_ahead_of_our_clock_still_counts() {
        // Renewed "in the future" (clock adjusted back since): valid for the
        // full duration from the renew time, never less.
        assert_eq!(
            judge(Some("me"), Some(2), 0),
            Standing::Ours {
                remaining: Duration::from_millis(5500)
            }
        );
    }

    #[test]
    fn the_margin_is_half_the_renewal_grace() {
        assert_eq!(grace_seconds(15), 5);
        assert_eq!(margin(15), Duration::from_millis(2500));
        assert_eq!(grace_seconds(2), 1);
        assert_eq!(margin(4), Duration::from_millis(500));
    }
}
