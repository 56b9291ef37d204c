//! Fleet benchmark, on the real API server and real tmux, with the agents as separate processes (the
//! `worksession` binary of this build). It prints figures.
//!
//!     cargo bench --bench fleet              # 20 agents x 50 sessions, 1,000 events, then a minute at rest
//!     cargo bench --bench fleet -- local     # local mode: 500 sessions in one directory, agent CPU at rest
//!
//! `FLEET_AGENTS`, `FLEET_SESSIONS` (per agent) and `LOCAL_SESSIONS` change the sizes; `WORKSESSION_BIN` runs another
//! build of the agent (to compare before and after). The harness is a shell loop that appends each pasted line to its
//! transcript (so delivery is confirmed by `conversationPath`, as for Claude Code): a stand-in that costs a few
//! hundred kB, where the python stand-in of the tests costs 14 MB and a thousand of them would not fit.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;
use worksession::api::{NODE_LABEL, Phase, PromptPhase, WorkEvent, WorkSession, node_label_value};

/// The harness: creates its transcript, then appends every line it reads to it as a JSON line, as a harness's
/// transcript holds a prompt (the bench's prompts need no escaping; the braces are printf's octal escapes, since a
/// profile's argv takes `{...}` for its placeholders).
const HARNESS: &str =
    r#": >> "$0"; while IFS= read -r line; do printf '\173"type":"user","content":"%s"\175\n' "$line" >> "$0"; done"#;

fn size(var: &str, default: usize, short: usize) -> usize {
    let default = support::bench_size(default, short);
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// How long the last writes and their wakes are let settle before a window at rest.
fn settle() -> Duration {
    Duration::from_secs(support::bench_size(15, 2) as u64)
}

/// The window at rest whose CPU and calls are counted.
fn rest() -> Duration {
    Duration::from_secs(support::bench_size(60, 3) as u64)
}

fn binary() -> PathBuf {
    std::env::var_os("WORKSESSION_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_worksession")), PathBuf::from)
}

/// One agent's folder: tmux socket, transcripts, config.
struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("conversations")).unwrap();
        let place = Place { dir };
        let transcript = format!("{}/conversations/{{sessionId}}.jsonl", place.path().display());
        let argv = json!(["-c", HARNESS, transcript]);
        let config = json!({
            "tmux": {"socket": place.socket()},
            "defaults": {"resumeProbeSeconds": 1, "resumeSettleSeconds": 10},
            "harnesses": {"fleet": {
                "binary": "/bin/sh", "interactive": argv, "resume": argv,
                "conversationPath": transcript,
            }},
        });
        std::fs::write(place.config(), serde_yaml_ng::to_string(&config).unwrap()).unwrap();
        place
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn socket(&self) -> PathBuf {
        self.path().join("tmux.sock")
    }

    fn config(&self) -> PathBuf {
        self.path().join("agent.yaml")
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let _ = Command::new("tmux").arg("-S").arg(self.socket()).arg("kill-server").stderr(Stdio::null()).status();
    }
}

/// An agent process, killed on drop.
struct Agent {
    child: Child,
    admin: std::net::SocketAddr,
}

impl Agent {
    fn start(args: &[&str], place: &Place) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let admin: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log = std::fs::File::create(place.path().join("agent.log")).unwrap();
        let child = Command::new(binary())
            .arg("agent")
            .args(args)
            .arg("--config")
            .arg(place.config())
            .arg(format!("--admin-addr={admin}"))
            .env("KUBECONFIG", &support::control_plane().kubeconfig)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the agent");
        Agent { child, admin }
    }

    /// (user + system CPU seconds, resident MB), from /proc.
    fn usage(&self) -> (f64, f64) {
        let pid = self.child.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let rss_kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .unwrap()
            .trim()
            .trim_end_matches(" kB")
            .trim()
            .parse()
            .unwrap();
        (ticks / 100.0, rss_kb / 1024.0)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// `apiserver_request_total` summed by (verb, resource), from the API server's own `/metrics`.
async fn api_requests(client: &kube::Client) -> HashMap<(String, String), f64> {
    let text = client.request_text(axum::http::Request::get("/metrics").body(Vec::new()).unwrap()).await.unwrap();
    let mut out = HashMap::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let (labels, value) = line.rsplit_once(' ').unwrap();
        let label = |name: &str| {
            let start = labels.find(&format!("{name}=\"")).map(|i| i + name.len() + 2)?;
            Some(labels[start..].split('"').next()?.to_string())
        };
        let key = (label("verb").unwrap_or_default(), label("resource").unwrap_or_default());
        *out.entry(key).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
    }
    out
}

