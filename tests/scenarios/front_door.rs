//! The front door, in both modes: a prompt is text (never a harness command unless a hand-made event opts
//! in), and two WorkSessions of one work item never contend for a tmux session, whatever order they reconcile in
//! after the tmux server restarts.

use serde_json::json;

use super::{
    ConditionType, Phase, PromptPhase, Rig, WorkSessionStatus, await_delivered, await_phase, await_value,
    conversation_of,
};
use worksession::node::tmux::{Liveness, Tmux};

fn recorded(status: &WorkSessionStatus) -> String {
    status.harness_session_id.as_deref().expect("a recorded id").to_string()
}

/// Events saying `/clear` and `!touch <marker>` (Claude Code runs both, on its command line and pasted alike, as the
/// stand-in does), sent while the harness is dead (the first rides on the respawn's command line) and while it lives
/// (pasted), reach the recorded conversation as prompts, marked: no new conversation, no shell command. A hand-made
/// event that opts in (`spec.command`) goes as it is, and runs.
pub async fn prompts_are_text_never_harness_commands(rig: &impl Rig) {
    let marker = rig.tmux().state().join("pwned-by-a-prompt");
    rig.create_session("lit", json!({})).await;
    let id = recorded(&await_phase(rig, "lit", Phase::Running).await);
    rig.tmux().await_output(&rig.tmux_session("lit"), "ready>").await;

    rig.tmux().kill_harness(&rig.tmux_session("lit")).await;
    rig.send("lit", "lit-1", "/clear").await;
    await_delivered(rig, "lit-1").await;
    let touch = format!("!touch {}", marker.display());
    rig.send("lit", "lit-2", &touch).await;
    rig.send("lit", "lit-3", "  /clear").await;
    rig.send("lit", "lit-4", "the next prompt").await;
    let status = await_delivered(rig, "lit-4").await;
    assert_eq!(status.harness_session_id.as_ref(), Some(&id), "delivered to the recorded conversation");
    let mark = worksession::harness::LITERAL_PREFIX;
    let sent = [("/clear", "argv"), (touch.as_str(), "paste"), ("  /clear", "paste"), ("the next prompt", "paste")];
    for (prompt, via) in sent {
        let as_sent = if prompt == "the next prompt" { prompt.to_string() } else { format!("{mark}{prompt}") };
        assert_eq!(conversation_of(rig, &as_sent).await, id, "{prompt:?}: a prompt of the recorded conversation");
        let got = rig.tmux().prompts().into_iter().find(|p| p.prompt == as_sent).unwrap();
        assert_eq!(got.via, via, "{prompt:?}");
    }
    assert!(!marker.exists(), "no shell command ran");
    assert_eq!(recorded(&rig.session_status("lit").await), id, "the conversation never switched");

    // Opting in, by hand: the prompt goes as it is and the harness runs it.
    let opted = rig.tmux().state().join("ran-by-choice");
    rig.send_command("lit", "lit-5", &format!("!touch {}", opted.display())).await;
    await_value("the opted-in command to run", || async { opted.exists() }, |ran| *ran).await;
}

/// Two WorkSessions of one work item on one node each run in a tmux session of their own: after the tmux server
/// restarts, each resumes its own conversation and gets its own event, whichever reconciles first.
pub async fn two_sessions_of_one_work_item_never_contend(rig: &impl Rig) {
    rig.create_session("twin-a", json!({"workItem": "twin"})).await;
    rig.create_session("twin-b", json!({"workItem": "twin"})).await;
    let a = recorded(&await_phase(rig, "twin-a", Phase::Running).await);
    let b = recorded(&await_phase(rig, "twin-b", Phase::Running).await);
    assert_ne!(a, b);
    assert_ne!(rig.tmux_session("twin-a"), rig.tmux_session("twin-b"));
    // Running says the panes are up, not that each harness has made its conversation yet: wait for its store, or a
    // server killed first leaves nothing to resume (a fresh start, correctly, and not what this test is about).
    for id in [&a, &b] {
        let made = || async { crate::standin::transcript_of(&rig.tmux().state(), id).exists() };
        await_value(&format!("conversation {id} made"), made, |made| *made).await;
    }
    assert!(rig.tmux().kill_server(), "the tmux server was running");
    rig.send("twin-b", "twin-b-1", "for b").await;
    rig.send("twin-a", "twin-a-1", "for a").await;
    assert_eq!(await_delivered(rig, "twin-a-1").await.harness_session_id.as_ref(), Some(&a));
    assert_eq!(await_delivered(rig, "twin-b-1").await.harness_session_id.as_ref(), Some(&b));
    assert_eq!(conversation_of(rig, "for a").await, a, "each resumed its own conversation");
    assert_eq!(conversation_of(rig, "for b").await, b);
}

