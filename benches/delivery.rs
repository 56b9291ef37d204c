//! Delivery benchmarks, through the agent on the real API server and real tmux (they print figures).
//!
//!     cargo bench --bench delivery [standin] [claude] [pull-request]
//!
//! standin: the cost of readiness and confirmation on the live-paste path. A WorkEvent created for a running
//!   stand-in, 20 in a row, until `Delivering` (the paste: where the agent used to write `Delivered`) and until
//!   `Delivered` (known delivered): with hooks (`standin-hooks`: its `UserPromptSubmit`, then the prompt's id in its
//!   transcript), with the transcript alone (`standin`) and with neither (`standin-blind`, where the probe since the
//!   paste proves it).
//! claude: an adopted conversation id the real Claude Code CLI does not know, with an event waiting: event created
//!   until its prompt is in a fresh conversation's transcript, with the built-in profile's `conversationPath` (looked
//!   at before resuming) and without it (`conversationPath: ""`: the CLI's own late "No conversation found").
//! pull-request: a review comment on a work item's pull request, 20 in a row, from the signed webhook posted to the
//!   bridge (over the API server) until it is `Delivered` to the running stand-in (`standin-hooks`) of the issue's
//!   session, and until the bridge answered (the routing by the branch, the link, the write).

#[path = "../tests/scenarios/mod.rs"]
mod scenarios;
#[path = "../tests/standin/mod.rs"]
mod standin;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "../tests/world/mod.rs"]
mod world;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use worksession::api::{Phase, PromptPhase};
use world::World;

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn stats(mut v: Vec<Duration>) -> String {
    v.sort();
    format!("median {}, slowest {}", secs(v[v.len() / 2]), secs(v[v.len() - 1]))
}

async fn phase_of(w: &World, event: &str) -> Option<PromptPhase> {
    w.events().get(event).await.ok().and_then(|e| e.status).and_then(|s| s.phase)
}

