//! The real Gemini, Copilot, opencode and Codex CLIs as the built-in `gemini`, `copilot`, `opencode` and `codex`
//! harnesses, offline and without accounts: `scripts/test` installs the pinned packages from npm (`scripts/testenv
//! install-clis`). Without a model: the unknown-id failure is what the profile's `resumeFailedPattern` expects; through
//! the agent a resume of an unknown conversation falls back to a fresh one whose pane stays alive (Gemini and Copilot
//! wait at their folder-trust question, as they would for a person); opencode, which cannot be told an id, has its id
//! discovered and resumed. Against the tests' scripted model (`support::model`): real turns of Gemini, opencode and
//! Codex (through a custom model provider, which keeps it from its sign-in screen), their hooks confirming prompts.

mod scenarios;
mod standin;
mod support;
mod world;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use support::clis;
use support::model::{Model, Reply};
use worksession::api::{Phase, PromptPhase};
use world::{World, condition, recorded_id};

async fn unknown_id_fails_as_the_profile_expects(name: &str, args: &[&str], code: i32) {
    let (exit, output, _) = clis::run(name, args).await;
    assert_eq!(exit, Some(code), "{name}: {output}");
    let profiles = worksession::harness::builtin();
    assert!(profiles[name].resume_failed(&output), "{name}'s resumeFailedPattern does not match: {output}");
}

#[tokio::test]
async fn gemini_unknown_id_fails_as_the_profile_expects() {
    let unknown = uuid::Uuid::new_v4().to_string();
    unknown_id_fails_as_the_profile_expects("gemini", &["--resume", &unknown], 42).await;
}

#[tokio::test]
async fn opencode_unknown_id_fails_as_the_profile_expects() {
    unknown_id_fails_as_the_profile_expects("opencode", &["--session=ses_worksessionUnknown"], 1).await;
}

#[tokio::test]
async fn copilot_unknown_id_fails_as_the_profile_expects() {
    let unknown = uuid::Uuid::new_v4().to_string();
    unknown_id_fails_as_the_profile_expects("copilot", &[&format!("--resume={unknown}")], 1).await;
}

/// A world whose `name` profile is the built-in one with the real CLI behind a wrapper that sets its environment.
async fn world_with(name: &'static str) -> World {
    World::with_config_for(move |tmux| offline_profile(name, tmux)).await
}

/// The `name` profile with its model unreachable, in `tmux`'s state folder as its `HOME`.
fn offline_profile(name: &str, tmux: &standin::TmuxServer) -> String {
    clis::offline_profile(name, &tmux.state())
}

/// The `name` profile against the scripted `model`.
fn scripted_profile(name: &str, tmux: &standin::TmuxServer, model: &Model) -> String {
    clis::scripted_profile(name, &tmux.state(), &tmux.workdir(), model)
}

/// The real Gemini CLI against the scripted model (`GOOGLE_GEMINI_BASE_URL`): given its hooks
/// the way the built-in profile gives them (`worksession hook-exec` writes a system settings file beside the
/// session's hook file and starts the CLI with `GEMINI_CLI_SYSTEM_SETTINGS_PATH` naming it), its `BeforeAgent` says it
/// took the initial prompt, the prompt is `Delivered` on its word, and at its turn's end the `Activity` condition
/// says it is idle. It needs what a person gives it once: its
/// folder trusted and its auth type chosen (its own files in its `HOME`), and a `HOME` under no folder others can
/// write (it skips such a settings file), so this world is made under the user's cache rather than `/tmp`.
#[tokio::test]
async fn gemini_through_the_agent_its_hooks_confirm_the_prompt() {
    // The user's cache, as the test control plane's: a clone under `/tmp` would put the world under a folder others
    // can write.
    let cache = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| support::repo_root().join("target"));
    let tmux = standin::TmuxServer::new_in(&cache.join(".cache/worksession-tests"));
    let home = tmux.state();
    let model = Model::start();
    let w = World::with_tmux(tmux, |tmux, yaml| yaml + &scripted_profile("gemini", tmux, &model)).await;
    let spec = json!({"harness": "gemini", "initialPrompt": "hello from the tests"});
    w.create_session("gh", spec).await;
    w.await_session("gh", "the initial prompt Delivered", |ws| {
        ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase)
            == Some(worksession::api::PromptPhase::Delivered)
    })
    .await;
    // The scripted model answers: its turn ends, and its hooks say so.
    w.await_session("gh", "its turn over", |ws| {
        condition(ws, "Activity").is_some_and(|c| c.1 == "Idle")
            && model.prompts().iter().any(|p| p.contains("hello from the tests"))
    })
    .await;
    let hooks = std::fs::read_to_string(worksession::node::hook::file_of(&home, &format!("{}/gh", w.ns.name))).unwrap();
    assert!(hooks.contains("\"UserPromptSubmit\"") && hooks.contains("hello from the tests"), "BeforeAgent: {hooks}");
    assert!(hooks.contains("\"source\":\"startup\""), "SessionStart at its start: {hooks}");
}

