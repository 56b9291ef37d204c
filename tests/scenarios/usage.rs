//! What a session's conversations spent, from the stand-in's transcript (Claude Code's shape: each reply's usage on
//! each of its lines), in both modes.

use worksession::api::{Phase, PromptPhase, Tokens, Usage, Via, WorkSessionStatus};
use worksession::core::ConditionType;
use worksession::node::tmux::Liveness;

use super::{Rig, await_delivered, await_value, condition, id, ready_message};

/// Awaits `name`'s usage counting `turns` turns, its harness verified (a turn may be counted while its spawn is).
async fn await_turns(rig: &impl Rig, name: &str, turns: u64) -> WorkSessionStatus {
    let counted =
        |s: &WorkSessionStatus| s.usage.as_ref().is_some_and(|u| u.turns == turns) && s.phase == Some(Phase::Running);
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

/// A budget reached mid-turn: the turn goes on to its end, nothing new is sent meanwhile, then the harness is stopped
/// (`Paused`, `BudgetReached`) with a prompt still waiting, never failed; the budget raised, that prompt reaches the
/// same conversation, once.
pub async fn a_budget_reached_pauses_after_the_turn_and_a_raise_goes_on(rig: &impl Rig) {
    // 1,050 tokens a reply: the first turn is within 1,500, the second is not.
    let spec = serde_json::json!({"harness": "standin-usage", "initialPrompt": "first", "budget": {"tokens": 1500}});
    rig.create_session("thrift", spec).await;
    let st = await_turns(rig, "thrift", 1).await;
    let conversation = id(&st);
    // A turn of 4 s: its reply's usage is written at once, its Stop when it ends.
    rig.send("thrift", "thrift-1", "WORK 4").await;
    await_delivered(rig, "thrift-1").await;
    await_turns(rig, "thrift", 2).await;
    rig.send("thrift", "thrift-2", "after the budget").await;
    let paused = |s: &WorkSessionStatus| s.phase == Some(Phase::Paused);
    let st = await_value("thrift Paused", || rig.session_status("thrift"), paused).await;
    let (status, reason, message) = condition(&st, ConditionType::Ready);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "BudgetReached"));
    assert!(message.starts_with("spent 2100 of its budget of 1500 tokens; 1 prompt waits"), "{message}");
    let tmux = rig.tmux();
    let prompts: Vec<String> = tmux.prompts().into_iter().map(|p| p.prompt).collect();
    assert_eq!(prompts, ["first", "WORK 4"], "nothing sent past the budget");
    // Its turn had ended: the stand-in's Stop is in its hook file before the stop.
    tmux.await_liveness(&rig.tmux_session("thrift"), Liveness::Absent).await;
    assert_eq!(rig.event_status("thrift-2").await.phase.unwrap_or(PromptPhase::Pending), PromptPhase::Pending);

    rig.patch_spec("thrift", serde_json::json!({"budget": {"tokens": 100000}})).await;
    let ev = await_delivered(rig, "thrift-2").await;
    assert_eq!((ev.via, ev.harness_session_id.as_deref()), (Some(Via::Resumed), Some(conversation.as_str())));
    let prompts = tmux.await_prompts(3).await;
    assert_eq!(prompts.iter().filter(|p| p.prompt == "after the budget").count(), 1, "{prompts:?}");
    let st = await_turns(rig, "thrift", 3).await;
    assert_eq!(st.phase, Some(Phase::Running));
}

/// The account's usage limit reached (the stand-in refuses every turn while its `limited` file is there, as Claude
/// Code records a 429): the three sessions of its harness are each parked (not failed, not restarted, no fresh
/// conversation), refused or, when a peer's refusal was known before its own prompt went out, held back by it (either
/// is right: a race decides); a session woken while the limit holds is refused and parked again. Once the limit is
/// gone, each prompt reaches its own conversation and is answered once.
pub async fn a_usage_limit_parks_the_sessions_of_its_account_and_each_refused_prompt_is_answered_once(rig: &impl Rig) {
    let names = ["cap-a", "cap-b", "cap-c"];
    for name in names {
        let spec = serde_json::json!({"harness": "standin-usage", "initialPrompt": format!("{name}: first")});
        rig.create_session(name, spec).await;
    }
    let mut before = Vec::new();
    for name in names {
        before.push(await_turns(rig, name, 1).await);
    }
    let tmux = rig.tmux();
    let limited = tmux.state().join("limited");
    std::fs::write(&limited, "").unwrap();
    for name in names {
        rig.send(name, &format!("{name}-1"), &format!("{name}: second")).await;
    }
    // Each parked while the limit holds: by its own refusal, or by a peer's seen before its prompt went out.
    for name in names {
        let parked = |s: &WorkSessionStatus| {
            let (status, reason, message) = condition(s, ConditionType::Ready);
            status == "False" && reason == "UsageLimited" && message.contains("parked until")
        };
        await_value(&format!("{name} parked"), || rig.session_status(name), parked).await;
    }

    std::fs::remove_file(&limited).unwrap();
    for (name, was) in names.iter().zip(&before) {
        let ev = await_delivered(rig, &format!("{name}-1")).await;
        assert_eq!(ev.harness_session_id, was.harness_session_id, "{name}: its own conversation");
        let behind = |s: &WorkSessionStatus| {
            s.usage.as_ref().is_some_and(|u| u.turns == 2 && u.limit.is_none()) && s.phase == Some(Phase::Running)
        };
        let st = await_value(&format!("{name}: answered, the limit behind"), || rig.session_status(name), behind).await;
        assert_eq!(st.respawn_count, was.respawn_count, "{name}: never restarted");
    }
    let mut refused = std::collections::HashMap::new();
    for (name, was) in names.iter().zip(&before) {
        // Sent once more after each refusal its transcript records, and answered once: no third turn.
        let transcript = std::fs::read_to_string(crate::standin::transcript_of(&tmux.state(), &id(was))).unwrap();
        let refusals = transcript.lines().filter(|l| l.contains("\"apiErrorStatus\": 429")).count();
        let second = format!("{name}: second");
        let sent = tmux.prompts().into_iter().filter(|p| p.prompt == second).count();
        assert_eq!(sent, refusals + 1, "{name}: sent again once per refusal");
        assert_eq!(rig.session_status(name).await.usage.map(|u| u.turns), Some(2), "{name}: answered once");
        refused.insert(*name, refusals);
    }
    assert!(refused.values().any(|r| *r >= 1), "the limit refused a turn: {refused:?}");
    // The wakes, as the agent decided each (its time in the Event said as it woke): no two of the account's within
    // its spread (2 s in the test's config), however late a reconcile ran; a second apart allows for a decision's
    // clock read before its wake was claimed.
    let mut wakes: Vec<k8s_openapi::jiff::Timestamp> = Vec::new();
    for name in names {
        let Some(notes) = rig.notes(name, "UsageLimitWaitedOut").await else { return };
        let at = |note: &String| {
            note.split_once("waited out at ")?.1.split_once(": ")?.0.parse::<k8s_openapi::jiff::Timestamp>().ok()
        };
        let times: Vec<_> = notes.iter().filter_map(at).collect();
        // A wake of its own only for a session that was itself refused.
        assert_eq!(times.is_empty(), refused[name] == 0, "{name}: its wake recorded: {notes:?}");
        wakes.extend(times);
    }
    wakes.sort();
    for pair in wakes.windows(2) {
        assert!(pair[1].duration_since(pair[0]).as_secs_f64() >= 1.0, "two wakes together: {wakes:?}");
    }
}

