//! What a session's conversations spent, from the stand-in's transcript (Claude Code's shape: each reply's usage on
//! each of its lines), in both modes.

use worksession::api::{Tokens, Usage, Via, WorkSessionStatus};

use super::{Rig, await_delivered, await_value, id};

/// Awaits `name`'s usage counting `turns` turns.
async fn await_turns(rig: &impl Rig, name: &str, turns: u64) -> WorkSessionStatus {
    let counted = |s: &WorkSessionStatus| s.usage.as_ref().is_some_and(|u| u.turns == turns);
    await_value(&format!("{name}: {turns} turns counted"), || rig.session_status(name), counted).await
}

/// Two turns, a third after the harness was killed and its conversation resumed, a fourth in a fresh conversation
/// after the transcript was lost: the work item's total holds each reply once, the conversation's share only the
/// fresh one's, and the cost is the config's prices' (`standin-model`: $0.0069 a reply).
pub async fn usage_adds_up_across_a_resume_and_a_fresh_conversation(rig: &impl Rig) {
    let times = |n: u64| Tokens { input: 100 * n, output: 20 * n, cache_write: 30 * n, cache_read: 900 * n };
    let usage = |s: &WorkSessionStatus| s.usage.clone().unwrap_or_default();
    let model = |u: &Usage| u.models.iter().map(|m| (m.model.clone(), m.tokens, m.replies)).collect::<Vec<_>>();
    rig.create_session("spend", serde_json::json!({"harness": "standin-usage", "initialPrompt": "first"})).await;
    await_turns(rig, "spend", 1).await;
    rig.send("spend", "spend-1", "second").await;
    let st = await_turns(rig, "spend", 2).await;
    let first = id(&st);
    assert_eq!(model(&usage(&st)), [("standin-model".into(), times(2), 2)]);
    assert_eq!(usage(&st).estimated_cost.as_deref(), Some("0.0138"));

    let tmux = rig.tmux();
    tmux.kill_harness(&rig.tmux_session("spend")).await;
    rig.send("spend", "spend-2", "third").await;
    let ev = await_delivered(rig, "spend-2").await;
    assert_eq!((ev.via, ev.harness_session_id.as_deref()), (Some(Via::Resumed), Some(first.as_str())));
    let st = await_turns(rig, "spend", 3).await;
    let u = usage(&st);
    assert_eq!(model(&u), [("standin-model".into(), times(3), 3)], "read on from where the count stood");
    assert_eq!(u.conversation.map(|c| (c.harness_session_id, c.turns)), Some((first.clone(), 3)));

    tmux.kill_harness(&rig.tmux_session("spend")).await;
    std::fs::remove_file(crate::standin::transcript_of(&tmux.state(), &first)).unwrap();
    rig.send("spend", "spend-3", "fourth").await;
    let ev = await_delivered(rig, "spend-3").await;
    assert_eq!(ev.via, Some(Via::Fresh));
    let st = await_turns(rig, "spend", 4).await;
    let u = usage(&st);
    assert_eq!(model(&u), [("standin-model".into(), times(4), 4)], "the work item's total");
    assert_eq!((u.tokens, u.estimated_cost.as_deref()), (4 * 1050, Some("0.0276")));
    let share = u.conversation.unwrap();
    assert_ne!(share.harness_session_id, first);
    assert_eq!((share.tokens, share.turns), (times(1), 1), "the fresh conversation's own");
}