/// Gemini: the resume runs and fails late (the settle window's row, with its words).
async fn an_unknown_conversation_falls_back_to_a_fresh_one_that_stays_alive(name: &'static str) {
    let w = world_with(name).await;
    let unknown = uuid::Uuid::new_v4().to_string();
    let spec = json!({"harness": name, "harnessSessionId": unknown, "initialPrompt": "hello from the tests"});
    w.create_session(name, spec).await;
    // The CLIs take longer than the probe to start (Node.js), so the failure comes late, with the TUI gone: the
    // settle window catches it.
    let ws = w
        .await_session(name, "Resumed=False, then Running", |ws| {
            condition(ws, "Resumed").is_some_and(|c| c.0 == "False") && world::phase_of(ws) == Some(Phase::Running)
        })
        .await;
    // Its failure comes after the probe: the settle window's row, with the CLI's words, which the profile knows.
    let (_, reason, message) = condition(&ws, "Resumed").unwrap();
    assert_eq!(reason, "PaneDiedAfterProbe", "{message}");
    assert!(worksession::harness::builtin()[name].resume_failed(&message), "{message}");
    assert_ne!(recorded_id(&ws), unknown, "a fresh conversation under a new id");
    let observed = worksession::node::tmux::Tmux::observe(&w.tmux.runner).await.unwrap();
    assert_eq!(observed.liveness(&w.tmux_session(name)), worksession::node::tmux::Liveness::Alive);
}

#[tokio::test]
async fn gemini_through_the_agent_an_unknown_conversation_falls_back_to_a_fresh_one() {
    an_unknown_conversation_falls_back_to_a_fresh_one_that_stays_alive("gemini").await;
}

/// Copilot: its store says first that the conversation is not there (no resume runs), and the fresh session it starts
/// makes its store's directory, which a later resume is checked against.
#[tokio::test]
async fn copilot_through_the_agent_an_unknown_conversation_falls_back_to_a_fresh_one() {
    let w = world_with("copilot").await;
    let unknown = uuid::Uuid::new_v4().to_string();
    let spec = json!({"harness": "copilot", "harnessSessionId": unknown, "initialPrompt": "hello from the tests"});
    w.create_session("copilot", spec).await;
    let ws = w.await_phase("copilot", Phase::Running).await;
    let (status, reason, message) = condition(&ws, "Resumed").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "ConversationNotFound"), "{message}");
    let fresh = recorded_id(&ws);
    assert_ne!(fresh, unknown);
    let store = w.tmux.state().join(".copilot/session-state").join(&fresh);
    support::poll("its store's directory", support::WAIT, || async {
        if store.is_dir() { Ok(()) } else { Err(format!("{} missing", store.display())) }
    })
    .await;
    let observed = worksession::node::tmux::Tmux::observe(&w.tmux.runner).await.unwrap();
    assert_eq!(observed.liveness(&w.tmux_session("copilot")), worksession::node::tmux::Liveness::Alive);
}

/// opencode takes no id at start: the agent finds it in opencode's own log (a line saying it created a session in the
/// workdir), records it, and resumes that conversation after the harness dies.
#[tokio::test]
async fn opencode_through_the_agent_its_id_is_discovered_and_resumed() {
    let w = world_with("opencode").await;
    w.create_session("opencode", json!({"harness": "opencode", "initialPrompt": "hello from the tests"})).await;
    let ws = w
        .await_session("opencode", "its id discovered", |ws| {
            condition(ws, "ConversationId").is_some_and(|c| c.0 == "True")
        })
        .await;
    let id = recorded_id(&ws);
    assert!(id.starts_with("ses_"), "an opencode session id: {id}");

    w.tmux.kill_pane(&w.tmux_session("opencode")).await;
    w.send("opencode", "opencode-1", "after the crash").await;
    let ws = w
        .await_session("opencode", "resumed and Running", |ws| {
            world::phase_of(ws) == Some(Phase::Running)
                && ws.status.as_ref().and_then(|s| s.last_respawn.as_ref()).is_some_and(|r| r.resumed)
        })
        .await;
    assert_eq!(recorded_id(&ws), id, "the discovered conversation");
    assert_eq!(condition(&ws, "Resumed").map(|c| c.1), Some("Resumed".into()));
}

/// Whether `ws`'s initial prompt is in `phase`.
fn initial_prompt_is(ws: &worksession::api::WorkSession, phase: worksession::api::PromptPhase) -> bool {
    ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase) == Some(phase)
}

