//! The real Claude Code CLI as the `claude` harness, through the agent on a real API server, offline.
//!
//! `scripts/test` installs the pinned CLI from npm into the test cache (`scripts/testenv install-claude`); it runs
//! without an account or a network as `../shared/guides/harnesses.md` describes: its own `HOME` with onboarding
//! done and the workdir trusted, a dummy API key, and `ANTHROPIC_BASE_URL` naming a scripted model
//! (`support::model`), so its turns are real: replies, tool calls, `Stop` at their end, usage in its transcript. The
//! built-in `claude` profile is used as it ships (its `readyPattern` and `conversationPath`), with only the binary
//! replaced by a wrapper that sets that environment.

mod fake_github;
mod scenarios;
mod standin;
mod support;
mod world;

use std::path::{Path, PathBuf};

use serde_json::json;
use support::model::{Model, Reply};
use worksession::api::{Phase, PromptPhase, Via};
use world::{World, condition, recorded_id};

/// A world whose `claude` profile runs the real CLI offline against the scripted `model` (its turns end), its `HOME`
/// being the harnesses' home, and whose hooks run this build's `worksession hook`. It runs in the CLI's `default`
/// permission mode (its own default, "auto", asks Anthropic's servers, which a local model is not) with `./slow-tool` allowed
/// without asking, and the deadline of a delivery allows for its boot beside the other tests' CLIs on two cores.
async fn world(model: &Model) -> World {
    World::with_yaml(|tmux, yaml| {
        // A tool that runs for a while, printing nothing, and says when it started.
        let tool = tmux.workdir().join("slow-tool");
        std::fs::write(&tool, "#!/bin/sh\ntouch \"$0.started\"\nsleep \"$1\"\necho slept\n").unwrap();
        std::process::Command::new("chmod").arg("+x").arg(&tool).status().unwrap();
        yaml.replace("confirmTimeoutSeconds: 15", "confirmTimeoutSeconds: 60")
            + &support::claude::scripted_profile(&tmux.state(), &tmux.workdir(), model)
            + "    extraArgs: [\"--permission-mode\", \"default\", \"--allowedTools\", \"Bash(./slow-tool:*)\"]\n"
    })
    .await
}

/// Whether `ws`'s `Activity` condition has `reason`.
fn activity_is(ws: &worksession::api::WorkSession, reason: &str) -> bool {
    condition(ws, "Activity").is_some_and(|c| c.1 == reason)
}

fn initial_prompt_delivered(ws: &worksession::api::WorkSession) -> bool {
    ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase) == Some(PromptPhase::Delivered)
}

/// A real turn, and the idle stop after it: the initial prompt asks for a tool that runs for seconds while the screen
/// is quiet; the scripted model gets the tool's result and ends the turn; the CLI's `Stop` turns `Activity` from
/// `Working` to `Idle`, and only from then does the idle period count. The reply and the usage the model sent are
/// in the transcript; an event then wakes the same conversation.
#[tokio::test]
async fn a_real_turn_ends_at_its_stop_and_the_idle_stop_counts_from_there() {
    let model = Model::start();
    model.on("run the slow tool", Reply::bash("./slow-tool 4", "The tool is done."));
    let w = world(&model).await;
    let spec = json!({"harness": "claude", "initialPrompt": "run the slow tool", "idle": {"suspendAfterSeconds": 2}});
    w.create_session("rt", spec).await;
    w.await_session("rt", "working on the turn", |ws| activity_is(ws, "Working")).await;
    let ws = w.await_phase("rt", Phase::Idle).await;
    assert!(initial_prompt_delivered(&ws), "confirmed by its UserPromptSubmit");
    let tool_done = model.requests().iter().find(|r| r.tool_result).map(|r| r.at).expect("the tool's result sent");
    let idle_since = ws.status.as_ref().and_then(|s| s.idle_since.as_ref()).unwrap().0;
    let turn_end = k8s_openapi::jiff::Timestamp::try_from(tool_done).unwrap();
    // Status times are whole seconds: the period is 2 s, so at least 1 s after the turn's end, whatever the rounding.
    assert!(idle_since >= turn_end + std::time::Duration::from_secs(1), "{idle_since} after {turn_end}");
    // The CLI's own word for the turn's end: its Stop, before the stop by at least the period (whole seconds).
    let hooks =
        std::fs::read_to_string(worksession::node::hook::file_of(&w.tmux.state(), &format!("{}/rt", w.ns.name)));
    let stopped: Vec<k8s_openapi::jiff::Timestamp> = hooks
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["hook"] == "Stop")
        .filter_map(|v| v["at"].as_str()?.parse().ok())
        .collect();
    let stop = *stopped.first().expect("its Stop at the turn's end");
    assert!(idle_since >= stop + std::time::Duration::from_secs(1), "{idle_since} after its Stop at {stop}");
    let id = recorded_id(&ws);
    await_in_transcript(&w, &id, "The tool is done.").await;
    let text = transcript(&w.tmux.state(), &w.tmux.workdir(), &id);
    assert!(text.contains("\"cache_read_input_tokens\":900"), "the usage the model sent: {text}");

    w.send("rt", "rt-1", "wake up").await;
    let st = w.await_event("rt-1", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())));
    w.await_session("rt", "the woken turn over", |ws| {
        activity_is(ws, "Idle") && model.prompts().ends_with(&["wake up".into()])
    })
    .await;
}

