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

/// A world whose `claude` profile runs the real CLI offline, its `HOME` being the harnesses' home, and whose hooks
/// run this build's `worksession hook`.
async fn world() -> World {
    World::with_yaml(|tmux, yaml| {
        // Offline, the CLI takes its command-line prompt some 12 s after it starts (measured): room to spare.
        let yaml = yaml.replace("confirmTimeoutSeconds: 15", "confirmTimeoutSeconds: 120");
        yaml + &claude_profile(tmux)
    })
    .await
}

/// The `claude` profile: the installed CLI offline in `tmux`'s state folder as its `HOME`.
fn claude_profile(tmux: &standin::TmuxServer) -> String {
    support::claude::offline_profile(&tmux.state(), &tmux.workdir())
}

/// Types `keys` into `session`'s pane as a person attached to it would, then Enter.
fn type_in(w: &World, session: &str, keys: &str) {
    let target = format!("={session}:");
    for args in [vec!["send-keys", "-t", &target, "-l", keys], vec!["send-keys", "-t", &target, "Enter"]] {
        let status = std::process::Command::new("tmux").arg("-S").arg(w.tmux.socket()).args(&args).status().unwrap();
        assert!(status.success(), "tmux {args:?}");
    }
}

/// Issue 26, point 3, with the real CLI: a person attached to the idle harness types `/clear` and an instruction; Claude
/// Code moves to a new conversation under a new id, and its `SessionStart` hook (given per run with `--settings`,
/// received by `worksession hook`) says so. The status records the new id and keeps the old one; after a crash the
/// next event lands in the conversation the person was in, not the one before the clear.
#[tokio::test]
async fn a_persons_clear_moves_the_recorded_id_and_a_crash_resumes_where_they_were() {
    let w = world().await;
    // No prompt of its own: offline the CLI retries the unreachable API after one, and a `/clear` typed meanwhile
    // waits in its queue (measured); idle, it runs at once.
    w.create_session("cl", json!({"harness": "claude"})).await;
    let old = recorded_id(&w.await_phase("cl", Phase::Running).await);
    let session = w.tmux_session("cl");
    w.tmux.await_output(&session, "for shortcuts").await;
    type_in(&w, &session, "/clear");
    let ws = w
        .await_session("cl", "the conversation after the clear recorded", |ws| {
            ws.status.as_ref().and_then(|s| s.harness_session_id.as_deref()).is_some_and(|id| id != old)
        })
        .await;
    let new = recorded_id(&ws);
    assert_eq!(ws.status.as_ref().unwrap().previous_session_ids, [old.as_str()], "the way back is kept");
    type_in(&w, &session, "the person's own instruction");
    let (home, workdir) = (w.tmux.state(), w.tmux.workdir());
    support::eventually("the instruction in the new conversation", || async {
        let path = worksession::transcript::locate(
            &worksession::harness::builtin()["claude"].conversation_path.clone().unwrap(),
            &home,
            &workdir.display().to_string(),
            &new,
        );
        std::fs::read_to_string(path).ok().filter(|t| t.contains("the person's own instruction"))
    })
    .await;

    w.tmux.kill_pane(&session).await;
    w.send("cl", "cl-1", "after the crash").await;
    let st = w.await_event("cl-1", EventPhase::Delivered).await.status.unwrap();
    assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Resumed), Some(new.as_str())));
    await_in_transcript(&w, &new, "after the crash").await; // resumed where the person was
    // The conversation they cleared (idle, it never wrote a transcript) did not get it.
    let cleared = worksession::transcript::locate(
        &worksession::harness::builtin()["claude"].conversation_path.clone().unwrap(),
        &home,
        &workdir.display().to_string(),
        &old,
    );
    let cleared = std::fs::read_to_string(cleared).unwrap_or_default();
    assert!(!cleared.contains("after the crash"), "not in the conversation they cleared");
}

/// Awaits `text` in the transcript of conversation `id`. A hook-backed delivery is confirmed by the CLI's
/// `UserPromptSubmit`, which it runs just before it writes the prompt to its transcript (measured: within a second).
async fn await_in_transcript(w: &World, id: &str, text: &str) {
    support::eventually(&format!("{text:?} in the transcript of {id}"), || async {
        let path = transcript_dir(w, id).join(format!("{id}.jsonl"));
        std::fs::read_to_string(path).ok().filter(|t| worksession::transcript::contains(t, text)).map(|_| ())
    })
    .await;
}