async fn fleet() {
    let (agents, per_agent) = (size("FLEET_AGENTS", 20, 2), size("FLEET_SESSIONS", 50, 3));
    let ns = support::TestNamespace::new().await;
    support::install_crds(ns.client.clone()).await;
    let places: Vec<Place> = (0..agents).map(|_| Place::new()).collect();
    // Node names of this run only: the test control plane keeps the objects of a deleted namespace, and an agent
    // serves its node's sessions in every namespace.
    let node = |a: usize| format!("{}-{a}", ns.name);
    let fleet: Vec<Agent> =
        places.iter().enumerate().map(|(a, place)| Agent::start(&["--node", &node(a)], place)).collect();
    println!("fleet: {agents} agents x {per_agent} sessions, binary {}", binary().display());

    let sessions: Api<WorkSession> = ns.api();
    let started = Instant::now();
    let names: Vec<(usize, String)> =
        (0..agents).flat_map(|a| (0..per_agent).map(move |s| (a, format!("fleet-{a}-{s}")))).collect();
    futures::stream::iter(&names)
        .for_each_concurrent(16, |(a, name)| {
            let (sessions, workdir) = (sessions.clone(), places[*a].path().display().to_string());
            let ws: WorkSession = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"workItem": name, "nodeName": node(*a), "harness": "fleet", "workdir": workdir},
            }))
            .unwrap();
            async move {
                sessions.create(&PostParams::default(), &ws).await.unwrap();
            }
        })
        .await;
    let total = names.len();
    support::poll("every session Running", Duration::from_secs(900), || async {
        let list = sessions.list(&Default::default()).await.map_err(|e| e.to_string())?;
        let running =
            list.items.iter().filter(|ws| ws.status.as_ref().and_then(|s| s.phase) == Some(Phase::Running)).count();
        if running == total { Ok(()) } else { Err(format!("{running} of {total} Running")) }
    })
    .await;
    println!("fleet: {total} sessions Running {:.1} s after the first was created", started.elapsed().as_secs_f64());

    // Delivered as the watch sees it, against the moment each create returned.
    let delivered: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen = delivered.clone();
    let events: Api<WorkEvent> = ns.api();
    let watch =
        tokio::spawn(watcher(events.clone(), watcher::Config::default()).applied_objects().try_for_each(move |ev| {
            if ev.status.as_ref().and_then(|s| s.phase) == Some(PromptPhase::Delivered) {
                seen.lock().unwrap().entry(ev.name_any()).or_insert_with(Instant::now);
            }
            futures::future::ready(Ok(()))
        }));
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let requests_before = api_requests(&ns.client).await;
    futures::stream::iter(&names)
        .for_each_concurrent(16, |(a, name)| {
            let (events, created) = (events.clone(), created.clone());
            // Labelled as the bridge labels what it creates.
            let ev: WorkEvent = serde_json::from_value(json!({
                "metadata": {"name": format!("{name}-ev"), "labels": {NODE_LABEL: node_label_value(&node(*a))}},
                "spec": {"session": name, "prompt": format!("event for {name}")},
            }))
            .unwrap();
            async move {
                events.create(&PostParams::default(), &ev).await.unwrap();
                created.lock().unwrap().insert(ev.name_any(), Instant::now());
            }
        })
        .await;
    support::poll("every event Delivered", Duration::from_secs(900), || async {
        let n = delivered.lock().unwrap().len();
        if n == total { Ok(()) } else { Err(format!("{n} of {total} Delivered")) }
    })
    .await;
    watch.abort();
    let requests = api_requests(&ns.client).await;
    println!(
        "fleet: API requests per delivered event (the bench's creates stand for the bridge's; /metrics reads included):"
    );
    let mut per_event: Vec<((String, String), f64)> = requests
        .iter()
        .map(|(k, v)| (k.clone(), (v - requests_before.get(k).copied().unwrap_or(0.0)) / total as f64))
        .filter(|(_, d)| *d >= 0.005)
        .collect();
    per_event.sort_by(|a, b| a.0.cmp(&b.0));
    for ((verb, resource), d) in &per_event {
        println!("fleet:   {verb} {resource}: {d:.2}");
    }
    // What etcd holds per object: CRs are stored as the JSON the API serves (managedFields included).
    let bytes = |v: serde_json::Value| serde_json::to_vec(&v).unwrap().len() as f64;
    let ws_json = sessions.list(&Default::default()).await.unwrap().items;
    let ev_json = events.list(&Default::default()).await.unwrap().items;
    let ws_bytes = ws_json.iter().map(|o| bytes(serde_json::to_value(o).unwrap())).sum::<f64>() / ws_json.len() as f64;
    let ev_bytes = ev_json.iter().map(|o| bytes(serde_json::to_value(o).unwrap())).sum::<f64>() / ev_json.len() as f64;
    println!(
        "fleet: bytes per object as stored: WorkSession (Running) {ws_bytes:.0}, WorkEvent (Delivered, a {}-byte prompt) {ev_bytes:.0}",
        "event for fleet-0-0".len()
    );
    let mut latencies: Vec<Duration> = {
        let (created, delivered) = (created.lock().unwrap(), delivered.lock().unwrap());
        delivered.iter().map(|(name, at)| at.saturating_duration_since(created[name])).collect()
    };
    latencies.sort();
    println!(
        "fleet: {total} events, created to Delivered: p50 {:.2} s, p99 {:.2} s, max {:.2} s",
        percentile(&latencies, 0.5).as_secs_f64(),
        percentile(&latencies, 0.99).as_secs_f64(),
        latencies.last().unwrap().as_secs_f64()
    );

    let notices = |addressed: &str| format!("worksession_agent_workevent_notices_total{{addressed=\"{addressed}\"}}");
    let mut rss = Vec::new();
    for (a, agent) in fleet.iter().enumerate() {
        let mine = support::metric(agent.admin, &notices("true")).await;
        let others = support::metric(agent.admin, &notices("false")).await;
        let (_, mb) = agent.usage();
        rss.push(mb);
        println!(
            "fleet: agent {a}: {per_agent} events addressed to it; its watch carried {mine} changes of its own events, {others} of other nodes'; resident {mb:.1} MB"
        );
    }
    let all_notices: f64 = {
        let mut n = 0.0;
        for agent in &fleet {
            n += support::metric(agent.admin, &notices("true")).await;
        }
        n
    };
    println!("fleet: watch notices per delivered event: {:.2}", all_notices / total as f64);
    rss.sort_by(f64::total_cmp);
    println!("fleet: agent resident memory: median {:.1} MB, max {:.1} MB", rss[rss.len() / 2], rss[rss.len() - 1]);

    // At rest: what the API server served in a minute (the bench itself makes no request meanwhile).
    tokio::time::sleep(settle()).await; // the last status writes and their wakes
    let ticks = |f: &[Agent]| f.iter().map(|a| a.usage().0).sum::<f64>();
    let (before, cpu_before) = (api_requests(&ns.client).await, ticks(&fleet));
    let observations = || async {
        let mut n = 0.0;
        for agent in &fleet {
            n += support::metric(agent.admin, "worksession_agent_tmux_observations_total").await;
        }
        n
    };
    let observed = observations().await;
    tokio::time::sleep(rest()).await;
    let (after, cpu_after) = (api_requests(&ns.client).await, ticks(&fleet));
    let observed = observations().await - observed;
    let mut changed: Vec<((String, String), f64)> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect();
    changed.sort_by(|a, b| a.0.cmp(&b.0));
    // The agents' resources; the rest is the API server's own housekeeping (endpoints, leases) and the bench's
    // /metrics reads.
    let ours = |resource: &str| ["worksessions", "workevents", "events"].contains(&resource);
    let is_write = |verb: &str| !["GET", "LIST", "WATCH"].contains(&verb);
    let count = |pick: &dyn Fn(&str, &str) -> bool| -> f64 {
        changed.iter().filter(|((verb, resource), _)| pick(verb, resource)).map(|(_, d)| d).sum()
    };
    println!(
        "fleet at rest, {} s: requests to worksessions, workevents and events (the agents'): {} reads, {} writes",
        rest().as_secs(),
        count(&|verb, resource| ours(resource) && !is_write(verb)) + 0.0,
        count(&|verb, resource| ours(resource) && is_write(verb)) + 0.0,
    );
    for ((verb, resource), d) in changed.iter().filter(|((_, resource), _)| !ours(resource)) {
        println!("fleet at rest:   not the agents': {verb} {resource:?}: {d}");
    }
    println!(
        "fleet at rest, {} s: {observed} tmux calls by {agents} agents ({:.2} per agent per second, for {per_agent} sessions each); agents' CPU {:.2} s in all",
        rest().as_secs(),
        observed / rest().as_secs_f64() / agents as f64,
        cpu_after - cpu_before
    );
}

