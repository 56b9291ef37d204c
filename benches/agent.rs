//! Agent benchmarks against real tmux and the real API server (not tests: they print figures).
//!
//!     cargo bench --bench agent [observe] [respawn] [verify] [memory]
//!
//! (a) observe: one observation of 1,000 live tmux sessions, against one raw `tmux list-panes -a` call asking for the
//!     same format (the agent's own seven fields), so the ratio is the agent's own cost.
//! (b) respawn: a pending event on a dead session to the harness process started, against its floor measured in the
//!     same run: one raw API write (a spawn records its intent first) plus one raw `tmux new-session` of the same
//!     harness (probe window excluded: probe 0); and where the time goes, from the agent's debug spans. Timed from
//!     the moment the event exists (its create returned: what the agent is told of), and also from the create's
//!     call (the bench's own write included).
//! (c) verify: 100 dead sessions each receiving an event with a 2 s probe, until all are verified.
//! (d) memory: the agent binary's resident memory with 1,000 WorkSessions (live harnesses) on its node.
//! Results are medians of repeated runs where a run is short; see docs/benchmarks.md.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use worksession::api::{Phase, PromptPhase, WorkEvent, WorkSession};
use worksession::config::Config;
use worksession::node::tmux::{Tmux, TmuxRunner};

/// The agent's debug spans as they close: each step of a reconcile, named by its session; and whether a reconcile
/// runs or ran lately.
#[derive(Clone, Default)]
struct Spans(Arc<std::sync::Mutex<Log>>);

#[derive(Default)]
struct Log {
    closed: Vec<Closed>,
    /// Reconciles open now.
    reconciling: usize,
    /// When a reconcile last opened or closed.
    last: Option<Instant>,
}

/// One closed span: its name (an op's with the op), its session, when it opened and closed.
struct Closed {
    step: String,
    session: String,
    opened: Instant,
    closed: Instant,
}

/// What a span of the agent is, kept with it until it closes: when it opened, its session, its step.
struct Opened {
    at: Instant,
    session: String,
    step: String,
}

/// The `name` and `op` fields of a span.
#[derive(Default)]
struct Fields {
    name: String,
    op: String,
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "name" => self.name = value.into(),
            "op" => self.op = value.into(),
            _ => {}
        }
    }
    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

impl<S> tracing_subscriber::Layer<S> for Spans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let span = ctx.span(id).unwrap();
        // A step names its session through the reconcile it is part of.
        let session = span.scope().skip(1).find_map(|s| s.extensions().get::<Opened>().map(|o| o.session.clone()));
        let step = if fields.op.is_empty() { span.name().to_string() } else { format!("op {}", fields.op) };
        if step == "reconcile" {
            let mut log = self.0.lock().unwrap();
            log.reconciling += 1;
            log.last = Some(Instant::now());
        }
        span.extensions_mut().insert(Opened { at: Instant::now(), session: session.unwrap_or(fields.name), step });
    }

    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        let span = ctx.span(&id).unwrap();
        if let Some(Opened { at, session, step }) = span.extensions_mut().remove::<Opened>() {
            let mut log = self.0.lock().unwrap();
            if step == "reconcile" {
                log.reconciling -= 1;
                log.last = Some(Instant::now());
            }
            log.closed.push(Closed { step, session, opened: at, closed: Instant::now() });
        }
    }
}

impl Spans {
    /// The steps of the reconcile that spawned `session`'s harness after `since` (it may have begun a little before:
    /// one woken by something else reads the new event too), as (step, opened, duration) from `since`, in the order
    /// they opened.
    fn spawning_reconcile(&self, session: &str, since: Instant) -> Vec<(String, Duration, Duration)> {
        let log = self.0.lock().unwrap();
        let mine = || log.closed.iter().filter(|c| c.session == session);
        let Some(spawn) = mine().find(|c| c.step == "op spawn" && c.opened >= since) else { return Vec::new() };
        let within = |c: &&Closed| c.opened <= spawn.opened && c.closed >= spawn.closed;
        let Some(reconcile) = mine().filter(|c| c.step == "reconcile").find(within) else { return Vec::new() };
        let mut steps: Vec<_> = mine()
            .filter(|c| c.opened >= reconcile.opened && c.closed <= reconcile.closed)
            .map(|c| {
                let at = c.opened.checked_duration_since(since).unwrap_or_default();
                (c.step.clone(), at, c.closed - c.opened)
            })
            .collect();
        steps.sort_by_key(|s| s.1);
        steps
    }