/// Claude Code's transcript of conversation `id` run in `workdir`, under `home`.
fn transcript(home: &Path, workdir: &Path, id: &str) -> String {
    let path = worksession::transcript::locate(
        &worksession::harness::builtin()["claude"].conversation_path.clone().unwrap(),
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
    await_in_transcript(&w, &id, "after the crash").await;
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
    // Offline the CLI boots in 12 s alone, far longer beside the other tests' CLIs on two cores.
    let events = w.events();
    let st = support::eventually_within("cd-1 Delivered", std::time::Duration::from_secs(150), || async {
        events.get("cd-1").await.ok()?.status.filter(|s| s.phase == Some(EventPhase::Delivered))
    })
    .await;
    assert_eq!(st.via, Some(Via::Pasted));
    let id = st.harness_session_id.unwrap();
    await_in_transcript(&w, &id, "typed while you were booting").await;
}

/// Issue 23, point 6, with the real CLI: Claude Code runs `/clear` (a new conversation under a new id) and `!...` (its
/// shell mode) whether it gets them on its command line or pasted into its input box (measured with 2.1.332). From a
/// WorkEvent they are prompts: pasted into the live harness, and riding on the resume's command line after a crash,
/// they reach the recorded conversation with `Prompt: ` in front, no shell command runs, no conversation is started,
/// and the next event lands in the recorded conversation.
#[tokio::test]
async fn a_webhook_clear_or_shell_line_is_a_prompt_to_the_real_cli() {
    let w = world().await;
    w.create_session("lit", json!({"harness": "claude", "initialPrompt": "first prompt"})).await;
    let ws = w
        .await_session("lit", "the initial prompt known delivered", |ws| {
            ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase)
                == Some(EventPhase::Delivered)
        })
        .await;
    let id = recorded_id(&ws);
    let marker = w.tmux.state().join("pwned-by-a-prompt");
    let touch = format!("!touch {}", marker.display());
    w.send("lit", "lit-1", &touch).await;
    w.send("lit", "lit-2", "/clear").await;
    for name in ["lit-1", "lit-2"] {
        let st = w.await_event(name, EventPhase::Delivered).await.status.unwrap();
        assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Pasted), Some(id.as_str())), "{name}");
    }

    // A crash: the next event rides on the resume's command line (its own words: a delivery is confirmed by its text
    // in the transcript, and the pasted `/clear` is there already).
    w.tmux.kill_pane(&w.tmux_session("lit")).await;
    w.send("lit", "lit-3", "/clear everything").await;
    let st = w.await_event("lit-3", EventPhase::Delivered).await.status.unwrap();
    assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())));
    w.send("lit", "lit-4", "the next prompt").await;
    // The resumed CLI retries the unreachable API with its command-line prompt first, so the paste can wait its turn
    // longer than the usual wait.
    let events = w.events();
    let st = support::eventually_within("lit-4 Delivered", std::time::Duration::from_secs(150), || async {
        events.get("lit-4").await.ok()?.status.filter(|s| s.phase == Some(EventPhase::Delivered))
    })
    .await;
    assert_eq!(st.harness_session_id.as_deref(), Some(id.as_str()));

    await_in_transcript(&w, &id, "the next prompt").await;
    let text = transcript(&w.tmux.state(), &w.tmux.workdir(), &id);
    let prompts = [format!("Prompt: {touch}"), "Prompt: /clear".into(), "Prompt: /clear everything".into()];
    for prompt in prompts.into_iter().chain(["the next prompt".to_string()]) {
        assert!(worksession::transcript::contains(&text, &prompt), "{prompt:?} in the recorded conversation");
    }
    assert!(!marker.exists(), "no shell command ran");
    // The CLI's own word: one conversation in this workdir, and its live process runs the recorded one.
    let project = worksession::transcript::locate(
        &worksession::harness::builtin()["claude"].conversation_path.clone().unwrap(),
        &w.tmux.state(),
        &w.tmux.workdir().display().to_string(),
        &id,
    );
    let conversations: Vec<String> = std::fs::read_dir(project.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".jsonl"))
        .collect();
    assert_eq!(conversations, [format!("{id}.jsonl")], "no conversation was started by a prompt");
    let sessions = w.tmux.state().join(".claude/sessions");
    let live: Vec<String> = std::fs::read_dir(&sessions)
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|json| {
            serde_json::from_str::<serde_json::Value>(&json).ok()?["sessionId"].as_str().map(String::from)
        })
        .collect();
    assert!(live.contains(&id) && live.iter().all(|s| s == &id), "the CLI runs the recorded conversation: {live:?}");
}