/// The real opencode against the scripted model: given its hooks the way the built-in profile
/// gives them (`worksession hook-exec` writes a plugin beside the session's hook file and starts the CLI with
/// `OPENCODE_CONFIG_CONTENT` naming it), its `chat.message` says it took the initial prompt: the prompt is `Delivered`
/// on its word, the conversation's id is the one it names, and its turn ends (`Activity` Idle). A WorkEvent pasted
/// while a slow turn streams is queued, reported, `Delivered`, and reaches the model once, after that turn.
#[tokio::test]
async fn opencode_through_the_agent_its_hooks_confirm_the_prompt_and_name_the_conversation() {
    use worksession::api::PromptPhase;
    let model = Model::start();
    let slow = "one two three four five six seven eight nine ten eleven twelve";
    model.on("hello from the tests", Reply::Slow { text: slow.into(), every: Duration::from_millis(500) });
    // Its first hook can come 15 s after its start under the whole suite's load (seen): the deadline is the real
    // CLI tests' (tests/claude.rs), not the stand-in's 15 s.
    let w = scripted_world("opencode", &model, 60).await;
    w.create_session("oc", json!({"harness": "opencode", "initialPrompt": "hello from the tests"})).await;
    w.await_session("oc", "the initial prompt Delivered", |ws| initial_prompt_is(ws, PromptPhase::Delivered)).await;
    let hooks = worksession::node::hook::file_of(&w.tmux.state(), &format!("{}/oc", w.ns.name));
    let said = std::fs::read_to_string(&hooks).unwrap();
    assert!(said.contains("\"UserPromptSubmit\"") && said.contains("hello from the tests"), "chat.message: {said}");
    let ws = w
        .await_session("oc", "its id from its hooks", |ws| {
            condition(ws, "ConversationId").is_some_and(|c| c.0 == "True")
        })
        .await;
    let id = recorded_id(&ws);
    assert!(id.starts_with("ses_") && said.contains(&id), "the conversation its prompt went to: {id} in {said}");

    w.send("oc", "oc-1", "a second prompt from the tests").await;
    w.await_event("oc-1", PromptPhase::Delivered).await;
    w.await_session("oc", "both turns over", |ws| {
        condition(ws, "Activity").is_some_and(|c| c.1 == "Idle")
            && model.prompts().iter().any(|p| p == "a second prompt from the tests")
    })
    .await;
    let said = std::fs::read_to_string(&hooks).unwrap();
    assert_eq!(said.matches("a second prompt from the tests").count(), 1, "sent once: {said}");
    let prompts = model.prompts();
    assert_eq!(prompts.iter().filter(|p| *p == "a second prompt from the tests").count(), 1, "{prompts:?}");
}