    /// No reconcile runs, and none opened or closed for `long`.
    fn quiet_for(&self, long: Duration) -> bool {
        let log = self.0.lock().unwrap();
        log.reconciling == 0 && log.last.is_none_or(|at| at.elapsed() >= long)
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

struct Server {
    dir: tempfile::TempDir,
}

impl Server {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().unwrap() }
    }
    fn socket(&self) -> PathBuf {
        self.dir.path().join("tmux.sock")
    }
    fn tmux(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(self.socket());
        c
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").output();
    }
}

/// Starts `n` sessions running `sleep` with one tmux call per 100 (commands chained with `;`).
fn start_sleepers(server: &Server, prefix: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let mut cmd = server.tmux();
        for (i, k) in chunk.iter().enumerate() {
            if i > 0 {
                cmd.arg(";");
            }
            cmd.args(["new-session", "-d", "-s", &format!("{prefix}{k}"), "--", "sleep", "3600"]);
        }
        assert!(cmd.status().unwrap().success());
    }
}

async fn bench_observe() {
    let server = Server::new();
    let n = support::bench_size(1000, 10);
    start_sleepers(&server, "loop-", n);
    let runner = TmuxRunner::new(Some(server.socket()));
    assert_eq!(runner.observe().await.unwrap().len(), n);
    let (mut raw, mut agent) = (Vec::new(), Vec::new());
    for _ in 0..support::bench_size(30, 3) {
        let t = Instant::now();
        // The same format the agent asks for: what is compared is the agent's own work around one tmux call.
        let format = worksession::node::tmux::observe_format("bench");
        let out = server.tmux().args(["list-panes", "-a", "-F", &format]).output().unwrap();
        assert!(out.status.success());
        raw.push(t.elapsed());
        let t = Instant::now();
        let obs = runner.observe().await.unwrap();
        agent.push(t.elapsed());
        assert_eq!(obs.len(), n);
    }
    let (raw, agent) = (median(raw), median(agent));
    println!(
        "(a) observe {n} live sessions: raw list-panes in the agent's format {} | agent observe {} | ratio {:.2}x (goal <= 1.5x)",
        ms(raw),
        ms(agent),
        agent.as_secs_f64() / raw.as_secs_f64()
    );
}

/// A harness that marks its start in `dir/<sessionId>` and stays alive; resumes succeed.
fn marker_profile_yaml(dir: &Path) -> String {
    let script = format!("echo started > {}/\"$0\"; exec sleep 3600", dir.display());
    format!(
        "binary: /bin/sh\n    interactive: ['-c', '{script}', '{{sessionId}}', '{{prompt}}']\n    resume: ['-c', '{script}', '{{sessionId}}', '{{prompt}}']"
    )
}

fn config(server: &Server, markers: &Path, probe: u32) -> Arc<Config> {
    let yaml = format!(
        // No settle window: (c) times the probe's verification; a resume's settle window would hold each
        // boot event at Delivering for its 60 s default (the marker harness keeps no transcript).
        "tmux:\n  socket: {}\ndefaults:\n  resumeProbeSeconds: {probe}\n  resumeSettleSeconds: 0\nharnesses:\n  marker:\n    {}\n",
        server.socket().display(),
        marker_profile_yaml(markers)
    );
    Arc::new(Config::parse(&yaml, Path::new("bench.yaml")).unwrap())
}

fn session(name: &str, node: &str, workdir: &Path) -> WorkSession {
    serde_json::from_value(json!({
        "apiVersion": "worksession.dev/v1alpha1", "kind": "WorkSession", "metadata": {"name": name},
        "spec": {"workItem": name, "nodeName": node, "harness": "marker", "workdir": workdir},
    }))
    .unwrap()
}

/// A WorkEvent as the bridge makes it: labelled for its session's node, which is what the agent watches (a hand-made
/// one waits for the labeler, which the benchmark does not run).
fn event(name: &str, session: &str, node: &str) -> WorkEvent {
    serde_json::from_value(json!({
        "apiVersion": "worksession.dev/v1alpha1", "kind": "WorkEvent",
        "metadata": {"name": name, "labels": {worksession::api::NODE_LABEL: node}},
        "spec": {"session": session, "prompt": "benchmark event"},
    }))
    .unwrap()
}