/// Issue 26, point 5, with the real CLI: a conversation one of Claude Code's background sessions holds (`claude
/// --bg`) is refused on `--resume` with "That session is running in the background ...", late (12-19 s offline,
/// measured). The holder is planted as the CLI registers one: a live process's entry of kind `bg` in
/// `~/.claude/sessions`, copied from the harness's own. That is no reason for a fresh conversation: `Resumed=False`
/// reason `ConversationBusy`, the event waits, no other conversation is started; once the holder is gone, the same
/// conversation is resumed and the event lands in it.
#[tokio::test]
async fn a_conversation_held_by_a_background_session_waits_and_is_resumed_not_replaced() {
    let w = world().await;
    w.create_session("bg", json!({"harness": "claude", "initialPrompt": "first prompt"})).await;
    let ws = w
        .await_session("bg", "the initial prompt known delivered", |ws| {
            ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase)
                == Some(EventPhase::Delivered)
        })
        .await;
    let id = recorded_id(&ws);
    let session = w.tmux_session("bg");
    let sessions = w.tmux.state().join(".claude/sessions");
    let own = std::fs::read_to_string(sessions.join(format!("{}.json", w.tmux.pane_pid(&session)))).unwrap();
    let mut holder_entry: serde_json::Value = serde_json::from_str(&own).unwrap();
    // Killed when the test ends, however it ends.
    struct Holder(std::process::Child);
    impl Drop for Holder {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut holder = Holder(std::process::Command::new("sleep").arg("600").spawn().unwrap());
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", holder.0.id())).unwrap();
    let started = stat.rsplit(") ").next().unwrap().split(' ').nth(19).unwrap().to_string(); // field 22
    holder_entry["pid"] = json!(holder.0.id());
    holder_entry["procStart"] = json!(started);
    holder_entry["kind"] = json!("bg");
    std::fs::write(sessions.join(format!("{}.json", holder.0.id())), holder_entry.to_string()).unwrap();

    w.tmux.kill_pane(&session).await;
    w.send("bg", "bg-1", "while it is held").await;
    let ws = w
        .await_session("bg", "its conversation busy elsewhere", |ws| {
            condition(ws, "Resumed").is_some_and(|c| c.1 == "ConversationBusy")
        })
        .await;
    let (status, _, message) = condition(&ws, "Resumed").unwrap();
    assert_eq!(status, "False");
    assert!(message.contains("is running in the background"), "the CLI's words: {message}");
    assert_eq!(recorded_id(&ws), id, "the conversation is kept");
    let waiting = w.events().get("bg-1").await.unwrap().status.and_then(|s| s.phase);
    assert_ne!(waiting, Some(EventPhase::Delivered));
    assert!(!transcript(&w.tmux.state(), &w.tmux.workdir(), &id).contains("while it is held"));

    holder.0.kill().unwrap();
    holder.0.wait().unwrap();
    let events = w.events();
    let st = support::eventually_within("bg-1 Delivered", std::time::Duration::from_secs(150), || async {
        events.get("bg-1").await.ok()?.status.filter(|s| s.phase == Some(EventPhase::Delivered))
    })
    .await;
    assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())));
    await_in_transcript(&w, &id, "while it is held").await;
    let project = transcript_dir(&w, &id);
    let conversations = std::fs::read_dir(project)
        .unwrap()
        .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".jsonl")));
    assert_eq!(conversations.count(), 1, "no other conversation was started");
}

/// The folder of Claude Code's transcripts for the world's workdir.
fn transcript_dir(w: &World, id: &str) -> PathBuf {
    let path = worksession::transcript::locate(
        &worksession::harness::builtin()["claude"].conversation_path.clone().unwrap(),
        &w.tmux.state(),
        &w.tmux.workdir().display().to_string(),
        id,
    );
    path.parent().unwrap().to_path_buf()
}
