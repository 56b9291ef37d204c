//! The cost of reading the harness's own record (issue 26), through the agent on the real API server and real tmux
//! (it prints figures).
//!
//!     cargo bench --bench record [transcript] [hooks]
//!
//! 50 stand-in harnesses running, each conversation's transcript padded to 10 MB, and one prompt sent to each that
//! the harness never takes (`--deaf-pastes`), so every one of them stays `Delivering` (the confirm deadline is set far
//! beyond the window): the agent process's CPU time and the bytes it read (`/proc/self/io` `rchar`) over a 20 s
//! window, with the record being the transcript (`transcript`: no hooks) or the hook file (`hooks`). The bench's own
//! work in the window is a sleep. It needs nothing but the World the tests use, so the same file runs against an
//! older release (docs/benchmarks.md says how the "before" figure was made).

#[path = "../tests/scenarios/mod.rs"]
mod scenarios;
#[path = "../tests/standin/mod.rs"]
mod standin;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "../tests/world/mod.rs"]
mod world;

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::json;
use worksession::api::{Phase, PromptPhase};
use world::World;

/// How many harnesses run.
fn sessions() -> usize {
    support::bench_size(50, 2)
}

/// How large each transcript is made.
fn transcript_bytes() -> usize {
    support::bench_size(10 << 20, 64 << 10)
}

/// How long the agent is watched.
fn window() -> Duration {
    Duration::from_secs(support::bench_size(20, 2) as u64)
}

/// This process's CPU seconds (user + system) and the bytes it has read.
fn usage() -> (f64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    let rchar = io.lines().find_map(|l| l.strip_prefix("rchar: ")).unwrap().trim().parse().unwrap();
    (ticks / 100.0, rchar)
}

/// A stand-in profile that never takes a paste, with its transcript, and hooks when `hooks`.
fn deaf_profile(tmux: &standin::TmuxServer, hooks: bool) -> String {
    let mut profile = format!(
        "  bench-deaf:\n    binary: {bin}\n    extraArgs: [--state, {state}, --deaf-pastes, '1000000']\n    interactive: [--session-id, '{{sessionId}}', '{{extraArgs}}', '--', '{{prompt}}']\n    resume: [--resume, '{{sessionId}}', '{{extraArgs}}', '--', '{{prompt}}']\n    readyPattern: 'ready>'\n    conversationPath: '{{home}}/conversations/{{sessionId}}.jsonl'\n",
        bin = standin::standin_binary().display(),
        state = tmux.state().display(),
    );
    if hooks {
        profile.push_str("    hooks: claude\n");
    }
    profile
}

async fn undelivered(hooks: bool) {
    let n = sessions();
    let w = World::with_yaml(|tmux, yaml| {
        // The deadline far beyond the window: every prompt stays Delivering while the agent is watched.
        let yaml = yaml.replace("confirmTimeoutSeconds: 15", "confirmTimeoutSeconds: 3600");
        yaml + &deaf_profile(tmux, hooks)
    })
    .await;
    for i in 0..n {
        w.create_session(&format!("r{i}"), json!({"harness": "bench-deaf", "workItem": format!("r{i}")})).await;
    }
    // Each conversation's transcript, 10 MB of a harness's own lines.
    let line = format!("{}\n", json!({"type": "assistant", "message": {"content": "x".repeat(1000)}}));
    for i in 0..n {
        let ws = w.await_phase(&format!("r{i}"), Phase::Running).await;
        let id = ws.status.and_then(|s| s.harness_session_id).expect("an id given at start");
        let path = standin::transcript_of(&w.tmux.state(), &id);
        // Running is a pane alive after its probe; the stand-in makes its transcript as it starts, maybe later.
        support::eventually(&format!("the transcript of r{i}"), || async { path.exists().then_some(()) }).await;
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        let mut written = 0;
        while written < transcript_bytes() {
            file.write_all(line.as_bytes()).unwrap();
            written += line.len();
        }
    }
    for i in 0..n {
        w.tmux.await_output(&w.tmux_session(&format!("r{i}")), "ready>").await;
        w.send(&format!("r{i}"), &format!("r{i}-1"), &format!("a prompt the harness drops {i}")).await;
    }
    let t = Instant::now();
    for i in 0..n {
        let events = w.events();
        let name = format!("r{i}-1");
        support::eventually(&format!("{name} Delivering"), || async {
            let phase = events.get(&name).await.ok()?.status?.phase;
            (phase == Some(PromptPhase::Delivering)).then_some(())
        })
        .await;
    }
    let sending = t.elapsed();
    let (cpu, read) = usage();
    tokio::time::sleep(window()).await;
    let (cpu_after, read_after) = usage();
    let secs = window().as_secs_f64();
    println!(
        "{n} sessions, transcripts of {} MB, every prompt Delivering (all sent in {:.1} s), record {}: agent CPU {:.2} s in {secs:.0} s ({:.1}% of a core), read {:.1} MB/s",
        transcript_bytes() >> 20,
        sending.as_secs_f64(),
        if hooks { "hook file" } else { "transcript" },
        cpu_after - cpu,
        (cpu_after - cpu) / secs * 100.0,
        (read_after - read) as f64 / secs / 1e6,
    );
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let all = args.is_empty();
    if all || args.iter().any(|a| a == "transcript") {
        undelivered(false).await;
    }
    if all || args.iter().any(|a| a == "hooks") {
        undelivered(true).await;
    }
}