async fn local() {
    let count = size("LOCAL_SESSIONS", 500, 5);
    let place = Place::new();
    let dir = place.path().join("manifests");
    std::fs::create_dir(&dir).unwrap();
    for s in 0..count {
        let name = format!("local-{s}");
        let manifest = json!({
            "apiVersion": "worksession.dev/v1alpha1", "kind": "WorkSession", "metadata": {"name": name},
            "spec": {"workItem": name, "nodeName": "local", "harness": "fleet", "workdir": place.path()},
        });
        std::fs::write(dir.join(format!("{name}.yaml")), serde_yaml_ng::to_string(&manifest).unwrap()).unwrap();
    }
    let agent = Agent::start(&["--local", dir.to_str().unwrap()], &place);
    println!("local: {count} sessions, binary {}", binary().display());
    let started = Instant::now();
    let store = worksession::store::local::LocalStore::new(&dir).unwrap();
    support::poll("every session Running", Duration::from_secs(900), || async {
        let sessions = store.session_files().map_err(|e| e.to_string())?;
        let running =
            sessions.iter().filter(|(_, ws)| ws.status.as_ref().and_then(|s| s.phase) == Some(Phase::Running)).count();
        if running == count { Ok(()) } else { Err(format!("{running} of {count} Running")) }
    })
    .await;
    println!("local: {count} sessions Running after {:.1} s", started.elapsed().as_secs_f64());
    tokio::time::sleep(settle()).await;
    let (cpu, _) = agent.usage();
    tokio::time::sleep(rest()).await;
    let (cpu_after, mb) = agent.usage();
    println!("local at rest: agent CPU {:.2} s in {} s; resident {mb:.1} MB", cpu_after - cpu, rest().as_secs());
}

#[tokio::main]
async fn main() {
    match std::env::args().skip(1).find(|a| !a.starts_with('-')).as_deref() {
        Some("local") => local().await,
        // The test command's short run: both, so both are known to run to completion.
        None if std::env::var_os("WORKSESSION_BENCH_SHORT").is_some() => {
            fleet().await;
            local().await;
        }
        _ => fleet().await,
    }
}
