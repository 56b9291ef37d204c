//! Usage limits: a turn the model's API refused is not a failure, a crash or a fresh conversation; its prompt waits
//! with every new one until the wake, then is sent again once; the sessions of one credential wake spread.

use super::*;
use crate::api::Usage;
use crate::harness::usage::{Limit, Tally};

const REFUSED: &str = "the model's API refused the turn: HTTP 429 rate_limit_error";

/// A live harness of `OLD` whose last turn ended at t(10); `e1` was delivered to it at t(50) and `e2` waits.
fn delivered_then_refused(refused_at: i64) -> Case {
    let usage = Usage { turns: 1, last_turn_time: Some(Time(t(10))), ..Default::default() };
    let mut case = Case::new(WorkSessionStatus { phase: Some(Phase::Running), usage: Some(usage), ..ran_old() });
    (case.liveness, case.tmux) = (Liveness::Alive, Some(SessionView { alive: true, ..ours() }));
    case.finished = vec![
        // Delivered in the turn that ended: not the refused one.
        FinishedWorkEvent { conversation: Some(OLD.into()), delivered: true, ..finished("e0", 5, "an old prompt") },
        FinishedWorkEvent {
            conversation: Some(OLD.into()),
            delivered: true,
            ..finished("e1", 50, "please fix the bug")
        },
    ];
    case.events = vec![PendingWorkEvent::pending("e2", "and the tests", t(60))];
    case.usage = Some(refusal(refused_at));
    case
}

/// Known delivered at t(`at`), sent a second before.
fn finished(name: &str, at: i64, prompt: &str) -> FinishedWorkEvent {
    FinishedWorkEvent { prompt: prompt.into(), sent: Some(t(at - 1)), ..FinishedWorkEvent::new(name, t(at)) }
}

/// A read of `OLD`'s record that found a refusal at t(`at`).
fn refusal(at: i64) -> UsageRead {
    let limit = Some(Limit::Reached { at: Some(t(at)), message: REFUSED.into() });
    UsageRead {
        conversation: OLD.into(),
        stood: 0,
        from: 0,
        to: 100,
        more: false,
        tally: Tally { limit, ..Default::default() },
    }
}

/// `initialPrompt` known delivered to `OLD` at t(`at`), sent a second before, after `attempts` sends.
fn initial_prompt_delivered(case: &mut Case, at: i64, attempts: u32) {
    case.spec.initial_prompt = Some("start the work".into());
    case.status.initial_prompt = Some(PromptStatus {
        phase: Some(PromptPhase::Delivered),
        delivered_at: Some(Time(t(at))),
        sent_time: Some(Time(t(at - 1))),
        harness_session_id: Some(OLD.into()),
        attempts,
        ..Default::default()
    });
}

fn wake_of(plan: &Plan) -> Option<Timestamp> {
    plan.status.usage.as_ref()?.limit.as_ref()?.wake_time.as_ref().map(|t| t.0)
}

#[test]
fn a_refused_turn_parks_the_session_and_its_prompt_is_sent_again_once_at_the_wake() {
    let mut case = delivered_then_refused(95);
    let plan = case.step();
    // Not pasted: e2 waits; the label tells the other nodes' agents of the limit.
    assert_eq!(ops(&plan), ["session.usage_limited", "label usage-limited true"]);
    assert_eq!(plan.status.phase, Some(Phase::Running), "its harness runs on");
    assert_eq!(condition(&plan.status, READY), Some(("False", "UsageLimited")));
    // The config's wait (300 s) from the refusal.
    assert_eq!(wake_of(&plan), Some(t(395)));
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(295)));

    // Until the wake: nothing sent, nothing said again, the status as it was (no condition flips and back). The
    // pane still shows e1's first paste.
    case.tmux.as_mut().unwrap().pasted = "uid-e1/1/0".into();
    case.usage = None;
    case.now = t(394);
    let again = case.step();
    assert_eq!((ops(&again), &again.status), (vec![], &plan.status));
    // The wake: the prompt known delivered last (e1, not e0) goes back, once, and is sent first, to the harness as
    // it is (no new conversation).
    case.now = t(395);
    let plan = case.step();
    assert_eq!(
        ops(&plan),
        ["claim wake ns/claude", "record intent", "session.usage_limit_waited_out", "event e1 Pending"],
        "the wake recorded first"
    );
    assert_eq!(case.events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["e1", "e2"], "back, first");
    let plan2 = case.step();
    assert_eq!(
        ops(&plan2)[..2],
        ["paste e1 into loop-ns_repo-12: please fix the bug", "event e1 Delivering via Pasted"]
    );
    assert_eq!(plan2.status.phase, Some(Phase::Running));
    assert!(!ops(&plan).iter().chain(&ops(&plan2)).any(|o| o.starts_with("spawn") || o.starts_with("stop")));
    // The limit still on record until a reply: nothing goes back again.
    case.now = t(396);
    case.finished.push(FinishedWorkEvent { delivered: true, ..finished("e1", 396, "please fix the bug") });
    assert!(!ops(&case.step()).iter().any(|o| o == "event e1 Pending"));
}

