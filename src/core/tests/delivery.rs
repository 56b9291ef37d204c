//! Delivery guarantees, as the core decides them: every prompt tracked until known delivered, nothing lost on a
//! late death, ready before paste, look before resuming, and crash safety through the tmux tags.

use super::*;

/// A session that never started, with an initial prompt and no events.
fn first_start() -> Case {
    let mut case = Case::new(WorkSessionStatus::default());
    case.spec.initial_prompt = Some("start here".into());
    case.events.clear();
    case
}

fn initial(plan: &Plan) -> Option<PromptPhase> {
    plan.status.initial_prompt.as_ref().and_then(|p| p.phase)
}

#[test]
fn tracked_until_known_the_initial_prompt_like_any_other() {
    let mut case = first_start();
    let plan = case.step();
    assert_eq!(
        spawned(&plan),
        "spawn loop-ns_repo-12 claude --session-id 11111111-2222-4333-8444-555555555555 -- start here"
    );
    assert_eq!(initial(&plan), Some(PromptPhase::Delivering), "sent: recorded in status");
    case.liveness = Liveness::Alive;
    case.now = t(102);
    let plan = case.step();
    assert_eq!(initial(&plan), Some(PromptPhase::Delivering), "alive after the probe is not yet known");
    case.now = t(102 + 60);
    let plan = case.step();
    let st = plan.status.initial_prompt.clone().unwrap();
    assert_eq!(
        (st.phase, st.via, st.harness_session_id.as_deref()),
        (Some(PromptPhase::Delivered), Some(Via::Fresh), Some(NEW))
    );
    assert_eq!(st.delivered_at, Some(Time(t(162))));
    assert_eq!(plan.status.last_prompt_time, Some(Time(t(162))), "when it last took a prompt");
    assert!(case.step().ops.is_empty(), "a Delivered is never taken back, nor sent again");
}

/// A session whose harness runs, given hooks that confirm its prompts.
fn live_with_hooks() -> Case {
    let mut case = Case::new(ran_old());
    (case.liveness, case.tmux, case.proof) =
        (Liveness::Alive, Some(SessionView { alive: true, ..ours() }), Some(Proof::Hooks));
    case
}

/// The built-in claude profile as it ships, with its transcript.
fn with_transcript(mut case: Case) -> Case {
    case.config.harnesses.get_mut("claude").unwrap().conversation_path =
        crate::harness::builtin()["claude"].conversation_path.clone();
    case
}

#[test]
fn the_transcript_confirms_at_once_and_only_it() {
    let mut case = with_transcript(Case::new(ran_old()));
    case.liveness = Liveness::Alive;
    case.tmux = Some(SessionView { alive: true, ..ours() });
    case.step();
    case.now = t(300);
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new(), "a pane that lives on is not the transcript's word");
    assert_eq!(plan.requeue_after, Some(super::super::deliver::DELIVERY_RECHECK), "looked at again soon");
    case.confirmed = vec!["e1".into()];
    assert_eq!(ops(&case.step()), ["event e1 Delivered via Pasted", "event.delivered"]);
}

/// The offset each send records: where the harness's record stood (`record_len`), or nothing of a fresh transcript.
fn sent_offsets(plan: &Plan) -> Vec<(String, Option<u64>)> {
    let mut offsets: Vec<(String, Option<u64>)> = plan
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::WorkEventStatus(u) if u.phase == PromptPhase::Delivering => Some((u.event.clone(), u.offset)),
            _ => None,
        })
        .collect();
    if let Some(p) = plan.status.initial_prompt.as_ref().filter(|p| p.phase == Some(PromptPhase::Delivering)) {
        offsets.insert(0, (INITIAL_PROMPT.into(), p.sent_offset));
    }
    offsets
}

#[test]
fn a_prompt_is_marked_where_the_harness_record_stood_when_it_was_sent() {
    // Pasted into a live harness: where its record stands now.
    let mut live = with_transcript(Case::new(ran_old()));
    (live.liveness, live.tmux, live.record_len) = (Liveness::Alive, Some(SessionView { alive: true, ..ours() }), 4096);
    assert_eq!(sent_offsets(&live.step()), [("e1".to_string(), Some(4096))]);
    // On a resume's command line: the resumed transcript's length.
    let mut resume = with_transcript(Case::new(ran_old()));
    (resume.found, resume.record_len) = (Some(true), 777);
    assert_eq!(sent_offsets(&resume.step()), [("e1".to_string(), Some(777))]);
    // On a fresh conversation's command line: its transcript starts empty, whatever the old one held.
    let mut fresh = with_transcript(first_start());
    fresh.record_len = 999;
    assert_eq!(sent_offsets(&fresh.step()), [(INITIAL_PROMPT.to_string(), Some(0))]);
    // With hooks: the session's hook file, fresh or not.
    fresh.proof = Some(Proof::Hooks);
    fresh.status = WorkSessionStatus::default();
    assert_eq!(sent_offsets(&fresh.step()), [(INITIAL_PROMPT.to_string(), Some(999))]);
}

