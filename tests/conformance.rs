//! The conformance table: each installed harness CLI at its pinned version through the same contract, against the
//! scripted model, through the agent with the built-in profile as it ships (only its binary wrapped to set the CLI's
//! environment). Each test measures one CLI: its version; whether the id it runs is the one it was given, or one the
//! agent discovers; a real turn (how its delivery is confirmed, which hooks fire, what `Activity` says at its end);
//! what the model gets for prompts starting with `/`, `!`, `#` and `@`; whether a killed harness's next prompt lands
//! in the same conversation; and what an unknown id does (the `Resumed` row, how long it took, the CLI's words).
//!
//! Each checks what it measured against the profile's assumptions (so a new CLI version that changes behaviour fails
//! here, not in a user's night) and writes its row to `target/conformance/<cli>.json`; `scripts/conformance` runs
//! them and writes `docs/conformance.md`.

mod scenarios;
mod standin;
mod support;
mod world;

use std::path::PathBuf;
use std::time::Instant;

use serde_json::json;
use support::model::Model;
use worksession::api::{EventPhase, Phase, Via};
use world::{World, condition, recorded_id};

/// One CLI's measured row.
#[derive(Debug, Default, serde::Serialize)]
struct Row {
    cli: String,
    version: String,
    id_at_start: String,
    turn: String,
    hooks: String,
    leading: String,
    resume_after_kill: String,
    unknown_id: String,
    measured: String,
}

/// The prompts whose first character a CLI may take as its own command, and what the profile sends for each.
const LEADING: [&str; 4] = ["/conformance-slash", "!conformance-bang", "#conformance-hash", "@conformance-at"];

async fn world_for(name: &'static str, model: &Model) -> World {
    // The real CLIs' deadline for a delivery (tests/claude.rs), but for Copilot, whose prompts are never confirmed
    // offline: the stand-in's 15 s, so its failure is measured within a test's wait.
    let confirm = if name == "copilot" { 15 } else { 60 };
    // Gemini CLI skips a settings file under a folder others can write (`/tmp`): every world under the user's cache.
    let cache = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| support::repo_root().join("target"));
    let tmux = standin::TmuxServer::new_in(&cache.join(".cache/worksession-tests"));
    World::with_tmux(tmux, |tmux, yaml| {
        yaml.replace("confirmTimeoutSeconds: 15", &format!("confirmTimeoutSeconds: {confirm}"))
            + &support::clis::scripted_profile(name, &tmux.state(), &tmux.workdir(), model)
    })
    .await
}

fn version_of(name: &str) -> String {
    let bin = if name == "claude" { support::claude::bin() } else { support::clis::bin(name) };
    let out = std::process::Command::new(bin).arg("--version").env("HOME", "/nonexistent").output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or_default().trim().to_string()
}

/// The distinct hooks the session's hook file holds, in the order first seen.
fn hooks_seen(w: &World, session: &str) -> Vec<String> {
    let file = worksession::hook::file_of(&w.tmux.state(), &format!("{}/{session}", w.ns.name));
    let mut seen: Vec<String> = Vec::new();
    for line in std::fs::read_to_string(file).unwrap_or_default().lines() {
        let hook =
            serde_json::from_str::<serde_json::Value>(line).ok().and_then(|v| v["hook"].as_str().map(String::from));
        if let Some(hook) = hook.filter(|h| !seen.contains(h)) {
            seen.push(hook);
        }
    }
    seen
}

/// The session ids the CLI's own hooks named (`SessionStart` and others carry one).
fn ids_in_hooks(w: &World, session: &str) -> Vec<String> {
    let file = worksession::hook::file_of(&w.tmux.state(), &format!("{}/{session}", w.ns.name));
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["data"]["session_id"].as_str().or(v["data"]["sessionID"].as_str()).map(String::from))
        .collect()
}