/// opencode takes a prompt pasted while its turn retries a failing API (its `chat.message` fires, the prompt shows as
/// queued) but never sends it to its model when that turn fails for good (measured with 1.18.33: the next prompt's
/// request carries it, merged). Its `session.error` says the turn failed (`Activity` `TurnFailed`), and the queued
/// prompt, not delivered, is sent again: the model gets it. (On the hook's word alone it was `Delivered` and the model
/// never got it until someone sent another prompt.)
#[tokio::test]
async fn opencode_a_prompt_queued_behind_a_failed_turn_is_sent_again() {
    use worksession::api::PromptPhase;
    let model = Model::start();
    // A short retry-after: opencode retries five times, a second apart, then gives up (doubling from 2 s without it).
    let error = failing_with_a_retry();
    model.on("turn that fails", error);
    model.on("queued behind it", Reply::text("Got the queued one."));
    let w = scripted_world("opencode", &model, 120).await;
    w.create_session("of", json!({"harness": "opencode", "initialPrompt": "turn that fails"})).await;
    support::until("the failing turn asked", || async { model.prompts().iter().any(|p| p == "turn that fails") }).await;
    w.send("of", "of-1", "queued behind it").await;
    let kube_events: kube::Api<k8s_openapi::api::events::v1::Event> = w.ns.api();
    let failed = support::eventually("a TurnFailed Event", || async {
        let list = kube_events.list(&Default::default()).await.ok()?;
        list.items.into_iter().find(|e| e.reason.as_deref() == Some("TurnFailed"))
    })
    .await;
    let words = failed.note.unwrap_or_default();
    assert!(words.contains("500") && words.contains("boom"), "its words: {words}");
    let ev = w.await_event("of-1", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!(ev.attempts, 2, "sent again: {ev:?}");
    let request = support::eventually("the model got the queued prompt", || async {
        model.requests().into_iter().find(|r| r.body["messages"].to_string().contains("queued behind it"))
    })
    .await;
    // opencode kept the queued copy and merges it with the second send into one message: the words twice.
    let copies = request.body["messages"].to_string().matches("queued behind it").count();
    assert_eq!(copies, 2, "{}", request.body["messages"]);
}

/// With the real Copilot CLI offline: given its hooks the way the built-in profile gives them (a
/// plugin directory, `--plugin-dir`), a prompt the CLI throws away (without an account it takes none: "Please use
/// /login") is never `Delivered`: its `userPromptSubmitted` never fires, the deadline sends it once more, then it is
/// `Failed` saying which evidence stayed silent. (Without hooks the settle window counted it delivered.) That the
/// plugin was loaded shows in its `sessionEnd`, the one hook it runs offline, when a person leaves it.
#[tokio::test]
async fn copilot_through_the_agent_a_prompt_it_throws_away_is_never_delivered() {
    use worksession::api::PromptPhase;
    let w = world_with("copilot").await;
    // A person trusted the folder once (else its first prompt answers that question).
    let config = w.tmux.state().join(".copilot");
    std::fs::create_dir_all(&config).unwrap();
    let trusted = json!({"trustedFolders": [w.tmux.workdir()]});
    std::fs::write(config.join("config.json"), trusted.to_string()).unwrap();
    w.create_session("cp", json!({"harness": "copilot", "initialPrompt": "hello from the tests"})).await;
    let ws = w.await_session("cp", "the initial prompt Failed", |ws| initial_prompt_is(ws, PromptPhase::Failed)).await;
    let prompt = ws.status.as_ref().and_then(|s| s.initial_prompt.clone()).unwrap();
    let message = prompt.message.unwrap_or_default();
    assert!(message.contains("UserPromptSubmit"), "names the silent evidence: {message}");
    assert_eq!(prompt.attempts, 2, "sent once more at the deadline, then given up");

    // A person leaves it (Ctrl-C, pressed again until it goes: it asks for a second one): its plugin's sessionEnd
    // runs the receiver.
    let session = w.tmux_session("cp");
    let hooks = worksession::node::hook::file_of(&w.tmux.state(), &format!("{}/cp", w.ns.name));
    support::poll("its sessionEnd", support::WAIT, || async {
        let said = std::fs::read_to_string(&hooks).unwrap_or_default();
        if said.contains("\"SessionEnd\"") {
            return Ok(());
        }
        let keys = ["-S", w.tmux.socket().to_str().unwrap(), "send-keys", "-t", &session, "C-c"];
        std::process::Command::new("tmux").args(keys).status().unwrap();
        Err(format!("hooks: {said:?}"))
    })
    .await;
    let said = std::fs::read_to_string(&hooks).unwrap();
    assert!(!said.contains("\"UserPromptSubmit\""), "it took no prompt: {said}");
}

/// Copilot CLI steers a prompt pasted while its turn retries a failing API (HTTP 500, `retry-after: 1`) into that turn,
/// and runs no `userPromptSubmitted` for it (measured with 1.0.102: its events file says `"delivery":"steering"`). Its
/// events file confirms it when the turn's end wakes the session: `Delivered` after one send, and the model gets it
/// once. (On the hooks' word alone the deadline sent it again, and the model got it twice.)
#[tokio::test]
async fn copilot_a_prompt_steered_into_a_retrying_turn_is_delivered_once() {
    use worksession::api::{PromptPhase, Via};
    let model = Model::start();
    let error = failing_with_a_retry();
    model.on("turn that fails", error);
    model.on("steered into it", Reply::text("Got the steered one."));
    let w = scripted_world("copilot", &model, 60).await;
    w.create_session("cs", json!({"harness": "copilot", "initialPrompt": "turn that fails"})).await;
    support::until("the failing turn asked", || async {
        model.prompts().iter().any(|p| p.contains("turn that fails"))
    })
    .await;
    w.send("cs", "cs-1", "steered into it").await;
    // Within the test's wait, well before the 60 s deadline that would send it again.
    let ev = w.await_event("cs-1", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!((ev.attempts, ev.via), (1, Some(Via::Pasted)), "{ev:?}");
    w.await_session("cs", "the turn over", |ws| condition(ws, "Activity").is_some_and(|c| c.1 == "Idle")).await;
    let hooks = worksession::node::hook::file_of(&w.tmux.state(), &format!("{}/cs", w.ns.name));
    let said = std::fs::read_to_string(&hooks).unwrap();
    assert!(!said.contains("steered into it"), "no hook reported it (else this proves nothing): {said}");
    let prompts = model.prompts();
    assert_eq!(prompts.iter().filter(|p| p.contains("steered into it")).count(), 1, "{prompts:?}");
}

/// Codex CLI against the scripted model, through a custom model provider (`wire_api = "responses"`): no account, so no
/// sign-in screen (a provider that needs no OpenAI auth skips it), its folder trusted in its config as a person would
/// once. Through the agent with the built-in `codex` profile: the initial prompt gets a real turn, the conversation's
/// id is discovered from its rollout (or its notify at the turn's end), and after a crash the next event resumes that
/// conversation (`codex resume <id>`) and reaches the model.
#[tokio::test]
async fn codex_through_the_agent_does_real_turns_and_resumes_its_conversation() {
    let model = Model::start();
    model.on("hello codex", Reply::text("Hello from the scripted model."));
    model.on(
        "a slow one",
        Reply::Slow { text: "one two three four five six".into(), every: Duration::from_millis(700) },
    );
    model.on("while it works", Reply::text("Steered."));
    let w = scripted_world("codex", &model, 60).await;
    w.create_session("cx", json!({"harness": "codex", "initialPrompt": "hello codex"})).await;
    // Killed as soon as the CLI's own record holds the turn under the recorded id (its rollout, which `codex resume`
    // reads; killed before, the conversation never was saved, and a fresh one rightly takes over), well within the
    // settle window: its own UserPromptSubmit hook had said the prompt was taken, so it is not sent again (known by
    // the settle window alone, it was put back and sent on the resume's command line: a second turn of it).
    let rollouts = w.tmux.state().join(".codex/sessions");
    let id = support::eventually("the turn in the recorded conversation's rollout", || async {
        let id = w.sessions().get("cx").await.ok()?.status?.harness_session_id?;
        let rollout = walk(&rollouts).into_iter().find(|p| p.to_string_lossy().ends_with(&format!("-{id}.jsonl")))?;
        let text = std::fs::read_to_string(rollout).ok()?;
        text.contains("Hello from the scripted model.").then_some(id)
    })
    .await;
    w.tmux.kill_pane(&w.tmux_session("cx")).await;
    w.send("cx", "cx-1", "after the crash").await;
    let ws = w
        .await_session("cx", "resumed and Running", |ws| {
            world::phase_of(ws) == Some(Phase::Running)
                && ws.status.as_ref().and_then(|s| s.last_respawn.as_ref()).is_some_and(|r| r.resumed)
        })
        .await;
    assert_eq!(recorded_id(&ws), id, "the recorded conversation");
    support::until("the event reached the model", || async { model.prompts().iter().any(|p| p == "after the crash") })
        .await;
    let resumed = model.requests().into_iter().find(|r| r.prompt.as_deref() == Some("after the crash")).unwrap();
    assert!(resumed.body["input"].to_string().contains("hello codex"), "in the same conversation: {}", resumed.body);
    let ws = w.sessions().get("cx").await.unwrap();
    let initial = ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase);
    assert_eq!(initial, Some(PromptPhase::Delivered));
    let firsts = model.prompts().iter().filter(|p| *p == "hello codex").count();
    assert_eq!(firsts, 1, "the initial prompt was taken once: {:?}", model.prompts());

    // A prompt pasted into the resumed CLI while a turn runs steers that turn: its hook confirms it, and the model
    // gets it (known by the settle window alone, it was reported Delivered though the model never got it).
    w.send("cx", "cx-slow", "a slow one").await;
    support::until("the slow turn asked", || async { model.prompts().iter().any(|p| p == "a slow one") }).await;
    w.send("cx", "cx-during", "while it works").await;
    w.await_event("cx-during", PromptPhase::Delivered).await;
    support::until("the steer reached the model", || async {
        model.requests().iter().any(|r| r.body["input"].to_string().contains("while it works"))
    })
    .await;
    w.await_session("cx", "Idle at the turn's end", |ws| condition(ws, "Activity").is_some_and(|c| c.1 == "Idle"))
        .await;
}

/// Codex's turn refused for the account's usage limit (the Responses API's 429 `usage_limit_reached`, which Codex never
/// retries and records as a failed `task_complete`): the session is parked, and at the wake the prompt is sent again
/// to the same conversation and answered once; the CLI is never restarted.
#[tokio::test]
async fn codex_a_turn_refused_for_a_usage_limit_is_parked_and_sent_again_to_the_same_conversation() {
    let model = Model::start();
    let limit = "The usage limit has been reached".to_string();
    model.on(
        "limited",
        Reply::Error { status: 429, kind: "usage_limit_reached".into(), message: limit, headers: vec![] },
    );
    let w = scripted_world("codex", &model, 60).await;
    w.create_session("cxl", json!({"harness": "codex", "initialPrompt": "limited: the first prompt"})).await;
    let rollouts = w.tmux.state().join(".codex/sessions");
    let rollout_of =
        |id: &str| walk(&rollouts).into_iter().find(|p| p.to_string_lossy().ends_with(&format!("-{id}.jsonl")));
    let id = support::eventually("the refusal in the recorded conversation's rollout", || async {
        let id = w.sessions().get("cxl").await.ok()?.status?.harness_session_id?;
        let text = std::fs::read_to_string(rollout_of(&id)?).ok()?;
        text.contains("usage_limit_exceeded").then_some(id)
    })
    .await;
    w.await_session("cxl", "parked", |ws| condition(ws, "Ready").is_some_and(|c| c.1 == "UsageLimited")).await;
    // The limit gone: the prompt sent again at the wake is answered in the same conversation.
    model.on("limited: the first prompt", Reply::text("Answered after the wait."));
    support::eventually("the answer in the rollout", || async {
        let text = std::fs::read_to_string(rollout_of(&id)?).ok()?;
        text.contains("Answered after the wait.").then_some(())
    })
    .await;
    let behind = |ws: &worksession::api::WorkSession| {
        let usage = ws.status.as_ref().and_then(|s| s.usage.as_ref());
        usage.is_some_and(|u| u.limit.is_none() && u.turns == 1)
    };
    let ws = w.await_session("cxl", "the limit behind, one turn answered", behind).await;
    let st = ws.status.unwrap();
    assert_eq!((st.harness_session_id.as_deref(), st.respawn_count), (Some(id.as_str()), 0), "never restarted");
    let text = std::fs::read_to_string(rollout_of(&id).unwrap()).unwrap();
    let refusals = text.matches("usage_limit_exceeded").count();
    let answers = text.matches("Answered after the wait.").count();
    assert!(refusals >= 1);
    assert!(answers >= 1, "answered");
    let turns = model.requests().into_iter().filter(|r| r.prompt.as_deref() == Some("limited: the first prompt"));
    assert!(turns.count() > refusals, "sent again after each refusal");
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.filter_map(|e| e.ok().map(|e| e.path())).flat_map(|p| if p.is_dir() { walk(&p) } else { vec![p] }).collect()
}

/// A world whose agent runs the built-in profile `name` against the scripted `model`, confirming within `confirm` s.
async fn scripted_world(name: &str, model: &Model, confirm: u64) -> World {
    World::with_yaml(|tmux, yaml| {
        yaml.replace("confirmTimeoutSeconds: 15", &format!("confirmTimeoutSeconds: {confirm}"))
            + &scripted_profile(name, tmux, model)
    })
    .await
}

/// An API error a CLI retries a second later: HTTP 500 with `retry-after: 1`.
fn failing_with_a_retry() -> Reply {
    let retry = vec![("retry-after".to_string(), "1".to_string())];
    Reply::Error { status: 500, kind: "api_error".into(), message: "boom".into(), headers: retry }
}

/// A key gateway for `upstream` (its key `real` in `dir`), served in this process for this test's own uid (the one
/// room); the port.
async fn gateway_for(
    name: &str,
    upstream: String,
    header: &str,
    paths: &[&str],
    real: &str,
    dir: &std::path::Path,
) -> u16 {
    use worksession::config::rooms::{EgressConfig, GatewayConfig, RoomsConfig};
    use worksession::node::egress::Proxy;
    std::fs::write(dir.join("key"), format!("{real}\n")).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let gateway = GatewayConfig {
        name: name.into(),
        upstream,
        key_file: dir.join("key"),
        header: header.into(),
        base_url_env: None,
        key_env: None,
        placeholder: "placeholder-key".into(),
        paths: paths.iter().map(|p| p.to_string()).collect(),
    };
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap());
    let (root, helper) = (dir.into(), "/bin/false".into());
    let rooms =
        RoomsConfig { root, first_uid: uid, count: 1, helper, egress: None, shared: false, namespace_keys: None };
    let egress = EgressConfig::serving(port, vec![gateway]);
    tokio::spawn(Proxy::new(egress, rooms).unwrap().serve(listener, |_| {}));
    port
}