#[test]
fn a_prompt_its_harness_never_confirms_is_sent_once_more_then_fails_saying_why() {
    let mut case = with_transcript(Case::new(ran_old()));
    case.liveness = Liveness::Alive;
    case.tmux = Some(SessionView { alive: true, ..ours() });
    assert_eq!(
        ops(&case.step()),
        ["paste e1 into loop-ns_repo-12: please fix the bug", "event e1 Delivering via Pasted"]
    );
    case.now = t(100 + 300);
    let plan = case.step();
    assert_eq!(ops(&plan), ["event e1 Pending"], "at the deadline: back in its place");
    assert_eq!(plan.requeue_after, Some(Duration::ZERO));
    let Op::WorkEventStatus(update) = &plan.ops[0] else { unreachable!() };
    assert_eq!(
        update.message.as_deref(),
        Some(
            "the harness's transcript did not show it within 300s (it confirms a prompt only as a JSON string in a \
             line written after the send); it is sent again"
        )
    );
    case.tmux = Some(SessionView { alive: true, ..ours() }); // the first paste's tag is spent
    assert_eq!(
        ops(&case.step()),
        ["paste e1 into loop-ns_repo-12: please fix the bug", "event e1 Delivering via Pasted"]
    );
    case.now = t(100 + 600);
    let plan = case.step();
    assert_eq!(ops(&plan), ["event e1 Failed", "event.failed"]);
    let Op::WorkEventStatus(update) = &plan.ops[0] else { unreachable!() };
    assert_eq!(
        update.message.as_deref(),
        Some(
            "the harness's transcript did not show it within 300s (it confirms a prompt only as a JSON string in a \
             line written after the send), 2 attempts; it is not sent again"
        )
    );
}

#[test]
fn with_hooks_only_the_hook_confirms_and_a_hook_file_that_grows_wakes_the_wait() {
    let mut case = live_with_hooks();
    case.step();
    case.now = t(160);
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new(), "no settle window with hooks: only their word");
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(240)), "the deadline; the hook file's growth wakes it");
    // Reported by its hook, not yet in its transcript (written just after): looked at again soon, not at the deadline.
    case.awaits_transcript = true;
    assert_eq!(case.step().requeue_after, Some(Duration::from_millis(500)), "the transcript is about to show it");
    case.awaits_transcript = false;
    case.confirmed = vec!["e1".into()];
    let plan = case.step();
    assert_eq!(ops(&plan), ["event e1 Delivered via Pasted", "event.delivered"]);
    let Op::Notice(n) = &plan.ops[1] else { unreachable!() };
    assert!(n.message.ends_with("shown by the harness's UserPromptSubmit hook"), "{}", n.message);
}

/// A prompt steered into a running turn fires no hook (Copilot): its events file shows it, and the notice says so
/// rather than naming a hook that never ran.
#[test]
fn a_prompt_steered_into_a_turn_is_said_delivered_by_the_record_that_showed_it() {
    let mut case = live_with_hooks();
    case.step();
    (case.confirmed, case.steered) = (vec!["e1".into()], vec!["e1".into()]);
    let plan = case.step();
    assert_eq!(ops(&plan), ["event e1 Delivered via Pasted", "event.delivered"]);
    let Op::Notice(n) = &plan.ops[1] else { unreachable!() };
    assert!(n.message.ends_with("shown by the harness's events file, steered into its running turn"), "{}", n.message);
}

/// A prompt the harness took while it worked on a turn (opencode queues it) reaches its model only after that turn:
/// known delivered when the turn ends well, or past the deadline once the harness no longer says it works (never sent
/// twice into a long turn); taken behind a turn that failed for good, it never reached the model, and is sent again at
/// once.
#[test]
fn a_prompt_queued_behind_a_turn_waits_for_its_end_and_one_behind_a_failed_turn_is_sent_again() {
    let mut case = live_with_hooks();
    case.step();
    case.queued = vec!["e1".into()];
    case.now = t(160);
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new(), "taken behind a running turn: not yet known delivered");
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(240)), "the deadline; the turn's end wakes it");
    case.now = t(100 + 300);
    let plan = case.step();
    assert_eq!(ops(&plan), ["event e1 Delivered via Pasted", "event.delivered"], "the turn outlasted the deadline");

    let mut case = live_with_hooks();
    case.step();
    case.dropped = vec!["e1".into()];
    case.turn = Some(Turn {
        hook: "StopFailure".into(),
        at: Some(t(150)),
        message: Some("opencode: APIError 500 boom".into()),
        kind: None,
    });
    case.now = t(160);
    let plan = case.step();
    assert!(ops(&plan).contains(&"event e1 Pending".to_string()), "sent again at once: {:?}", ops(&plan));
    assert_eq!(case.events[0].attempts, 1, "its second send comes");
    assert_eq!(case.events[0].offset, None, "with an offset of its own: the first send's report came to nothing");
    let message = plan.ops.iter().find_map(|op| match op {
        Op::WorkEventStatus(u) if u.event == "e1" => u.message.clone(),
        _ => None,
    });
    assert!(message.as_deref().is_some_and(|m| m.contains("failed (opencode: APIError 500 boom)")), "{message:?}");
    let activity = find(&case.status.conditions, ActivityReason::TurnFailed).expect("TurnFailed");
    assert_eq!((activity.status.as_str(), activity.message.as_str()), ("False", "opencode: APIError 500 boom"));
    assert!(plan.ops.iter().any(|op| matches!(op, Op::Notice(n) if n.reason == EventReason::TurnFailed)));
    case.dropped.clear();
    let plan = case.step();
    assert!(ops(&plan).iter().any(|o| o.starts_with("paste e1")), "pasted again: {:?}", ops(&plan));
    assert_eq!(case.events[0].attempts, 2);
    // Dropped again behind another failed turn: two sends, and it fails saying why.
    case.dropped = vec!["e1".into()];
    let plan = case.step();
    assert_eq!(&ops(&plan)[..2], ["event e1 Failed", "event.failed"], "{:?}", ops(&plan));
}

