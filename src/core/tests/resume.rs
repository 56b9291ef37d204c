//! The resume table (`try_resume`), row by row: the rows decided before tmux runs anything, and those decided from
//! tmux's answer (survived, spawn failed, pane died).

use super::*;

/// The resume table's rows decided before tmux: (row, setup, spawn, notices).
#[test]
fn try_resume_rows_before_tmux() {
    type Setup = fn(&mut Case);
    let rows: [(&str, Setup, &str, &[&str]); 5] = [
        ("resumeOnRespawn false: fresh, silent", |c| c.config.defaults.resume_on_respawn = false, FRESH_E1, &[]),
        ("no recorded id: fresh, silent", |c| c.status.harness_session_id = None, FRESH_E1, &[]),
        (
            "id fails the shape: fresh + resume_failed",
            |c| c.status.harness_session_id = Some("-rf".into()),
            FRESH_E1,
            &["session.resume_failed InvalidSessionId"],
        ),
        (
            "harness cannot resume: fresh + resume_failed",
            |c| c.config.harnesses.get_mut("claude").unwrap().resume = None,
            FRESH_E1,
            &["session.resume_failed HarnessCannotResume"],
        ),
        ("otherwise: the recorded id", |_| {}, RESUME_E1, &[]),
    ];
    for (row, setup, spawn, notices) in rows {
        let mut case = Case::new(ran_old());
        setup(&mut case);
        let plan = case.decide();
        let mut want = vec!["record intent".to_string()];
        want.extend(notices.iter().map(|s| s.to_string()));
        let via = if spawn == RESUME_E1 { "Resumed" } else { "Fresh" };
        want.extend([spawn.to_string(), format!("event e1 Delivering via {via}")]);
        assert_eq!(ops(&plan), want, "{row}");
        let intent = plan.intent().expect("a spawn records its intent first");
        assert_eq!(intent.phase, Some(Phase::Starting), "{row}");
        assert_eq!(plan.status.phase, Some(Phase::Verifying), "{row}");
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(2)), "{row}: probe deadline");
        assert_eq!(
            plan.status.harness_session_id.as_deref(),
            case.status.harness_session_id.as_deref(),
            "{row}: recorded only once verified"
        );
    }
}

#[test]
fn spec_harness_session_id_is_adopted_when_none_is_recorded() {
    let mut case = Case::new(WorkSessionStatus::default());
    case.spec.harness_session_id = Some(OLD.into());
    assert_eq!(spawned(&case.decide()), RESUME_E1);
    case.status.harness_session_id = Some("recorded".into());
    assert!(spawned(&case.decide()).contains("--resume recorded"), "status wins over spec");
}

/// The rows decided from tmux's answer: survived, spawn failed, pane died.
#[test]
fn try_resume_rows_after_tmux() {
    // Resumed and alive at the deadline.
    let mut case = Case::new(ran_old());
    case.step();
    case.liveness = Liveness::Alive;
    case.now = t(101);
    let early = case.decide();
    assert_eq!((ops(&early), early.requeue_after), (vec![], Some(Duration::from_secs(1))), "waits for the deadline");
    case.now = t(102);
    let plan = case.step();
    // Without a transcript, the boot prompt of a resume is known delivered only once the settle window is over.
    assert_eq!(ops(&plan), ["session.respawned resumed=true"]);
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(60)), "the settle window");
    assert_eq!(condition(&plan.status, RESUMED), Some(("True", "Resumed")));
    assert_eq!(plan.status.harness_session_id.as_deref(), Some(OLD), "same id kept");
    assert_eq!((plan.status.phase, plan.status.respawn_count), (Some(Phase::Running), 1));
    assert_eq!(plan.status.verification, None);
    case.now = t(162);
    assert_eq!(ops(&case.step()), ["event e1 Delivered via Resumed", "event.delivered"]);

    // tmux could not start the resume: fresh at once, same event.
    let mut case = Case::new(ran_old());
    let intent = case.decide().intent().unwrap().clone();
    case.status = intent;
    case.spawn_failure = Some("tmux new-session failed: boom");
    let plan = case.step();
    assert_eq!(
        ops(&plan),
        ["record intent", "session.resume_failed ResumeSpawnFailed", FRESH_E1, "event e1 Delivering via Fresh"]
    );
    assert_eq!(condition(&plan.status, RESUMED), Some(("False", "ResumeSpawnFailed")));

    // The resumed pane died within the probe: PaneDied, fresh under a new uuid with the same prompt.
    let mut case = Case::new(ran_old());
    case.step();
    case.output = "No conversation found with session ID: 0a0b0c0d-old";
    case.now = t(100);
    case.liveness = Liveness::Dead;
    let plan = case.step();
    // The resume's send went to a harness that is gone: returned (nothing counted), then sent to the fresh one.
    assert_eq!(
        ops(&plan),
        [
            "record intent",
            "session.resume_failed PaneDied",
            "event e1 Pending",
            FRESH_E1,
            "event e1 Delivering via Fresh"
        ]
    );
    let resumed = plan.status.conditions.iter().find(|c| c.type_ == RESUMED.as_str()).unwrap();
    assert_eq!(resumed.reason, "PaneDied");
    assert!(resumed.message.contains("No conversation found with session ID: 0a0b0c0d-old"), "{}", resumed.message);
    // ... and once that fresh pane is alive at its deadline, the event is delivered via Fresh under the new id.
    case.liveness = Liveness::Alive;
    case.now = t(103);
    let plan = case.step();
    // Without a transcript, known delivered at the end of the settle window after the respawn.
    assert_eq!(ops(&plan), ["session.respawned resumed=false"]);
    case.now = t(103 + 60);
    assert_eq!(ops(&case.step()), ["event e1 Delivered via Fresh", "event.delivered"]);
    assert_eq!(plan.status.harness_session_id.as_deref(), Some(NEW));
    assert_eq!(plan.status.previous_session_ids, [OLD], "the fallback keeps the way back");
    assert_eq!(condition(&plan.status, RESUMED), Some(("False", "PaneDied")));
}