#[test]
fn a_harness_gone_while_parked_is_resumed_at_the_wake_with_the_refused_prompt() {
    let mut case = delivered_then_refused(95);
    case.step();
    (case.liveness, case.tmux, case.usage) = (Liveness::Absent, None, None);
    case.now = t(200);
    let plan = case.step();
    assert_eq!(ops(&plan), ["session.exited"], "its exit said; no spawn while parked");
    assert_eq!(plan.status.phase, Some(Phase::Parked));
    case.now = t(400);
    case.step();
    let plan = case.decide();
    assert!(spawned(&plan).contains(&format!("--resume {OLD}")), "{:?}", ops(&plan));
    assert!(spawned(&plan).ends_with("please fix the bug"), "{:?}", ops(&plan));
}

#[test]
fn a_refused_initial_prompt_waits_again_and_a_record_dated_ahead_is_taken_at_the_clock() {
    let mut case = delivered_then_refused(5_000);
    case.finished.clear();
    initial_prompt_delivered(&mut case, 40, 1);
    let plan = case.step();
    let limit = plan.status.usage.as_ref().unwrap().limit.clone().unwrap();
    assert_eq!(limit.time.map(|t| t.0), Some(t(100)), "a refusal is never dated after the clock");
    assert_eq!(wake_of(&plan), Some(t(400)));
    (case.usage, case.now) = (None, t(400));
    let plan = case.step();
    let initial = plan.status.initial_prompt.clone().unwrap();
    assert_eq!((initial.phase, initial.attempts), (Some(PromptPhase::Pending), 1), "its send still counted");
}

#[test]
fn a_second_refusal_after_the_wake_parks_it_again() {
    let mut case = delivered_then_refused(95);
    case.step();
    case.usage = None;
    case.now = t(500);
    case.step();
    case.usage = Some(UsageRead { stood: 100, from: 100, to: 200, ..refusal(490) });
    let plan = case.step();
    assert_eq!(condition(&plan.status, READY), Some(("False", "UsageLimited")));
    assert_eq!(wake_of(&plan), Some(t(790)));
    let limit = plan.status.usage.unwrap().limit.unwrap();
    assert!(!limit.woken, "a wake of its own to come");
}

#[test]
fn the_sessions_of_one_credential_wake_spread_the_first_refused_first() {
    // Two others refused before this one: it wakes third, two spreads (10 s each) after the latest refusal's wait.
    let mut case = delivered_then_refused(95);
    case.limited = vec![
        Limited { session: "ns/b".into(), at: t(92), woke: None },
        Limited { session: "ns/a".into(), at: t(90), woke: None },
    ];
    let plan = case.step();
    assert_eq!(wake_of(&plan), Some(t(415)));
    case.now = t(414);
    assert_eq!(condition(&case.decide().status, READY), Some(("False", "UsageLimited")));

    // One with no refusal of its own and a prompt waiting: after them all; started then, not before.
    let mut case = Case::new(ran_old());
    case.limited = vec![
        Limited { session: "ns/a".into(), at: t(90), woke: None },
        Limited { session: "ns/b".into(), at: t(92), woke: None },
    ];
    let plan = case.decide();
    assert_eq!((ops(&plan), plan.status.phase), (vec!["session.usage_limited".to_string()], Some(Phase::Parked)));
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(312)), "t(92) + 300 + 2 × 10");
    case.now = t(412);
    assert_eq!(spawned(&case.decide()), RESUME_E1);
    // With nothing waiting it is not parked at all; once the waits are over, neither.
    case.events.clear();
    case.now = t(100);
    assert_ne!(case.decide().status.phase, Some(Phase::Parked));
}