/// A queued take whose turn still runs past the deadline (a long run of retries) is not taken for delivered while
/// the harness says it works: the turn may yet fail and drop it. Once the harness no longer works, its word is taken.
#[test]
fn a_queued_prompt_waits_past_the_deadline_while_its_turn_still_runs() {
    let mut case = live_with_hooks();
    case.step();
    case.queued = vec!["e1".into()];
    let working = Turn { hook: "UserPromptSubmit".into(), at: Some(t(150)), message: None, kind: None };
    case.turn = Some(working);
    case.now = t(100 + 400);
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new(), "its turn still runs");
    assert_eq!(plan.requeue_after, Some(super::super::deliver::DELIVERY_RECHECK));
    case.turn = Some(Turn { hook: "Stop".into(), at: Some(t(490)), message: None, kind: None });
    let plan = case.step();
    assert_eq!(ops(&plan), ["event e1 Delivered via Pasted", "event.delivered"]);
}

/// A busy pattern holds pastes while it shows; the wait is counted from the harness's latest turn event too, so a
/// prompt that waited behind a long turn (a harness that takes prompts only between turns) is not failed the moment
/// the turn ends; one that keeps showing it fails, saying so.
#[test]
fn a_busy_screen_holds_pastes_and_the_wait_counts_from_the_last_turn() {
    let mut case = Case::new(ran_old());
    case.config.harnesses.get_mut("claude").unwrap().busy_pattern =
        Some(regex::Regex::new("(?m)^Executing Hooks: ").unwrap());
    case.liveness = Liveness::Alive;
    case.screen = Some("Executing Hooks: x\n> ");
    case.turn = Some(Turn { hook: "Stop".into(), at: Some(t(600)), message: None, kind: None });
    case.now = t(601);
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new(), "nothing pasted while it is busy, nor failed: its turn just ended");
    case.screen = Some(CLAUDE_READY);
    assert_eq!(ops(&case.decide())[0], "paste e1 into loop-ns_repo-12: please fix the bug");
    case.screen = Some("Executing Hooks: x\n> ");
    case.now = t(600 + 120);
    let plan = case.step();
    assert_eq!(&ops(&plan)[..2], ["event e1 Failed", "event.failed"]);
    let message = plan.ops.iter().find_map(|op| match op {
        Op::WorkEventStatus(u) => u.message.clone(),
        _ => None,
    });
    assert!(message.is_some_and(|m| m.contains("kept showing its busy pattern")));
}

#[test]
fn a_late_death_returns_every_unconfirmed_prompt_in_order_and_the_next_spawn_sends_them() {
    let mut case = first_start();
    case.status = ran_old();
    case.status.phase = Some(Phase::Running);
    case.status.initial_prompt = Some(PromptStatus {
        phase: Some(PromptPhase::Delivering),
        sent_time: Some(Time(t(0))),
        via: Some(Via::Resumed),
        ..Default::default()
    });
    case.status.last_respawn.as_mut().unwrap().resumed = true;
    case.events = vec![delivering("e1", "one", Via::Pasted), ev("e2", "two")];
    case.liveness = Liveness::Dead;
    case.now = t(30);
    case.output = "No conversation found with session ID: 0a0b0c0d-old";
    let plan = case.step();
    assert_eq!(initial(&plan), Some(PromptPhase::Pending));
    assert_eq!(ops(&plan), ["session.resume_failed PaneDiedAfterProbe", "event e1 Pending"]);
    let message = &plan.status.conditions.iter().find(|c| c.type_ == RESUMED.as_str()).unwrap().message;
    assert!(message.contains("No conversation found with session ID: 0a0b0c0d-old"), "quotes the pane: {message}");
    assert_eq!(plan.requeue_after, Some(Duration::ZERO), "respawns at once, without waiting for another event");
    // The next spawn: fresh (the harness said it cannot find it), the initial prompt first, on its command line.
    let plan = case.step();
    assert_eq!(
        spawned(&plan),
        "spawn loop-ns_repo-12 claude --session-id 11111111-2222-4333-8444-555555555555 -- start here"
    );
    case.liveness = Liveness::Alive;
    case.now = t(32);
    let plan = case.step();
    assert_eq!(
        ops(&plan)[1..],
        [
            "paste e1 into loop-ns_repo-12: one",
            "event e1 Delivering via Pasted",
            "paste e2 into loop-ns_repo-12: two",
            "event e2 Delivering via Pasted"
        ]
    );
}