/// A prompt sent while a real turn streams is pasted into the CLI's queue, confirmed by its `UserPromptSubmit` when
/// the CLI takes it, and reaches the model once, after the turn it waited for.
#[tokio::test]
async fn a_prompt_sent_while_a_real_turn_runs_is_queued_and_confirmed() {
    let model = Model::start();
    let slow = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen";
    model.on("a slow answer", Reply::Slow { text: slow.into(), every: std::time::Duration::from_millis(500) });
    let w = world(&model).await;
    w.create_session("q", json!({"harness": "claude", "initialPrompt": "a slow answer please"})).await;
    w.await_session("q", "working on the slow answer", |ws| {
        activity_is(ws, "Working") && model.prompts().iter().any(|p| p.contains("a slow answer"))
    })
    .await;
    w.send("q", "q-1", "meanwhile, this").await;
    let st = w.await_event("q-1", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!(st.via, Some(Via::Pasted));
    let ws = w
        .await_session("q", "both turns over", |ws| {
            activity_is(ws, "Idle") && model.prompts().iter().any(|p| p == "meanwhile, this")
        })
        .await;
    let prompts = model.prompts();
    assert_eq!(prompts.iter().filter(|p| p.as_str() == "meanwhile, this").count(), 1, "{prompts:?}");
    // The model got it after the turn it waited for: its request holds that turn's whole reply.
    let asked = model.requests().into_iter().find(|r| r.prompt.as_deref() == Some("meanwhile, this")).unwrap();
    assert!(asked.body["messages"].to_string().contains("sixteen"), "after the slow turn: {}", asked.body);
    await_in_transcript(&w, &recorded_id(&ws), "meanwhile, this").await;
}

/// Compaction, typed by a person (`/compact`) or the CLI's own when the context nears its window (the scripted model
/// reports 995k tokens read; measured with 2.1.332: the CLI compacts before the next prompt), keeps the conversation's
/// id: its `SessionStart` says `compact` with the same id, the recorded id stays and no earlier one is added, and
/// the next prompt, and a crash's resume, land in the same transcript.
#[tokio::test]
async fn compaction_by_a_person_or_by_the_cli_keeps_the_recorded_conversation() {
    let model = Model::start();
    let w = world(&model).await;
    w.create_session("cp", json!({"harness": "claude", "initialPrompt": "first prompt"})).await;
    let ws = w
        .await_session("cp", "the first turn over", |ws| initial_prompt_delivered(ws) && activity_is(ws, "Idle"))
        .await;
    let id = recorded_id(&ws);
    let session = w.tmux_session("cp");
    w.tmux.await_output(&session, "for shortcuts").await;
    w.type_in(&session, "/compact");
    let compactions = || model.prompts().iter().filter(|p| p.contains("Respond with TEXT ONLY")).count();
    support::until("the person's compaction asked of the model", || async { compactions() > 0 }).await;
    let hooks = worksession::node::hook::file_of(&w.tmux.state(), &format!("{}/cp", w.ns.name));
    let compacted = |n: usize| {
        let hooks = hooks.clone();
        move || {
            let hooks = hooks.clone();
            async move { std::fs::read_to_string(&hooks).unwrap_or_default().matches("\"source\":\"compact\"").count() >= n }
        }
    };
    support::until("its SessionStart after /compact", compacted(1)).await;

    model.set_usage(support::model::Usage { input: 5, output: 30, cache_creation: 1000, cache_read: 995_000 });
    w.send("cp", "cp-1", "a prompt in a full context").await;
    w.await_event("cp-1", PromptPhase::Delivered).await;
    w.send("cp", "cp-2", "the prompt after it").await;
    w.await_event("cp-2", PromptPhase::Delivered).await;
    support::until("its own compaction's SessionStart", compacted(2)).await;
    let said = std::fs::read_to_string(&hooks).unwrap();
    for line in said.lines().filter(|l| l.contains("\"source\":\"compact\"")) {
        assert!(line.contains(&format!("\"session_id\":\"{id}\"")), "the same id: {line}");
    }
    let ws = w.sessions().get("cp").await.unwrap();
    assert_eq!(recorded_id(&ws), id);
    assert!(ws.status.as_ref().unwrap().previous_session_ids.is_empty(), "no conversation was left");
    await_in_transcript(&w, &id, "the prompt after it").await;

    w.tmux.kill_pane(&session).await;
    w.send("cp", "cp-3", "after the crash").await;
    let st = w.await_event("cp-3", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())));
    await_in_transcript(&w, &id, "after the crash").await;
}

/// A crash in the middle of a tool call: the CLI is killed while its tool runs. The next event resumes the
/// conversation and is taken; the CLI (2.1.332, measured) closes the interrupted call with a result of its own ("Tool
/// call interrupted") rather than sending a conversation the API would refuse, and the turn ends.
#[tokio::test]
async fn a_crash_in_the_middle_of_a_tool_call_resumes_and_takes_the_next_prompt() {
    let model = Model::start();
    model.on("run the slow tool", Reply::bash("./slow-tool 600", "never"));
    let w = world(&model).await;
    w.create_session("mt", json!({"harness": "claude", "initialPrompt": "run the slow tool"})).await;
    let started = w.tmux.workdir().join("slow-tool.started");
    support::until("the tool running", || async { started.exists() }).await;
    // Its conversation is recorded once the spawn is verified, which a loaded machine may finish after the tool began.
    let recorded =
        |ws: &worksession::api::WorkSession| ws.status.as_ref().is_some_and(|s| s.harness_session_id.is_some());
    let id = recorded_id(&w.await_session("mt", "its conversation recorded", recorded).await);
    // Killed once the CLI's own record holds the call (it writes its transcript a moment after it acts: killed
    // before, there is no conversation to resume, and a fresh one takes over).
    await_in_transcript(&w, &id, "./slow-tool 600").await;
    w.tmux.kill_pane(&w.tmux_session("mt")).await;
    w.send("mt", "mt-1", "after the crash").await;
    let st = w.await_event("mt-1", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())));
    let ws = w
        .await_session("mt", "the turn after the crash over", |ws| {
            activity_is(ws, "Idle") && model.prompts().ends_with(&["after the crash".into()])
        })
        .await;
    assert_eq!(condition(&ws, "Resumed").map(|c| c.1), Some("Resumed".into()));
    let last = model.requests().into_iter().rev().find(|r| r.prompt.as_deref() == Some("after the crash")).unwrap();
    let sent = last.body["messages"].to_string();
    assert!(sent.contains("tool_result") && sent.contains("interrupted"), "the interrupted call closed: {sent}");
}

/// With the real CLI: a person attached to the idle harness types `/clear` and an instruction; Claude
/// Code moves to a new conversation under a new id, and its `SessionStart` hook (given per run with `--settings`,
/// received by `worksession hook`) says so. The status records the new id and keeps the old one; after a crash the
/// next event lands in the conversation the person was in, not the one before the clear.
#[tokio::test]
async fn a_persons_clear_moves_the_recorded_id_and_a_crash_resumes_where_they_were() {
    let model = Model::start();
    let w = world(&model).await;
    w.create_session("cl", json!({"harness": "claude"})).await;
    let old = recorded_id(&w.await_phase("cl", Phase::Running).await);
    let session = w.tmux_session("cl");
    w.tmux.await_output(&session, "for shortcuts").await;
    w.type_in(&session, "/clear");
    let ws = w
        .await_session("cl", "the conversation after the clear recorded", |ws| {
            ws.status.as_ref().and_then(|s| s.harness_session_id.as_deref()).is_some_and(|id| id != old)
        })
        .await;
    let new = recorded_id(&ws);
    assert_eq!(ws.status.as_ref().unwrap().previous_session_ids, [old.as_str()], "the way back is kept");
    w.type_in(&session, "the person's own instruction");
    let (home, workdir) = (w.tmux.state(), w.tmux.workdir());
    support::eventually("the instruction in the new conversation", || async {
        let path = worksession::node::transcript::locate(
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
    let st = w.await_event("cl-1", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Resumed), Some(new.as_str())));
    await_in_transcript(&w, &new, "after the crash").await; // resumed where the person was
    // The conversation they cleared (idle, it never wrote a transcript) did not get it.
    let cleared = worksession::node::transcript::locate(
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
        std::fs::read_to_string(path).ok().filter(|t| worksession::node::transcript::contains(t, text)).map(|_| ())
    })
    .await;
}

