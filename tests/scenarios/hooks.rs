//! Hooks, with the stand-in in Claude Code's hook shape (`standin-unkind`, `standin-deaf`, `standin-late`): the
//! harness's own hooks, received by this build's `worksession hook`, confirm each prompt, after where the hook file
//! stood when it was sent, and say what the harness does.

use worksession::api::{Phase, PromptPhase, Via, WorkEventStatus};
use worksession::core::ConditionType;

use super::{Rig, await_delivered, await_phase, await_value, condition, initial_phase};

/// A prompt the harness took before says nothing of the same words sent later: the stand-in loses the paste of a
/// second "yes", which stays `Delivering` (its hook file already holds a "yes", before the offset), and at the deadline
/// (15 s in tests) it is sent again, taken, and confirmed: two attempts, and the harness got "yes" twice, never thrice.
pub async fn a_prompt_is_confirmed_only_after_its_send_and_sent_again_at_the_deadline(rig: &impl Rig) {
    rig.create_session("yes", serde_json::json!({"harness": "standin-deaf", "initialPrompt": "yes"})).await;
    let st = await_value(
        "yes: its initial prompt Delivered",
        || rig.session_status("yes"),
        |s| initial_phase(s) == Some(PromptPhase::Delivered),
    )
    .await;
    assert_eq!(st.initial_prompt.as_ref().and_then(|p| p.via), Some(Via::Fresh));
    rig.send("yes", "yes-1", "yes").await;
    let sent = |s: &WorkEventStatus| s.phase == Some(PromptPhase::Delivering) && s.attempts == 1;
    let first = await_value("yes-1 sent", || rig.event_status("yes-1"), sent).await;
    assert!(first.sent_offset.is_some_and(|at| at > 0), "the mark is where the hook file stood: {first:?}");
    let ev = await_delivered(rig, "yes-1").await;
    assert_eq!((ev.attempts, ev.via), (2, Some(Via::Pasted)), "sent again after the deadline: {ev:?}");
    let taken: Vec<String> = rig.tmux().prompts().into_iter().map(|p| p.prompt).collect();
    assert_eq!(taken, ["yes", "yes"], "the initial prompt, then the second paste; the first paste was lost");
}

/// As unkind as the real CLI: each prompt stored with its whitespace altered, each hook fired a second late. A prompt
/// with tabs and trailing spaces is still confirmed; `Activity` follows the harness (working, then idle once its turn
/// is over, then waiting for a person with its words).
pub async fn an_unkind_harness_still_confirms_and_says_what_it_does(rig: &impl Rig) {
    rig.create_session("unk", serde_json::json!({"harness": "standin-unkind"})).await;
    await_phase(rig, "unk", Phase::Running).await;
    let prompt = "fix\tthe bug  \nand then   the tests  ";
    rig.send("unk", "unk-1", prompt).await;
    let ev = await_delivered(rig, "unk-1").await;
    assert_eq!(ev.via, Some(Via::Pasted));
    let taken: Vec<String> = rig.tmux().prompts().into_iter().map(|p| p.prompt).collect();
    assert_eq!(taken, ["fix    the bug\nand then   the tests"], "the harness stored it altered");
    let idle = |s: &worksession::api::WorkSessionStatus| condition(s, ConditionType::Activity).1 == "Idle";
    let st = await_value("unk idle after its turn", || rig.session_status("unk"), idle).await;
    assert_eq!(condition(&st, ConditionType::Activity).0, "False");
    rig.send("unk", "unk-2", "ASK may I run the tests?").await;
    let waiting =
        |s: &worksession::api::WorkSessionStatus| condition(s, ConditionType::Activity).1 == "WaitingForInput";
    let st = await_value("unk waiting for a person", || rig.session_status("unk"), waiting).await;
    assert_eq!(condition(&st, ConditionType::Activity).2, "Standin needs your permission to use Bash");
    assert_eq!(rig.event_status("unk-2").await.phase, Some(PromptPhase::Delivered));
}

/// The real CLI runs `UserPromptSubmit` just before it writes the prompt to its transcript, and one killed in between
/// has lost the prompt though its hook reported it (measured with Claude Code 2.1.332). The stand-in writes it 6 s
/// after the hook; killed within them, the prompt is not `Delivered` on the hook's word: it is sent again to the
/// resumed conversation, and reaches it once.
pub async fn a_prompt_reported_but_never_written_is_sent_again(rig: &impl Rig) {
    rig.create_session("lt", serde_json::json!({"harness": "standin-late"})).await;
    await_phase(rig, "lt", Phase::Running).await;
    let st = rig.session_status("lt").await;
    let id = st.harness_session_id.expect("an id given at start");
    rig.send("lt", "lt-1", "write this down").await;
    let identity = format!("{}/lt", rig.namespace());
    let hooks = worksession::node::hook::file_of(&rig.tmux().state(), &identity);
    crate::support::eventually("the hook reported lt-1", || async {
        std::fs::read_to_string(&hooks).ok().filter(|h| h.contains("write this down")).map(|_| ())
    })
    .await;
    rig.tmux().kill_pane(&rig.tmux_session("lt")).await;
    assert!(rig.tmux().prompts().is_empty(), "killed before it wrote the prompt down");

    let ev = await_delivered(rig, "lt-1").await;
    assert_eq!((ev.via, ev.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())), "{ev:?}");
    let taken: Vec<_> = rig.tmux().prompts().into_iter().map(|p| (p.conversation, p.prompt)).collect();
    assert_eq!(taken, [(id, "write this down".to_string())], "written once, in the same conversation");
}