async fn wait_until<F: Fn() -> bool>(what: &str, limit: Duration, check: F) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// `tmux new-session` of the marker harness `script` as session `id`, as a person would type it.
fn raw_new_session(server: &Server, id: &str, workdir: &Path, script: &str) {
    let status = server
        .tmux()
        .args(["new-session", "-d", "-s", id, "-c"])
        .arg(workdir)
        .args(["--", "/bin/sh", "-c", script, id, "benchmark event"])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits until a harness wrote its `marker`, looked for every 100 µs by a thread of its own: a tokio timer ticks by
/// the millisecond, which would add up to two to whatever is timed (and more to a wait that begins before the harness
/// starts, the agent's, than to one that begins after its tmux call returned, the raw one's).
///
/// The looking begins when this is called, not when it is awaited: each figure is timed with it looking from the
/// moment its clock starts, so its cost (a thread waking ten thousand times a second, on two cores) weighs on the
/// agent and on the floor alike.
fn started(what: &str, marker: &Path) -> impl std::future::Future<Output = ()> + use<> {
    let (what, marker) = (what.to_string(), marker.to_path_buf());
    let looking = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !marker.exists() {
            assert!(Instant::now() < deadline, "timed out: {what}");
            std::thread::sleep(Duration::from_micros(100));
        }
    });
    async move { looking.await.unwrap() }
}

/// Sessions `names` on `node`, started by the agent, then their harnesses killed (dead panes, phase Pending).
async fn dead_sessions(client: &Client, ns: &str, node: &str, names: &[String], server: &Server, workdir: &Path) {
    let api: Api<WorkSession> = Api::namespaced(client.clone(), ns);
    for name in names {
        api.create(&PostParams::default(), &session(name, node, workdir)).await.unwrap();
    }
    support::eventually_within("sessions running", Duration::from_secs(300), || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        let running = list.iter().filter(|ws| ws.status.as_ref().and_then(|s| s.phase) == Some(Phase::Running)).count();
        (running == names.len()).then_some(())
    })
    .await;
    let out = server.tmux().args(["list-panes", "-a", "-F", "#{pane_pid}"]).output().unwrap();
    for pid in String::from_utf8(out.stdout).unwrap().lines() {
        Command::new("kill").arg("-9").arg(pid).status().unwrap();
    }
    support::eventually_within("sessions dead", Duration::from_secs(120), || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        let pending = list.iter().filter(|ws| ws.status.as_ref().and_then(|s| s.phase) == Some(Phase::Pending)).count();
        (pending == names.len()).then_some(())
    })
    .await;
}

fn spawn_agent(client: Client, node: &str, config: Arc<Config>) -> tokio::task::JoinHandle<()> {
    let options = worksession::agent::AgentOptions {
        config: tokio::sync::watch::channel(config).1,
        admin_addr: None,
        admin_listening: None,
        failpoint: None,
    };
    let store = worksession::store::kube::KubeStore::new(client.clone(), node);
    let node = node.to_string();
    tokio::spawn(async move { worksession::agent::run(client, node, store, options).await.unwrap() })
}

/// A namespace with the CRDs, a tmux server, and folders for harness markers and working directories.
struct Bench {
    ns: support::TestNamespace,
    server: Server,
    markers: tempfile::TempDir,
    workdir: tempfile::TempDir,
    node: String,
}