/// Claude Code's transcript of conversation `id` run in `workdir`, under `home`.
fn transcript(home: &Path, workdir: &Path, id: &str) -> String {
    let path = worksession::node::transcript::locate(
        &worksession::harness::builtin()["claude"].conversation_path.clone().unwrap(),
        home,
        &workdir.display().to_string(),
        id,
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn unknown_adopted_id_starts_fresh_then_a_crash_resumes_the_same_conversation() {
    let model = Model::start();
    let w = world(&model).await;
    let ghost = "22222222-3333-4444-8555-666666666666";
    w.create_session("cc", json!({"harness": "claude", "harnessSessionId": ghost, "initialPrompt": "first prompt"}))
        .await;
    // Never resumed: the CLI has no such conversation, so the spawn is fresh at once.
    let ws = w
        .await_session("cc", "the initial prompt known delivered", |ws| {
            ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase)
                == Some(PromptPhase::Delivered)
        })
        .await;
    assert_eq!(condition(&ws, "Resumed").map(|c| c.1), Some("ConversationNotFound".into()));
    let id = recorded_id(&ws);
    assert_ne!(id, ghost);
    assert!(transcript(&w.tmux.state(), &w.tmux.workdir(), &id).contains("first prompt"));

    // A crash, then an event: the same conversation is resumed and its transcript gains the event.
    w.tmux.kill_pane(&w.tmux_session("cc")).await;
    w.send("cc", "cc-1", "after the crash").await;
    let ev = w.await_event("cc-1", PromptPhase::Delivered).await;
    let st = ev.status.unwrap();
    assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())));
    let ws = w.await_phase("cc", Phase::Running).await;
    assert_eq!(condition(&ws, "Resumed").map(|c| c.1), Some("Resumed".into()));
    await_in_transcript(&w, &id, "after the crash").await;
}

