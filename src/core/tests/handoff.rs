//! The handoff: a fresh conversation after a failed resume is told, with its first prompt, what the lost one had
//! taken; the prompt follows unchanged.

use super::*;

/// The lost conversation `OLD` had taken two prompts; one more was delivered to a conversation before it.
fn lost_with_prompts() -> Case {
    let mut case = Case::new(ran_old());
    case.found = Some(false);
    let delivered = |name: &str, at, prompt: &str, to: &str| FinishedEvent {
        prompt: prompt.into(),
        conversation: Some(to.into()),
        ..FinishedEvent::new(name, t(at))
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
}