#[test]
fn ready_before_paste_with_a_bounded_wait_that_fails_clearly() {
    let mut case = Case::new(ran_old());
    case.liveness = Liveness::Alive;
    case.screen = Some("booting...");
    case.events = vec![ev("e1", "one"), ev("e2", "two")];
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new(), "nothing pasted before the input box shows");
    assert_eq!(plan.requeue_after, Some(super::super::deliver::DELIVERY_RECHECK));
    case.screen = Some(CLAUDE_READY);
    assert_eq!(ops(&case.decide())[0], "paste e1 into loop-ns_repo-12: one", "in order once ready");
    // Never ready: after the bounded wait (120 s from the later of the respawn at t(0) and the event) it fails.
    case.screen = Some("booting...");
    case.now = t(120);
    let plan = case.step();
    assert_eq!(ops(&plan), ["event e1 Failed", "event.failed", "event e2 Failed", "event.failed"]);
}

#[test]
fn look_before_resuming_a_missing_conversation_is_not_resumed() {
    let mut case = Case::new(ran_old());
    case.found = Some(false);
    let plan = case.step();
    assert_eq!(
        ops(&plan),
        ["record intent", "session.resume_failed ConversationNotFound", FRESH_E1, "event e1 Delivering via Fresh"]
    );
    assert_eq!(plan.status.verification.as_ref().unwrap().fresh_reason.as_deref(), Some("ConversationNotFound"));
    case.found = Some(true);
    case.status = ran_old();
    assert_eq!(spawned(&case.decide()), RESUME_E1, "found: resumed");
}

#[test]
fn crash_safe_a_spawn_that_never_ran_is_run_again_the_same() {
    let mut case = Case::new(ran_old());
    let intent = case.decide().intent().unwrap().clone(); // the agent stopped after writing this, before spawning
    case.status = intent;
    case.tmux = Some(SessionView { alive: false, spawn: "an-older-spawn".into(), ..ours() });
    case.now = t(105);
    let plan = case.step();
    assert_eq!(
        ops(&plan),
        ["record intent", RESUME_E1, "event e1 Delivering via Resumed"],
        "the same resume, not a failure (its intent recorded again, with the new deadline)"
    );
    assert_eq!(plan.status.failure_count, 0);
    // Once it ran, a death within the probe is a failed resume as usual.
    case.liveness = Liveness::Dead;
    let plan = case.step();
    assert_eq!(ops(&plan)[..2], ["record intent", "session.resume_failed PaneDied"]);
}

#[test]
fn crash_safe_a_paste_recorded_only_by_tmux_is_not_pasted_again() {
    let mut case = Case::new(ran_old());
    case.liveness = Liveness::Alive;
    case.tmux = Some(SessionView { alive: true, pasted: "uid-e1".into(), ..ours() });
    let plan = case.step();
    assert_eq!(ops(&plan), ["event e1 Delivering via Pasted"], "the tag says it was pasted: recorded, not pasted");
}

#[test]
fn a_prompt_the_transcript_shows_stays_delivered_when_the_pane_dies() {
    let mut case = with_transcript(Case::new(ran_old()));
    case.status.phase = Some(Phase::Running);
    case.events = vec![delivering("e1", "one", Via::Pasted), delivering("e2", "two", Via::Pasted)];
    case.confirmed = vec!["e1".into()];
    case.liveness = Liveness::Dead;
    let plan = case.step();
    let events: Vec<String> = ops(&plan).into_iter().filter(|o| o.starts_with("event ")).collect();
    assert_eq!(
        events,
        ["event e1 Delivered via Pasted", "event e2 Pending", "event e2 Delivering via Resumed"],
        "the transcript's word holds for e1; e2 is sent again, alone"
    );
    assert!(spawned(&plan).ends_with("-- two"), "{}", spawned(&plan));
}

