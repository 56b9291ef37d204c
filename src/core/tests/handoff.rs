//! The handoff: a fresh conversation after a failed resume is told, with its first prompt, what the lost one had
//! taken; the prompt follows unchanged.

use super::*;

/// The lost conversation `OLD` had taken two prompts; one more was delivered to a conversation before it.
fn lost_with_prompts() -> Case {
    let mut case = Case::new(ran_old());
    case.found = Some(false);
    let delivered = |name: &str, at, prompt: &str, to: &str| FinishedWorkEvent {
        prompt: prompt.into(),
        conversation: Some(to.into()),
        delivered: true,
        ..FinishedWorkEvent::new(name, t(at))
    };
    case.finished = vec![
        delivered("e0", 10, "add the feature", OLD),
        delivered("before", 5, "a prompt of an older conversation", "older"),
        delivered("e00", 20, "now the tests", OLD),
    ];
    case
}

#[test]
fn a_fresh_conversation_after_a_failed_resume_gets_the_lost_ones_prompts_then_the_event() {
    let mut case = lost_with_prompts();
    case.checkout = Some(("worksession/repo-12", "0123456789abcdef0123456789abcdef01234567"));
    let plan = case.step();
    let spawn = spawned(&plan);
    let (handoff, prompt) = spawn.split_once(" -- ").unwrap().1.rsplit_once("\n\n").unwrap();
    assert_eq!(prompt, "please fix the bug", "the event follows unchanged");
    assert!(handoff.starts_with(&format!("[worksession] This work item was in conversation {OLD}")), "{handoff}");
    assert!(handoff.contains("ConversationNotFound"), "why: {handoff}");
    let (first, second) = (handoff.find("[1] add the feature").unwrap(), handoff.find("[2] now the tests").unwrap());
    assert!(first < second, "oldest first");
    assert!(!handoff.contains("older conversation"), "only the lost conversation's prompts");
    assert!(handoff.contains("branch worksession/repo-12, last commit 0123456789abcdef"), "{handoff}");
    let recorded = plan.status.handoff.as_ref().unwrap();
    assert_eq!((recorded.from.as_str(), recorded.prompt.as_deref()), (OLD, Some("e1")));
    assert!(spawn.ends_with(&format!("{}\n\nplease fix the bug", recorded.text)));
}

#[test]
fn turned_off_by_the_session_or_the_profile_the_fallback_is_the_seeds() {
    let mut case = lost_with_prompts();
    case.spec.handoff = Some(crate::api::HandoffSpec { enabled: Some(false), ..Default::default() });
    assert_eq!(spawned(&case.decide()), FRESH_E1);
    let mut case = lost_with_prompts();
    case.config.harnesses.get_mut("claude").unwrap().handoff = false;
    let plan = case.decide();
    assert_eq!(spawned(&plan), FRESH_E1);
    assert_eq!(plan.status.handoff, None);
}

#[test]
fn opting_out_of_resume_or_nothing_to_resume_hands_nothing_over() {
    let mut case = lost_with_prompts();
    case.config.defaults.resume_on_respawn = false;
    assert_eq!(spawned(&case.decide()), FRESH_E1);
}

#[test]
fn a_handoff_not_yet_delivered_stays_owed_to_the_next_fresh_conversation() {
    let mut case = lost_with_prompts();
    let first = case.step();
    let text = first.status.handoff.clone().unwrap().text;
    // The new conversation dies before it took the prompt, and it cannot be resumed either: the next one is told of
    // the conversation that had taken the prompts, not of the one that took nothing.
    case.events = vec![ev("e1", "please fix the bug")];
    case.status.phase = Some(Phase::Pending);
    case.status.verification = None;
    case.tmux = None;
    case.liveness = Liveness::Dead;
    case.found = Some(false);
    let plan = case.step();
    let handoff = plan.status.handoff.as_ref().unwrap();
    assert_eq!((handoff.from.as_str(), handoff.text.as_str()), (OLD, text.as_str()));
    assert!(spawned(&plan).contains(&format!("{text}\n\nplease fix the bug")), "carried again");
}