/// A resume the harness refuses because another process of its own holds the conversation (Claude Code's background
/// sessions) is busy elsewhere, not a failed resume: within the probe or after it, no fresh conversation replaces
/// it; its prompt waits, and the same conversation is resumed again after the back-off.
#[test]
fn a_conversation_held_elsewhere_is_resumed_again_never_replaced() {
    const HELD: &str = "That session is running in the background. Run `claude agents` to find it and open it, or \
                        stop it there first to resume it here. Add --fork-session to branch off a copy instead.";
    let rows = [("within the probe", 100), ("within the settle window", 130), ("after the settle window", 200)];
    for (row, died_at) in rows {
        let mut case = Case::new(ran_old());
        case.status.failure_count = 2; // it has been refused before: the next try waits
        assert_eq!(spawned(&case.step()), RESUME_E1, "{row}");
        if died_at > 102 {
            case.liveness = Liveness::Alive;
            case.now = t(102);
            assert_eq!(ops(&case.step()), ["session.respawned resumed=true"], "{row}: it looked alive");
        }
        case.liveness = Liveness::Dead;
        case.output = HELD;
        case.now = t(died_at);
        let plan = case.step();
        assert_eq!(ops(&plan), ["session.resume_failed ConversationBusy", "event e1 Pending"], "{row}: no fresh spawn");
        let resumed = plan.status.conditions.iter().find(|c| c.type_ == RESUMED.as_str()).unwrap();
        assert_eq!((resumed.status.as_str(), resumed.reason.as_str()), ("False", "ConversationBusy"), "{row}");
        assert!(resumed.message.contains("is running in the background"), "{row}: {}", resumed.message);
        assert_eq!(plan.status.harness_session_id.as_deref(), Some(OLD), "{row}: the conversation is kept");
        assert_eq!(plan.status.unresumable_session_id, None, "{row}");
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(20)), "{row}: the third failure waits 20 s");
        // Before the back-off is over nothing starts; after it, the same conversation is resumed.
        case.now = t(died_at + 10);
        assert_eq!(ops(&case.step()), ["session.backoff"], "{row}");
        case.now = t(died_at + 20);
        assert_eq!(spawned(&case.step()), RESUME_E1, "{row}: resumed again");
    }
    // A harness that ran ten minutes was not refused its resume, whatever its last lines quote: an exit.
    let mut case = Case::new(ran_old());
    case.step();
    (case.liveness, case.now) = (Liveness::Alive, t(102));
    case.step();
    (case.liveness, case.output, case.now) = (Liveness::Dead, HELD, t(102 + 600));
    let plan = case.step();
    assert_eq!(ops(&plan)[1], "session.exited", "healthy, then an exit: {:?}", ops(&plan));
    assert_eq!(spawned(&plan), RESUME_E1, "resumed at once, no back-off");
    assert_eq!(condition(&plan.status, RESUMED), Some(("True", "Resumed")), "not ConversationBusy");
}

/// A spawn clears a stale session of its name (its owner's only) only where tmux showed one, or where it looked
/// under another name: with none there, `new-session` alone saves a tmux call.
#[test]
fn a_spawn_clears_first_only_what_tmux_showed_or_did_not_look_at() {
    let clears = |case: &Case| {
        let plan = case.decide();
        plan.ops.iter().find_map(|op| if let Op::Spawn(s) = op { Some(s.clear) } else { None }).unwrap()
    };
    let mut dead = Case::new(ran_old());
    dead.tmux = Some(ours());
    assert!(clears(&dead), "a dead pane of the name is there");
    let mut absent = Case::new(ran_old());
    absent.liveness = Liveness::Absent;
    assert!(!clears(&absent), "nothing of the name");
    absent.session = Some("loop-repo-12"); // the recorded older name, looked at instead
    assert!(clears(&absent), "the configured name was not looked at");
}