/// Found on a real node: the tmux server restarted while a fresh spawn was being verified. No session carries the
/// spawn's tag, but its conversation is in the store: it ran. It is not run again with its id (the harness refuses
/// an id in use), its conversation is kept for the next respawn, and the boot prompt its transcript shows is not sent
/// a second time.
#[test]
fn crash_safe_a_fresh_spawn_whose_tmux_server_restarted_is_not_run_again() {
    let mut case = with_transcript(first_start());
    case.step(); // spawned fresh with the initial prompt
    case.tmux = None;
    case.liveness = Liveness::Absent;
    case.found = Some(true);
    case.confirmed = vec![INITIAL_PROMPT.into()];
    case.now = t(101);
    let plan = case.step();
    assert_eq!(spawned(&plan), "", "not run again");
    assert_eq!(plan.status.harness_session_id.as_deref(), Some(NEW), "its conversation is kept");
    assert_eq!(initial(&plan), Some(PromptPhase::Delivered), "the transcript shows the boot prompt");
    // Without the store's word it is the spawn that never ran, run again the same.
    let mut unknown = with_transcript(first_start());
    unknown.step();
    unknown.tmux = None;
    unknown.liveness = Liveness::Absent;
    unknown.found = Some(false);
    unknown.now = t(101);
    assert!(spawned(&unknown.step()).ends_with(&format!("--session-id {NEW} -- start here")));
    // An event then resumes the kept conversation.
    case.found = Some(true);
    case.confirmed.clear();
    case.events = vec![ev("e1", "please fix the bug")];
    case.now = t(200);
    assert_eq!(spawned(&case.step()), format!("spawn loop-ns_repo-12 claude --resume {NEW} -- please fix the bug"));
}

#[test]
fn an_initial_prompt_not_on_the_command_line_is_owed_until_pasted() {
    // Too long for a command line (and so is one of a resume without `{prompt}`, opencode's): the spawn survives the
    // probe before its harness shows it is ready, and the prompt is still owed, then pasted once it is.
    let long = "x".repeat(ARGV_PROMPT_LIMIT + 1);
    let mut case = first_start();
    case.spec.initial_prompt = Some(long.clone());
    let plan = case.step();
    assert!(!spawned(&plan).contains('x'), "no prompt on the command line: {}", spawned(&plan));
    assert_eq!(initial(&plan), Some(PromptPhase::Pending), "owed, from the intent on");
    case.liveness = Liveness::Alive;
    case.screen = Some("booting");
    case.now = t(102);
    let plan = case.step();
    assert_eq!(initial(&plan), Some(PromptPhase::Pending), "survived, not yet ready: still owed");
    case.now = t(103);
    assert_eq!(initial(&case.step()), Some(PromptPhase::Pending), "and after its spawn is recorded");
    case.screen = Some(CLAUDE_READY);
    case.now = t(104);
    let plan = case.step();
    assert_eq!(ops(&plan)[0], format!("paste {INITIAL_PROMPT} into loop-ns_repo-12: {long}"));
    assert_eq!(initial(&plan), Some(PromptPhase::Delivering));
}

/// Gemini CLI's hazard: a harness that takes no prompt while it works (`queuesPrompts: false`) is given prompts
/// only between turns, one at a time, by its hooks' word: a paste meanwhile would stay unsent in its input box and the
/// next would join it there.
#[test]
fn a_harness_that_takes_no_prompt_while_it_works_gets_one_between_turns() {
    let mut case = Case::new(ran_old());
    case.config.harnesses.get_mut("claude").unwrap().queues_prompts = false;
    (case.liveness, case.tmux, case.proof) =
        (Liveness::Alive, Some(SessionView { alive: true, ..ours() }), Some(Proof::Hooks));
    case.events = vec![ev("e1", "one"), ev("e2", "two")];
    case.turn = Some(Turn { hook: "Stop".into(), at: Some(t(90)), kind: None, message: None });
    assert_eq!(ops(&case.step()), ["paste e1 into loop-ns_repo-12: one", "event e1 Delivering via Pasted"], "one");
    assert_eq!(ops(&case.step()), Vec::<String>::new(), "the next waits until the harness took it");
    // Taken: its turn runs; the next waits for its end, with no deadline.
    (case.confirmed, case.turn) = (
        vec!["e1".into()],
        Some(Turn { hook: "UserPromptSubmit".into(), at: Some(t(101)), kind: None, message: None }),
    );
    assert_eq!(ops(&case.step()), ["event e1 Delivered via Pasted", "event.delivered"]);
    case.now = t(5000);
    assert_eq!(ops(&case.step()), Vec::<String>::new(), "a turn takes as long as it takes");
    case.turn = Some(Turn { hook: "Stop".into(), at: Some(t(5001)), kind: None, message: None });
    assert_eq!(ops(&case.step()), ["paste e2 into loop-ns_repo-12: two", "event e2 Delivering via Pasted"]);
    // Waiting for a person is still its turn: a paste would answer the question.
    case.events.push(ev("e3", "three"));
    case.turn =
        Some(Turn { hook: "Notification".into(), at: Some(t(5002)), kind: None, message: Some("Allow?".into()) });
    case.confirmed = vec!["e2".into()];
    let plan = case.step();
    assert!(ops(&plan).contains(&"event e2 Delivered via Pasted".to_string()), "{:?}", ops(&plan));
    assert!(!ops(&plan).iter().any(|op| op.starts_with("paste")), "nothing pasted: {:?}", ops(&plan));
    assert_eq!(ops(&case.step()), Vec::<String>::new(), "e3 waits for the person's answer and the turn's end");
    // A harness that queues (Claude Code) is given one while it works; one whose prompts nothing confirms (no hooks,
    // no transcript) gets both at once.
    for (queues_prompts, proof, pasted) in [(true, Proof::Hooks, 1), (false, Proof::Settle, 2)] {
        let mut other = Case::new(ran_old());
        other.config.harnesses.get_mut("claude").unwrap().queues_prompts = queues_prompts;
        (other.liveness, other.tmux, other.proof) =
            (Liveness::Alive, Some(SessionView { alive: true, ..ours() }), Some(proof));
        other.events = vec![ev("e1", "one"), ev("e2", "two")];
        other.turn = Some(Turn { hook: "UserPromptSubmit".into(), at: Some(t(90)), kind: None, message: None });
        let plan = other.step();
        let pastes = ops(&plan).iter().filter(|op| op.starts_with("paste")).count();
        assert_eq!(pastes, pasted, "({queues_prompts}, {proof:?}): {:?}", ops(&plan));
    }
}

