//! The cost of reading the harness's own record, through the agent on the real API server and real tmux (it prints
//! figures).
//!
//!     cargo bench --bench record [transcript] [hooks] [usage]
//!
//! 50 stand-in harnesses running, each conversation's transcript padded to 10 MB, and one prompt sent to each that
//! the harness never takes (`--deaf-pastes`), so every one of them stays `Delivering` (the confirm deadline is set far
//! beyond the window): the agent process's CPU time and the bytes it read (`/proc/self/io` `rchar`) over a 20 s
//! window, with the record being the transcript (`transcript`: no hooks) or the hook file (`hooks`). The bench's own
//! work in the window is a sleep. `usage`: 50 stand-ins at work (a screen line a second), each transcript padded to
//! 10 MB and then growing by one reply with its usage a second, the agent's CPU over the window without and with the
//! usage read. It needs nothing but the World the tests use, so the same file runs against an
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

/// A stand-in profile that works on: its screen prints a line a second, and its transcript is read for usage when
/// `reads` (the profile's `usage`), else not.
fn working_profile(tmux: &standin::TmuxServer, reads: bool) -> String {
    let mut profile = format!(
        "  bench-working:\n    binary: {bin}\n    extraArgs: [--state, {state}, --chatter, '1']\n    interactive: [--session-id, '{{sessionId}}', '{{extraArgs}}', '--', '{{prompt}}']\n    resume: [--resume, '{{sessionId}}', '{{extraArgs}}', '--', '{{prompt}}']\n    readyPattern: 'ready>'\n    conversationPath: '{{home}}/conversations/{{sessionId}}.jsonl'\n    hooks: claude\n",
        bin = standin::standin_binary().display(),
        state = tmux.state().display(),
    );
    if reads {
        profile.push_str("    usage: {format: claude}\n");
    }
    profile
}

/// 50 harnesses at work, their transcripts 10 MB each, each growing by one reply (Claude Code's shape, with its usage)
/// a second, their screens printing a line a second: the agent's CPU and bytes read over the window, with the usage
/// read (`reads`) or not.
async fn growing(reads: bool) {
    let n = sessions();
    let w = World::with_yaml(|tmux, yaml| yaml + &working_profile(tmux, reads)).await;
    for i in 0..n {
        w.create_session(&format!("g{i}"), json!({"harness": "bench-working", "workItem": format!("g{i}")})).await;
    }
    let filler = format!("{}\n", json!({"type": "assistant", "message": {"content": "x".repeat(1000)}}));
    let mut transcripts = Vec::new();
    for i in 0..n {
        let ws = w.await_phase(&format!("g{i}"), Phase::Running).await;
        let id = ws.status.and_then(|s| s.harness_session_id).expect("an id given at start");
        let path = standin::transcript_of(&w.tmux.state(), &id);
        support::eventually(&format!("the transcript of g{i}"), || async { path.exists().then_some(()) }).await;
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        let mut written = 0;
        while written < transcript_bytes() {
            file.write_all(filler.as_bytes()).unwrap();
            written += filler.len();
        }
        transcripts.push(file);
    }
    // What the harness's hooks would say at each turn's end: a Stop, which wakes the session (the record is read at
    // a reconcile).
    let mut hooks = Vec::new();
    for i in 0..n {
        let path = worksession::node::hook::file_of(&w.tmux.state(), &format!("{}/g{i}", w.ns.name));
        hooks.push(std::fs::OpenOptions::new().append(true).create(true).open(path).unwrap());
    }
    let stop =
        || format!("{}\n", json!({"hook": "Stop", "spawn": "", "at": k8s_openapi::jiff::Timestamp::now().to_string()}));
    for file in &mut hooks {
        file.write_all(stop().as_bytes()).unwrap();
    }
    // The padding counted before the window (when read at all): the window sees only the growth.
    if reads {
        for i in 0..n {
            let sessions = w.sessions();
            let name = format!("g{i}");
            support::eventually(&format!("{name}'s record counted"), || async {
                let usage = sessions.get(&name).await.ok()?.status?.usage?;
                (usage.conversation?.read_offset >= transcript_bytes() as u64).then_some(())
            })
            .await;
        }
    }
    let reply = |k: usize| {
        let usage = json!({"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 30,
            "cache_read_input_tokens": 900});
        let message = json!({"id": format!("msg_{k}"), "model": "standin-model", "role": "assistant",
            "stop_reason": "end_turn", "content": [{"type": "text", "text": "done"}], "usage": usage});
        format!("{}\n", json!({"type": "assistant", "message": message}))
    };
    let (cpu, read) = usage();
    let started = Instant::now();
    let mut k = 0;
    while started.elapsed() < window() {
        for (file, hook) in transcripts.iter_mut().zip(&mut hooks) {
            k += 1;
            file.write_all(reply(k).as_bytes()).unwrap();
            hook.write_all(stop().as_bytes()).unwrap();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (cpu_after, read_after) = usage();
    let secs = started.elapsed().as_secs_f64();
    let counted = if reads {
        let mut turns = 0;
        for i in 0..n {
            let ws = w.sessions().get(&format!("g{i}")).await.unwrap();
            turns += ws.status.and_then(|s| s.usage).map_or(0, |u| u.turns);
        }
        format!(", {turns} of {k} replies counted by the window's end")
    } else {
        String::new()
    };
    println!(
        "{n} sessions at work, transcripts of {} MB growing a reply a second each, usage {}: agent CPU {:.2} s in {secs:.0} s ({:.1}% of a core), read {:.2} MB/s{counted}",
        transcript_bytes() >> 20,
        if reads { "read" } else { "not read" },
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
    if all || args.iter().any(|a| a == "usage") {
        growing(false).await;
        growing(true).await;
    }
}