/// Runs the CLI `name` once with `args`, `HOME` at `home` and `env` (the proxy variables a room has besides), to its
/// end; what it printed.
async fn once(name: &str, home: &std::path::Path, args: &[&str], env: &[(&str, String)]) -> String {
    let mut cmd = tokio::process::Command::new(clis::bin(name));
    cmd.args(args).env("HOME", home).current_dir(home).kill_on_drop(true).stdin(std::process::Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output()).await.expect("the CLI ends").unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Gemini CLI, Codex and opencode through a key gateway, as a room's harness is given one: each does a real turn against the
/// scripted model with a placeholder key and its proxy variables naming the egress port, and every request the model
/// receives carries the gateway's key, never the placeholder; each asks only for the paths listed (docs/security.md
/// says which).
#[tokio::test]
async fn gemini_codex_and_opencode_through_a_key_gateway_send_the_agents_key() {
    const REAL: &str = "the-agents-own-key-never-in-a-room";
    // Gemini: its base URL the gateway's, its key the placeholder, in `x-goog-api-key`.
    let model = Model::start();
    model.on("hello gemini", Reply::text("Answered through the gateway."));
    // Under the user's cache: Gemini CLI skips a settings file under a folder others can write (`/tmp`).
    let cache = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| support::repo_root().join("target"));
    std::fs::create_dir_all(cache.join(".cache/worksession-tests")).unwrap();
    let home = tempfile::tempdir_in(cache.join(".cache/worksession-tests")).unwrap();
    let paths =
        ["/v1beta/models/gemini-2.5-flash:streamGenerateContent", "/v1beta/models/gemini-2.5-flash:generateContent"];
    let port = gateway_for("gemini", model.base_url(), "x-goog-api-key", &paths, REAL, home.path()).await;
    std::fs::create_dir_all(home.path().join(".gemini")).unwrap();
    let settings = json!({"security": {"auth": {"selectedType": "gemini-api-key"}}});
    std::fs::write(home.path().join(".gemini/settings.json"), settings.to_string()).unwrap();
    let proxy = format!("http://127.0.0.1:{port}");
    let mut env = vec![
        ("GOOGLE_GEMINI_BASE_URL", format!("{proxy}/gateway/gemini")),
        ("GEMINI_API_KEY", "placeholder-key".into()),
    ];
    env.extend(["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"].map(|n| (n, proxy.clone())));
    let said =
        once("gemini", home.path(), &["--skip-trust", "-m", "gemini-2.5-flash", "-p", "hello gemini"], &env).await;
    let requests = model.requests();
    println!("gemini: {said}\n{:?}", requests.iter().map(|r| &r.path).collect::<Vec<_>>());
    assert!(said.contains("Answered through the gateway."), "{said}");
    let keys: std::collections::BTreeSet<Option<&str>> = requests.iter().map(|r| r.key.as_deref()).collect();
    assert_eq!(keys, [Some(REAL)].into(), "gemini: every request with the agent's key");
    assert!(requests.iter().all(|r| paths.contains(&r.path.split('?').next().unwrap())), "only the paths listed");

    // Codex: a custom provider whose base URL is the gateway's, its `env_key` the placeholder, sent as a bearer token.
    let model = Model::start();
    model.on("hello codex", Reply::text("Answered through the gateway."));
    let home = tempfile::tempdir().unwrap();
    let port = gateway_for("openai", model.base_url(), "authorization", &["/v1/responses"], REAL, home.path()).await;
    let proxy = format!("http://127.0.0.1:{port}");
    std::fs::create_dir_all(home.path().join(".codex")).unwrap();
    let config = format!(
        "model = \"mock-model\"\nmodel_provider = \"gateway\"\ncheck_for_update_on_startup = false\n\
         [model_providers.gateway]\nname = \"gateway\"\nbase_url = \"{proxy}/gateway/openai/v1\"\n\
         env_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\nrequest_max_retries = 0\nstream_max_retries = 0\n"
    );
    std::fs::write(home.path().join(".codex/config.toml"), config).unwrap();
    let mut env = vec![("OPENAI_API_KEY", "placeholder-key".to_string())];
    env.extend(["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"].map(|n| (n, proxy.clone())));
    let said = once("codex", home.path(), &["exec", "--skip-git-repo-check", "hello codex"], &env).await;
    let requests = model.requests();
    println!("codex: {said}\n{:?}", requests.iter().map(|r| &r.path).collect::<Vec<_>>());
    assert!(said.contains("Answered through the gateway."), "{said}");
    let keys: std::collections::BTreeSet<Option<&str>> = requests.iter().map(|r| r.key.as_deref()).collect();
    assert_eq!(keys, [Some(REAL)].into(), "codex: every request with the agent's key");
    assert!(requests.iter().all(|r| r.path == "/v1/responses"), "only the path listed");

    // opencode: its `anthropic` provider's `baseURL` the gateway's, its `apiKey` the placeholder.
    let model = Model::start();
    model.on("hello opencode", Reply::text("Answered through the gateway."));
    let home = tempfile::tempdir().unwrap();
    let port = gateway_for("anthropic", model.base_url(), "x-api-key", &["/v1/messages"], REAL, home.path()).await;
    let proxy = format!("http://127.0.0.1:{port}");
    let config = json!({
        "provider": {"anthropic": {"options": {"baseURL": format!("{proxy}/gateway/anthropic/v1"), "apiKey": "{env:ANTHROPIC_API_KEY}"}}},
        "model": "anthropic/claude-haiku-4-5",
        "autoupdate": false,
    });
    std::fs::create_dir_all(home.path().join(".config/opencode")).unwrap();
    std::fs::write(home.path().join(".config/opencode/opencode.json"), config.to_string()).unwrap();
    let mut env = vec![
        ("ANTHROPIC_API_KEY", "placeholder-key".to_string()),
        ("OPENCODE_DISABLE_MODELS_FETCH", "1".into()),
        ("OPENCODE_DISABLE_AUTOUPDATE", "1".into()),
    ];
    env.extend(["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"].map(|n| (n, proxy.clone())));
    let said = once("opencode", home.path(), &["run", "hello opencode"], &env).await;
    let requests = model.requests();
    println!("opencode: {said}\n{:?}", requests.iter().map(|r| &r.path).collect::<Vec<_>>());
    assert!(said.contains("Answered through the gateway."), "{said}");
    let keys: std::collections::BTreeSet<Option<&str>> = requests.iter().map(|r| r.key.as_deref()).collect();
    assert_eq!(keys, [Some(REAL)].into(), "opencode: every request with the agent's key");
    assert!(requests.iter().all(|r| r.path.split('?').next() == Some("/v1/messages")), "only the path listed");
}

