//! Ids found after the start, shared by both modes, with the stand-in in Codex CLI's shapes
//! (`standin-codex`): no id at start, its rollout written at the first turn and found by the profile's `discover`.

use serde_json::json;

use super::{
    ConditionType, Phase, Rig, Via, await_delivered, await_value, conversation_of, id, status_reason as condition,
};

async fn await_discovered(rig: &impl Rig, name: &str) -> String {
    let st = await_value(
        &format!("{name}: ConversationId discovered"),
        || rig.session_status(name),
        |s| {
            condition(s, ConditionType::ConversationId) == ("True".into(), "Discovered".into())
                && s.harness_session_id.is_some()
        },
    )
    .await;
    id(&st)
}

/// A harness that shows its id only after the start: the session is `Discovering` until its rollout appears, then
/// records the id; a death then resumes that conversation. Two started at once in one workdir never take each
/// other's id. A death before the id showed is a fresh start.
pub async fn ids_discovered_after_the_start(rig: &impl Rig) {
    let codex = |prompt: &str| json!({"harness": "standin-codex", "initialPrompt": prompt});
    rig.create_session("cx", codex("first turn of cx")).await;
    let id = await_discovered(rig, "cx").await;
    assert_eq!(id, conversation_of(rig, "first turn of cx").await, "the id of the conversation it runs");

    rig.tmux().kill_harness(&rig.tmux_session("cx")).await;
    rig.send("cx", "cx-1", "after the crash").await;
    // Its respawn resumes the discovered conversation (the event rides on it, or is pasted once it runs, when the
    // settle window had already put the boot prompt back and respawned it first).
    let ev = await_delivered(rig, "cx-1").await;
    assert!(ev.via == Some(Via::Resumed) || ev.via == Some(Via::Pasted), "{ev:?}");
    assert_eq!(conversation_of(rig, "after the crash").await, id, "the discovered conversation, resumed");
    let st = rig.session_status("cx").await;
    assert_eq!(condition(&st, ConditionType::Resumed), ("True".into(), "Resumed".into()), "{st:?}");

    // Two at once in one workdir: the second waits until the first showed its id; each records its own.
    rig.create_session("cy", codex("first turn of cy")).await;
    rig.create_session("cz", codex("first turn of cz")).await;
    let (y, z) = (await_discovered(rig, "cy").await, await_discovered(rig, "cz").await);
    assert_eq!(y, conversation_of(rig, "first turn of cy").await);
    assert_eq!(z, conversation_of(rig, "first turn of cz").await);

    // No first turn, no rollout: still discovering when it dies, so the next start is fresh.
    rig.create_session("cw", json!({"harness": "standin-codex", "workdir": rig.tmux().state()})).await;
    let st = await_value(
        "cw Discovering",
        || rig.session_status("cw"),
        |s| {
            s.phase == Some(Phase::Running)
                && condition(s, ConditionType::ConversationId) == ("False".into(), "Discovering".into())
        },
    )
    .await;
    assert!(st.harness_session_id.is_none(), "{st:?}");
    rig.tmux().kill_harness(&rig.tmux_session("cw")).await;
    rig.send("cw", "cw-1", "start again").await;
    let ev = await_delivered(rig, "cw-1").await;
    assert_eq!(ev.via, Some(Via::Fresh));
    let st = rig.session_status("cw").await;
    assert_eq!(condition(&st, ConditionType::Resumed), ("False".into(), "NoRecordedSession".into()), "{st:?}");
    assert_eq!(await_discovered(rig, "cw").await, conversation_of(rig, "start again").await);
}