#[test]
fn in_the_second_of_the_initial_prompt_the_event_is_the_one_refused() {
    // Known delivered in the same second (status times are kept to the second): the initial prompt came first.
    let mut case = delivered_then_refused(95);
    case.finished =
        vec![FinishedWorkEvent { conversation: Some(OLD.into()), delivered: true, ..finished("e1", 50, "x") }];
    initial_prompt_delivered(&mut case, 50, 0);
    case.step();
    (case.usage, case.now) = (None, t(400));
    let plan = case.step();
    assert_eq!(
        ops(&plan),
        ["claim wake ns/claude", "record intent", "session.usage_limit_waited_out", "event e1 Pending"]
    );
    assert_eq!(plan.status.initial_prompt.unwrap().phase, Some(PromptPhase::Delivered), "answered: not sent again");
}

#[test]
fn the_wake_waits_for_the_harnesss_word_and_sends_back_only_a_prompt_of_the_refused_turn() {
    // A prompt sent and not yet known taken: the wake waits for its word.
    let mut case = delivered_then_refused(95);
    case.step();
    case.usage = None;
    case.events = vec![PendingWorkEvent { sent: Some(t(96)), ..delivering("e2", "and the tests", Via::Pasted) }];
    (case.proof, case.now) = (Some(Proof::Hooks), t(395));
    let plan = case.step();
    assert!(!ops(&plan).iter().any(|o| o.ends_with("Pending")), "{:?}", ops(&plan));
    assert_eq!(condition(&plan.status, READY), Some(("False", "UsageLimited")));
    assert_eq!(plan.requeue_after, Some(Duration::from_millis(500)));

    // Nothing of the refused turn was ours (a person's prompt typed in the pane): e0, answered before it, stays.
    let mut case = delivered_then_refused(95);
    case.finished.truncate(1);
    case.step();
    (case.usage, case.now) = (None, t(395));
    let plan = case.step();
    assert!(!ops(&plan).iter().any(|o| o.ends_with("Pending")), "{:?}", ops(&plan));
    assert!(plan.status.usage.unwrap().limit.unwrap().woken, "the wake came, once");
}

#[test]
fn a_refusal_dated_after_the_clock_in_a_status_parks_nothing() {
    // A status this agent did not write (its own reads are dated at most now) or a peer's from a skewed clock.
    let mut case = delivered_then_refused(95);
    case.usage = None;
    case.status.usage.as_mut().unwrap().limit =
        Some(crate::api::UsageLimit { time: Some(Time(t(10_000))), message: REFUSED.into(), ..Default::default() });
    case.limited = vec![Limited { session: "ns/a".into(), at: t(20_000), woke: None }];
    let plan = case.decide();
    assert_eq!(condition(&plan.status, READY), Some(("True", "Running")));
    assert!(ops(&plan).iter().any(|o| o.starts_with("paste e2")), "{:?}", ops(&plan));
}

#[test]
fn the_prompt_a_wake_sends_again_is_kept_past_the_retention() {
    let mut case = delivered_then_refused(95);
    case.config.event_retention = Some(Duration::from_secs(60));
    let plan = case.step();
    assert!(!ops(&plan).iter().any(|o| o.starts_with("expire")), "parked: {:?}", ops(&plan));
    (case.usage, case.now) = (None, t(395));
    let plan = case.step();
    assert_eq!(
        ops(&plan),
        ["expire e0", "claim wake ns/claude", "record intent", "session.usage_limit_waited_out", "event e1 Pending"],
        "the one sent again kept"
    );
}

#[test]
fn a_fresh_conversation_after_a_failed_resume_waits_for_the_wake() {
    let mut case = Case::new(ran_old());
    assert_eq!(spawned(&case.step()), RESUME_E1);
    // Its resume said "No conversation found"; meanwhile another session of its account was refused.
    case.limited = vec![Limited { session: "ns/a".into(), at: t(99), woke: None }];
    (case.liveness, case.output) = (Liveness::Dead, "No conversation found with session ID: 0a0b0c0d-old");
    case.tmux.as_mut().unwrap().alive = false;
    let plan = case.decide();
    assert!(ops(&plan).iter().any(|o| o.starts_with("session.resume_failed")), "{:?}", ops(&plan));
    assert!(!ops(&plan).iter().any(|o| o.starts_with("spawn")), "{:?}", ops(&plan));
    assert_eq!(plan.status.phase, Some(Phase::Parked));
}

