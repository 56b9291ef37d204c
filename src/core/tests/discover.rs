//! Ids found after the start: a harness that cannot be told its conversation's id (the built-in `codex`)
//! is started fresh without one; once it survived its probe the session is `Discovering`, and the id the executor
//! finds is recorded; a death before that is a fresh start; a second fresh harness in a workdir with a discovery in
//! flight waits.

use super::*;
use crate::core::discover::DISCOVERY_RECHECK;

/// A first start of a `codex` session, its event waiting.
fn codex() -> Case {
    let mut case = Case::new(WorkSessionStatus::default());
    case.spec.harness = "codex".into();
    case.liveness = Liveness::Absent;
    case
}

/// Spawns it and lets it survive the probe (2 s by default).
fn started() -> Case {
    let mut case = codex();
    let plan = case.step();
    assert!(spawned(&plan).contains("codex -- please fix the bug"), "no id on its command line: {:?}", ops(&plan));
    case.liveness = Liveness::Alive;
    case.now = t(103);
    case.step();
    case
}

#[test]
fn a_fresh_codex_is_discovering_until_its_id_shows() {
    let mut case = started();
    assert_eq!(case.status.phase, Some(Phase::Running));
    assert_eq!(case.status.harness_session_id, None, "the spawn's placeholder is no conversation's id");
    assert_eq!(condition(&case.status, CONVERSATION_ID), Some(("False", "Discovering")));
    let c = case.status.conditions.iter().find(|c| c.type_ == CONVERSATION_ID.as_str()).unwrap();
    assert_eq!(c.last_transition_time, Time(t(100)), "the condition says since the spawn");
    assert_eq!(case.status.discovering_since, Some(Time(t(100))), "only what was written after the spawn counts");
    assert_eq!(condition(&case.status, RESUMED), Some(("False", "NoRecordedSession")));

    case.now = t(104);
    let plan = case.step();
    assert!(plan.requeue_after.is_some_and(|d| d <= DISCOVERY_RECHECK), "it looks again: {:?}", plan.requeue_after);

    case.discovered = Some("0199a213-81c0-7800-8aa1-bbab2a035a53");
    let plan = case.step();
    assert_eq!(plan.status.harness_session_id.as_deref(), Some("0199a213-81c0-7800-8aa1-bbab2a035a53"));
    assert_eq!(condition(&plan.status, CONVERSATION_ID), Some(("True", "Discovered")));
    assert_eq!(plan.status.discovering_since, None);
    assert_eq!(plan.status.last_respawn.unwrap().harness_session_id, "0199a213-81c0-7800-8aa1-bbab2a035a53");
}

/// The discovery is state of its own (`discoveringSince`), not the condition read back; a status an older agent wrote
/// while it discovered (the condition alone) goes on discovering from the spawn's time.
#[test]
fn discovering_is_a_status_field_and_an_older_agents_condition_carries_over() {
    let mut case = started();
    let found = "0199a213-81c0-7800-8aa1-bbab2a035a53";
    // The condition alone is no state: only the decision reads an older agent's once.
    let mut said_only = case.status.clone();
    said_only.discovering_since = None;
    assert_eq!(condition(&said_only, CONVERSATION_ID), Some(("False", "Discovering")));
    assert!(!crate::core::discover::discovering(&said_only));
    // An older agent's: the condition alone, with the spawn's time.
    case.status.discovering_since = None;
    case.now = t(104);
    let plan = case.step();
    assert_eq!(plan.status.discovering_since, Some(Time(t(100))), "carried over from the condition");
    case.discovered = Some(found);
    assert_eq!(case.step().status.harness_session_id.as_deref(), Some(found));
}

#[test]
fn discovered_a_death_resumes_the_discovered_conversation() {
    let mut case = started();
    case.discovered = Some("0199a213-81c0-7800-8aa1-bbab2a035a53");
    case.now = t(104);
    case.step();
    case.discovered = None;
    case.liveness = Liveness::Dead;
    case.events = vec![ev("e2", "and the docs")];
    case.now = t(200);
    let plan = case.step();
    assert!(
        spawned(&plan).contains("codex resume 0199a213-81c0-7800-8aa1-bbab2a035a53 -- and the docs"),
        "{:?}",
        ops(&plan)
    );
}

#[test]
fn a_death_before_the_id_showed_is_a_fresh_start() {
    let mut case = started();
    case.liveness = Liveness::Dead;
    case.events = vec![ev("e2", "again")];
    case.now = t(700); // healthy long enough that the death is no failure
    let plan = case.step();
    assert!(spawned(&plan).contains("codex -- again"), "{:?}", ops(&plan));
    assert!(!spawned(&plan).contains("resume"), "{:?}", ops(&plan));
}

#[test]
fn a_second_fresh_harness_in_a_workdir_with_a_discovery_in_flight_waits() {
    let mut case = codex();
    case.discovering_here = Some("agents/other-1");
    let plan = case.step();
    assert!(spawned(&plan).is_empty(), "{:?}", ops(&plan));
    assert_eq!(plan.status.phase, Some(Phase::Pending));
    assert_eq!(condition(&plan.status, READY), Some(("False", "WaitingForDiscovery")));
    assert_eq!(plan.requeue_after, Some(DISCOVERY_RECHECK));

    // A harness told its id (claude) never waits on another's discovery.
    let mut case = Case::new(WorkSessionStatus::default());
    case.liveness = Liveness::Absent;
    case.discovering_here = Some("agents/other-1");
    assert!(!spawned(&case.step()).is_empty());
}
