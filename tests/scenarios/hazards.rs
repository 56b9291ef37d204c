//! Resume hazards, with the stand-in as unkind as Claude Code where its trackers say it bites (`standin-claude`:
//! the built-in `claude` profile's `resumeBusyPattern` and `env`, the stand-in's `--summary-picker`, and its refusal
//! of a conversation another process holds, 2 s late): a resume never opens the "Resume from summary" picker, and a
//! conversation busy elsewhere waits for its resume instead of being replaced by a fresh one.

use std::time::{Duration, SystemTime};

use worksession::api::{Phase, PromptPhase, Via, WorkSessionStatus};
use worksession::core::ConditionType;

use super::{Rig, await_delivered, await_phase, await_value, condition};

/// Starts `name` on `standin-claude`, delivers one prompt to it, and kills its harness: returns its conversation's id.
async fn a_conversation_then_a_crash(rig: &impl Rig, name: &str) -> String {
    rig.create_session(name, serde_json::json!({"harness": "standin-claude"})).await;
    let st = await_phase(rig, name, Phase::Running).await;
    let id = st.harness_session_id.expect("a fresh conversation's id is given at start");
    rig.send(name, &format!("{name}-1"), "the first prompt").await;
    await_delivered(rig, &format!("{name}-1")).await;
    rig.tmux().kill_harness(&rig.tmux_session(name)).await;
    id
}

/// A conversation idle for two hours and of some 150k tokens is what makes Claude Code offer to resume it from a
/// summary, a picker where the boot prompt waits and a paste is menu input whose Enter compacts it into a new
/// conversation. The built-in profile's `env` keeps the picker away: the next event is resumed into the very
/// conversation, and the picker never showed (without that `env` it does: `tests/stand_in.rs`).
pub async fn a_resume_never_opens_the_summary_picker(rig: &impl Rig) {
    let id = a_conversation_then_a_crash(rig, "pk").await;
    let transcript = rig.tmux().state().join("conversations").join(format!("{id}.jsonl"));
    let long = serde_json::json!({"type": "assistant", "message": {"content": "x".repeat(600_000)}});
    let mut text = std::fs::read_to_string(&transcript).unwrap();
    text.push_str(&format!("{long}\n"));
    std::fs::write(&transcript, text).unwrap();
    let two_hours_ago = SystemTime::now() - Duration::from_secs(2 * 3600);
    std::fs::File::options().write(true).open(&transcript).unwrap().set_modified(two_hours_ago).unwrap();

    rig.send("pk", "pk-2", "after a long pause").await;
    let ev = await_delivered(rig, "pk-2").await;
    assert_eq!((ev.via, ev.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())), "{ev:?}");
    assert!(!rig.tmux().state().join("picker.log").exists(), "the picker never showed");
    let taken = rig.tmux().prompts().into_iter().find(|p| p.prompt == "after a long pause").expect("taken");
    assert_eq!(taken.conversation, id, "in the same conversation, not a summary's");
}

/// Another process of the harness holds the conversation (Claude Code's background session): the resume is refused
/// with the CLI's words, after its probe. That is no reason for a fresh conversation: `Resumed=False` reason
/// `ConversationBusy`, the event waits (nothing else got it), and once the other process lets go, the same
/// conversation is resumed and the event delivered into it.
pub async fn a_conversation_busy_elsewhere_waits_and_is_resumed(rig: &impl Rig) {
    let id = a_conversation_then_a_crash(rig, "bz").await;
    let held = rig.tmux().state().join("held");
    std::fs::create_dir_all(&held).unwrap();
    std::fs::write(held.join(&id), "").unwrap();

    rig.send("bz", "bz-2", "while it is held").await;
    let busy = |s: &WorkSessionStatus| condition(s, ConditionType::Resumed).1 == "ConversationBusy";
    let st = await_value("bz: its conversation busy elsewhere", || rig.session_status("bz"), busy).await;
    let (status, _, message) = condition(&st, ConditionType::Resumed);
    assert_eq!(status, "False");
    assert!(message.contains("is running in the background"), "the harness's words: {message}");
    assert_eq!(st.harness_session_id.as_deref(), Some(id.as_str()), "the conversation is kept");
    assert_ne!(rig.event_status("bz-2").await.phase, Some(PromptPhase::Delivered));
    assert!(rig.tmux().prompts().iter().all(|p| p.prompt != "while it is held"), "no other conversation got it");

    std::fs::remove_file(held.join(&id)).unwrap();
    let ev = await_delivered(rig, "bz-2").await;
    assert_eq!((ev.via, ev.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())), "{ev:?}");
    let taken: Vec<_> = rig.tmux().prompts().into_iter().filter(|p| p.prompt == "while it is held").collect();
    assert_eq!(taken.len(), 1, "delivered once: {taken:?}");
    assert_eq!(taken[0].conversation, id);
    // Its boot prompt may be known delivered before its probe is over: the condition follows at the probe's end.
    let resumed = |s: &WorkSessionStatus| condition(s, ConditionType::Resumed).1 == "Resumed";
    await_value("bz: resumed once it was let go", || rig.session_status("bz"), resumed).await;
}

/// Gemini CLI has no queue (measured with 0.61.0): a prompt pasted while it works stays unsent in its input box, and
/// the next paste joins it there. The stand-in's gemini shape does the same, and its initial prompt is a turn of 20 s
/// (`WORK 20`), longer than the tests' 15 s confirm deadline: there is none while it works. An event sent meanwhile
/// waits for the turn's end (its `AfterAgent` hook), is pasted then, alone, and reaches the harness once as it was
/// written; pasted at once it would have stayed in the box, been sent again at its deadline into the same box, and
/// reached the harness twice joined into one prompt (or never).
pub async fn a_harness_without_a_queue_gets_prompts_between_turns(rig: &impl Rig) {
    let spec =
        serde_json::json!({"harness": "standin-gemini", "initialPrompt": "WORK 20", "workdir": rig.tmux().state()});
    rig.create_session("gq", spec).await;
    let working = |s: &WorkSessionStatus| condition(s, ConditionType::Activity).1 == "Working";
    await_value("gq: working on its first turn", || rig.session_status("gq"), working).await;
    rig.send("gq", "gq-1", "after the turn").await;
    rig.send("gq", "gq-2", "and after that one").await;
    let ev = await_delivered(rig, "gq-1").await;
    assert_eq!((ev.attempts, ev.via), (1, Some(Via::Pasted)), "pasted once, between turns: {ev:?}");
    let ev = await_delivered(rig, "gq-2").await;
    assert_eq!(ev.attempts, 1, "{ev:?}");
    // Its hook confirms a prompt before it writes its record (as Gemini's BeforeAgent fires before its turn): wait for
    // the record, then read it whole.
    let taken: Vec<String> = rig.tmux().await_prompts(3).await.into_iter().map(|p| p.prompt).collect();
    assert_eq!(taken, ["WORK 20", "after the turn", "and after that one"], "each alone, once, in order");
    assert_eq!(rig.event_status("gq-1").await.phase, Some(PromptPhase::Delivered));
}
