//! End-to-end scenarios shared by the Kubernetes agent (`tests/agent.rs`) and local mode (`tests/local.rs`): one
//! scenario, two object stores. A [`Rig`] is one running agent on a real tmux server with the stand-in harness.
#![allow(dead_code)] // each test binary uses a different part of this module

use serde_json::Value;

use crate::standin::TmuxServer;
use crate::support::{WAIT, poll};
use worksession::tmux::{Liveness, Tmux};

/// What a scenario needs of an agent and its store.
pub trait Rig {
    /// Creates a WorkSession `name` (work item `name`, harness `standin`, the rig's workdir) with `spec` merged in.
    fn create_session(&self, name: &str, spec: Value) -> impl Future<Output = ()>;
    /// Sends a WorkEvent `name` to `session`.
    fn send(&self, session: &str, name: &str, prompt: &str) -> impl Future<Output = ()>;
    /// A WorkSession's status as JSON (`Null` when it has none or is gone).
    fn session_status(&self, name: &str) -> impl Future<Output = Value>;
    /// A WorkEvent's status as JSON (`Null` when it has none).
    fn event_status(&self, name: &str) -> impl Future<Output = Value>;
    /// Whether the WorkSession is gone altogether (deleted and released).
    fn session_gone(&self, name: &str) -> impl Future<Output = bool>;
    /// Sets `spec.suspend`.
    fn suspend(&self, name: &str, on: bool) -> impl Future<Output = ()>;
    /// Deletes the WorkSession.
    fn delete_session(&self, name: &str) -> impl Future<Output = ()>;
    /// Stops the agent and starts a new one.
    fn restart_agent(&mut self);
    /// The tmux server and the stand-in's records.
    fn tmux(&self) -> &TmuxServer;
}

/// Awaits `get()` satisfying `pred`, failing the test after [`WAIT`] with the last value seen.
pub async fn await_value<F: Future<Output = Value>>(
    what: &str,
    mut get: impl FnMut() -> F,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    poll(what, WAIT, || {
        let value = get();
        async {
            let last = value.await;
            if pred(&last) { Ok(last) } else { Err(last.to_string()) }
        }
    })
    .await
}

async fn await_phase(rig: &impl Rig, name: &str, phase: &str) -> Value {
    await_value(&format!("{name} {phase}"), || rig.session_status(name), |s| s["phase"] == phase).await
}

async fn await_delivered(rig: &impl Rig, event: &str) -> Value {
    await_value(&format!("{event} Delivered"), || rig.event_status(event), |s| s["phase"] == "Delivered").await
}

fn resumed(status: &Value) -> (String, String, String) {
    let c = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Resumed")
        .cloned()
        .unwrap_or_default();
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"), s("message"))
}

/// First spawn; the pane killed; an event resumes the same conversation; then a paste into the live pane.
pub async fn resume_the_same_conversation(rig: &impl Rig) {
    rig.create_session("alpha", serde_json::json!({"initialPrompt": "hello"})).await;
    let st = await_phase(rig, "alpha", "Running").await;
    let id = st["harnessSessionId"].as_str().unwrap().to_string();
    let tmux = rig.tmux();
    assert_eq!(tmux.await_prompts(1).await[0].prompt, "hello");

    tmux.kill_harness("loop-alpha").await;
    await_phase(rig, "alpha", "Pending").await;
    rig.send("alpha", "alpha-1", "the reviewer asked for tests").await;
    let ev = await_delivered(rig, "alpha-1").await;
    assert_eq!((ev["via"].as_str(), ev["harnessSessionId"].as_str()), (Some("Resumed"), Some(id.as_str())));
    let st = await_phase(rig, "alpha", "Running").await;
    assert_eq!(st["harnessSessionId"].as_str(), Some(id.as_str()), "same conversation");
    assert_eq!(resumed(&st).0, "True");
    let prompts = tmux.await_prompts(2).await;
    assert_eq!(
        (prompts[1].conversation.as_str(), prompts[1].prompt.as_str()),
        (id.as_str(), "the reviewer asked for tests")
    );

    tmux.await_output("loop-alpha", "ready>").await;
    rig.send("alpha", "alpha-2", "and a changelog entry").await;
    assert_eq!(await_delivered(rig, "alpha-2").await["via"], "Pasted");
    let prompts = tmux.await_prompts(3).await;
    assert_eq!((prompts[2].via.as_str(), prompts[2].pid), ("paste", prompts[1].pid));
}