/// Each CLI whose record states usage, in a real turn against the scripted model (a tool call, then the answer), and
/// its record read as the agent reads it, by the built-in profile's `usage`: the tokens the model reported for each of
/// its two calls, by kind, under the model's name, and one turn ended.
#[tokio::test]
async fn each_clis_record_of_a_real_turn_counts_what_its_model_reported() {
    use worksession::api::Tokens;
    // The scripted model reports 100 fresh input tokens, 30 written to the cache, 900 read from it, 20 out; the
    // Responses API has no cache write (Codex).
    let usage = support::model::Usage { input: 100, output: 20, cache_creation: 30, cache_read: 900 };
    for (name, model_name, spent) in [
        ("claude", "claude-opus-5-5", Tokens { input: 100, output: 20, cache_write: 30, cache_read: 900 }),
        ("codex", "mock-model", Tokens { input: 100, output: 20, cache_write: 0, cache_read: 900 }),
        ("copilot", "claude-haiku-4-5", Tokens { input: 100, output: 20, cache_write: 30, cache_read: 900 }),
    ] {
        let model = Model::start();
        model.set_usage(usage);
        model.on("usage please", Reply::bash("echo hi", "All done."));
        let cache = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| support::repo_root().join("target"));
        std::fs::create_dir_all(cache.join(".cache/worksession-tests")).unwrap();
        let home = tempfile::tempdir_in(cache.join(".cache/worksession-tests")).unwrap();
        let workdir = home.path().join("work");
        std::fs::create_dir_all(&workdir).unwrap();
        clis::scripted_profile(name, home.path(), &workdir, &model);
        let id = uuid::Uuid::new_v4().to_string();
        let args: Vec<String> = match name {
            "claude" => {
                ["-p", "usage please", "--session-id", &id, "--allowedTools", "Bash(echo hi)"].map(String::from).into()
            }
            "codex" => ["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "usage please"]
                .map(String::from)
                .into(),
            _ => [format!("--session-id={id}"), "-p".into(), "usage please".into(), "--allow-all-tools".into()].into(),
        };
        let mut cmd = tokio::process::Command::new(home.path().join(format!("{name}-offline")));
        cmd.args(&args).current_dir(&workdir).kill_on_drop(true).stdin(std::process::Stdio::null());
        let out = tokio::time::timeout(Duration::from_secs(120), cmd.output()).await.expect("the CLI ends").unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(said.contains("All done."), "{name}: {said}");
        let requests = model.requests();
        assert_eq!(requests.iter().filter(|r| r.tool_result).count(), 1, "{name}: the tool's result went back");
        // Codex makes its own id: it prints it.
        let id = match name {
            "codex" => said.lines().find_map(|l| l.strip_prefix("session id: ")).expect("its id").trim().to_string(),
            _ => id,
        };
        let profile = &worksession::harness::builtin()[name];
        let status = worksession::api::WorkSessionStatus::default();
        let place = (home.path(), &*workdir.to_string_lossy().into_owned());
        let read = worksession::agent::usage::read(profile, &status, place, &id)
            .await
            .unwrap_or_else(|| panic!("{name}: its record read"));
        assert_eq!(read.tally.models, [(model_name.to_string(), spent.plus(spent), 2)], "{name}");
        assert_eq!(read.tally.turns, 1, "{name}");
        assert!(read.tally.last_turn_end.is_some(), "{name}");
        assert_eq!((read.from, read.more), (0, false), "{name}");
        // Read again from where that read ended: nothing new.
        let counted = worksession::api::WorkSessionStatus {
            usage: Some(worksession::api::Usage {
                conversation: Some(worksession::api::ConversationUsage {
                    harness_session_id: id.clone(),
                    read_offset: read.to,
                    last_reply: read.tally.last_reply.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let again = worksession::agent::usage::read(profile, &counted, place, &id);
        assert_eq!(again.await.map(|r| r.tally), None, "{name}: read once");
    }
}
