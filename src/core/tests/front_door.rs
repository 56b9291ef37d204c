//! The front door, as the core decides it: a prompt the harness would take as one of its commands goes
//! with the literal mark in front, on its command line and pasted; only a hand-made event that opts in goes as it is; a
//! paste is recognised by the event's UID, not its name; a conversation another session records is not adopted; a
//! session under an older release's name is adopted until it dies.

use super::*;

#[test]
fn a_prompt_the_harness_would_take_as_a_command_goes_as_text_on_its_command_line_and_pasted() {
    use crate::harness::LITERAL_PREFIX;
    for prompt in ["/clear", "  /clear", "!touch /tmp/p", "\n/compact"] {
        let marked = format!("{LITERAL_PREFIX}{prompt}");
        let mut case = Case::new(ran_old());
        case.events = vec![ev("e1", prompt)];
        assert_eq!(
            spawned(&case.decide()),
            format!("spawn loop-ns_repo-12 claude --resume 0a0b0c0d-old -- {marked}"),
            "{prompt:?}: marked on the command line"
        );
        // Pasted into a live harness: marked too.
        case.liveness = Liveness::Alive;
        let paste = case.decide().ops.into_iter().find_map(|op| match op {
            Op::Paste { text, .. } => Some(text),
            _ => None,
        });
        assert_eq!(paste, Some(marked), "{prompt:?}: pasted as text");
    }
    // What the harness reads as text goes as it is.
    for prompt in ["fix /tmp/x", "# a heading", "@notes.txt please", "please fix the bug"] {
        let mut case = Case::new(ran_old());
        case.events = vec![ev("e1", prompt)];
        assert!(spawned(&case.decide()).ends_with(&format!("-- {prompt}")), "{prompt:?} on the command line");
    }
    // A profile may say its harness has no such commands.
    let mut case = Case::new(ran_old());
    case.config.harnesses.get_mut("claude").unwrap().command_prefixes.clear();
    case.events = vec![ev("e1", "/literal")];
    assert!(spawned(&case.decide()).ends_with("-- /literal"));
}

#[test]
fn a_hand_made_command_goes_as_it_is_and_never_rides_on_the_command_line() {
    let mut case = Case::new(ran_old());
    case.events = vec![PendingWorkEvent { command: true, ..ev("e1", "/compact") }];
    assert_eq!(spawned(&case.step()), "spawn loop-ns_repo-12 claude --resume 0a0b0c0d-old");
    case.liveness = Liveness::Alive;
    case.now = t(103);
    let first = case.step();
    case.now = t(104);
    let pasted: Vec<String> = [first, case.step()]
        .iter()
        .flat_map(|p| &p.ops)
        .filter_map(|op| match op {
            Op::Paste { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(pasted, ["/compact"], "as it is, for the harness to run");
}

#[test]
fn a_paste_is_recognised_by_the_events_uid_not_its_name() {
    let mut case = Case::new(ran_old());
    case.liveness = Liveness::Alive;
    // An earlier event of the same name was pasted (its tag is its own UID): this one is a new delivery.
    case.tmux = Some(SessionView { alive: true, pasted: "uid-of-an-earlier-e1".into(), ..ours() });
    assert_eq!(ops(&case.decide())[0], "paste e1 into loop-ns_repo-12: please fix the bug");
    let tagged = case.decide().ops.iter().find_map(|op| match op {
        Op::Paste { tag, .. } => Some(tag.clone()),
        _ => None,
    });
    assert_eq!(tagged.as_deref(), Some("uid-e1/1/0"), "the event's UID, the attempt, and its offset");
    // Its own UID on the session: pasted before the agent stopped, so recorded, not pasted again, and confirmed only
    // from the paste's offset on.
    case.tmux = Some(SessionView { alive: true, pasted: "uid-e1/1/4096".into(), ..ours() });
    let plan = case.decide();
    assert_eq!(ops(&plan), ["event e1 Delivering via Pasted"]);
    let Op::WorkEventStatus(update) = &plan.ops[0] else { unreachable!() };
    assert_eq!((update.offset, update.attempt), (Some(4096), true), "the paste counted, at its offset");
    // A tag an older release wrote, without an offset.
    case.tmux = Some(SessionView { alive: true, pasted: "uid-e1".into(), ..ours() });
    assert_eq!(ops(&case.decide()), ["event e1 Delivering via Pasted"]);
    case.tmux = Some(SessionView { alive: true, pasted: "uid-e10/1/4096".into(), ..ours() });
    assert_eq!(ops(&case.decide())[0], "paste e1 into loop-ns_repo-12: please fix the bug", "another event's tag");
    // Its first attempt, recorded, then sent back at its deadline: pasted again, as attempt 2.
    case.events[0].attempts = 1;
    case.tmux = Some(SessionView { alive: true, pasted: "uid-e1/1/4096".into(), ..ours() });
    let plan = case.decide();
    assert_eq!(ops(&plan)[0], "paste e1 into loop-ns_repo-12: please fix the bug", "an attempt recorded is spent");
    assert!(matches!(&plan.ops[0], Op::Paste { tag, .. } if tag == "uid-e1/2/0"));
}

#[test]
fn a_conversation_another_session_records_is_not_adopted() {
    let mut case = Case::new(WorkSessionStatus::default());
    case.spec.harness_session_id = Some("their-conversation".into());
    case.id_taken_by = Some("team-b/theirs");
    let plan = case.decide();
    assert_eq!(spawned(&plan), "", "no spawn");
    assert_eq!(plan.status.phase, Some(Phase::Failed));
    assert_eq!(condition(&plan.status, READY), Some(("False", "SessionIdTaken")));
    let ready = plan.status.conditions.iter().find(|c| c.type_ == READY.as_str()).unwrap();
    assert!(
        ready.message.contains("team-b/theirs") && ready.message.contains("their-conversation"),
        "{}",
        ready.message
    );
    case.id_taken_by = None;
    assert!(spawned(&case.decide()).contains("--resume their-conversation"), "free again: adopted");
}

#[test]
fn a_session_under_an_older_releases_name_is_adopted_until_it_dies() {
    let mut case = Case::new(ran_old());
    case.session = Some("loop-repo-12"); // `<prefix><workItem>`, as older releases named it
    case.liveness = Liveness::Alive;
    let plan = case.decide();
    assert_eq!(ops(&plan)[0], "paste e1 into loop-repo-12: please fix the bug");
    case.liveness = Liveness::Dead;
    let plan = case.decide();
    assert_eq!(ops(&plan)[..3], ["record intent", "stop loop-repo-12", RESUME_E1]);
    assert_eq!(plan.status.tmux_session.as_deref(), Some("loop-ns_repo-12"));
}
