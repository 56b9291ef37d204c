//! The harness stand-in itself (`tests/standin/harness`), on real tmux: as unkind as the real CLI where it matters
//! (a late resume failure with its TUI up, a crash, an id in use refused, early input dropped while it boots). The
//! tmux runner's own tests are in `tests/tmux.rs`.

mod standin;
mod support;

use standin::{TmuxServer, seed_conversation};
use worksession::harness::Mode;
use worksession::tmux::{Liveness, Tmux};

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
