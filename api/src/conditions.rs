//! `metav1.Condition` bookkeeping as Kubernetes API conventions require:
//! one condition per type, and `lastTransitionTime` changes only when the
//! status does. Pure: the caller supplies the time.
//!
//! Every kind also carries the kstatus summary conditions (see
//! [`summarize`] and docs/status.md), so that Flux health checks,
//! `kubectl wait --for=condition=Ready` and Argo CD judge it without
//! knowing its domain conditions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The status values of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`.
    Unknown,
}

impl Status {
    /// The value as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// Sets the condition of type `type_` (CamelCase) to these values. Returns
/// true when anything changed, so callers can skip a no-op status write.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: Status,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: &Time,
) -> bool {
    let status = status.as_str();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let changed = c.status != status
                || c.reason != reason
                || c.message != message
                || c.observed_generation != observed_generation;
            if c.status != status {
                c.last_transition_time = now.clone();
                c.status = status.to_string();
            }
            c.reason = reason.to_string();
            c.message = message.to_string();
            c.observed_generation = observed_generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: reason.to_string(),
                message: message.to_string(),
                observed_generation,
                last_transition_time: now.clone(),
            });
            true
        }
    }
}

/// Removes the condition of type `type_`. Returns true when there was one.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// The `Ready` condition type: True only in the desired, good state.
pub const READY: &str = "Ready";
/// kstatus's `Reconciling` (abnormal-true): the operator is still working
/// towards the desired state, or waiting for something that will come.
pub const RECONCILING: &str = "Reconciling";
/// kstatus's `Stalled` (abnormal-true): the object will not reach its
/// desired state without a person changing something.
pub const STALLED: &str = "Stalled";

/// Where an object stands in kstatus terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// The desired, good state: `Ready=True`; `Reconciling` and `Stalled`
    /// absent (kstatus: Current).
    Ready,
    /// On the way there, or waiting for something that will come:
    /// `Ready=False` and `Reconciling=True`; `Stalled` absent (kstatus:
    /// InProgress).
    Reconciling,
    /// Not getting there without a person changing something:
    /// `Ready=False` and `Stalled=True`; `Reconciling` absent (kstatus:
    /// Failed).
    Stalled,
}

/// An object's [`State`] with the reason and message of what decides it,
/// written by [`summarize`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Where it stands.
    pub state: State,
    /// CamelCase reason of `Ready` (and of `Reconciling` or `Stalled`).
    pub reason: String,
    /// Their message.
    pub message: String,
}

impl Summary {
    /// [`State::Ready`] with this reason and message.
    pub fn ready(reason: &str, message: impl Into<String>) -> Self {
        Self::new(State::Ready, reason, message)
    }

    /// [`State::Reconciling`] with this reason and message.
    pub fn reconciling(reason: &str, message: impl Into<String>) -> Self {
        Self::new(State::Reconciling, reason, message)
    }

    /// [`State::Stalled`] with this reason and message.
    pub fn stalled(reason: &str, message: impl Into<String>) -> Self {
        Self::new(State::Stalled, reason, message)
    }

    /// [`State::Stalled`] with the reason and message of `condition`, the
    /// domain condition that decides it.
    pub fn stalled_by(condition: &Condition) -> Self {
        Self::stalled(&condition.reason, condition.message.clone())
    }