impl Bench {
    async fn new() -> Self {
        let ns = support::TestNamespace::new().await;
        support::install_crds(ns.client.clone()).await;
        let node = format!("bench-{}", ns.name);
        let (markers, workdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        Self { ns, server: Server::new(), markers, workdir, node }
    }
}

fn pane_pid(server: &Server, session: &str) -> String {
    let out = server.tmux().args(["list-panes", "-t", &format!("={session}:"), "-F", "#{pane_pid}"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn pane_dead(server: &Server, session: &str) -> bool {
    let out = server.tmux().args(["list-panes", "-t", &format!("={session}:"), "-F", "#{pane_dead}"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim() == "1"
}

/// The runner's spawn of the marker harness as session `id`, owned by the bench.
fn marker_spawn(id: &str, script: &str, workdir: &Path, clear: bool) -> worksession::node::tmux::Spawn {
    worksession::node::tmux::Spawn {
        session: id.into(),
        workdir: workdir.into(),
        binary: "/bin/sh".into(),
        argv: vec!["-c".into(), script.into(), id.into(), "benchmark event".into()],
        tag: format!("bench-{id}"),
        owner: "bench".into(),
        owner_name: "bench/raw".into(),
        env: Vec::new(),
        confine: None,
        clear,
    }
}

async fn bench_respawn(spans: &Spans) {
    let Bench { ns, server, markers, workdir, node } = Bench::new().await;
    let agent = spawn_agent(ns.client.clone(), &node, config(&server, markers.path(), 0));
    let names: Vec<String> = (0..support::bench_size(20, 3)).map(|i| format!("r{i}")).collect();
    dead_sessions(&ns.client, &ns.name, &node, &names, &server, workdir.path()).await;
    let api: Api<WorkSession> = ns.api();

    let (agent_times, timelines, agent_with_create) = respawns(spans, &ns, &node, &names, markers.path(), "e").await;
    // The same from no tmux session at all (an idle stop's, a restarted node's): nothing of the name to clear first.
    // One session of another kind stays, so the server does too.
    start_sleepers(&server, "keep-", 1);
    let out = server.tmux().args(["list-sessions", "-F", "#{session_name}"]).output().unwrap();
    for session in String::from_utf8(out.stdout).unwrap().lines().filter(|s| !s.starts_with("keep-")) {
        server.tmux().args(["kill-session", "-t", &format!("={session}")]).status().unwrap();
    }
    // The kill counts as a quick failure: the respawns wait until its back-off is over, as a wake after an idle stop
    // never waits for one.
    support::eventually_within("sessions not running, out of back-off", Duration::from_secs(120), || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        let now = k8s_openapi::jiff::Timestamp::now();
        let ready = |s: &worksession::api::WorkSessionStatus| {
            s.phase == Some(Phase::Pending) && s.next_retry_time.as_ref().is_none_or(|t| t.0 < now)
        };
        let pending = list.iter().filter(|ws| ws.status.as_ref().is_some_and(ready)).count();
        (pending == names.len()).then_some(())
    })
    .await;
    let (absent_times, _, _) = respawns(spans, &ns, &node, &names, markers.path(), "w").await;
    agent.abort();

    // The floor's API write: one merge patch of a WorkSession's annotations, the cheapest write there is.
    let mut write_times = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let patch = json!({"metadata": {"annotations": {"bench": i.to_string()}}});
        let t = Instant::now();
        api.patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
        write_times.push(t.elapsed());
    }
    // And the write the intent is: a server-side apply of the whole status, over the version read, by the agent's
    // field manager, changing one field (the phase, as an intent does).
    let mut apply_times = Vec::new();
    for name in &names {
        let ws = api.get(name).await.unwrap();
        let mut status = ws.status.clone().unwrap();
        status.phase = Some(Phase::Starting);
        let patch = json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkSession",
            "metadata": {"resourceVersion": ws.metadata.resource_version}, "status": status});
        let params = kube::api::PatchParams::apply("worksession-agent").force();
        let t = Instant::now();
        api.patch_status(name, &params, &kube::api::Patch::Apply(&patch)).await.unwrap();
        apply_times.push(t.elapsed());
    }

    let mut raw_times = Vec::new();
    let script = format!("echo started > {}/\"$0\"; exec sleep 3600", markers.path().display());
    for i in 0..support::bench_size(20, 3) {
        let id = format!("raw-{i}");
        let marker = markers.path().join(&id);
        let seen = started("raw harness started", &marker);
        let t = Instant::now();
        raw_new_session(&server, &id, workdir.path(), &script);
        seen.await;
        raw_times.push(t.elapsed());
        let target = format!("={id}:");
        server.tmux().args(["set-option", "-w", "-t", &target, "remain-on-exit", "on"]).status().unwrap();
        // Tagged as the runner's spawn below tags it: the runner clears only a session of its own owner.
        server
            .tmux()
            .args(["set-option", "-t", &target, worksession::node::tmux::OWNER_TAG, "bench"])
            .status()
            .unwrap();
    }
    // Both again as the agent meets them: each right after a WorkEvent was created (the API server and etcd still
    // busy with it, on the same two cores), timed from the create's return as the agent's respawn is.
    let events: Api<WorkEvent> = ns.api();
    let (mut situ_times, mut situ_applies) = (Vec::new(), Vec::new());
    for (i, name) in names.iter().enumerate() {
        let ws = api.get(name).await.unwrap();
        let mut status = ws.status.clone().unwrap();
        status.phase = Some(if i % 2 == 0 { Phase::Pending } else { Phase::Running });
        let patch = json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkSession",
            "metadata": {"resourceVersion": ws.metadata.resource_version}, "status": status});
        let params = kube::api::PatchParams::apply("worksession-agent").force();
        let id = format!("situ-{i}");
        let marker = markers.path().join(&id);
        events.create(&PostParams::default(), &event(&format!("{name}-floor"), name, &node)).await.unwrap();
        let seen = started("in-situ harness started", &marker);
        let t = Instant::now();
        api.patch_status(name, &params, &kube::api::Patch::Apply(&patch)).await.unwrap();
        situ_applies.push(t.elapsed());
        raw_new_session(&server, &id, workdir.path(), &script);
        seen.await;
        situ_times.push(t.elapsed());
    }
    // The tmux side alone: the runner's spawn over a dead session of that name (an owner-checked clearing first).
    let runner = TmuxRunner::new(Some(server.socket()));
    let mut runner_times = Vec::new();
    for i in 0..support::bench_size(20, 3) {
        let id = format!("raw-{i}");
        Command::new("kill").arg("-9").arg(pane_pid(&server, &id)).status().unwrap();
        wait_until("pane dead", Duration::from_secs(10), || pane_dead(&server, &id)).await;
        let marker = markers.path().join(&id);
        std::fs::remove_file(&marker).unwrap();
        let spawn = marker_spawn(&id, &script, workdir.path(), true);
        let seen = started("respawned harness started", &marker);
        let t = Instant::now();
        runner.spawn(&spawn).await.unwrap();
        seen.await;
        runner_times.push(t.elapsed());
    }
    println!(
        "(b) tmux side only, runner spawn over a dead session: {} vs raw new-session {} | ratio {:.2}x",
        ms(median(runner_times.clone())),
        ms(median(raw_times.clone())),
        median(runner_times).as_secs_f64() / median(raw_times.clone()).as_secs_f64()
    );
    // With no session of the name: the owner-checked clearing asked for, or left out (what the core decides then),
    // in turns.
    let (mut cleared, mut not) = (Vec::new(), Vec::new());
    for i in 0..support::bench_size(40, 4) {
        let id = format!("raw-{i}");
        let _ = server.tmux().args(["kill-session", "-t", &format!("={id}")]).output();
        let marker = markers.path().join(&id);
        let _ = std::fs::remove_file(&marker);
        let spawn = marker_spawn(&id, &script, workdir.path(), i % 2 == 0);
        let seen = started("spawned harness started", &marker);
        let t = Instant::now();
        runner.spawn(&spawn).await.unwrap();
        seen.await;
        if spawn.clear { cleared.push(t.elapsed()) } else { not.push(t.elapsed()) }
    }
    println!(
        "(b) tmux side only, runner spawn with no session of the name: {} clearing first | {} not",
        ms(median(cleared)),
        ms(median(not))
    );
    let (write, raw, agent, absent) =
        (median(write_times), median(raw_times.clone()), median(agent_times.clone()), median(absent_times));
    let floor = write + raw;
    println!(
        "(b) respawn, pending event on a dead session -> harness started: floor {} (API write {} + raw new-session {}) | agent {} from the event's existence | ratio {:.2}x (goal <= 1.5x)",
        ms(floor),
        ms(write),
        ms(raw),
        ms(agent),
        agent.as_secs_f64() / floor.as_secs_f64()
    );
    let applied = median(apply_times) + raw;
    println!(
        "(b) the same against the floor of the intent's own kind of write: floor {} (status apply {} + raw new-session {}) | ratio {:.2}x",
        ms(applied),
        ms(applied - raw),
        ms(raw),
        agent.as_secs_f64() / applied.as_secs_f64()
    );
    let situ = median(situ_times);
    println!(
        "(b) the same against that floor measured right after a WorkEvent's create: floor {} (status apply {}) | ratio {:.2}x",
        ms(situ),
        ms(median(situ_applies)),
        agent.as_secs_f64() / situ.as_secs_f64()
    );
    let with_create = median(agent_with_create);
    println!(
        "(b) the same from the create's call (the bench's own API write included): agent {} | ratio {:.2}x",
        ms(with_create),
        with_create.as_secs_f64() / floor.as_secs_f64()
    );
    println!(
        "(b) the same from no tmux session (an idle stop's): agent {} | ratio {:.2}x",
        ms(absent),
        absent.as_secs_f64() / floor.as_secs_f64()
    );
    print_timeline(&timelines);
}