#[test]
fn the_reset_a_gateway_was_told_with_the_refusal_is_the_wake_not_the_configs_wait() {
    let mut case = delivered_then_refused(97);
    // No gateway's word yet: the config's wait, and a look again soon, as the word may follow the record.
    let plan = case.decide();
    assert_eq!((wake_of(&plan), plan.requeue_after), (Some(t(397)), Some(Duration::from_secs(2))));
    case.limit_reset = Some(Reset { at: t(150), told: t(96) });
    assert_eq!(wake_of(&case.decide()), Some(t(150)));
    // Told of an earlier refusal (a long reset a minute before), or of one gone by: the config's wait.
    case.limit_reset = Some(Reset { at: t(5_000), told: t(30) });
    assert_eq!(wake_of(&case.decide()), Some(t(397)));
    case.limit_reset = Some(Reset { at: t(90), told: t(95) });
    assert_eq!(wake_of(&case.decide()), Some(t(397)));
}

#[test]
fn an_agent_that_forgot_the_gateways_word_keeps_the_wake_its_status_recorded() {
    let mut case = delivered_then_refused(95);
    case.limit_reset = Some(Reset { at: t(1_000), told: t(95) });
    assert_eq!(wake_of(&case.step()), Some(t(1_000)));
    // Restarted: the registry is empty, the status remembers.
    (case.limit_reset, case.usage, case.now) = (None, None, t(400));
    let plan = case.step();
    assert_eq!(wake_of(&plan), Some(t(1_000)));
    assert!(!ops(&plan).iter().any(|o| o.ends_with("Pending")), "not woken before: {:?}", ops(&plan));
}

#[test]
fn a_wake_that_came_late_is_not_followed_at_once_by_the_next() {
    // Its own wake is due (t(405)), but another of its credential woke just now, held up by its harness's word: this
    // one keeps the spread (10 s) from that wake, not from when that one was due.
    let mut case = delivered_then_refused(95);
    case.limited = vec![Limited { session: "ns/a".into(), at: t(90), woke: Some(t(403)) }];
    case.now = t(405);
    let plan = case.step();
    assert_eq!(wake_of(&plan), Some(t(413)));
    assert_eq!(condition(&plan.status, READY), Some(("False", "UsageLimited")));
    case.now = t(413);
    let plan = case.decide();
    let claim = format!("claim wake {}", crate::core::credential("ns/repo-12", &case.spec.harness));
    assert_eq!(ops(&plan).first(), Some(&claim), "the wake is claimed before anything else: {:?}", ops(&plan));
    assert_eq!(plan.status.usage.unwrap().limit.unwrap().wake_time.map(|t| t.0), Some(t(413)), "when it came");
}

#[test]
fn the_label_follows_the_limit_and_goes_with_it() {
    // A reply came: the limit is behind, and the label the object still carries is taken off.
    let mut case = Case::new(ran_old());
    case.limited_label = Some(true);
    assert!(ops(&case.decide()).contains(&"label usage-limited false".to_string()));
    // Being deleted: the object goes with its label.
    case.deleting = true;
    assert!(!ops(&case.decide()).iter().any(|op| op.starts_with("label")));
}

#[test]
fn a_session_whose_wake_came_is_not_parked_again_by_the_wakes_after_it() {
    // Its wake came at t(400) and its prompt went back to be sent; another of its credential woke at t(410).
    let mut case = delivered_then_refused(95);
    case.now = t(400);
    case.step();
    case.limited = vec![Limited { session: "ns/a".into(), at: t(90), woke: Some(t(410)) }];
    case.now = t(411);
    let plan = case.decide();
    assert_ne!(condition(&plan.status, READY), Some(("False", "UsageLimited")), "{:?}", ops(&plan));
    assert!(ops(&plan).iter().any(|op| op.starts_with("paste e1")), "the refused prompt is sent: {:?}", ops(&plan));
    assert_eq!(plan.status.usage.unwrap().limit.unwrap().wake_time.map(|t| t.0), Some(t(400)), "when it came");
}
