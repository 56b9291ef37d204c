//! The harness stand-in itself (`tests/standin/harness`), on real tmux: as unkind as the real CLI where it matters
//! (a late resume failure with its TUI up, a crash, an id in use refused, early input dropped while it boots). The
//! tmux runner's own tests are in `tests/tmux.rs`.

mod standin;
mod support;

use standin::{TmuxServer, seed_conversation};
use worksession::harness::Mode;
use worksession::node::tmux::{Liveness, Tmux};

#[tokio::test]
async fn slow_resume_failure_and_crash_after() {
    let tmux = TmuxServer::new();
    tmux.runner
        .spawn(&tmux.spawn_of("loop-slow", Mode::Resume, "gone", None, &["--resume-fail-delay", "0.5"]))
        .await
        .unwrap();
    tmux.runner.spawn(&tmux.spawn_of("loop-crash", Mode::Fresh, "c1", None, &["--crash-after", "0.3"])).await.unwrap();
    // It fails late, with its TUI up first (as the real CLI does): its ready prompt, then the failure, in its pane.
    tmux.await_liveness("loop-slow", Liveness::Dead).await;
    tmux.await_output("loop-slow", "No conversation found with session ID: gone").await;
    let out = tmux.runner.last_lines("loop-slow", 20).await.unwrap();
    let (ready, failed) = (out.find("ready>"), out.find("No conversation found"));
    assert!(ready.is_some() && ready < failed, "the TUI came up before the failure: {out}");
    tmux.await_liveness("loop-crash", Liveness::Dead).await;
    tmux.await_output("loop-crash", "Segmentation fault").await;
}

#[tokio::test]
async fn fresh_session_id_in_use_is_refused() {
    let tmux = TmuxServer::new();
    seed_conversation(&tmux.state(), "taken");
    tmux.runner.spawn(&tmux.spawn_of("loop-t", Mode::Fresh, "taken", None, &[])).await.unwrap();
    tmux.await_liveness("loop-t", Liveness::Dead).await;
    tmux.await_output("loop-t", "Session ID taken is already in use").await;
}

#[tokio::test]
async fn the_standin_drops_early_input_and_fails_late_with_its_tui_up() {
    let tmux = TmuxServer::new();
    // Booting: what is pasted before the ready prompt is lost, as with a real TUI.
    tmux.runner
        .spawn(&tmux.spawn_of("loop-boot", Mode::Fresh, "conv-boot", None, &["--boot-delay", "1"]))
        .await
        .unwrap();
    tmux.await_output("loop-boot", "booting").await;
    tmux.runner.paste("loop-boot", "too early", "e0").await.unwrap();
    tmux.await_output("loop-boot", "ready>").await;
    tmux.runner.paste("loop-boot", "in time", "e1").await.unwrap();
    let got: Vec<String> = tmux.await_prompts(1).await.into_iter().map(|p| p.prompt).collect();
    assert_eq!(got, ["in time"]);
    // The transcript holds it the way Claude Code writes a prompt.
    let transcript = std::fs::read_to_string(standin::transcript_of(&tmux.state(), "conv-boot")).unwrap();
    assert!(transcript.contains(r#""type": "user""#) && transcript.contains(r#""content": "in time""#), "{transcript}");

    // A late resume failure: the TUI is up and looks ready, a paste goes nowhere, then the pane dies.
    let slow = tmux.spawn_of("loop-late", Mode::Resume, "ghost", None, &["--resume-fail-delay", "1"]);
    tmux.runner.spawn(&slow).await.unwrap();
    tmux.await_output("loop-late", "ready>").await;
    tmux.runner.paste("loop-late", "lost", "e2").await.unwrap();
    tmux.await_liveness("loop-late", Liveness::Dead).await;
    tmux.await_output("loop-late", "No conversation found with session ID: ghost").await;
    assert!(tmux.prompts().iter().all(|p| p.prompt != "lost"), "nothing reached a conversation");
}

/// The stand-in's Claude Code hazards show where the real CLI's code says they do: resuming a
/// conversation idle two hours and of 150k tokens opens the "Resume from summary" picker (no ready prompt), where a
/// paste is menu input whose Enter compacts it into a new conversation and is itself lost; the built-in `claude`
/// profile's `env` keeps the picker away. A conversation another process holds is refused with the CLI's words.
#[tokio::test]
async fn the_standin_opens_the_summary_picker_and_refuses_a_held_conversation() {
    let tmux = TmuxServer::new();
    seed_conversation(&tmux.state(), "old-and-large");
    let old = standin::transcript_of(&tmux.state(), "old-and-large");
    std::fs::write(&old, format!("{}\n", serde_json::json!({"type": "user", "content": "x".repeat(600_000)}))).unwrap();
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 3600);
    std::fs::File::options().write(true).open(&old).unwrap().set_modified(two_hours_ago).unwrap();

    let picker = tmux.spawn_of("loop-pick", Mode::Resume, "old-and-large", None, &["--summary-picker"]);
    tmux.runner.spawn(&picker).await.unwrap();
    tmux.await_output("loop-pick", "Resume full session as-is").await;
    assert!(!tmux.runner.last_lines("loop-pick", 20).await.unwrap().contains("ready>"), "no input box");
    tmux.runner.paste("loop-pick", "a prompt for the conversation", "e1").await.unwrap();
    tmux.await_output("loop-pick", "(compacted) New conversation").await;
    assert!(tmux.prompts().is_empty(), "the paste was menu input");

    std::fs::File::options().write(true).open(&old).unwrap().set_modified(two_hours_ago).unwrap();
    let env = worksession::harness::builtin()["claude"].env.clone();
    let kept = worksession::node::tmux::Spawn {
        env,
        ..tmux.spawn_of("loop-kept", Mode::Resume, "old-and-large", None, &["--summary-picker"])
    };
    tmux.runner.spawn(&kept).await.unwrap();
    tmux.await_output("loop-kept", "ready>").await;
    tmux.runner.paste("loop-kept", "a prompt for the conversation", "e2").await.unwrap();
    let got = tmux.await_prompts(1).await;
    assert_eq!(
        (got[0].conversation.as_str(), got[0].prompt.as_str()),
        ("old-and-large", "a prompt for the conversation")
    );
    let shown = std::fs::read_to_string(tmux.state().join("picker.log")).unwrap();
    assert_eq!(shown.lines().count(), 1, "the picker showed once, without the profile's env: {shown}");

    std::fs::create_dir_all(tmux.state().join("held")).unwrap();
    std::fs::write(tmux.state().join("held/old-and-large"), "").unwrap();
    tmux.runner.spawn(&tmux.spawn_of("loop-held", Mode::Resume, "old-and-large", None, &[])).await.unwrap();
    tmux.await_liveness("loop-held", Liveness::Dead).await;
    tmux.await_output("loop-held", "That session is running in the background.").await;
    assert!(
        worksession::harness::builtin()["claude"].resume_busy(&tmux.runner.last_lines("loop-held", 5).await.unwrap())
    );
}