/// For each session of `names` (dead or absent, `Pending`), a WorkEvent (named with `suffix`) until its harness has
/// started: the times from the event's existence, where each one's time went, and the times from the create's call.
async fn respawns(
    spans: &Spans,
    ns: &support::TestNamespace,
    node: &str,
    names: &[String],
    markers: &Path,
    suffix: &str,
) -> (Vec<Duration>, Vec<Vec<(String, Duration, Duration)>>, Vec<Duration>) {
    let (api, events): (Api<WorkSession>, Api<WorkEvent>) = (ns.api(), ns.api());
    let (mut times, mut timelines, mut with_create) = (Vec::new(), Vec::new(), Vec::new());
    for name in names {
        let id = api.get(name).await.unwrap().status.unwrap().harness_session_id.unwrap();
        let marker = markers.join(&id);
        let _ = std::fs::remove_file(&marker);
        let t = Instant::now();
        events.create(&PostParams::default(), &event(&format!("{name}-{suffix}"), name, node)).await.unwrap();
        let created = t.elapsed();
        started("respawned harness started", &marker).await;
        let started = t.elapsed();
        times.push(started - created);
        with_create.push(started);
        // The reconcile ends after the harness started (it records the event's and the session's status then).
        wait_until("the reconcile's end", Duration::from_secs(30), || !spans.spawning_reconcile(name, t).is_empty())
            .await;
        let mut timeline = vec![("create the WorkEvent (the bench's API write)".to_string(), Duration::ZERO, created)];
        timeline.extend(spans.spawning_reconcile(name, t));
        timeline.push(("harness started (its marker file)".to_string(), started, Duration::ZERO));
        timelines.push(timeline);
        // The next respawn begins with the agent idle, as each floor's step is measured on its own: this one's
        // delivery confirmed (the reconcile its own writes wake) and the agent quiet after it. Otherwise that
        // reconcile's writes (a Kubernetes Event, the WorkEvent's and the session's status) fall inside the next
        // respawn's window and weigh on the same two cores.
        let event = format!("{name}-{suffix}");
        support::eventually_within("the event delivered", Duration::from_secs(30), || async {
            let ev = events.get(&event).await.ok()?;
            (ev.status.and_then(|s| s.phase) == Some(PromptPhase::Delivered)).then_some(())
        })
        .await;
        wait_until("the agent quiet", Duration::from_secs(30), || spans.quiet_for(Duration::from_millis(100))).await;
    }
    (times, timelines, with_create)
}