#[tokio::test]
async fn an_event_arriving_during_the_boot_reaches_the_transcript() {
    let model = Model::start();
    let w = world(&model).await;
    w.create_session("cd", json!({"harness": "claude"})).await;
    w.await_session("cd", "spawned", |ws| {
        ws.status.as_ref().and_then(|s| s.verification.as_ref()).is_some()
            || ws.status.as_ref().and_then(|s| s.phase) == Some(Phase::Running)
    })
    .await;
    // The CLI takes seconds to show its input box: this event arrives while it boots.
    w.send("cd", "cd-1", "typed while you were booting").await;
    let st = w.await_event("cd-1", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!(st.via, Some(Via::Pasted));
    let id = st.harness_session_id.unwrap();
    await_in_transcript(&w, &id, "typed while you were booting").await;
}

/// With the real CLI: Claude Code runs `/clear` (a new conversation under a new id) and `!...` (its
/// shell mode) whether it gets them on its command line or pasted into its input box (measured with 2.1.332). From a
/// WorkEvent they are prompts: pasted into the live harness, and riding on the resume's command line after a crash,
/// they reach the recorded conversation with `Prompt: ` in front, no shell command runs, no conversation is started,
/// and the next event lands in the recorded conversation.
#[tokio::test]
async fn a_webhook_clear_or_shell_line_is_a_prompt_to_the_real_cli() {
    let model = Model::start();
    let w = world(&model).await;
    w.create_session("lit", json!({"harness": "claude", "initialPrompt": "first prompt"})).await;
    let ws = w
        .await_session("lit", "the initial prompt known delivered", |ws| {
            ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase)
                == Some(PromptPhase::Delivered)
        })
        .await;
    let id = recorded_id(&ws);
    let marker = w.tmux.state().join("pwned-by-a-prompt");
    let touch = format!("!touch {}", marker.display());
    w.send("lit", "lit-1", &touch).await;
    w.send("lit", "lit-2", "/clear").await;
    for name in ["lit-1", "lit-2"] {
        let st = w.await_event(name, PromptPhase::Delivered).await.status.unwrap();
        assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Pasted), Some(id.as_str())), "{name}");
    }

    // A crash: the next event rides on the resume's command line (its own words: a delivery is confirmed by its text
    // in the transcript, and the pasted `/clear` is there already).
    w.tmux.kill_pane(&w.tmux_session("lit")).await;
    w.send("lit", "lit-3", "/clear everything").await;
    let st = w.await_event("lit-3", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())));
    w.send("lit", "lit-4", "the next prompt").await;
    let st = w.await_event("lit-4", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!(st.harness_session_id.as_deref(), Some(id.as_str()));

    await_in_transcript(&w, &id, "the next prompt").await;
    let text = transcript(&w.tmux.state(), &w.tmux.workdir(), &id);
    let prompts = [format!("Prompt: {touch}"), "Prompt: /clear".into(), "Prompt: /clear everything".into()];
    for prompt in prompts.into_iter().chain(["the next prompt".to_string()]) {
        assert!(worksession::node::transcript::contains(&text, &prompt), "{prompt:?} in the recorded conversation");
    }
    assert!(!marker.exists(), "no shell command ran");
    // The CLI's own word: one conversation in this workdir, and its live process runs the recorded one.
    let project = worksession::node::transcript::locate(
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

/// With the real CLI: a conversation one of Claude Code's background sessions holds (`claude
/// --bg`) is refused on `--resume` with "That session is running in the background ...", late (12-19 s offline,
/// measured). The holder is planted as the CLI registers one: a live process's entry of kind `bg` in
/// `~/.claude/sessions`, copied from the harness's own. That is no reason for a fresh conversation: `Resumed=False`
/// reason `ConversationBusy`, the event waits, no other conversation is started; once the holder is gone, the same
/// conversation is resumed and the event lands in it.
#[tokio::test]
async fn a_conversation_held_by_a_background_session_waits_and_is_resumed_not_replaced() {
    let model = Model::start();
    let w = world(&model).await;
    w.create_session("bg", json!({"harness": "claude", "initialPrompt": "first prompt"})).await;
    let ws = w
        .await_session("bg", "the initial prompt known delivered", |ws| {
            ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase)
                == Some(PromptPhase::Delivered)
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
    assert_ne!(waiting, Some(PromptPhase::Delivered));
    assert!(!transcript(&w.tmux.state(), &w.tmux.workdir(), &id).contains("while it is held"));

    holder.0.kill().unwrap();
    holder.0.wait().unwrap();
    let st = w.await_event("bg-1", PromptPhase::Delivered).await.status.unwrap();
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
    let path = worksession::node::transcript::locate(
        &worksession::harness::builtin()["claude"].conversation_path.clone().unwrap(),
        &w.tmux.state(),
        &w.tmux.workdir().display().to_string(),
        id,
    );
    path.parent().unwrap().to_path_buf()
}

/// A lost conversation handed over: the recorded conversation's transcript is gone (its store lost with a node, or
/// removed), so its resume fails and a fresh one takes over; the new conversation's first prompt carries what the old
/// one had taken, and the event after it unchanged; the real CLI takes it whole (its `UserPromptSubmit` confirms
/// the delivery) and the model gets it.
#[tokio::test]
async fn a_lost_conversation_is_handed_over_to_the_fresh_one() {
    let model = Model::start();
    let w = world(&model).await;
    w.create_session("ho", json!({"harness": "claude", "initialPrompt": "first prompt: build the feature"})).await;
    w.await_session("ho", "the first turn over", |ws| initial_prompt_delivered(ws) && activity_is(ws, "Idle")).await;
    w.send("ho", "ho-1", "second prompt: and its tests").await;
    w.await_event("ho-1", PromptPhase::Delivered).await;
    let ws = w
        .await_session("ho", "the second turn over", |ws| {
            activity_is(ws, "Idle") && model.prompts().ends_with(&["second prompt: and its tests".into()])
        })
        .await;
    let lost = recorded_id(&ws);

    w.tmux.kill_pane(&w.tmux_session("ho")).await;
    std::fs::remove_file(transcript_dir(&w, &lost).join(format!("{lost}.jsonl"))).unwrap();
    w.send("ho", "ho-2", "third prompt: after the loss").await;
    let st = w.await_event("ho-2", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!(st.via, Some(Via::Fresh), "on the fresh conversation's command line");
    let fresh = st.harness_session_id.unwrap();
    assert_ne!(fresh, lost);
    // The event's status is written before the session's: the session's says so once written.
    let not_found = |ws: &worksession::api::WorkSession| {
        condition(ws, "Resumed").map(|c| (c.0, c.1)) == Some(("False".into(), "ConversationNotFound".into()))
    };
    let ws = w.await_session("ho", "Resumed=False ConversationNotFound", not_found).await;
    let handoff = ws.status.as_ref().unwrap().handoff.clone().expect("the handoff recorded");
    assert_eq!((handoff.from.as_str(), handoff.prompt.as_deref()), (lost.as_str(), Some("ho-2")));

    let sent = support::eventually("the model asked with the handoff", || async {
        model.prompts().into_iter().find(|p| p.ends_with("third prompt: after the loss"))
    })
    .await;
    assert!(sent.starts_with(&format!("[worksession] This work item was in conversation {lost}")), "{sent}");
    let (first, second) = (sent.find("first prompt: build the feature"), sent.find("second prompt: and its tests"));
    assert!(first.unwrap() < second.unwrap(), "both, oldest first: {sent}");
    assert_eq!(sent, format!("{}\n\nthird prompt: after the loss", handoff.text));
}

/// The handoff pasted: the event after the loss is too long for a command line with the handoff in front, so the
/// fresh conversation starts without a prompt and both are pasted once its input box shows; the real CLI takes the
/// paste whole (its `UserPromptSubmit` reports the full text, though its screen folds a long paste) and the model
/// gets the handoff, then the event.
#[tokio::test]
async fn a_handoff_too_long_for_the_command_line_is_pasted_whole() {
    let model = Model::start();
    let w = world(&model).await;
    w.create_session("hp", json!({"harness": "claude", "initialPrompt": "first prompt: build the feature"})).await;
    let ws = w
        .await_session("hp", "the first turn over", |ws| {
            initial_prompt_delivered(ws) && activity_is(ws, "Idle") && !model.prompts().is_empty()
        })
        .await;
    let lost = recorded_id(&ws);
    w.tmux.kill_pane(&w.tmux_session("hp")).await;
    std::fs::remove_file(transcript_dir(&w, &lost).join(format!("{lost}.jsonl"))).unwrap();
    let long = format!("a long report after the loss: {}", "word ".repeat(1590));
    w.send("hp", "hp-1", &long).await;
    let st = w.await_event("hp-1", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!(st.via, Some(Via::Pasted));
    let sent = support::eventually("the model asked with the handoff", || async {
        model.prompts().into_iter().find(|p| p.contains("a long report after the loss"))
    })
    .await;
    // The CLI wraps a long paste (`<pasted_content id=...>`, measured with 2.1.332): its words are the text's.
    let words = worksession::node::transcript::words;
    let sent = words(&sent);
    assert!(sent.starts_with(&format!("[worksession] This work item was in conversation {lost}")), "{sent:.300}");
    assert!(sent.contains("[1] first prompt: build the feature"));
    let handoff = w.sessions().get("hp").await.unwrap().status.unwrap().handoff.unwrap().text;
    assert_eq!(sent, words(&format!("{handoff}\n\n{long}")), "whole");
}

/// An API error the CLI does not retry by itself (a 429 whose limit resets later, `x-should-retry: false`): the real
/// CLI took the prompt (`Delivered`), asked the model, and records the error in its transcript as an assistant line
/// of model `<synthetic>`, with no `Stop`. The session is parked (the test config's 3 s), then the refused prompt is
/// sent again to the same conversation, once per refusal, never by a restart: answered once the limit is gone, the
/// limit behind. The next prompt goes on in the same conversation.
#[tokio::test]
async fn a_rate_limited_turn_is_parked_and_sent_again_to_the_same_conversation() {
    let model = Model::start();
    model.on("limited", Reply::rate_limited(std::time::Duration::from_secs(3600)));
    let w = world(&model).await;
    w.create_session("rl", json!({"harness": "claude", "initialPrompt": "limited: the first prompt"})).await;
    let ws = w.await_session("rl", "the initial prompt known delivered", initial_prompt_delivered).await;
    let id = recorded_id(&ws);
    support::eventually("the API error in the transcript", || async {
        let text = transcript(&w.tmux.state(), &w.tmux.workdir(), &id);
        (text.contains("<synthetic>") && text.contains("429")).then_some(())
    })
    .await;
    // The limit gone: the prompt sent again at the wake is answered.
    model.on("limited: the first prompt", Reply::text("Answered after the wait."));
    await_in_transcript(&w, &id, "Answered after the wait.").await;
    let behind = |ws: &worksession::api::WorkSession| {
        activity_is(ws, "Idle") && ws.status.as_ref().and_then(|s| s.usage.as_ref()).is_some_and(|u| u.limit.is_none())
    };
    let ws = w.await_session("rl", "the limit behind, the turn over", behind).await;
    let st = ws.status.unwrap();
    assert_eq!((st.harness_session_id.as_deref(), st.respawn_count), (Some(id.as_str()), 0), "never restarted");
    let refusals = transcript(&w.tmux.state(), &w.tmux.workdir(), &id).matches("\"apiErrorStatus\":429").count();
    let asked = model.prompts().iter().filter(|p| p.contains("limited: the first prompt")).count();
    assert!(refusals >= 1);
    assert_eq!(asked, refusals + 1, "asked once per refusal and once answered: the CLI retried nothing by itself");

    model.on("after the limit", Reply::text("Back at work."));
    w.send("rl", "rl-1", "after the limit: go on").await;
    let st = w.await_event("rl-1", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!(st.harness_session_id.as_deref(), Some(id.as_str()));
    await_in_transcript(&w, &id, "Back at work.").await;
}

/// The pull request loop with the real CLI: a member's comment on the issue starts the work item's conversation (a
/// real turn), the agent's pull request opens on the work item's branch, and a reviewer's comment on it lands in the
/// same conversation: the CLI's transcript holds both, and the model's request for the review carries the issue's
/// prompt and the answer given to it (the conversation's context, not a fresh one).
#[tokio::test]
async fn a_review_comment_lands_in_the_conversation_that_took_the_issue() {
    use scenarios::fixtures;
    use scenarios::pull_requests::{BRANCH, ITEM, REPO, bridge_of, deliver};
    let model = Model::start();
    model.on("please fix the parser", Reply::text("I fixed the parser on the branch."));
    model.on("this unwrap can panic", Reply::text("I replaced the unwrap."));
    let w = world(&model).await;
    let app = bridge_of(&w, "claude");
    let issue = fixtures::issue_comment(REPO, 12, "mona", "please fix the parser");
    assert_eq!(deliver(&app, "issue_comment", "rc-issue", &issue).await.0, 201);
    let first = w.await_event(&worksession::bridge::event_name("gh", "rc-issue"), PromptPhase::Delivered).await;
    let id = first.status.unwrap().harness_session_id.expect("delivered into a conversation");

    let mut opened = fixtures::pull_request(REPO, 57, "opened", BRANCH, "agents-bot");
    opened["pull_request"]["head"]["sha"] = "aaaa111".into();
    let (status, answer) = deliver(&app, "pull_request", "rc-opened", &opened).await;
    assert_eq!((status, answer["workSession"].as_str()), (200, Some(ITEM)), "{answer}");
    let comment = fixtures::review_comment(REPO, 57, BRANCH, "mona", 9001, "this unwrap can panic");
    assert_eq!(deliver(&app, "pull_request_review_comment", "rc-review", &comment).await.0, 201);
    let review = w.await_event(&worksession::bridge::event_name("gh", "rc-review"), PromptPhase::Delivered).await;
    assert_eq!(review.status.unwrap().harness_session_id.as_deref(), Some(id.as_str()), "the same conversation");

    await_in_transcript(&w, &id, "I replaced the unwrap.").await;
    let text = transcript(&w.tmux.state(), &w.tmux.workdir(), &id);
    for said in ["please fix the parser", "I fixed the parser on the branch.", "this unwrap can panic"] {
        assert!(worksession::node::transcript::contains(&text, said), "{said:?} in the conversation");
    }
    let asks = |r: &support::model::Request| r.prompt.as_deref().is_some_and(|p| p.contains("this unwrap can panic"));
    let asked = model.requests().into_iter().find(asks).expect("asked");
    let context = asked.body.to_string();
    assert!(context.contains("please fix the parser") && context.contains("I fixed the parser on the branch."));
    assert_eq!(w.sessions().list(&Default::default()).await.unwrap().items.len(), 1, "no second session");
}

/// A turn that never ends (the model's stream starts and stops sending): the CLI keeps working (`Activity` stays
/// `Working`, no `Stop`), a prompt sent meanwhile waits behind it, and a person's Escape interrupts the turn; the
/// waiting prompt then reaches the model once, in the same conversation. And an overloaded model (529, not retried by
/// the CLI) is an API error in the transcript, after which the next prompt goes on.
#[tokio::test]
async fn a_turn_that_never_ends_is_interrupted_by_a_person_and_an_overloaded_model_is_an_error() {
    let model = Model::start();
    model.on("never ends", Reply::Hang);
    model.on("behind the hang", Reply::text("Taken after the hang."));
    let overloaded = vec![("x-should-retry".to_string(), "false".to_string())];
    let error = Reply::Error {
        status: 529,
        kind: "overloaded_error".into(),
        message: "Overloaded".into(),
        headers: overloaded,
    };
    model.on("overloaded", error);
    let w = world(&model).await;
    w.create_session("h", json!({"harness": "claude", "initialPrompt": "this turn never ends"})).await;
    let ws = w.await_session("h", "the hung turn taken", initial_prompt_delivered).await;
    let id = recorded_id(&ws);
    support::until("the hung turn asked", || async { model.prompts().iter().any(|p| p.contains("never ends")) }).await;
    w.send("h", "h-1", "a prompt behind the hang").await;
    // Taken by the CLI (its hook names it) while its turn hangs: queued, the model has not seen it yet.
    let ev = w.await_event("h-1", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!(ev.via, Some(Via::Pasted));
    assert_eq!(model.prompts(), ["this turn never ends"], "queued behind the hung turn");
    let ws = w.sessions().get("h").await.unwrap();
    assert!(activity_is(&ws, "Working"), "the hung turn goes on: {:?}", ws.status);
    let target = format!("={}:", w.tmux_session("h"));
    let mut escape = std::process::Command::new("tmux");
    escape.arg("-S").arg(w.tmux.socket()).args(["send-keys", "-t", &target, "Escape"]);
    assert!(escape.status().unwrap().success());
    support::until("the waiting prompt reached the model", || async {
        model.prompts().iter().any(|p| p.contains("behind the hang"))
    })
    .await;
    await_in_transcript(&w, &id, "Taken after the hang.").await;
    assert_eq!(model.prompts().iter().filter(|p| p.contains("behind the hang")).count(), 1, "once");

    w.send("h", "h-2", "overloaded, this one").await;
    w.await_event("h-2", PromptPhase::Delivered).await;
    support::eventually("the API error in the transcript", || async {
        let text = transcript(&w.tmux.state(), &w.tmux.workdir(), &id);
        (text.contains("<synthetic>") && text.contains("529")).then_some(())
    })
    .await;
    model.on("after the overload", Reply::text("Back again."));
    w.send("h", "h-3", "after the overload: go on").await;
    w.await_event("h-3", PromptPhase::Delivered).await;
    await_in_transcript(&w, &id, "Back again.").await;
}

/// The key stays with the agent: the real CLI, given only what a room's harness is given with a key gateway (the
/// gateway's URL, a placeholder key, and proxy variables naming the egress port), does a real turn, and every
/// request the model receives carries the gateway's key and never the placeholder. Both ways a client may reach the
/// gateway through its proxy are served (a plain request to the proxy, or one inside a `CONNECT` to it).
#[tokio::test]
async fn through_a_key_gateway_the_model_gets_the_agents_key_and_the_cli_only_a_placeholder() {
    use worksession::config::rooms::{EgressConfig, GatewayConfig, RoomsConfig};
    use worksession::node::egress::{Proxy, Seen};
    const REAL: &str = "sk-ant-api03-the-agents-own-key-never-in-a-room-000000000000";
    let model = Model::start();
    model.on("through the gateway", Reply::text("Answered through the gateway."));
    let keys = tempfile::tempdir().unwrap();
    std::fs::write(keys.path().join("key"), format!("{REAL}\n")).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let gateway = GatewayConfig {
        name: "anthropic".into(),
        upstream: model.base_url(),
        key_file: keys.path().join("key"),
        header: "x-api-key".into(),
        base_url_env: Some("ANTHROPIC_BASE_URL".into()),
        key_env: Some("ANTHROPIC_API_KEY".into()),
        placeholder: support::claude::KEY.into(),
        paths: worksession::config::rooms::DEFAULT_PATHS.map(String::from).to_vec(),
    };
    let env = gateway.env(port);
    // This test's harness runs as the test's own user: that uid is the one room the gateway serves.
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap());
    let rooms = RoomsConfig {
        root: keys.path().into(),
        first_uid: uid,
        count: 1,
        helper: "/bin/false".into(),
        egress: None,
        shared: false,
        namespace_keys: None,
    };
    let egress = EgressConfig::serving(port, vec![gateway]);
    let forwarded = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = forwarded.clone();
    let seen = move |s: Seen<'_>| {
        if let Seen::Forwarded(_) = s {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    };
    tokio::spawn(Proxy::new(egress, rooms).unwrap().serve(listener, seen));
    let proxy = format!("http://127.0.0.1:{port}");
    let mut vars: Vec<(&str, String)> = env.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    vars.extend(["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"].map(|n| (n, proxy.clone())));
    let w = World::with_yaml(|tmux, yaml| {
        yaml.replace("confirmTimeoutSeconds: 15", "confirmTimeoutSeconds: 60")
            + &support::claude::profile_with(&tmux.state(), &tmux.workdir(), &vars)
    })
    .await;
    w.create_session("gw", json!({"harness": "claude", "initialPrompt": "through the gateway: hello"})).await;
    let ws = w.await_session("gw", "the initial prompt known delivered", initial_prompt_delivered).await;
    await_in_transcript(&w, &recorded_id(&ws), "Answered through the gateway.").await;
    let requests = model.requests();
    let keys: std::collections::BTreeSet<Option<&str>> = requests.iter().map(|r| r.key.as_deref()).collect();
    assert_eq!(keys, [Some(REAL)].into(), "every request with the agent's key, none with the placeholder");
    assert!(forwarded.load(std::sync::atomic::Ordering::SeqCst) >= requests.len(), "each one by the gateway");
    assert!(model.prompts().iter().any(|p| p.contains("through the gateway: hello")));
}

/// What the work item's conversations spent, from `status.usage`.
fn usage_of(ws: &worksession::api::WorkSession) -> worksession::api::Usage {
    ws.status.as_ref().and_then(|s| s.usage.clone()).unwrap_or_default()
}

/// Usage from the real CLI's transcript, as the scripted model reported it: two turns of one conversation, a third
/// after the CLI was killed and the conversation resumed, and a fourth in a fresh conversation after the transcript
/// was lost; the work item's total holds all four, the conversation's share only the fresh one's, each reply counted
/// once, and the cost is the config's price table's.
#[tokio::test]
async fn usage_adds_up_across_turns_a_resume_and_a_fresh_conversation() {
    use worksession::api::Tokens;
    let model = Model::start();
    // Per reply: 100 fresh input tokens, 20 out, 30 written to the cache, 900 read from it.
    model.set_usage(support::model::Usage { input: 100, output: 20, cache_creation: 30, cache_read: 900 });
    // Dollars per million: 10 in, 100 out, 100 to write the cache, 1 to read it: $0.0069 a reply.
    let prices = "prices:\n  claude-opus-5-5: {input: 10, output: 100, cacheWrite: 100, cacheRead: 1}\n";
    let w = World::with_yaml(|tmux, yaml| {
        yaml.replace("confirmTimeoutSeconds: 15", "confirmTimeoutSeconds: 60").replace("prices:\n", prices)
            + &support::claude::scripted_profile(&tmux.state(), &tmux.workdir(), &model)
            + "    extraArgs: [\"--permission-mode\", \"default\"]\n"
    })
    .await;
    let per_reply = Tokens { input: 100, output: 20, cache_write: 30, cache_read: 900 };
    let times = |n: u64| Tokens { input: 100 * n, output: 20 * n, cache_write: 30 * n, cache_read: 900 * n };
    let turns = |n: u64| move |ws: &worksession::api::WorkSession| usage_of(ws).turns == n;

    w.create_session("us", json!({"harness": "claude", "initialPrompt": "first turn"})).await;
    w.await_session("us", "the first turn counted", turns(1)).await;
    w.send("us", "us-1", "second turn").await;
    let ws = w.await_session("us", "the second turn counted", turns(2)).await;
    let usage = usage_of(&ws);
    let id = recorded_id(&ws);
    assert_eq!(usage.models.len(), 1, "{usage:?}");
    assert_eq!((usage.models[0].model.as_str(), usage.models[0].tokens), ("claude-opus-5-5", times(2)));
    assert_eq!((usage.models[0].replies, usage.tokens), (2, 2 * per_reply.total()));
    assert_eq!(usage.estimated_cost.as_deref(), Some("0.0138"));
    assert!(usage.last_turn_time.is_some());
    let share = usage.conversation.clone().unwrap();
    assert_eq!((share.harness_session_id.as_str(), share.tokens, share.turns), (id.as_str(), times(2), 2));

    // Killed, then resumed by the next event: the same conversation's record goes on, read from where it stood.
    w.tmux.kill_pane(&w.tmux_session("us")).await;
    w.send("us", "us-2", "third turn").await;
    let st = w.await_event("us-2", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())));
    let ws = w.await_session("us", "the third turn counted", turns(3)).await;
    let usage = usage_of(&ws);
    assert_eq!((usage.models[0].tokens, usage.models[0].replies), (times(3), 3), "{usage:?}");
    assert_eq!(usage.conversation.as_ref().map(|c| (c.tokens, c.turns)), Some((times(3), 3)));

    // Its transcript lost while it is down: the next event starts a fresh conversation, which adds to the total.
    w.tmux.kill_pane(&w.tmux_session("us")).await;
    std::fs::remove_file(transcript_dir(&w, &id).join(format!("{id}.jsonl"))).unwrap();
    w.send("us", "us-3", "fourth turn").await;
    let st = w.await_event("us-3", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!(st.via, Some(Via::Fresh));
    let fresh = st.harness_session_id.unwrap();
    let ws = w.await_session("us", "the fourth turn counted", turns(4)).await;
    let usage = usage_of(&ws);
    assert_eq!((usage.models[0].tokens, usage.models[0].replies), (times(4), 4), "{usage:?}");
    assert_eq!(usage.tokens, 4 * per_reply.total());
    assert_eq!(usage.estimated_cost.as_deref(), Some("0.0276"));
    let share = usage.conversation.unwrap();
    assert_eq!((share.harness_session_id, share.tokens, share.turns), (fresh, times(1), 1), "the fresh one's own");
}

/// A budget reached by a real turn: the turn ends, the CLI is stopped with its conversation kept, and a prompt sent
/// then waits, never failed; the budget raised, that prompt reaches the resumed conversation, once.
#[tokio::test]
async fn a_budget_reached_by_a_real_turn_stops_the_cli_and_a_raise_resumes_its_conversation() {
    use scenarios::Rig;
    let model = Model::start();
    // 1,050 tokens a reply: the first turn is within 1,500, the second is not.
    model.set_usage(support::model::Usage { input: 100, output: 20, cache_creation: 30, cache_read: 900 });
    let w = world(&model).await;
    let turns = |n: u64| move |ws: &worksession::api::WorkSession| usage_of(ws).turns == n;
    let spec = json!({"harness": "claude", "initialPrompt": "first turn", "budget": {"tokens": 1500}});
    w.create_session("bg", spec).await;
    w.await_session("bg", "the first turn counted", turns(1)).await;
    w.send("bg", "bg-1", "second turn").await;
    let paused = |ws: &worksession::api::WorkSession| world::phase_of(ws) == Some(Phase::Paused);
    let ws = w.await_session("bg", "paused once its second turn ended", paused).await;
    assert_eq!(usage_of(&ws).turns, 2, "the turn that reached the budget ended");
    let id = recorded_id(&ws);
    w.tmux.await_liveness(&w.tmux_session("bg"), worksession::node::tmux::Liveness::Absent).await;

    w.send("bg", "bg-2", "after the budget").await;
    let waits =
        |ws: &worksession::api::WorkSession| condition(ws, "Ready").is_some_and(|c| c.2.contains("1 prompt waits"));
    let ws = w.await_session("bg", "its prompt waiting", waits).await;
    assert_eq!(condition(&ws, "Ready").map(|c| c.1), Some("BudgetReached".into()));
    assert!(!model.prompts().iter().any(|p| p.contains("after the budget")), "nothing sent past the budget");
    assert_eq!(w.event_status("bg-2").await.phase.unwrap_or(PromptPhase::Pending), PromptPhase::Pending);

    w.patch_spec("bg", json!({"budget": {"tokens": 100000}})).await;
    let st = w.await_event("bg-2", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!((st.via, st.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())));
    w.await_session("bg", "the third turn counted", turns(3)).await;
    let asked = model.prompts().iter().filter(|p| p.contains("after the budget")).count();
    assert_eq!(asked, 1, "delivered once");
}

/// What an answer from afar builds on, measured on the CLI alone (no agent): in its `default` permission mode, a
/// `PermissionRequest` hook is handed the tool's name and input before the dialog shows, and the JSON it prints
/// answers in the person's place: `allow` runs the command; `deny` does not, and the model is told the hook's words.
#[tokio::test]
async fn a_permission_request_hook_answers_in_the_persons_place() {
    use worksession::node::tmux::{Spawn, Tmux};
    for allow in [true, false] {
        let model = Model::start();
        model.on("make the file", Reply::bash("touch made-by-the-tool", "The tool has run."));
        let tmux = standin::TmuxServer::new();
        let (home, workdir) = (tmux.state(), tmux.workdir());
        support::claude::scripted_profile(&home, &workdir, &model);
        let decision = if allow {
            json!({"behavior": "allow"})
        } else {
            json!({"behavior": "deny", "message": "Denied from afar."})
        };
        let answer = json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}});
        let (hook, asked) = (home.join("answer"), home.join("asked.json"));
        let script = format!("#!/bin/sh\ncat > '{}'\nprintf '%s\\n' '{answer}'\n", asked.display());
        std::fs::write(&hook, script).unwrap();
        std::process::Command::new("chmod").arg("+x").arg(&hook).status().unwrap();
        let hooks = json!({"hooks": {"PermissionRequest": [{"hooks": [{"type": "command", "command": hook}]}]}});
        let spawn = Spawn {
            session: "cli".into(),
            workdir: workdir.clone(),
            binary: home.join("claude-offline").display().to_string(),
            argv: ["--permission-mode", "default", "--settings", &hooks.to_string()].map(Into::into).into(),
            tag: "measured".into(),
            owner: "test-owner".into(),
            owner_name: "tests/claude".into(),
            env: Vec::new(),
            confine: None,
            clear: true,
        };
        tmux.runner.spawn(&spawn).await.unwrap();
        let claude = &worksession::harness::builtin()["claude"];
        support::until("the CLI ready for a prompt", || async {
            claude.ready(tmux.runner.screen("cli").await.ok().as_deref())
        })
        .await;
        tmux.runner.paste("cli", "make the file", "asked").await.unwrap();
        let told = support::eventually("the tool's result back at the model", || async {
            model.requests().into_iter().find(|r| r.tool_result)
        })
        .await;
        let request: serde_json::Value = serde_json::from_slice(&std::fs::read(&asked).unwrap()).unwrap();
        assert_eq!(request["hook_event_name"], "PermissionRequest");
        assert_eq!(request["tool_name"], "Bash");
        assert_eq!(request["tool_input"]["command"], "touch made-by-the-tool");
        let ran = workdir.join("made-by-the-tool").exists();
        let result = told.body["messages"].as_array().and_then(|m| m.last()).unwrap().to_string();
        println!("allow={allow}: the hook was handed {request}\nthe model was told {result}");
        assert_eq!(ran, allow, "the command ran only when allowed");
        assert_eq!(result.contains("Denied from afar."), !allow, "a denial's words reach the model");
        support::eventually("the turn ended", || async {
            tmux.runner.screen("cli").await.ok().filter(|s| s.contains("The tool has run."))
        })
        .await;
    }
}

/// Approvals from afar, with the real CLI asking (`--permission-mode default`) through the agent: its
/// `PermissionRequest` becomes `status.approval` (`Activity` `WaitingForApproval`); an answer naming another request
/// does nothing but fail; `worksession approve` runs the command and the turn ends; a denial keeps it from running and
/// its reason reaches the model; a rule of the session answers without a person; and with no answer the request is
/// denied at its deadline.
#[tokio::test]
async fn a_permission_request_is_answered_from_afar_by_a_person_a_rule_or_its_deadline() {
    use worksession::api::{ApprovalStatus, Decision};
    use worksession::cli::approve::answer;
    let model = Model::start();
    model.on("make the file", Reply::bash("touch made-by-the-tool", "The tool has run."));
    model.on("remove the file", Reply::bash("rm made-by-the-tool", "Removal done."));
    model.on("say policy", Reply::bash("touch policy.txt", "Policy done."));
    model.on("list the root", Reply::bash("touch listed.txt", "Listing done."));
    let w = world(&model).await;
    let sink = worksession::store::kube::KubeSink::new(w.ns.client.clone());
    let at = (w.ns.name.as_str(), "ap");
    let rules = json!([{"match": "Bash(touch policy*)", "decision": "Allow"}]);
    let spec = json!({"harness": "claude", "initialPrompt": "make the file", "approval": {"rules": rules}});
    w.create_session("ap", spec).await;
    let waiting = |tool_input: &'static str| {
        move |ws: &worksession::api::WorkSession| {
            let a = ws.status.as_ref().and_then(|s| s.approval.as_ref());
            a.is_some_and(|a| a.waiting() && a.request.contains(tool_input)) && activity_is(ws, "WaitingForApproval")
        }
    };
    let approval = |ws: &worksession::api::WorkSession| -> ApprovalStatus {
        ws.status.as_ref().and_then(|s| s.approval.clone()).expect("a request")
    };
    let ws = w.await_session("ap", "asking to touch the file", waiting("touch made-by-the-tool")).await;
    let asked = approval(&ws);
    assert_eq!(asked.tool, "Bash");

    // An answer to a request that is not the one waiting: it fails, and nothing runs.
    let stale = answer(&sink, at, Some("0123456789ab".into()), Decision::Allow, None, Some("mallory".into())).await;
    stale.expect("made: only the agent knows it names no waiting request");
    let failed = w.await_event("ap.answer-0123456789ab", PromptPhase::Failed).await;
    assert!(failed.status.unwrap().message.unwrap().contains(&format!("request {} waits", asked.id)));
    assert!(approval(&w.sessions().get("ap").await.unwrap()).waiting(), "still waiting");
    assert!(!w.tmux.workdir().join("made-by-the-tool").exists());

    // `worksession approve`, for the request waiting.
    answer(&sink, at, None, Decision::Allow, None, Some("alice".into())).await.expect("approved");
    w.await_event(&format!("ap.answer-{}", asked.id), PromptPhase::Delivered).await;
    let ws = w.await_session("ap", "the turn over", |ws| activity_is(ws, "Idle")).await;
    assert!(w.tmux.workdir().join("made-by-the-tool").exists(), "the command ran");
    let a = approval(&ws);
    assert_eq!((a.id.as_str(), a.decision, a.by.as_deref()), (asked.id.as_str(), Some(Decision::Allow), Some("alice")));
    // Answered once: a second answer to it is refused before it is made.
    let again = answer(&sink, at, Some(asked.id.clone()), Decision::Deny, None, None).await;
    assert!(again.unwrap_err().contains("answered already"));

    // Denied, with a reason the model is told.
    w.send("ap", "ap-2", "remove the file").await;
    w.await_session("ap", "asking to remove the file", waiting("rm made-by-the-tool")).await;
    let denied = answer(&sink, at, None, Decision::Deny, Some("keep-the-file-7".into()), Some("bob".into())).await;
    denied.expect("denied");
    let told = support::eventually("the denial at the model", || async {
        model
            .requests()
            .into_iter()
            .find(|r| r.tool_result && r.body.to_string().contains("Denied by bob: keep-the-file-7"))
    })
    .await;
    let result = told.body["messages"].as_array().and_then(|m| m.last()).unwrap().to_string();
    assert!(result.contains("\"is_error\":true"), "told as an error: {result}");
    assert!(w.tmux.workdir().join("made-by-the-tool").exists(), "the command did not run");
    let ws = w.await_session("ap", "the denied turn over", |ws| activity_is(ws, "Idle")).await;
    assert_ne!(approval(&ws).id, asked.id, "a request of its own");

    // A rule answers without a person.
    w.send("ap", "ap-3", "say policy").await;
    let ws = w
        .await_session("ap", "the rule's turn over", |ws| {
            activity_is(ws, "Idle") && approval(ws).request.contains("touch policy.txt")
        })
        .await;
    assert!(w.tmux.workdir().join("policy.txt").exists(), "the rule allowed it");
    assert_eq!(approval(&ws).by.as_deref(), Some("policy"));

    // No answer: denied at the deadline (the shortest a session may set).
    let spec = json!({"harness": "claude", "initialPrompt": "list the root", "approval": {"waitSeconds": 10}});
    w.create_session("dl", spec).await;
    w.await_session("dl", "asking to list the root", waiting("touch listed.txt")).await;
    let ws = w
        .await_session("dl", "denied at its deadline", |ws| {
            ws.status.as_ref().and_then(|s| s.approval.as_ref()).is_some_and(|a| !a.waiting())
        })
        .await;
    let a = approval(&ws);
    assert_eq!((a.decision, a.by.as_deref()), (Some(Decision::Deny), Some("deadline")));
    support::eventually("the deadline's denial at the model", || async {
        model.requests().into_iter().find(|r| r.tool_result && r.body.to_string().contains("No answer came within 10"))
    })
    .await;
    assert!(!w.tmux.workdir().join("listed.txt").exists(), "the command did not run");
}

/// Approvals from GitHub, with the real CLI asking: the bridge posts the request on the issue the work item came from,
/// with its id; a stranger's, a bot's and an older id's `/approve` do nothing (202 `ignored`, the command not run); a
/// member's `/approve <id>` runs it and the turn ends; the comment is edited to say who allowed it; the same comment
/// delivered again answers nothing more.
#[tokio::test]
async fn a_permission_request_is_posted_on_its_issue_and_answered_by_a_comment_from_someone_allowed() {
    use world::bridge::{REPO, comment};
    let model = Model::start();
    model.on("make the file", Reply::bash("touch made-from-github", "The tool has run."));
    let w = world(&model).await;
    let gh = fake_github::FakeGithub::start().await;
    let bridge = w.github_bridge(&gh.url(""), "claude").await;
    let deliver = |delivery: &'static str, payload: serde_json::Value| bridge.deliver(delivery, payload);
    let comment = |sender: &str, role: &str, body: &str| comment(7, sender, role, body);
    assert_eq!(deliver("ap-1", comment("mona", "MEMBER", "make the file")).await.0, 201);
    let item = support::work_item(REPO, 7);
    let ws = w
        .await_session(&item, "asking to touch the file", |ws| {
            ws.status.as_ref().and_then(|s| s.approval.as_ref()).is_some_and(|a| a.waiting())
        })
        .await;
    let id = ws.status.unwrap().approval.unwrap().id;
    let posted = support::eventually("the request posted on the issue", || async {
        gh.comments().into_iter().find(|c| c["body"].as_str().is_some_and(|b| b.contains(&format!("/approve {id}"))))
    })
    .await;
    assert!(posted["body"].as_str().unwrap().contains("touch made-from-github"), "{posted}");

    let ignored = |(status, body): (u16, String), reason: &str| {
        assert_eq!(status, 202, "{body}");
        assert!(body.contains(reason), "{body}");
    };
    ignored(deliver("ap-2", comment("stranger", "NONE", &format!("/approve {id}"))).await, "only");
    let mut bot = comment("helper-bot[bot]", "MEMBER", &format!("/approve {id}"));
    bot["sender"]["type"] = "Bot".into();
    ignored(deliver("ap-3", bot).await, "bot");
    ignored(deliver("ap-4", comment("mona", "MEMBER", "/approve 000000000000")).await, "waits");
    ignored(deliver("ap-5", comment("mona", "MEMBER", "/approve now please")).await, "names its request");
    assert!(!w.tmux.workdir().join("made-from-github").exists(), "nothing ran");
    assert!(w.sessions().get(&item).await.unwrap().status.unwrap().approval.unwrap().waiting());

    let approve = comment("mona", "MEMBER", &format!("/approve {id}"));
    assert_eq!(deliver("ap-6", approve.clone()).await.0, 201);
    let ws = w.await_session(&item, "the turn over", |ws| activity_is(ws, "Idle")).await;
    assert!(w.tmux.workdir().join("made-from-github").exists(), "the command ran");
    let a = ws.status.unwrap().approval.unwrap();
    assert_eq!((a.decision, a.by.as_deref()), (Some(worksession::api::Decision::Allow), Some("github:mona")));
    support::eventually("the comment says who allowed it", || async {
        gh.comments()
            .into_iter()
            .find(|c| c["body"].as_str().is_some_and(|b| b.contains("**Allowed** by ` github:mona `")))
    })
    .await;
    assert!(!gh.comments().iter().any(|c| c["body"].as_str().is_some_and(|b| b.contains(&format!("/approve {id}`")))));
    // The same comment again (a redelivery under another id): no request waits.
    ignored(deliver("ap-7", approve).await, "waits");
    let prompts = model.prompts();
    assert!(!prompts.iter().any(|p| p.contains("/approve")), "an answer is never a prompt: {prompts:?}");
}
