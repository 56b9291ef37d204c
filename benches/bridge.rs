//! Bridge throughput against the real API server (a benchmark: it prints figures).
//!
//!     cargo bench --bench bridge
//!
//! Sustained signed GitHub webhooks per second through the bridge (HTTP over loopback, 16 at a time), against
//! creating the same WorkEvents directly through the API with the same concurrency; p50 and p99 latency of each.

#[path = "../tests/fixtures/github.rs"]
mod fixtures;
#[path = "../tests/support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Api;
use kube::api::PostParams;

use tokio::net::TcpListener;
use worksession::api::{WorkEvent, WorkSession};
use worksession::bridge::{self, github};
use worksession::store::kube::KubeSink;

/// How many webhooks (and direct creations) are timed.
fn n() -> usize {
    support::bench_size(1000, 20)
}
const CONCURRENCY: usize = 16;
const SECRET: &[u8] = b"bench-secret";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn report(what: &str, total: Duration, mut latencies: Vec<Duration>) -> f64 {
    latencies.sort();
    let rate = latencies.len() as f64 / total.as_secs_f64();
    println!(
        "{what}: {} in {:.2} s = {rate:.0}/s | p50 {:.1} ms | p99 {:.1} ms",
        latencies.len(),
        total.as_secs_f64(),
        percentile(&latencies, 0.5).as_secs_f64() * 1000.0,
        percentile(&latencies, 0.99).as_secs_f64() * 1000.0
    );
    rate
}

fn payload(i: usize) -> Vec<u8> {
    serde_json::to_vec(&fixtures::issue_comment("octo-org/hello", 1347, "mona", &format!("comment {i}"))).unwrap()
}

async fn post(bridge: SocketAddr, i: usize) -> Duration {
    let body = payload(i);
    let (delivery, signature) = (format!("bench-{i}"), github::sign(SECRET, &body));
    let headers =
        [("X-GitHub-Event", "issue_comment"), ("X-GitHub-Delivery", &delivery), ("X-Hub-Signature-256", &signature)];
    let t = Instant::now();
    let (status, response) = support::http(bridge, "POST", "/webhooks/github", &headers, &body).await.unwrap();
    let elapsed = t.elapsed();
    assert_eq!(status, 201, "{response}");
    elapsed
}

#[tokio::main]
async fn main() {
    let ns = support::TestNamespace::new().await;
    support::install_crds(ns.client.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), SECRET).unwrap();
    let yaml = format!(
        "github:\n  secretFile: {}\nroutes:\n  - repository: 'octo-org/*'\n    namespace: {}\n    nodeName: bench-node\n    harness: claude\n    workdir: /srv/{{repo}}\n",
        dir.path().join("secret").display(),
        ns.name
    );
    let app = support::bridge_router(&yaml, KubeSink::new(ns.client.clone()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    // Warm-up: creates the WorkSession and the connections.
    post(addr, usize::MAX).await;

    // The same objects the bridge writes (labels, source, rendered prompt), under new names.
    let events: Api<WorkEvent> = ns.api();
    let template = events.get(&bridge::event_name("gh", &format!("bench-{}", usize::MAX))).await.unwrap();
    let t = Instant::now();
    let direct: Vec<Duration> = futures::stream::iter(0..n())
        .map(|i| {
            let events = events.clone();
            let mut ev = WorkEvent::new(&format!("direct-{i}"), template.spec.clone());
            ev.metadata.labels = template.metadata.labels.clone();
            ev.spec.prompt = ev.spec.prompt.replace(&usize::MAX.to_string(), &i.to_string());
            async move {
                let t = Instant::now();
                events.create(&PostParams::default(), &ev).await.unwrap();
                t.elapsed()
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let direct_rate = report("direct API creates", t.elapsed(), direct);

    let t = Instant::now();
    let via_bridge: Vec<Duration> =
        futures::stream::iter(0..n()).map(|i| post(addr, i)).buffer_unordered(CONCURRENCY).collect().await;
    let bridge_rate = report("signed webhooks through the bridge", t.elapsed(), via_bridge);
    let sessions: Api<WorkSession> = ns.api();
    assert!(sessions.get(&support::work_item("octo-org/hello", 1347)).await.is_ok());
    println!("bridge / direct: {:.2}x (goal >= 0.95x)", bridge_rate / direct_rate);
}