async fn conform(name: &'static str) {
    let profile = worksession::harness::builtin()[name].clone();
    // Where its hooks report each turn (its prompt taken, its end), a turn is over when they say so.
    let turns = profile.hooks.is_some_and(worksession::harness::hooks::Hooks::confirms_prompts);
    let model = Model::start();
    let w = world_for(name, &model).await;
    let mut row = Row { cli: name.into(), version: version_of(name), ..Row::default() };
    let today = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    row.measured = today;

    // A real turn: the initial prompt, confirmed by the harness's own record, and the turn's end.
    let first = "conformance: the first prompt";
    w.create_session("c", json!({"harness": name, "initialPrompt": first})).await;
    let ws = w
        .await_session("c", "the initial prompt known delivered or failed", |ws| {
            let phase = ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase);
            matches!(phase, Some(EventPhase::Delivered | EventPhase::Failed))
        })
        .await;
    let initial = ws.status.as_ref().and_then(|s| s.initial_prompt.clone()).unwrap();
    if initial.phase == Some(EventPhase::Failed) {
        // Copilot CLI without an account takes no prompt (it asks for /login): nothing more is measurable offline.
        row.turn = format!("none offline: the prompt failed ({})", initial.message.unwrap_or_default());
        row.hooks = hooks_seen(&w, "c").join(", ");
        assert!(!model.prompts().iter().any(|p| p.contains(first)), "{name}: failed, yet the model got it");
    } else {
        let ws = w
            .await_session("c", "the turn over", |ws| {
                let turn_over = !turns || condition(ws, "Activity").is_some_and(|c| c.1 == "Idle");
                turn_over && model.prompts().iter().any(|p| p.contains(first))
            })
            .await;
        let activity = condition(&ws, "Activity").map_or("not reported".into(), |c| c.1);
        row.turn = format!("the model got the prompt; Activity {activity} at the turn's end");
        row.hooks = hooks_seen(&w, "c").join(", ");
        let id = recorded_id(&ws);
        let given = profile.interactive.as_ref().is_some_and(|a| a.iter().any(|w| w.contains("{sessionId}")));
        let named = ids_in_hooks(&w, "c");
        row.id_at_start = if given {
            assert!(named.is_empty() || named.contains(&id), "{name}: its hooks name {named:?}, not the given {id}");
            format!("given (`{}`), and the one it runs", profile.interactive.as_ref().unwrap().join(" "))
        } else {
            let discover = profile.discover.as_ref().map_or("-", |d| d.path.as_deref().unwrap_or("its log or hooks"));
            format!("discovered ({discover})")
        };

        // Prompts that lead with a character a CLI may take as its own command: what the model got for each.
        let mut leading = Vec::new();
        for (i, prompt) in LEADING.iter().enumerate() {
            let event = format!("lead-{i}");
            w.send("c", &event, prompt).await;
            w.await_event(&event, EventPhase::Delivered).await;
            let got = support::eventually(&format!("{name}: the model got {prompt:?}"), || async {
                model.prompts().into_iter().find(|p| p.contains(&prompt[1..]))
            })
            .await;
            let literal = profile.command_prefixes.iter().any(|c| prompt.starts_with(c.as_str()));
            let expected =
                if literal { format!("{}{prompt}", worksession::harness::LITERAL_PREFIX) } else { prompt.to_string() };
            // Whole, on a line of its own (Copilot CLI puts the time on lines before it).
            let got = got.trim().rsplit('\n').next().unwrap_or_default().to_string();
            assert_eq!(got, expected, "{name}: {prompt:?} sent as {expected:?} is taken as text, whole");
            leading.push(format!("`{}` → `{}`", prompt.chars().next().unwrap(), got.replace(&prompt[1..], "…")));
            w.await_session("c", "the turn over", |ws| {
                !turns || condition(ws, "Activity").is_some_and(|c| c.1 == "Idle")
            })
            .await;
        }
        row.leading = leading.join("; ");

        // A killed harness: the next prompt resumes the conversation it was in (the one recorded now: a harness may
        // have moved to another since its first turn, and said so).
        let ws = w
            .await_session("c", "a recorded id", |ws| {
                ws.status.as_ref().and_then(|s| s.harness_session_id.as_ref()).is_some_and(|id| !id.is_empty())
            })
            .await;
        let now = recorded_id(&ws);
        let moved = if now == id { String::new() } else { format!(" (its id moved from {id} to {now} on the way)") };
        let id = now;
        w.tmux.kill_pane(&w.tmux_session("c")).await;
        w.send("c", "after-kill", "conformance: after the kill").await;
        let st = w.await_event("after-kill", EventPhase::Delivered).await.status.unwrap();
        // On the resume's command line, or pasted once it runs where the resume takes no prompt (opencode).
        let via = if profile.takes_prompt(worksession::harness::Mode::Resume) { Via::Resumed } else { Via::Pasted };
        assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(via), Some(id.as_str())), "{name}");
        let request = support::eventually(&format!("{name}: the model asked after the kill"), || async {
            model.requests().into_iter().find(|r| r.prompt.as_deref().is_some_and(|p| p.contains("after the kill")))
        })
        .await;
        assert!(request.body.to_string().contains(first), "{name}: the resumed conversation holds the first prompt");
        row.resume_after_kill =
            format!("resumed: the model got the next prompt with the conversation before it{moved}");
    }

    // An unknown id: the agent's resume table, with the CLI's own words where it ran.
    let unknown = uuid::Uuid::new_v4().to_string();
    let started = Instant::now();
    let spec = json!({"harness": name, "harnessSessionId": unknown, "initialPrompt": "conformance: an unknown id"});
    w.create_session("u", spec).await;
    let ws = w
        .await_session("u", "Resumed=False and Running", |ws| {
            condition(ws, "Resumed").is_some_and(|c| c.0 == "False") && world::phase_of(ws) == Some(Phase::Running)
        })
        .await;
    let (_, reason, message) = condition(&ws, "Resumed").unwrap();
    let ran = matches!(reason.as_str(), "PaneDied" | "PaneDiedAfterProbe");
    assert!(ran || reason == "ConversationNotFound", "{name}: {reason}: {message}");
    if ran {
        assert!(profile.resume_failed(&message), "{name}: resumeFailedPattern does not match: {message}");
    }
    // The CLI's own words where it ran (from where its profile's pattern matches), else the agent's.
    let from = profile.resume_failed_pattern.as_ref().and_then(|p| p.find(&message)).map_or(0, |m| m.start());
    let words: String = message[from..].split_whitespace().collect::<Vec<_>>().join(" ").chars().take(120).collect();
    row.unknown_id = format!("`{reason}` after {} s: {words}", started.elapsed().as_secs());
    // A fresh conversation (a harness that shows its id later has none recorded yet).
    let recorded = ws.status.as_ref().and_then(|s| s.harness_session_id.clone());
    assert_ne!(recorded.as_deref(), Some(unknown.as_str()), "{name}: a fresh conversation");

    let dir = support::repo_root().join("target/conformance");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.json")), serde_json::to_string_pretty(&row).unwrap()).unwrap();
}