/// Two pastes a busy harness reads together may join in its input box, and neither is submitted (Claude Code under
/// load): where the harness's own record (its hooks, its transcript) confirms a paste, the next is pasted only once
/// that word came, whether or not the harness queues prompts; it does not wait for the turn to end.
#[test]
fn where_the_harness_confirms_pastes_the_next_waits_for_the_word_on_the_one_before() {
    for proof in [Proof::Hooks, Proof::Transcript] {
        let mut case = Case::new(ran_old());
        (case.liveness, case.tmux, case.proof) =
            (Liveness::Alive, Some(SessionView { alive: true, ..ours() }), Some(proof));
        case.events = vec![ev("e1", "one"), ev("e2", "two")];
        assert_eq!(ops(&case.step()), ["paste e1 into loop-ns_repo-12: one", "event e1 Delivering via Pasted"]);
        assert_eq!(ops(&case.step()), Vec::<String>::new(), "{proof:?}: e2 waits for the word on e1");
        case.confirmed = vec!["e1".into()];
        case.turn = Some(Turn { hook: "UserPromptSubmit".into(), at: Some(t(101)), kind: None, message: None });
        assert_eq!(
            ops(&case.step()),
            [
                "event e1 Delivered via Pasted",
                "event.delivered",
                "paste e2 into loop-ns_repo-12: two",
                "event e2 Delivering via Pasted"
            ],
            "{proof:?}: e2 pasted while e1's turn runs"
        );
    }
}

/// A harness that takes prompts one at a time may read a paste and its Enter together under load and keep the prompt
/// unsent in its input box (Gemini CLI): pasted after its hooks said it was idle, with nothing written to its hook
/// file since, Enter is pressed again a few times shortly after the paste. Not while its screen is busy (looked at
/// again), not once its hook file grew (its turn began: an Enter could answer a dialog of that turn), not for a
/// harness whose hooks never said it was idle (a start-up question may be on its screen), not for a command-line
/// prompt, and never for a harness that queues prompts.
#[test]
fn an_unconfirmed_paste_to_a_harness_that_takes_one_at_a_time_gets_its_enter_again() {
    use super::super::deliver::SUBMIT_AGAIN_AFTER;
    let one_at_a_time = |turn: Option<&str>| {
        let mut case = Case::new(ran_old());
        case.config.harnesses.get_mut("claude").unwrap().queues_prompts = false;
        case.config.harnesses.get_mut("claude").unwrap().busy_pattern =
            Some(regex::Regex::new("(?m)^Executing Hooks: ").unwrap());
        (case.liveness, case.tmux, case.proof) =
            (Liveness::Alive, Some(SessionView { alive: true, ..ours() }), Some(Proof::Hooks));
        case.turn = turn.map(|hook| Turn { hook: hook.into(), at: Some(t(90)), kind: None, message: None });
        case.record_len = 700;
        case
    };
    let mut case = one_at_a_time(Some("Stop"));
    assert_eq!(
        ops(&case.step()),
        ["paste e1 into loop-ns_repo-12: please fix the bug", "event e1 Delivering via Pasted"]
    );
    case.now = t(102);
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new(), "not yet");
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(1)), "woken when it is due");
    case.now = t(103);
    let plan = case.step();
    assert_eq!(ops(&plan), ["press Enter for e1 in loop-ns_repo-12"], "nothing from it 3 s after the paste");
    assert_eq!(plan.requeue_after, Some(SUBMIT_AGAIN_AFTER), "and again later");
    // Its screen busy: an Enter would be lost; looked at again.
    case.now = t(106);
    case.screen = Some("Executing Hooks: x\n> ");
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new(), "a busy screen");
    assert_eq!(plan.requeue_after, Some(SUBMIT_AGAIN_AFTER));
    case.screen = Some(CLAUDE_READY);
    // Its hook file grew since the paste (whatever the hook): its turn began.
    let mut reacted = Case { record_len: 800, ..case.clone() };
    assert_eq!(ops(&reacted.step()), Vec::<String>::new(), "a hook since the paste");
    assert_eq!(ops(&case.clone().step()), ["press Enter for e1 in loop-ns_repo-12"], "still nothing from it");
    // A few times only, shortly after the paste; the deadline does the rest.
    case.now = t(109);
    assert_eq!(ops(&case.step()), Vec::<String>::new(), "no more");

    // Sent at t(100) by `via`, at the hook file's offset 700.
    let sent = |via| PendingWorkEvent {
        phase: PromptPhase::Delivering,
        sent: Some(t(100)),
        via: Some(via),
        offset: Some(700),
        attempts: 1,
        ..ev("e1", "please fix the bug")
    };
    // Hooks that never said it was idle, or said it works: no Enter.
    for turn in [None, Some("UserPromptSubmit"), Some("Notification")] {
        let mut case = Case { events: vec![sent(Via::Pasted)], ..one_at_a_time(turn) };
        case.now = t(104);
        let plan = case.step();
        assert!(!ops(&plan).iter().any(|op| op.starts_with("press")), "{turn:?}: {:?}", ops(&plan));
    }
    // A prompt on the command line: a dialog of the CLI's own may come first.
    let mut fresh = one_at_a_time(Some("Stop"));
    fresh.events = vec![sent(Via::Fresh)];
    fresh.now = t(104);
    assert_eq!(ops(&fresh.step()), Vec::<String>::new(), "a command-line prompt");

    // A harness that queues prompts takes a paste's Enter while it works: never pressed again.
    let mut queues = Case { config: Case::new(ran_old()).config, ..one_at_a_time(Some("Stop")) };
    queues.step();
    queues.now = t(104);
    assert_eq!(ops(&queues.step()), Vec::<String>::new(), "a harness that queues");
}