/// A namespace's budget (a WorkBudget) reached by its sessions together: each is stopped after its turn (`Paused`,
/// `BudgetReached`, the budget named), a prompt sent meanwhile waits and a session made meanwhile does not start;
/// the budget raised, the prompt reaches the same conversation, once, and the new session starts.
pub async fn a_namespaces_budget_reached_by_its_sessions_together_pauses_each_and_a_raise_goes_on(rig: &impl Rig) {
    // 1,050 tokens a reply: one turn each is within 2,000, the two together are not.
    rig.apply_budget("team", serde_json::json!({"tokens": 2000})).await;
    for name in ["pool-a", "pool-b"] {
        let spec = serde_json::json!({"harness": "standin-usage", "initialPrompt": format!("{name}: first")});
        rig.create_session(name, spec).await;
    }
    let paused = |s: &WorkSessionStatus| s.phase == Some(Phase::Paused);
    let mut conversations = Vec::new();
    for name in ["pool-a", "pool-b"] {
        let st = await_value(&format!("{name} Paused"), || rig.session_status(name), paused).await;
        assert_eq!(st.usage.as_ref().map(|u| u.turns), Some(1), "{name}: its turn ended first");
        let (status, reason, message) = condition(&st, ConditionType::Ready);
        assert_eq!((status.as_str(), reason.as_str()), ("False", "BudgetReached"));
        assert!(
            message.starts_with("its namespace's sessions spent 2100 of its budget of 2000 tokens (WorkBudget team)"),
            "{message}"
        );
        assert!(message.ends_with("raise or remove WorkBudget team to go on, the conversation kept"), "{message}");
        rig.tmux().await_liveness(&rig.tmux_session(name), Liveness::Absent).await;
        conversations.push(id(&st));
    }
    rig.send("pool-a", "pool-a-1", "after the budget").await;
    rig.create_session("pool-c", serde_json::json!({"harness": "standin-usage", "initialPrompt": "pool-c: first"}))
        .await;
    let st = await_value("pool-c Paused", || rig.session_status("pool-c"), paused).await;
    assert!(ready_message(&st).contains("WorkBudget team"), "{st:?}");
    // The agent has weighed pool-a's prompt (its message counts it), so what follows is its decision, not a lag.
    let counted = |s: &WorkSessionStatus| ready_message(s).contains("1 prompt waits");
    await_value("pool-a's prompt waiting", || rig.session_status("pool-a"), counted).await;
    assert_eq!(rig.event_status("pool-a-1").await.phase.unwrap_or(PromptPhase::Pending), PromptPhase::Pending);
    let tmux = rig.tmux();
    let mut prompts: Vec<String> = tmux.prompts().into_iter().map(|p| p.prompt).collect();
    prompts.sort();
    assert_eq!(prompts, ["pool-a: first", "pool-b: first"], "nothing sent past the budget");

    rig.apply_budget("team", serde_json::json!({"tokens": 100000})).await;
    let ev = await_delivered(rig, "pool-a-1").await;
    assert_eq!((ev.via, ev.harness_session_id.as_deref()), (Some(Via::Resumed), Some(conversations[0].as_str())));
    await_turns(rig, "pool-c", 1).await;
    let prompts = tmux.await_prompts(4).await;
    let sent = |prompt: &str| prompts.iter().filter(|p| p.prompt == prompt).count();
    assert_eq!((sent("after the budget"), sent("pool-c: first")), (1, 1), "{prompts:?}");
}
