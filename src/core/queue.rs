//! The event queue, pure: which WorkEvents wait (in order), which expired, and the status a decision gives one.
//! The reconcile reads events from the store and hands them through here to [`super::decide`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::api::{EventPhase, WorkEvent, WorkEventStatus};

/// Undelivered events (`Pending` or `Delivering`, or no status yet), oldest first.
///
/// Creation time has one-second resolution, so ties are broken by the name: something that never changes (the
/// resourceVersion moves with every status write, so an event going back to `Pending` would change places).
pub fn undelivered(mut events: Vec<WorkEvent>) -> Vec<WorkEvent> {
    events.retain(|e| {
        let phase = e.status.as_ref().and_then(|s| s.phase);
        !matches!(phase, Some(EventPhase::Delivered | EventPhase::Failed))
    });
    let key = |e: &WorkEvent| (e.metadata.creation_timestamp.clone().map(|t| t.0), e.name_any());
    events.sort_by_cached_key(key);
    events
}

/// Delivered or failed events finished `retention` ago or longer, and how long until the next one is.
pub fn expired(
    events: &[WorkEvent],
    now: k8s_openapi::jiff::Timestamp,
    retention: std::time::Duration,
) -> (Vec<&WorkEvent>, Option<std::time::Duration>) {
    use k8s_openapi::jiff::SignedDuration;
    let retention = SignedDuration::try_from(retention).unwrap_or(SignedDuration::MAX);
    let (mut due, mut next) = (Vec::new(), None::<std::time::Duration>);
    for e in events {
        let Some(st) = &e.status else { continue };
        let finished = match st.phase {
            Some(EventPhase::Delivered) => st.delivered_at.as_ref().map(|t| t.0),
            Some(EventPhase::Failed) => e.metadata.creation_timestamp.as_ref().map(|t| t.0),
            _ => None,
        };
        let Some(end) = finished.and_then(|t| t.checked_add(retention).ok()) else { continue };
        match std::time::Duration::try_from(end.duration_since(now)) {
            Ok(left) if !left.is_zero() => next = Some(next.map_or(left, |n| n.min(left))),
            _ => due.push(e),
        }
    }
    (due, next)
}

/// The status an [`super::EventUpdate`] gives an event.
pub fn apply(ev: &WorkEvent, update: &super::EventUpdate, now: Time) -> WorkEventStatus {
    let old = ev.status.clone().unwrap_or_default();
    let pending = update.phase == EventPhase::Pending;
    WorkEventStatus {
        phase: Some(update.phase),
        delivered_at: (update.phase == EventPhase::Delivered).then_some(now),
        sent_time: if pending { None } else { update.sent.map(Time).or(old.sent_time) },
        via: if pending { None } else { update.via.or(old.via) },
        harness_session_id: update.harness_session_id.clone().or(old.harness_session_id),
        attempts: old.attempts + u32::from(update.attempt),
        message: update.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::WorkEventSpec;

    fn event(name: &str, created: i64, rv: &str, phase: Option<EventPhase>) -> WorkEvent {
        let mut e = WorkEvent::new(
            name,
            WorkEventSpec { session: "s".into(), prompt: "p".into(), source: None, ..Default::default() },
        );
        e.metadata.creation_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::from_second(created).unwrap()));
        e.metadata.resource_version = Some(rv.into());
        e.status = phase.map(|phase| WorkEventStatus { phase: Some(phase), ..Default::default() });
        e
    }

    #[test]
    fn order_is_creation_then_name_and_never_moves() {
        let names = |events: Vec<WorkEvent>| undelivered(events).iter().map(|e| e.name_any()).collect::<Vec<_>>();
        let before = vec![event("b", 10, "5", None), event("a", 10, "9", None), event("c", 9, "7", None)];
        assert_eq!(names(before), ["c", "a", "b"]);
        // "a" went to Delivering and back to Pending: its resourceVersion moved on, its place did not.
        let after = vec![
            event("b", 10, "5", None),
            event("a", 10, "42", Some(EventPhase::Pending)),
            event("c", 9, "7", Some(EventPhase::Delivered)),
        ];
        assert_eq!(names(after), ["a", "b"]);
    }
}