/// A prompt its deadline sends again keeps the offset of its first send (a harness that took that send late, a slow
/// start, says so after it, and the prompt is not failed though taken); a death forgets it (the next harness's record
/// starts afresh).
#[test]
fn a_prompt_sent_again_at_its_deadline_keeps_its_first_mark_until_a_death() {
    let mut case = with_transcript(Case::new(ran_old()));
    (case.liveness, case.tmux, case.record_len) = (Liveness::Alive, Some(SessionView { alive: true, ..ours() }), 4096);
    assert_eq!(sent_offsets(&case.step()), [("e1".to_string(), Some(4096))]);
    (case.now, case.record_len) = (t(100 + 300), 8192);
    assert_eq!(ops(&case.step()), ["event e1 Pending"]);
    assert_eq!(case.events[0].offset, Some(4096), "kept for the second send");
    case.tmux = Some(SessionView { alive: true, ..ours() });
    let plan = case.step();
    assert_eq!(ops(&plan), ["paste e1 into loop-ns_repo-12: please fix the bug", "event e1 Delivering via Pasted"]);
    assert_eq!((case.events[0].offset, case.events[0].attempts), (Some(4096), 2), "from the first send's offset on");
    let Some(Op::Paste { tag, .. }) = plan.ops.first() else { unreachable!() };
    assert!(tag.ends_with("/2/4096"), "its tag says the same, for an agent that restarts: {tag}");
    // At its second deadline, then a death before the third look: the offset goes with the harness.
    case.now = t(100 + 700);
    assert_eq!(ops(&case.step()), ["event e1 Failed", "event.failed"]);
    let mut died = with_transcript(Case::new(ran_old()));
    (died.liveness, died.tmux, died.record_len) = (Liveness::Alive, Some(SessionView { alive: true, ..ours() }), 4096);
    died.step();
    died.now = t(100 + 300);
    died.step();
    (died.liveness, died.now, died.record_len) = (Liveness::Dead, t(100 + 301), 5000);
    let plan = died.step();
    assert!(ops(&plan).contains(&"event e1 Pending".to_string()), "forgotten with the dead harness: {:?}", ops(&plan));
    assert_eq!(died.events[0].offset, Some(5000), "its resume's own offset, not the kept one");
}

#[test]
fn an_event_not_due_yet_waits_without_holding_up_the_others_and_wakes_the_decision_at_its_time() {
    let mut case = Case::new(ran_old());
    case.liveness = Liveness::Alive;
    case.tmux = Some(SessionView { alive: true, ..ours() });
    let batch = PendingWorkEvent { not_before: Some(t(130)), ..ev("ci", "CI failed") };
    case.events = vec![batch, ev("e2", "a comment")];
    let plan = case.step();
    assert_eq!(ops(&plan), ["paste e2 into loop-ns_repo-12: a comment", "event e2 Delivering via Pasted"]);
    assert!(
        plan.requeue_after.is_some_and(|d| d <= Duration::from_secs(30)),
        "woken by then: {:?}",
        plan.requeue_after
    );
    case.events.retain(|e| e.name == "ci");
    case.now = t(130);
    assert_eq!(ops(&case.step()), ["paste ci into loop-ns_repo-12: CI failed", "event ci Delivering via Pasted"]);
    // A dead pane is not respawned for an event that is not due: nothing waits to be delivered yet.
    let mut dead = Case::new(ran_old());
    dead.events = vec![PendingWorkEvent { not_before: Some(t(130)), ..ev("ci", "CI failed") }];
    let plan = dead.step();
    assert_eq!(spawned(&plan), "", "no spawn before the event is due");
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(30)), "woken when it is due");
}