#[test]
fn a_handoff_rides_on_the_first_paste_when_the_command_line_has_no_room() {
    let mut case = lost_with_prompts();
    let long = "y".repeat(ARGV_PROMPT_LIMIT - 100);
    case.events = vec![ev("e1", &long)];
    let plan = case.step();
    assert!(!spawned(&plan).contains("[worksession]"), "boot without a prompt");
    assert_eq!(plan.status.handoff.as_ref().unwrap().prompt, None, "not claimed yet");
    case.liveness = Liveness::Alive;
    case.now = t(200);
    let plan = case.step();
    let paste = ops(&plan).into_iter().find(|o| o.starts_with("paste e1")).expect("pasted");
    assert!(paste.contains("[worksession] This work item was in conversation") && paste.ends_with(&long));
    assert_eq!(plan.status.handoff.as_ref().unwrap().prompt.as_deref(), Some("e1"));
    // The claim is recorded before the paste: an agent that stops after it still looks for what it sent.
    let intent = plan.intent().expect("an intent before the paste");
    assert_eq!(intent.handoff.as_ref().unwrap().prompt_uid.as_deref(), Some(case.events[0].tag.as_str()));
    let position = |what: &str| ops(&plan).iter().position(|o| o.starts_with(what)).unwrap();
    assert!(position("record intent") < position("paste e1"));
}

/// A resume given a long prompt on its command line dies; the fallback's command line has no room for the prompt
/// with its handoff: the prompt waits again (nothing counted) and is pasted, handoff first, once the harness is ready.
#[test]
fn a_dead_resumes_long_boot_prompt_waits_again_for_the_fallback_to_paste_it() {
    let mut case = lost_with_prompts();
    case.found = Some(true);
    let long = "z".repeat(ARGV_PROMPT_LIMIT - 100);
    case.events = vec![ev("e1", &long)];
    let plan = case.step();
    assert!(spawned(&plan).contains("--resume"), "resumed with it on its command line");
    assert_eq!(case.events[0].phase, PromptPhase::Delivering);
    // The resumed pane dies within its probe: a fresh conversation, whose command line cannot hold both.
    (case.liveness, case.now) = (Liveness::Dead, t(101));
    case.output = "No conversation found with session ID: 0a0b0c0d-old";
    let plan = case.step();
    assert!(!spawned(&plan).contains("zzz"), "not on the fallback's command line");
    assert_eq!((case.events[0].phase, case.events[0].attempts), (PromptPhase::Pending, 0), "waits again");
    (case.liveness, case.now) = (Liveness::Alive, t(200));
    let plan = case.step();
    let paste = ops(&plan).into_iter().find(|o| o.starts_with("paste e1")).expect("pasted once ready");
    assert!(paste.contains("[worksession]") && paste.ends_with(&long));
}

/// Delivered, the handoff is done: a later event under the same name (a new object) is sent as it is.
#[test]
fn a_delivered_handoff_never_rides_again_not_even_on_an_event_of_the_same_name() {
    let mut case = lost_with_prompts();
    let plan = case.step();
    let handoff = plan.status.handoff.clone().unwrap();
    assert_eq!(handoff.prompt.as_deref(), Some("e1"));
    // e1 is delivered to the new conversation.
    let fresh = plan.status.verification.as_ref().unwrap().harness_session_id.clone();
    case.events.clear();
    case.finished.push(FinishedWorkEvent {
        prompt: "please fix the bug".into(),
        conversation: Some(fresh),
        delivered: true,
        tag: "uid-e1".into(),
        ..FinishedWorkEvent::new("e1", t(150))
    });
    (case.liveness, case.now) = (Liveness::Alive, t(150));
    let plan = case.step();
    assert!(plan.status.handoff.as_ref().unwrap().delivered, "done");
    // A new event of that name.
    case.events = vec![PendingWorkEvent { tag: "another-uid".into(), ..ev("e1", "again") }];
    case.now = t(160);
    let plan = case.step();
    let paste = ops(&plan).into_iter().find(|o| o.starts_with("paste e1")).expect("pasted");
    assert_eq!(paste, "paste e1 into loop-ns_repo-12: again");
    assert_eq!(crate::api::carried(&plan.status, "another-uid", "again"), "again");
}

/// The prompt that carried the handoff failed: the handoff waits for the next prompt, never silently dropped.
#[test]
fn a_handoff_whose_prompt_failed_rides_on_the_next_one() {
    let mut case = lost_with_prompts();
    case.step();
    // e1 failed (its harness never confirmed it); e2 comes.
    case.events = vec![ev("e2", "the next one")];
    case.finished.push(FinishedWorkEvent { tag: "uid-e1".into(), ..FinishedWorkEvent::new("e1", t(120)) });
    (case.liveness, case.now) = (Liveness::Alive, t(500));
    let plan = case.step();
    let paste = ops(&plan).into_iter().find(|o| o.starts_with("paste e2")).expect("pasted");
    assert!(paste.contains("[worksession]") && paste.ends_with("the next one"), "{paste}");
    assert_eq!(plan.status.handoff.as_ref().unwrap().prompt.as_deref(), Some("e2"));
}
