//! The event queue, part of decide: the order prompts are delivered in, which finished WorkEvents expired, and the
//! status a decision gives one. The executor turns WorkEvents into [`PendingWorkEvent`]s and [`FinishedWorkEvent`]s.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::{FinishedWorkEvent, PendingWorkEvent, WorkEventUpdate};
use crate::api::{PromptPhase, WorkEventStatus};

/// The events still to deliver (`Pending` or `Delivering`), oldest first.
///
/// Creation time has one-second resolution, so ties are broken by the name: something that never changes (the
/// resourceVersion moves with every status write, so an event going back to `Pending` would change places).
pub fn ordered(mut events: Vec<PendingWorkEvent>) -> Vec<PendingWorkEvent> {
    events.retain(|e| matches!(e.phase, PromptPhase::Pending | PromptPhase::Delivering));
    events.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    events
}

/// The finished events `retention` old or older, and how long until the next one is.
pub fn expired(finished: &[FinishedWorkEvent], now: Timestamp, retention: Duration) -> (Vec<&str>, Option<Duration>) {
    let retention = SignedDuration::try_from(retention).unwrap_or(SignedDuration::MAX);
    let (mut due, mut next) = (Vec::new(), None::<Duration>);
    for e in finished {
        let Ok(end) = e.at.checked_add(retention) else { continue };
        match Duration::try_from(end.duration_since(now)) {
            Ok(left) if !left.is_zero() => next = Some(next.map_or(left, |n| n.min(left))),
            _ => due.push(e.name.as_str()),
        }
    }
    (due, next)
}

/// The status an [`WorkEventUpdate`] gives an event whose status was `old`.
pub fn apply(old: Option<&WorkEventStatus>, update: &WorkEventUpdate, now: Time) -> WorkEventStatus {
    let old = old.cloned().unwrap_or_default();
    let pending = update.phase == PromptPhase::Pending;
    WorkEventStatus {
        phase: Some(update.phase),
        delivered_at: (update.phase == PromptPhase::Delivered).then_some(now),
        sent_time: if pending { None } else { update.sent.map(Time).or(old.sent_time) },
        sent_offset: if pending && !update.keep_offset { None } else { update.offset.or(old.sent_offset) },
        via: if pending { None } else { update.via.or(old.via) },
        harness_session_id: update.harness_session_id.clone().or(old.harness_session_id),
        attempts: if update.returned { 0 } else { old.attempts + u32::from(update.attempt) },
        returns: old.returns + u32::from(update.returned),
        message: update.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, created: i64, phase: PromptPhase) -> PendingWorkEvent {
        let created = Timestamp::from_second(created).unwrap();
        PendingWorkEvent { phase, ..PendingWorkEvent::pending(name, "p", created) }
    }

    #[test]
    fn order_is_creation_then_name_and_never_moves() {
        let names = |events: Vec<PendingWorkEvent>| ordered(events).into_iter().map(|e| e.name).collect::<Vec<_>>();
        let before = vec![
            event("b", 10, PromptPhase::Pending),
            event("a", 10, PromptPhase::Pending),
            event("c", 9, PromptPhase::Pending),
        ];
        assert_eq!(names(before), ["c", "a", "b"]);
        // "a" went to Delivering and back to Pending: its place did not move; "c" was delivered and left.
        let after = vec![
            event("b", 10, PromptPhase::Pending),
            event("a", 10, PromptPhase::Delivering),
            event("c", 9, PromptPhase::Delivered),
        ];
        assert_eq!(names(after), ["a", "b"]);
    }

    #[test]
    fn a_finished_event_expires_its_retention_after_it_finished() {
        let at = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap();
        let finished = [FinishedWorkEvent::new("old", at(0)), FinishedWorkEvent::new("new", at(50))];
        let (due, next) = expired(&finished, at(100), Duration::from_secs(60));
        assert_eq!((due, next), (vec!["old"], Some(Duration::from_secs(10))));
        let (due, next) = expired(&finished, at(110), Duration::from_secs(60));
        assert_eq!((due, next), (vec!["old", "new"], None));
    }
}
