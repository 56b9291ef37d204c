//! Placement benchmark, on the real API server: 20 agents (their Leases and Ready Nodes, as
//! the agents and kubelets keep them) and `worksession controller`'s placement, in this process. 1,000 WorkSessions
//! without a node are created at once; it prints the time until every one is bound, the requests the API server
//! counted meanwhile on WorkSessions and WorkEvents (by verb, resource and code: conflicts are the 409s), and the
//! spread (sessions per node).
//!
//!     cargo bench --bench placement          # 1,000 sessions across 20 agents
//!
//! `PLACEMENT_AGENTS` and `PLACEMENT_SESSIONS` change the sizes.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use worksession::api::WorkSession;
use worksession::config::PlacementConfig;

fn size(var: &str, default: usize, short: usize) -> usize {
    let default = support::bench_size(default, short);
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` lists before it runs
    }
    // The controller's own log lines, with RUST_LOG (worksession=info shows each binding).
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "off".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    let (agents, sessions) = (size("PLACEMENT_AGENTS", 20, 3), size("PLACEMENT_SESSIONS", 1000, 30));
    let ns = support::TestNamespace::new().await;
    support::install_crds(ns.client.clone()).await;
    let client = ns.client.clone();
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let names: Vec<String> = (0..agents).map(|i| format!("{}-n{i:02}", ns.name)).collect();
    let placement = PlacementConfig {
        lease_namespace: ns.name.clone(),
        lease_duration: Duration::from_secs(3600),
        ..Default::default()
    };
    for name in &names {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Bench",
            "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
        nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(&ready)).await.unwrap();
        let lease = worksession::agent::lease::lease(name, &placement, k8s_openapi::jiff::Timestamp::now());
        let lease_name = worksession::agent::lease::lease_name(name);
        leases.patch(&lease_name, &PatchParams::apply("bench").force(), &Patch::Apply(&lease)).await.unwrap();
    }
    let options = worksession::controller::placement::controller::PlacementOptions {
        lease_namespace: ns.name.clone(),
        grace: Duration::from_secs(300),
        namespace: Some(ns.name.clone()),
        cordon_moves: true,
    };
    let ready = Arc::new(AtomicBool::new(false));
    let controller =
        tokio::spawn(worksession::controller::placement::controller::run(client.clone(), options, ready.clone()));
    while !ready.load(std::sync::atomic::Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let api: Api<WorkSession> = Api::namespaced(client.clone(), &ns.name);
    let before = requests(&client).await;
    let started = Instant::now();
    // Created by 16 writers at once, as a bridge under a burst of webhooks would.
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let api = api.clone();
            tokio::spawn(async move {
                for i in (w..sessions).step_by(16) {
                    let ws: WorkSession = serde_json::from_value(json!({"metadata": {"name": format!("s{i:04}")},
                        "spec": {"workItem": format!("s{i:04}"), "harness": "standin", "workdir": "/w"}}))
                    .unwrap();
                    api.create(&PostParams::default(), &ws).await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let created = started.elapsed();
    let per_node = loop {
        let list = api.list(&ListParams::default()).await.unwrap();
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for ws in &list.items {
            if let Some(node) = &ws.spec.node_name {
                *per_node.entry(node.clone()).or_default() += 1;
            }
        }
        if per_node.values().sum::<usize>() == sessions {
            break per_node;
        }
        tokio::time::sleep(Duration::from_millis(500)).await; // a LIST of 1,000 is no free look
    };
    let bound = started.elapsed();
    controller.abort();
    // What the API server counted meanwhile (the bench's own creates and its polling LISTs among them).
    let after = requests(&client).await;
    let mut counted = BTreeMap::new();
    for (key, n) in &after {
        let n = n - before.get(key).copied().unwrap_or(0.0);
        if n > 0.0 {
            counted.insert(key.clone(), n);
        }
    }
    let conflicts = counted.iter().filter(|(k, _)| k.ends_with(" 409")).fold(0.0, |sum, (_, n)| sum + n);
    for (key, n) in &counted {
        println!("placement: requests {key}: {n} ({:.2} per session)", n / sessions as f64);
    }
    let (min, max) = (per_node.values().min().unwrap(), per_node.values().max().unwrap());
    println!(
        "placement: {sessions} sessions across {agents} agents: created in {:.2} s, all bound {:.2} s after the first \
         create ({:.0} placements/s); per node min {min}, max {max} (ideal {})",
        created.as_secs_f64(),
        bound.as_secs_f64(),
        sessions as f64 / bound.as_secs_f64(),
        sessions / agents,
    );
    println!(
        "{}",
        json!({"bench": "placement", "sessions": sessions, "agents": agents, "bound_seconds": bound.as_secs_f64(),
            "min_per_node": min, "max_per_node": max, "conflicts": conflicts, "requests": counted})
    );
    for name in &names {
        let _ = nodes.delete(name, &Default::default()).await;
    }
}

/// The API server's count of requests on WorkSessions and WorkEvents, by verb, resource (and subresource) and code,
/// from its own `apiserver_request_total`: what the placement cost, not what the controller believes it sent.
async fn requests(client: &kube::Client) -> BTreeMap<String, f64> {
    let request = hyper::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.expect("the API server's metrics (the admin may read them)");
    let mut counts = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let Some((labels, value)) = line.rsplit_once(' ') else { continue };
        // `name="value"`, right after the `{` or a `,` (so `resource` is never read out of `subresource`).
        let label = |name: &str| {
            let at =
                [format!("{{{name}=\""), format!(",{name}=\"")].iter().find_map(|k| Some(labels.find(k)? + k.len()))?;
            labels[at..].split('"').next()
        };
        let resource = label("resource").unwrap_or_default();
        if resource != "worksessions" && resource != "workevents" {
            continue;
        }
        let sub = label("subresource").filter(|s| !s.is_empty()).map(|s| format!("/{s}")).unwrap_or_default();
        let key = format!("{} {resource}{sub} {}", label("verb").unwrap_or("?"), label("code").unwrap_or("?"));
        *counts.entry(key).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
    }
    counts
}