/// Codex CLI's notify (given per run as `-c notify=[...]`, received by this build's `worksession
/// hook`) names its thread at the end of its first turn, so its id is known without scanning its rollouts: the
/// stand-in writes none here. The id is recorded, and a crash resumes that conversation.
pub async fn the_codex_notify_names_its_conversation(rig: &impl Rig) {
    let codex = json!({"harness": "standin-codex-notify", "initialPrompt": "first turn of nx"});
    rig.create_session("nx", codex).await;
    let id = await_discovered(rig, "nx").await;
    assert_eq!(id, conversation_of(rig, "first turn of nx").await, "the id of the conversation it runs");
    assert!(!rig.tmux().state().join(".codex").exists(), "no rollout to scan: the notify told");

    rig.tmux().kill_harness(&rig.tmux_session("nx")).await;
    rig.send("nx", "nx-1", "after the crash").await;
    let ev = await_delivered(rig, "nx-1").await;
    assert!(ev.via == Some(Via::Resumed) || ev.via == Some(Via::Pasted), "{ev:?}");
    assert_eq!(conversation_of(rig, "after the crash").await, id, "the notified conversation, resumed");
}

/// Codex CLI notifies for threads of its own too: after a first turn, the thread that writes the task's title, which
/// it keeps nowhere (no rollout; measured with 0.171.0). The latest notify then names a conversation no resume finds:
/// the recorded id stays the one it keeps, and a crash resumes it.
pub async fn a_codex_title_thread_is_not_taken_for_the_conversation(rig: &impl Rig) {
    let codex = json!({"harness": "standin-codex-titled", "initialPrompt": "first turn of tt"});
    rig.create_session("tt", codex).await;
    let id = conversation_of(rig, "first turn of tt").await;
    // The harness's own record of both notifies, and its spawn's verification over (a decision follows the hooks
    // only then).
    let hooks = rig.tmux().state().join(format!(".worksession/hooks/{}_tt.jsonl", rig.namespace()));
    super::await_value(
        "both notifies",
        || async { std::fs::read_to_string(&hooks).unwrap_or_default() },
        |t| t.matches("\"notify\"").count() >= 2,
    )
    .await;
    let settled = super::await_value(
        "the spawn verified",
        || rig.session_status("tt"),
        |s| s.verification.is_none() && s.harness_session_id.is_some(),
    )
    .await;
    assert_eq!(super::id(&settled), id, "the conversation it keeps");

    rig.tmux().kill_harness(&rig.tmux_session("tt")).await;
    rig.send("tt", "tt-2", "after the crash").await;
    let ev = await_delivered(rig, "tt-2").await;
    assert!(ev.via == Some(Via::Resumed) || ev.via == Some(Via::Pasted), "{ev:?}");
    assert_eq!(conversation_of(rig, "after the crash").await, id, "resumed, not replaced");
    // Its hook confirms the event as the resumed harness takes it, before the resume's verification is over.
    super::await_value(
        "tt: Resumed=True once verified",
        || rig.session_status("tt"),
        |s| s.verification.is_none() && super::condition(s, ConditionType::Resumed).0 == "True",
    )
    .await;
}

/// Codex CLI's own hooks confirm each prompt it takes (`UserPromptSubmit`, given per run): a paste it lost is not
/// taken for delivered because its pane lived on (the settle window, all Codex had before), but sent again at the
/// deadline and taken once.
pub async fn a_paste_codex_lost_is_sent_again(rig: &impl Rig) {
    let codex = json!({"harness": "standin-codex-deaf", "initialPrompt": "first turn of cd"});
    rig.create_session("cd", codex).await;
    await_value(
        "cd: its initial prompt Delivered",
        || rig.session_status("cd"),
        |s| super::initial_phase(s) == Some(super::PromptPhase::Delivered),
    )
    .await;
    rig.send("cd", "cd-1", "pasted into codex").await;
    let ev = await_delivered(rig, "cd-1").await;
    assert_eq!((ev.attempts, ev.via), (2, Some(Via::Pasted)), "sent again after the deadline: {ev:?}");
    let taken: Vec<String> = rig.tmux().prompts().into_iter().map(|p| p.prompt).collect();
    assert_eq!(taken, ["first turn of cd", "pasted into codex"], "the lost paste, then its second send, once");
}