/// Where one respawn's time goes: each step's median start (from the bench's create call; a reconcile that began
/// before it counts from 0) and median duration, over the respawns it was part of, in the order of those starts.
fn print_timeline(timelines: &[Vec<(String, Duration, Duration)>]) {
    let mut steps: Vec<(String, Duration, Duration, usize)> = Vec::new();
    let names: std::collections::BTreeSet<&String> = timelines.iter().flatten().map(|s| &s.0).collect();
    for name in names {
        // Each respawn's first step of that name.
        let seen: Vec<_> = timelines.iter().filter_map(|t| t.iter().find(|s| &s.0 == name)).collect();
        let at = median(seen.iter().map(|s| s.1).collect());
        steps.push((name.clone(), at, median(seen.iter().map(|s| s.2).collect()), seen.len()));
    }
    steps.sort_by_key(|s| s.1);
    println!(
        "(b) where one respawn's time goes (medians over {} respawns; the reconcile that spawned):",
        timelines.len()
    );
    for (step, at, took, n) in steps {
        println!(
            "      at {:>9}  took {:>9}  {step}{}",
            ms(at),
            ms(took),
            if n < timelines.len() { format!(" (in {n})") } else { String::new() }
        );
    }
}

async fn bench_verify() {
    let Bench { ns, server, markers, workdir, node } = Bench::new().await;
    let agent = spawn_agent(ns.client.clone(), &node, config(&server, markers.path(), 2));
    let names: Vec<String> = (0..support::bench_size(100, 5)).map(|i| format!("v{i}")).collect();
    dead_sessions(&ns.client, &ns.name, &node, &names, &server, workdir.path()).await;
    let events: Api<WorkEvent> = ns.api();
    let t = Instant::now();
    let node = node.as_str();
    let creates = names.iter().map(|name| {
        let events = events.clone();
        async move { events.create(&PostParams::default(), &event(&format!("{name}-e"), name, node)).await.unwrap() }
    });
    futures::future::join_all(creates).await;
    let created = t.elapsed();
    support::eventually_within("all delivered", Duration::from_secs(120), || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        let delivered =
            list.iter().filter(|e| e.status.as_ref().and_then(|s| s.phase) == Some(PromptPhase::Delivered)).count();
        (delivered == names.len()).then_some(())
    })
    .await;
    let total = t.elapsed();
    agent.abort();
    println!(
        "(c) {} dead sessions, one event each, 2 s probe: all verified and delivered after {:.2} s (events created in {:.2} s; goal < 4 s)",
        names.len(),
        total.as_secs_f64(),
        created.as_secs_f64()
    );
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches(" kB").parse().unwrap()
}

