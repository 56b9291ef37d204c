//! The real Claude Code CLI as the `claude` harness, through the agent on a real API server, offline.
//!
//! `scripts/test` installs the pinned CLI from npm into the test cache (`scripts/testenv install-claude`); it runs
//! without an account or a network as `../shared/guides/harnesses.md` describes: its own `HOME` with onboarding
//! done and the workdir trusted, a dummy API key (its API calls fail and are retried; the TUI stays up). The
//! built-in `claude` profile is used as it ships (its `readyPattern` and `conversationPath`), with only the binary
//! replaced by a wrapper that sets that environment.

mod scenarios;
mod standin;
mod support;
mod world;

use std::path::{Path, PathBuf};

use serde_json::json;
use worksession::api::{EventPhase, Phase, Via};
use world::{World, condition, recorded_id};

const KEY: &str = "sk-ant-api03-worksession-offline-test-key-00000000000000";

/// The CLI that `scripts/testenv install-claude` installed.
fn claude_bin() -> PathBuf {
    let out =
        std::process::Command::new(support::repo_root().join("scripts/testenv")).arg("claude-bin").output().unwrap();
    let bin = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert!(bin.exists(), "{} is missing: run `scripts/testenv install-claude` (scripts/test does)", bin.display());
    bin
}

/// A world whose `claude` profile runs the real CLI offline, its `HOME` being the harnesses' home.
async fn world() -> World {
    World::with_config_for(|tmux| {
        let home = tmux.state();
        let workdir = tmux.workdir();
        let config = json!({
            "hasCompletedOnboarding": true,
            "projects": {workdir.display().to_string(): {"hasTrustDialogAccepted": true}},
            "customApiKeyResponses": {"approved": [&KEY[KEY.len() - 20..]], "rejected": []},
        });
        std::fs::write(home.join(".claude.json"), config.to_string()).unwrap();
        let wrapper = home.join("claude-offline");
        let script = format!(
            "#!/bin/sh\nexport HOME='{home}' ANTHROPIC_API_KEY='{KEY}' DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\nexec '{bin}' \"$@\"\n",
            home = home.display(),
            bin = claude_bin().display(),
        );
        std::fs::write(&wrapper, script).unwrap();
        std::process::Command::new("chmod").arg("+x").arg(&wrapper).status().unwrap();
        format!("  claude:\n    binary: {}\n", wrapper.display())
    })
    .await
}

/// Claude Code's transcript of conversation `id` run in `workdir`, under `home`.
fn transcript(home: &Path, workdir: &Path, id: &str) -> String {
    let path = worksession::transcript::locate(
        worksession::harness::CLAUDE_CONVERSATION_PATH,
        home,
        &workdir.display().to_string(),
        id,
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn unknown_adopted_id_starts_fresh_then_a_crash_resumes_the_same_conversation() {
    let w = world().await;
    let ghost = "22222222-3333-4444-8555-666666666666";
    w.create_session("cc", json!({"harness": "claude", "harnessSessionId": ghost, "initialPrompt": "first prompt"}))
        .await;
    // Never resumed: the CLI has no such conversation, so the spawn is fresh at once.
    let ws = w
        .await_session("cc", "the initial prompt known delivered", |ws| {
            ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase)
                == Some(EventPhase::Delivered)
        })
        .await;
    assert_eq!(condition(&ws, "Resumed").map(|c| c.1), Some("ConversationNotFound".into()));
    let id = recorded_id(&ws);
    assert_ne!(id, ghost);
    assert!(transcript(&w.tmux.state(), &w.tmux.workdir(), &id).contains("first prompt"));

    // A crash, then an event: the same conversation is resumed and its transcript gains the event.
    w.tmux.kill_pane(&w.tmux_session("cc")).await;
    w.send("cc", "cc-1", "after the crash").await;
    let ev = w.await_event("cc-1", EventPhase::Delivered).await;
    let st = ev.status.unwrap();
    assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())));
    let ws = w.await_phase("cc", Phase::Running).await;
    assert_eq!(condition(&ws, "Resumed").map(|c| c.1), Some("Resumed".into()));
    assert!(transcript(&w.tmux.state(), &w.tmux.workdir(), &id).contains("after the crash"));
}

#[tokio::test]
async fn an_event_arriving_during_the_boot_reaches_the_transcript() {
    let w = world().await;
    w.create_session("cd", json!({"harness": "claude"})).await;
    w.await_session("cd", "spawned", |ws| {
        ws.status.as_ref().and_then(|s| s.verification.as_ref()).is_some()
            || ws.status.as_ref().and_then(|s| s.phase) == Some(Phase::Running)
    })
    .await;
    // The CLI takes seconds to show its input box offline: this event arrives while it boots.
    w.send("cd", "cd-1", "typed while you were booting").await;
    let ev = w.await_event("cd-1", EventPhase::Delivered).await;
    let st = ev.status.unwrap();
    assert_eq!(st.via, Some(Via::Pasted));
    let id = st.harness_session_id.unwrap();
    assert!(transcript(&w.tmux.state(), &w.tmux.workdir(), &id).contains("typed while you were booting"));
}
