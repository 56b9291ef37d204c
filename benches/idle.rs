//! Idle suspension benchmark, through the agent on the real API server and real tmux (it prints figures).
//!
//!     cargo bench --bench idle
//!
//! 50 stand-in harnesses running, each with `idle.suspendAfterSeconds: 20`: the resident memory of the tmux server and
//! all its descendants while they run, and once every session is `Idle`; then, for 10 of them, a WorkEvent created
//! until its prompt is recorded by the resumed stand-in in the same conversation.

#[path = "../tests/scenarios/mod.rs"]
mod scenarios;
#[path = "../tests/standin/mod.rs"]
mod standin;
#[path = "../tests/support/mod.rs"]
mod support;
#[path = "../tests/world/mod.rs"]
mod world;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;
use worksession::api::Phase;
use world::World;

/// How many harnesses run.
fn sessions() -> usize {
    support::bench_size(50, 3)
}

/// Resident kB of `root` and all its descendants, from /proc.
fn tree_rss_kb(root: u32) -> u64 {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut rss: HashMap<u32, u64> = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let field = |name: &str| {
            status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.split_whitespace().next().unwrap_or("0"))
        };
        let ppid: u32 = field("PPid:").and_then(|v| v.parse().ok()).unwrap_or(0);
        children.entry(ppid).or_default().push(pid);
        rss.insert(pid, field("VmRSS:").and_then(|v| v.parse().ok()).unwrap_or(0));
    }
    let (mut total, mut stack) = (0, vec![root]);
    while let Some(pid) = stack.pop() {
        total += rss.get(&pid).copied().unwrap_or(0);
        stack.extend(children.get(&pid).into_iter().flatten());
    }
    total
}

fn tmux_server_pid(w: &World) -> u32 {
    let out = std::process::Command::new("tmux")
        .arg("-S")
        .arg(w.tmux.socket())
        .args(["display-message", "-p", "#{pid}"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().parse().expect("a tmux server pid")
}

#[tokio::main]
async fn main() {
    let w = World::new().await;
    let names: Vec<String> = (0..sessions()).map(|i| format!("idle-{i}")).collect();
    for name in &names {
        w.create_session(name, json!({"idle": {"suspendAfterSeconds": 20}, "initialPrompt": "hello"})).await;
    }
    let mut ids = HashMap::new();
    for name in &names {
        let ws = w.await_phase(name, Phase::Running).await;
        ids.insert(name.clone(), ws.status.unwrap().harness_session_id.unwrap());
    }
    let server = tmux_server_pid(&w);
    let running = tree_rss_kb(server);
    for name in &names {
        w.await_phase(name, Phase::Idle).await;
    }
    // The server exits with its last session; then nothing of it is resident (0).
    let idle = tree_rss_kb(server);
    println!(
        "{} stand-in harnesses: tmux server and descendants resident {:.1} MB running, {:.1} MB once Idle",
        names.len(),
        running as f64 / 1024.0,
        idle as f64 / 1024.0
    );
    let mut wakes = Vec::new();
    for name in names.iter().take(support::bench_size(10, 2)) {
        let prompt = format!("wake {name}");
        let t = Instant::now();
        w.send(name, &format!("{name}-wake"), &prompt).await;
        loop {
            let done = w.tmux.prompts().iter().any(|p| p.prompt == prompt && p.conversation == ids[name]);
            if done {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(60), "{name} never woke");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        wakes.push(t.elapsed());
    }
    wakes.sort();
    println!(
        "wake: WorkEvent created -> prompt in the resumed conversation: median {:.2} s, slowest {:.2} s (10 wakes)",
        wakes[wakes.len() / 2].as_secs_f64(),
        wakes[wakes.len() - 1].as_secs_f64()
    );
}