async fn bench_memory() {
    let Bench { ns, server, markers, workdir, node } = Bench::new().await;
    let config_path = markers.path().join("agent.yaml");
    let cfg = format!(
        "tmux:\n  socket: {}\ndefaults:\n  resumeProbeSeconds: 0\nharnesses:\n  marker:\n    {}\n",
        server.socket().display(),
        marker_profile_yaml(markers.path())
    );
    std::fs::write(&config_path, cfg).unwrap();
    let mut agent = Command::new(env!("CARGO_BIN_EXE_worksession"))
        .args(["agent", "--node", &node, "--admin-addr", "127.0.0.1:0", "--config"])
        .arg(&config_path)
        .env("KUBECONFIG", &support::control_plane().kubeconfig)
        .env("RUST_LOG", "warn")
        // As the chart runs it; `MALLOC_ARENA_MAX=0` measures glibc's own default.
        .env("MALLOC_ARENA_MAX", std::env::var("MALLOC_ARENA_MAX").unwrap_or_else(|_| "1".into()))
        .spawn()
        .unwrap();
    let api: Api<WorkSession> = ns.api();
    let t = Instant::now();
    let count = support::bench_size(1000, 10);
    for i in 0..count {
        api.create(&PostParams::default(), &session(&format!("m{i}"), &node, workdir.path())).await.unwrap();
    }
    support::eventually_within("every session running", Duration::from_secs(600), || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        let running = list.iter().filter(|ws| ws.status.as_ref().and_then(|s| s.phase) == Some(Phase::Running)).count();
        (running == count).then_some(())
    })
    .await;
    let settled = t.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await; // let a few tmux polls run over the full set
    let rss = rss_kib(agent.id());
    let live = TmuxRunner::new(Some(server.socket())).observe().await.unwrap().len();
    let _ = agent.kill();
    let _ = agent.wait();
    println!(
        "(d) agent resident memory with {count} WorkSessions ({live} live tmux sessions, all Running after {:.1} s): {:.1} MB (goal < 40 MB at 1,000)",
        settled.as_secs_f64(),
        rss as f64 / 1024.0
    );
}

#[tokio::main]
async fn main() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, filter::Targets};
    // The agent's debug spans, for (b)'s timeline; its log lines too when RUST_LOG asks for them.
    let chosen: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let want = |name: &str| chosen.is_empty() || chosen.iter().any(|c| c == name);
    let spans = Spans::default();
    let logs = std::env::var_os("RUST_LOG")
        .is_some()
        .then(|| tracing_subscriber::fmt::layer().with_filter(EnvFilter::from_default_env()));
    // Only for (b): the others would pay for spans nobody reads.
    let timed = want("respawn")
        .then(|| spans.clone().with_filter(Targets::new().with_target("worksession", tracing::Level::DEBUG)));
    tracing_subscriber::registry().with(timed).with(logs).init();
    if want("observe") {
        bench_observe().await;
    }
    if want("respawn") {
        bench_respawn(&spans).await;
    }
    if want("verify") {
        bench_verify().await;
    }
    if want("memory") {
        bench_memory().await;
    }
}