async fn live_paste(profile: &str) {
    let w = World::new().await;
    w.create_session("bench", json!({"harness": profile})).await;
    w.await_phase("bench", Phase::Running).await;
    w.tmux.await_output(&w.tmux_session("bench"), "ready>").await;
    let (mut pasted, mut delivered) = (Vec::new(), Vec::new());
    for i in 0..support::bench_size(20, 2) {
        let name = format!("bench-{i}");
        let t = Instant::now();
        w.send("bench", &name, &format!("prompt {i}")).await;
        let mut seen_delivering = None;
        loop {
            match phase_of(&w, &name).await {
                Some(PromptPhase::Delivering) if seen_delivering.is_none() => seen_delivering = Some(t.elapsed()),
                Some(PromptPhase::Delivered) => break,
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        delivered.push(t.elapsed());
        pasted.push(seen_delivering.unwrap_or_else(|| t.elapsed()));
    }
    println!("live paste, profile {profile}: event created -> pasted (Delivering): {}", stats(pasted));
    println!("live paste, profile {profile}: event created -> Delivered: {}", stats(delivered));
}

/// Claude Code's transcripts of the world's workdir, as (file, text).
fn transcripts(w: &World) -> Vec<(PathBuf, String)> {
    let slug = worksession::node::transcript::cwd_slug(&w.tmux.workdir().display().to_string());
    let dir = w.tmux.state().join(".claude/projects").join(slug);
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().map(|e| (e.path(), std::fs::read_to_string(e.path()).unwrap_or_default())).collect()
}

async fn unknown_id(with_store: bool) -> Duration {
    let w = claude_world(with_store).await;
    w.send("cl", "cl-1", "the waiting event").await;
    let t = Instant::now();
    w.create_session("cl", json!({"harness": "claude", "harnessSessionId": "33333333-4444-4555-8666-777777777777"}))
        .await;
    loop {
        if transcripts(&w).iter().any(|(_, text)| text.contains("the waiting event")) {
            return t.elapsed();
        }
        assert!(t.elapsed() < Duration::from_secs(180), "the prompt never reached a transcript");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn claude_world(with_store: bool) -> World {
    let key = "sk-ant-api03-worksession-offline-bench-key-000000000000000";
    let out =
        std::process::Command::new(support::repo_root().join("scripts/testenv")).arg("claude-bin").output().unwrap();
    let bin = String::from_utf8(out.stdout).unwrap().trim().to_string();
    // The product's default settle window (60 s): the test config's 5 s is shorter than the CLI's own late failure
    // (15-40 s offline), and a pane that outlives the window is taken at its word.
    World::with_yaml(|tmux, yaml| {
        let yaml = yaml.replace("resumeSettleSeconds: 10", "resumeSettleSeconds: 60");
        let home = tmux.state();
        let config = json!({
            "hasCompletedOnboarding": true,
            "projects": {tmux.workdir().display().to_string(): {"hasTrustDialogAccepted": true}},
            "customApiKeyResponses": {"approved": [&key[key.len() - 20..]], "rejected": []},
        });
        std::fs::write(home.join(".claude.json"), config.to_string()).unwrap();
        let wrapper = home.join("claude-offline");
        let script = format!(
            "#!/bin/sh\nexport HOME='{}' ANTHROPIC_API_KEY='{key}' DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1\nexec '{bin}' \"$@\"\n",
            home.display()
        );
        std::fs::write(&wrapper, script).unwrap();
        std::process::Command::new("chmod").arg("+x").arg(&wrapper).status().unwrap();
        let store = if with_store { "" } else { "    conversationPath: ''\n" };
        format!("{yaml}  claude:\n    binary: {}\n{store}", wrapper.display())
    })
    .await
}

/// Signs and posts a GitHub delivery to the bridge's routes; the status it answered.
async fn webhook(app: &axum::Router, kind: &str, delivery: &str, payload: &serde_json::Value) -> u16 {
    use tower::ServiceExt;
    let body = serde_json::to_vec(payload).unwrap();
    let request = axum::http::Request::post("/webhooks/github")
        .header("x-github-event", kind)
        .header("x-github-delivery", delivery)
        .header("x-hub-signature-256", worksession::bridge::github::sign(b"bench", &body))
        .body(axum::body::Body::from(body))
        .unwrap();
    app.clone().oneshot(request).await.unwrap().status().as_u16()
}

async fn review_comments() {
    use scenarios::Rig;
    use scenarios::fixtures;
    let w = World::new().await;
    let secret = w.tmux.dir.path().join("github-secret");
    std::fs::write(&secret, "bench").unwrap();
    let yaml = format!(
        "github:\n  secretFile: {}\nroutes:\n  - {{repository: 'octo-org/*', namespace: {}, nodeName: {}, harness: standin-hooks, workdir: {}, workItem: '{{repo}}-{{number}}'}}\n",
        secret.display(),
        w.ns.name,
        w.node,
        w.tmux.workdir().display()
    );
    let app = w.bridge(&yaml);
    let (repo, branch) = ("octo-org/hello", "worksession/hello-12");
    assert_eq!(webhook(&app, "issue_comment", "issue", &fixtures::issue_comment(repo, 12, "mona", "go")).await, 201);
    w.await_phase("hello-12", Phase::Running).await;
    w.tmux.await_output(&w.tmux_session("hello-12"), "ready>").await;
    assert_eq!(
        webhook(&app, "pull_request", "opened", &fixtures::pull_request(repo, 57, "opened", branch, "bot")).await,
        200
    );
    let (mut answered, mut delivered) = (Vec::new(), Vec::new());
    for i in 0..support::bench_size(20, 2) {
        let payload = fixtures::review_comment(repo, 57, branch, "mona", 7000 + i as u64, &format!("review {i}"));
        let delivery = format!("review-{i}");
        let t = Instant::now();
        assert_eq!(webhook(&app, "pull_request_review_comment", &delivery, &payload).await, 201);
        answered.push(t.elapsed());
        let name = worksession::bridge::event_name("gh", &delivery);
        while phase_of(&w, &name).await != Some(PromptPhase::Delivered) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        delivered.push(t.elapsed());
    }
    let ms = |mut v: Vec<Duration>| {
        v.sort();
        let at = |i: usize| v[i].as_secs_f64() * 1000.0;
        format!("median {:.1} ms, slowest {:.1} ms", at(v.len() / 2), at(v.len() - 1))
    };
    println!("review comment on a work item's pull request: webhook -> bridge answered 201: {}", ms(answered));
    println!("review comment on a work item's pull request: webhook -> Delivered (standin-hooks): {}", ms(delivered));
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let all = args.is_empty();
    if all || args.iter().any(|a| a == "standin") {
        // Side by side: the harness's hooks (and its transcript), its transcript alone, and neither (the probe).
        live_paste("standin-hooks").await;
        live_paste("standin").await;
        live_paste("standin-blind").await;
    }
    if all || args.iter().any(|a| a == "pull-request") {
        review_comments().await;
    }
    if all || args.iter().any(|a| a == "claude") {
        for run in 1..=support::bench_size(2, 1) {
            println!(
                "unknown recorded id, real CLI, with conversationPath (run {run}): event created -> prompt in a fresh transcript: {}",
                secs(unknown_id(true).await)
            );
            println!(
                "unknown recorded id, real CLI, without conversationPath (run {run}): event created -> prompt in a fresh transcript: {}",
                secs(unknown_id(false).await)
            );
        }
    }
}