/// The status write after a spawn failed (or the agent stopped before it): the store holds the intent, its boot
/// prompt still `Pending`. The spawn ran (its pane carries its tag) with that prompt on its command line: it is
/// recorded as sent, never pasted a second time, and confirmed by the harness's record as any other.
#[test]
fn a_boot_prompt_whose_send_was_not_recorded_is_never_sent_twice() {
    let mut case = with_transcript(Case::new(ran_old()));
    case.found = Some(true);
    let plan = case.step();
    assert_eq!(ops(&plan), ["record intent", RESUME_E1, "event e1 Delivering via Resumed"]);
    // The write of that plan's status and the event's failed: the store shows the intent, e1 waiting.
    case.status = plan.intent().cloned().unwrap();
    case.events = vec![ev("e1", "please fix the bug")];
    case.liveness = Liveness::Alive;
    for now in [101, 200] {
        // Before and after the probe's deadline alike.
        case.now = t(now);
        let plan = case.step();
        let sent: Vec<String> = ops(&plan).into_iter().filter(|o| o.starts_with("paste")).collect();
        assert!(sent.is_empty(), "never pasted again at t({now}): {:?}", ops(&plan));
    }
    assert_eq!(case.events[0].phase, PromptPhase::Delivering, "recorded as sent");
    case.confirmed = vec!["e1".into()];
    case.now = t(201);
    let plan = case.step();
    assert!(ops(&plan).contains(&"event e1 Delivered via Resumed".to_string()), "{:?}", ops(&plan));
}

/// A prompt whose harness died before confirming it goes back with no send counted: the next harness gets it, and
/// at its confirm deadline a second send, before it fails (counted over both harnesses, it failed at its first).
#[test]
fn a_prompt_returned_by_a_death_still_gets_its_second_send() {
    let mut case = with_transcript(Case::new(ran_old()));
    case.found = Some(true);
    (case.liveness, case.tmux) = (Liveness::Alive, Some(SessionView { alive: true, ..ours() }));
    case.status.phase = Some(Phase::Running);
    let plan = case.step();
    assert_eq!(ops(&plan), ["paste e1 into loop-ns_repo-12: please fix the bug", "event e1 Delivering via Pasted"]);
    assert_eq!(case.events[0].attempts, 1);
    // Its harness dies before its record shows it: back in its place with none counted, and resumed at once with it
    // on the command line: one send to this harness.
    (case.liveness, case.tmux, case.now) = (Liveness::Dead, None, t(110));
    let plan = case.step();
    assert!(ops(&plan).contains(&"event e1 Pending".to_string()), "{:?}", ops(&plan));
    assert_eq!(spawned(&plan), RESUME_E1);
    assert_eq!(case.events[0].attempts, 1, "the count started again");
    case.liveness = Liveness::Alive;
    case.now = t(110 + 300);
    let plan = case.step();
    let resent = ops(&plan);
    assert!(resent.contains(&"event e1 Pending".to_string()), "sent again, not failed: {resent:?}");
}

/// A prompt is not sent to dying harnesses for ever: the fifth harness that dies before it was known delivered fails
/// it, saying why, and the respawn goes on without it.
#[test]
fn a_prompt_returned_by_five_dying_harnesses_fails() {
    let mut case = with_transcript(Case::new(ran_old()));
    case.found = Some(true);
    (case.liveness, case.tmux) = (Liveness::Alive, Some(SessionView { alive: true, ..ours() }));
    case.status.phase = Some(Phase::Running);
    case.events = vec![PendingWorkEvent { returns: RETURN_LIMIT - 2, ..ev("e1", "please fix the bug") }];
    case.step(); // pasted
    (case.liveness, case.tmux, case.now) = (Liveness::Dead, None, t(110));
    let plan = case.step();
    assert!(ops(&plan).contains(&"event e1 Pending".to_string()), "the fourth death returns it: {:?}", ops(&plan));
    assert_eq!(case.events[0].returns, RETURN_LIMIT - 1);
    // Resumed with it on the command line; that harness dies too.
    (case.liveness, case.now) = (Liveness::Dead, t(200));
    case.status.verification = None;
    case.status.phase = Some(Phase::Running);
    let plan = case.step();
    assert!(ops(&plan).contains(&"event e1 Failed".to_string()), "{:?}", ops(&plan));
    let Some(Op::WorkEventStatus(update)) =
        plan.ops.iter().find(|o| matches!(o, Op::WorkEventStatus(u) if u.phase == PromptPhase::Failed))
    else {
        unreachable!()
    };
    assert!(update.message.as_deref().unwrap().contains("5 harnesses that each died"), "{update:?}");
    assert!(!ops(&plan).iter().any(|o| o.starts_with("spawn") && o.contains("please fix the bug")), "not sent again");
}
