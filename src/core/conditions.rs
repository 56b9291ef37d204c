//! `metav1.Condition` bookkeeping: one condition per type, `lastTransitionTime` kept unless the status flips.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// The session's harness is running and takes prompts.
pub const READY: &str = "Ready";
/// Whether the last spawn resumed the recorded conversation, with the decision table's reason.
pub const RESUMED: &str = "Resumed";

/// Sets the condition `type_`, keeping `lastTransitionTime` when its status did not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: Timestamp,
) {
    let status = if ok { "True" } else { "False" };
    let next = |last_transition_time| Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation,
        last_transition_time,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let since = if c.status == status { c.last_transition_time.clone() } else { Time(now) };
            *c = next(since);
        }
        None => conditions.push(next(Time(now))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let t2: Timestamp = "2026-01-01T00:02:00Z".parse().unwrap();
        let mut c = Vec::new();
        set_condition(&mut c, READY, true, "Running", "a", Some(1), t0);
        set_condition(&mut c, READY, true, "Running", "b", Some(2), t1);
        assert_eq!(
            (c.len(), c[0].last_transition_time.0, c[0].message.as_str(), c[0].observed_generation),
            (1, t0, "b", Some(2))
        );
        set_condition(&mut c, READY, false, "BackOff", "c", Some(2), t2);
        assert_eq!((c[0].last_transition_time.0, c[0].status.as_str(), c[0].reason.as_str()), (t2, "False", "BackOff"));
        set_condition(&mut c, RESUMED, true, "Resumed", "", Some(2), t2);
        assert_eq!(c.len(), 2);
    }
}