#[tokio::test]
async fn claude_conforms() {
    conform("claude").await;
}

#[tokio::test]
async fn codex_conforms() {
    conform("codex").await;
}

#[tokio::test]
async fn gemini_conforms() {
    conform("gemini").await;
}

#[tokio::test]
async fn opencode_conforms() {
    conform("opencode").await;
}

#[tokio::test]
async fn copilot_conforms() {
    conform("copilot").await;
}

/// Copilot CLI's unknown id, run as the profile's resume runs it (measured: an older version started an empty session
/// under the id instead): it must say so and exit, as `resumeFailedPattern` expects.
#[tokio::test]
async fn copilot_unknown_id_fails_when_run_directly() {
    let unknown = uuid::Uuid::new_v4().to_string();
    let (exit, output, took) = support::clis::run("copilot", &[&format!("--resume={unknown}")]).await;
    assert_eq!(exit, Some(1), "{output}");
    assert!(worksession::harness::builtin()["copilot"].resume_failed(&output), "{output}");
    let dir = support::repo_root().join("target/conformance");
    std::fs::create_dir_all(&dir).unwrap();
    let line = output.lines().find(|l| !l.trim().is_empty()).unwrap_or_default().trim().to_string();
    let note = json!({"exit": exit, "seconds": took.as_secs_f32(), "words": line});
    std::fs::write(dir.join("copilot-direct.json"), note.to_string()).unwrap();
}
