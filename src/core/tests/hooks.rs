//! The id follows the conversation: a live harness whose hooks say it moved to another conversation (Claude Code's
//! `SessionStart` after a person's `/clear`) has that one recorded, the ones it left kept, so the next resume takes the
//! conversation the harness was in.

use super::*;

const CLEARED: &str = "33333333-4444-4555-8666-777777777777";

/// A live, verified harness of conversation `OLD` with nothing to deliver.
fn running() -> Case {
    let mut case = Case::new(WorkSessionStatus { phase: Some(Phase::Running), ..ran_old() });
    case.liveness = Liveness::Alive;
    case.tmux = Some(ours());
    case.events.clear();
    case
}

#[test]
fn a_harness_that_moved_to_a_new_conversation_has_it_recorded_and_the_old_one_kept() {
    let mut case = running();
    case.hooked = Some(CLEARED);
    let plan = case.step();
    assert_eq!(plan.status.harness_session_id.as_deref(), Some(CLEARED));
    assert_eq!(plan.status.previous_session_ids, [OLD]);
    assert_eq!(ops(&plan), ["session.conversation_changed"]);
    // Said once: the next look changes nothing.
    assert_eq!(ops(&case.step()), Vec::<String>::new());
    // A crash, then an event: the conversation the harness moved to is resumed.
    case.liveness = Liveness::Dead;
    case.hooked = None;
    case.events = vec![ev("e1", "please fix the bug")];
    let plan = case.decide();
    assert!(spawned(&plan).contains(&format!("--resume {CLEARED}")), "{:?}", ops(&plan));
}

#[test]
fn the_conversations_left_are_kept_newest_first_and_bounded() {
    let mut case = running();
    let ids: Vec<String> = (0..12).map(|i| format!("00000000-0000-4000-8000-{i:012}")).collect();
    for id in &ids {
        case.hooked = Some(Box::leak(id.clone().into_boxed_str()));
        case.step();
    }
    let kept = &case.status.previous_session_ids;
    assert_eq!(kept.len(), crate::core::hooks::PREVIOUS_KEPT);
    assert_eq!(kept[0], ids[10], "newest first");
    assert!(!kept.contains(&OLD.to_string()), "the oldest fell off");
    // Back to one it left: it moves to the front, never twice in the list.
    case.hooked = Some(Box::leak(ids[5].clone().into_boxed_str()));
    case.step();
    assert_eq!(case.status.previous_session_ids.iter().filter(|p| **p == ids[5]).count(), 0, "it is the recorded one");
    assert_eq!(case.status.previous_session_ids[0], ids[11]);
}

#[test]
fn what_the_hooks_say_is_ignored_while_a_spawn_is_verified_or_when_it_is_no_id() {
    let mut case = running();
    case.hooked = Some("not an id; rm -rf /");
    assert_eq!(case.decide().status.harness_session_id.as_deref(), Some(OLD), "not the shape of an id");
    let mut case = Case::new(ran_old());
    let intent = case.decide().intent().unwrap().clone();
    case.status = intent;
    case.liveness = Liveness::Alive;
    case.tmux = Some(SessionView { spawn: NEW.into(), ..ours() });
    case.hooked = Some(CLEARED);
    let plan = case.decide();
    assert_ne!(plan.status.harness_session_id.as_deref(), Some(CLEARED), "judged once the spawn is verified");
}

fn turn(hook: &str, at: i64, kind: Option<&str>, message: Option<&str>) -> Turn {
    Turn { hook: hook.into(), at: Some(t(at)), kind: kind.map(String::from), message: message.map(String::from) }
}

fn activity(plan: &Plan) -> Option<(String, String, String)> {
    let c = plan.status.conditions.iter().find(|c| c.type_ == "Activity")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// What the harness does, by its latest turn event.
#[test]
fn the_activity_condition_says_what_the_harness_does_and_a_wait_for_a_person_is_told_once() {
    let mut case = running();
    assert_eq!(activity(&case.step()), None, "no hooks, nothing said");
    case.turn = Some(turn("UserPromptSubmit", 90, None, None));
    let plan = case.step();
    assert_eq!(activity(&plan).map(|a| (a.0, a.1)), Some(("True".into(), "Working".into())));
    let asks = "Claude needs your permission to use Bash";
    case.turn = Some(turn("Notification", 95, Some("permission_prompt"), Some(asks)));
    let plan = case.step();
    assert_eq!(activity(&plan), Some(("False".into(), "WaitingForInput".into(), asks.into())));
    assert_eq!(ops(&plan), ["session.waiting_for_input"]);
    assert_eq!(ops(&case.step()), Vec::<String>::new(), "told once");
    case.turn = Some(turn("Stop", 99, None, None));
    assert_eq!(activity(&case.step()).map(|a| a.1), Some("Idle".into()));
    case.turn = Some(turn("Notification", 160, Some("idle_prompt"), Some("Claude is waiting for your input")));
    assert_eq!(activity(&case.step()).map(|a| a.1), Some("Idle".into()), "waiting for a prompt is idle");
    case.liveness = Liveness::Dead;
    assert_eq!(activity(&case.step()), None, "no harness, no activity");
}

/// The idle stop takes the harness's own word where it has one.
#[test]
fn with_hooks_a_harness_working_on_a_turn_is_never_idle_and_one_that_finished_is_quiet_since_then() {
    let mut case = running();
    case.spec.idle = Some(crate::api::IdleSpec { suspend_after_seconds: Some(60) });
    case.tmux = Some(SessionView { activity: t(0).as_second(), ..ours() });
    case.turn = Some(turn("UserPromptSubmit", 10, None, None));
    assert_eq!(ops(&case.step()), Vec::<String>::new(), "a quiet screen, but a turn in flight");
    case.turn = Some(turn("Stop", 80, None, None));
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new(), "quiet since the turn ended, not since the screen");
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(40)));
    case.now = t(140);
    assert_eq!(ops(&case.step()), ["stop loop-ns_repo-12", "session.idle"]);
}
