//! `metav1.Condition` bookkeeping as Kubernetes API conventions require:
//! one condition per type, and `lastTransitionTime` changes only when the
//! status does. Pure: the caller supplies the time.

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
}