/// A WorkSession whose `spec.harnessSessionId` names the conversation another WorkSession of the node records is
/// refused, naming it, and never spawned: two processes on one conversation would write one transcript, and a tenant
/// must not adopt another's conversation. The owner's harness and conversation go on untouched.
pub async fn a_conversation_another_session_records_is_not_adopted(rig: &impl Rig) {
    rig.create_session("owner", json!({})).await;
    let theirs = recorded(&await_phase(rig, "owner", Phase::Running).await);
    rig.tmux().await_output(&rig.tmux_session("owner"), "ready>").await;
    let pid = rig.tmux().pane_pid(&rig.tmux_session("owner"));
    rig.create_session("thief", json!({"harnessSessionId": theirs})).await;
    let status = await_value(
        "the second session refused",
        || rig.session_status("thief"),
        |s| super::status_reason(s, ConditionType::Ready).1 == "SessionIdTaken",
    )
    .await;
    assert!(super::ready_message(&status).contains(&format!("{}/owner", rig.namespace())), "{status:?}");
    assert_eq!(status.phase, Some(Phase::Failed));
    rig.send("thief", "thief-1", "whose conversation is this?").await;
    rig.send("owner", "owner-1", "still mine").await;
    assert_eq!(await_delivered(rig, "owner-1").await.harness_session_id.as_ref(), Some(&theirs));
    let observed = rig.tmux().runner.observe().await.unwrap();
    assert_eq!(observed.liveness(&rig.tmux_session("thief")), Liveness::Absent, "never spawned");
    assert_eq!(rig.tmux().pane_pid(&rig.tmux_session("owner")), pid, "the owner's harness is untouched");
    assert!(rig.tmux().prompts().iter().all(|p| p.prompt != "whose conversation is this?"), "held, not delivered");
}

/// A harness on the same tmux server replaces another session's tmux session with one of its own
/// (untagged) while that session's harness waits. The agent never adopts it: the next event is not pasted into the
/// attacker's program, the session is reported naming it, and the attacker's session is left alone (it is nobody's).
pub async fn an_untagged_session_under_a_victims_name_gets_nothing(rig: &impl Rig) {
    rig.create_session("vic", json!({})).await;
    await_phase(rig, "vic", Phase::Running).await;
    let name = rig.tmux_session("vic");
    rig.tmux().await_output(&name, "ready>").await;
    let tmux = |args: &[&str]| {
        let mut cmd = std::process::Command::new("tmux");
        cmd.arg("-S").arg(rig.tmux().socket()).args(args).status().unwrap().success()
    };
    let stolen = rig.tmux().state().join("stolen-prompts");
    // Swapped in one tmux command: the agent never observes the name free (it would respawn into it), and the
    // server never runs out of sessions (it would exit).
    assert!(tmux(&["new-session", "-d", "-s", "impostor", "sh", "-c", &format!("cat > '{}'", stolen.display())]));
    assert!(tmux(&["kill-session", "-t", &format!("={name}"), ";", "rename-session", "-t", "=impostor", &name]));
    rig.send("vic", "vic-1", "for the victim only").await;
    let status = await_value(
        "the untagged session reported",
        || rig.session_status("vic"),
        |s| super::status_reason(s, ConditionType::Ready).1 == "TmuxSessionUntagged",
    )
    .await;
    assert!(super::ready_message(&status).contains(&name), "names it: {status:?}");
    let event = rig.event_status("vic-1").await;
    assert!(event.phase.is_none() || event.phase == Some(PromptPhase::Pending), "held, never sent: {event:?}");
    assert!(!std::fs::read_to_string(&stolen).unwrap_or_default().contains("victim"), "nothing pasted into it");
    let observed = rig.tmux().runner.observe().await.unwrap();
    assert_eq!(observed.liveness(&name), Liveness::Alive, "left alone: not the agent's to stop");
}