/// An unknown recorded id fails at once: `PaneDied`, a new uuid, the event delivered via `Fresh`.
pub async fn fast_resume_failure_falls_back(rig: &impl Rig) {
    rig.send("beta", "beta-1", "first event").await;
    rig.create_session("beta", serde_json::json!({"harnessSessionId": "ghost-conversation"})).await;
    let ev = await_delivered(rig, "beta-1").await;
    let st = await_phase(rig, "beta", "Running").await;
    let (status, reason, message) = resumed(&st);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "PaneDied"));
    assert!(message.contains("No conversation found with session ID: ghost-conversation"), "{message}");
    let id = st["harnessSessionId"].as_str().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "a new uuid: {id}");
    assert_eq!((ev["via"].as_str(), ev["harnessSessionId"].as_str()), (Some("Fresh"), Some(id)));
}

/// A resume that dies after the probe: the event goes back to `Pending`, then a fresh conversation gets it.
pub async fn slow_resume_failure_falls_back(rig: &impl Rig) {
    rig.send("gamma", "gamma-1", "slow one").await;
    rig.create_session("gamma", serde_json::json!({"harness": "standin-slow", "harnessSessionId": "ghost"})).await;
    let st = await_value(
        "gamma fresh after PaneDiedAfterProbe",
        || rig.session_status("gamma"),
        |s| {
            let (_, reason, message) = resumed(s);
            s["phase"] == "Running" && reason == "PaneDiedAfterProbe" && message.starts_with("started a fresh")
        },
    )
    .await;
    let id = st["harnessSessionId"].as_str().unwrap().to_string();
    let ev = await_delivered(rig, "gamma-1").await;
    assert_eq!((ev["via"].as_str(), ev["harnessSessionId"].as_str()), (Some("Fresh"), Some(id.as_str())));
    assert!(ev["attempts"].as_u64().unwrap() >= 2, "{ev}");
    let prompts = rig.tmux().prompts();
    assert_eq!(
        prompts.iter().map(|p| (p.conversation.as_str(), p.prompt.as_str())).collect::<Vec<_>>(),
        [(id.as_str(), "slow one")]
    );
}

/// Suspend stops the session and holds events; unsuspend delivers them; delete stops it and releases it.
pub async fn suspend_then_delete(rig: &impl Rig) {
    rig.create_session("zeta", serde_json::json!({})).await;
    await_phase(rig, "zeta", "Running").await;
    rig.suspend("zeta", true).await;
    await_phase(rig, "zeta", "Suspended").await;
    assert_eq!(rig.tmux().runner.observe().await.unwrap().liveness("loop-zeta"), Liveness::Absent);
    rig.send("zeta", "zeta-1", "wait for it").await;
    assert_eq!(rig.session_status("zeta").await["phase"], "Suspended");
    assert_eq!(rig.event_status("zeta-1").await, Value::Null, "events wait while suspended");
    rig.suspend("zeta", false).await;
    await_delivered(rig, "zeta-1").await;

    rig.delete_session("zeta").await;
    await_value("zeta released", || async { Value::Bool(rig.session_gone("zeta").await) }, |v| v == &Value::Bool(true))
        .await;
    assert_eq!(rig.tmux().runner.observe().await.unwrap().liveness("loop-zeta"), Liveness::Absent);
}

/// A restarted agent adopts a live session (nothing respawned) and finishes a verification in flight.
pub async fn restart_adopts_and_finishes_verifications(rig: &mut impl Rig) {
    rig.create_session("theta", serde_json::json!({})).await;
    let id = await_phase(rig, "theta", "Running").await["harnessSessionId"].as_str().unwrap().to_string();
    rig.create_session("iota", serde_json::json!({"resume": {"probeSeconds": 4}})).await;
    await_phase(rig, "iota", "Running").await;
    let theta_pid = rig.tmux().pane_pid("loop-theta");

    rig.tmux().kill_harness("loop-iota").await;
    rig.send("iota", "iota-1", "during verification").await;
    await_phase(rig, "iota", "Verifying").await;
    rig.restart_agent();

    assert_eq!(await_delivered(rig, "iota-1").await["via"], "Resumed");
    rig.tmux().await_output("loop-theta", "ready>").await;
    rig.send("theta", "theta-1", "still you?").await;
    assert_eq!(await_delivered(rig, "theta-1").await["via"], "Pasted", "adopted, not respawned");
    let st = rig.session_status("theta").await;
    assert_eq!((st["harnessSessionId"].as_str(), st["respawnCount"].as_u64()), (Some(id.as_str()), Some(0)));
    assert_eq!(rig.tmux().pane_pid("loop-theta"), theta_pid);
    let prompts = rig.tmux().await_prompts(2).await;
    assert_eq!(prompts.iter().filter(|p| p.prompt == "during verification").count(), 1, "one spawn for the event");
}