    fn new(state: State, reason: &str, message: impl Into<String>) -> Self {
        Self {
            state,
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// Sets `Ready`, `Reconciling` and `Stalled` from `summary`. The
/// abnormal-true condition that does not apply is removed rather than set
/// False (kstatus reads both alike), so at most one of them is present.
/// Returns true when anything changed, so callers can skip a no-op status
/// write.
pub fn summarize(
    conditions: &mut Vec<Condition>,
    summary: &Summary,
    observed_generation: Option<i64>,
    now: &Time,
) -> bool {
    let (ready, abnormal) = match summary.state {
        State::Ready => (Status::True, None),
        State::Reconciling => (Status::False, Some(RECONCILING)),
        State::Stalled => (Status::False, Some(STALLED)),
    };
    let mut changed = set(
        conditions,
        READY,
        ready,
        &summary.reason,
        &summary.message,
        observed_generation,
        now,
    );
    for type_ in [RECONCILING, STALLED] {
        changed |= if abnormal == Some(type_) {
            set(
                conditions,
                type_,
                Status::True,
                &summary.reason,
                &summary.message,
                observed_generation,
                now,
            )
        } else {
            remove(conditions, type_)
        };
    }
    changed
}

/// The condition of type `type_`, if present.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True when the condition of type `type_` has status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let mut c = Vec::new();
        assert!(set(
            &mut c,
            "Ready",
            Status::False,
            "Pending",
            "waiting",
            Some(1),
            &at(10)
        ));
        assert!(set(
            &mut c,
            "Ready",
            Status::False,
            "Pending",
            "still waiting",
            Some(2),
            &at(20)
        ));
        assert_eq!(
            c[0].last_transition_time,
            at(10),
            "same status keeps the time"
        );
        assert!(!set(
            &mut c,
            "Ready",
            Status::False,
            "Pending",
            "still waiting",
            Some(2),
            &at(30)
        ));
        assert!(set(
            &mut c,
            "Ready",
            Status::True,
            "Applied",
            "done",
            Some(2),
            &at(40)
        ));
        assert_eq!(c[0].last_transition_time, at(40));
        assert_eq!(c.len(), 1, "one condition per type");
        assert!(set(
            &mut c,
            "WithinMaximum",
            Status::True,
            "Proved",
            "",
            Some(2),
            &at(40)
        ));
        assert_eq!(c.len(), 2);
        assert!(is_true(&c, "Ready") && is_true(&c, "WithinMaximum"));
        assert!(!is_true(&c, "FindingsClear"));
    }

    fn types(c: &[Condition]) -> Vec<(&str, &str, &str)> {
        let mut t: Vec<_> = c
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect();
        t.sort();
        t
    }

    #[test]
    fn the_summary_keeps_at_most_one_abnormal_condition_and_reports_no_op() {
        let mut c = Vec::new();
        let waiting = Summary::reconciling("AwaitingApproval", "needs a reviewer");
        assert!(summarize(&mut c, &waiting, Some(1), &at(10)));
        assert_eq!(
            types(&c),
            [
                ("Ready", "False", "AwaitingApproval"),
                ("Reconciling", "True", "AwaitingApproval")
            ]
        );
        assert!(!summarize(&mut c, &waiting, Some(1), &at(20)), "no-op");
        let stalled = Summary::stalled("Rejected", "exceeds org-ceiling");
        assert!(summarize(&mut c, &stalled, Some(1), &at(30)));
        assert_eq!(
            types(&c),
            [
                ("Ready", "False", "Rejected"),
                ("Stalled", "True", "Rejected")
            ]
        );
        let stalled_at = get(&c, STALLED).unwrap();
        assert_eq!(stalled_at.message, "exceeds org-ceiling");
        assert_eq!(stalled_at.observed_generation, Some(1));
        assert_eq!(
            get(&c, READY).unwrap().last_transition_time,
            at(10),
            "Ready stayed False"
        );
        let ready = Summary::ready("Applied", "committed");
        assert!(summarize(&mut c, &ready, Some(2), &at(40)));
        assert_eq!(types(&c), [("Ready", "True", "Applied")]);
        assert!(!summarize(&mut c, &ready, Some(2), &at(50)), "no-op");
        // Domain conditions are left alone.
        set(
            &mut c,
            "Approved",
            Status::True,
            "Approved",
            "",
            Some(2),
            &at(50),
        );
        assert!(summarize(&mut c, &stalled, Some(2), &at(60)));
        assert!(is_true(&c, "Approved") && is_true(&c, STALLED));
    }
}
