//! Placement against the test control plane (`cargo test --test placement`): agents as processes naming different nodes
//! (each its own tmux socket, one shared folder as the shared volume: the stand-in's state and the harnesses' HOME),
//! `worksession controller` as a process, and Node objects the tests mark Ready or NotReady as a kubelet and the node
//! lifecycle controller would. Placement by capacity and selector; a node lost with its agent and its tmux server, its
//! session resumed on another node with its waiting event delivered once; a cut-off agent (SIGSTOP past the grace) that
//! stops its harness when it continues and delivers nothing.

mod standin;
mod support;

use std::process::Stdio;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use standin::TmuxServer;
use support::{TestNamespace, eventually, until};
use worksession::api::{Phase, PromptPhase, WorkEvent, WorkSession};
use worksession::node::tmux::{Liveness, Tmux};

/// Lease and grace short for a test, long enough for an API server under the whole suite's load: an agent fences
/// itself after 2 + 3 s without a renewal, the controller moves a session 2 + 6 s after it last saw one.
const LEASE_SECONDS: u64 = 2;
const GRACE_SECONDS: u64 = 6;

/// A process, killed when dropped.
struct Process(tokio::process::Child);

impl Process {
    fn start(args: &[String]) -> Self {
        Self::start_with(&support::control_plane().kubeconfig, args)
    }

    fn start_with(kubeconfig: &std::path::Path, args: &[String]) -> Self {
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_worksession"))
            .args(args)
            .env("RUST_LOG", "worksession=info")
            .env("KUBECONFIG", kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Self(child)
    }

    fn signal(&self, signal: &str) {
        let pid = self.0.id().expect("running").to_string();
        assert!(std::process::Command::new("kill").args([signal, &pid]).status().unwrap().success());
    }
}

/// A TCP link to the API server that the test can cut, as a partition would: every connection through it is dropped
/// and new ones are refused until it is mended.
struct Link {
    addr: std::net::SocketAddr,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    _task: tokio::task::JoinHandle<()>,
}

impl Link {
    async fn new() -> Self {
        let kubeconfig = std::fs::read_to_string(&support::control_plane().kubeconfig).unwrap();
        let upstream = kubeconfig.lines().find_map(|l| l.trim().strip_prefix("server: https://")).unwrap().to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let flag = open.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !flag.load(std::sync::atomic::Ordering::SeqCst) {
                    continue; // refused: dropped at once
                }
                let (upstream, flag) = (upstream.clone(), flag.clone());
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else { return };
                    let copy = tokio::io::copy_bidirectional(&mut client, &mut server);
                    let cut = async {
                        while flag.load(std::sync::atomic::Ordering::SeqCst) {
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        }
                    };
                    tokio::select! { _ = copy => {}, () = cut => {} }
                });
            }
        });
        Self { addr, open, _task: task }
    }

    /// The admin kubeconfig, its server this link.
    fn kubeconfig(&self, path: &std::path::Path) -> std::path::PathBuf {
        let kubeconfig = std::fs::read_to_string(&support::control_plane().kubeconfig).unwrap();
        let server = kubeconfig.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap().to_string();
        std::fs::write(path, kubeconfig.replace(&server, &format!("https://{}", self.addr))).unwrap();
        path.to_path_buf()
    }

    fn cut(&self) {
        self.open.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A node of the test: its Node object, its tmux server, its agent.
struct TestNode {
    name: String,
    tmux: TmuxServer,
    agent: Option<Process>,
}

struct Cluster {
    ns: TestNamespace,
    /// The shared volume: its stand-in state and workdir are every node's.
    shared: TmuxServer,
    nodes: Vec<TestNode>,
    _controller: Process,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Nodes `(suffix, labels, maxSessions)`, each Ready with a running agent, and the controller.
    async fn new(nodes: &[(&str, serde_json::Value, Option<u32>)]) -> Self {
        Self::with_yaml(nodes, |_, yaml| yaml).await
    }

    /// The same, with the agents' config YAML (before its `placement`) rewritten by `edit`.
    async fn with_yaml(
        nodes: &[(&str, serde_json::Value, Option<u32>)],
        edit: impl Fn(&TmuxServer, String) -> String,
    ) -> Self {
        Self::build(nodes, edit, true).await
    }

    /// Nodes that share nothing: each agent's harnesses keep their conversations in that node's own folder (a
    /// hostPath workspace), only the workdir is common.
    async fn unshared(nodes: &[(&str, serde_json::Value, Option<u32>)]) -> Self {
        Self::build(nodes, |_, yaml| yaml, false).await
    }

    async fn build(
        nodes: &[(&str, serde_json::Value, Option<u32>)],
        edit: impl Fn(&TmuxServer, String) -> String,
        shared_state: bool,
    ) -> Self {
        Self::build_with(nodes, edit, shared_state, None).await
    }

    /// Nodes whose first agent reaches the API server through `link` (a connection the test can cut).
    async fn with_link(nodes: &[(&str, serde_json::Value, Option<u32>)], link: &Link) -> Self {
        Self::build_with(nodes, |_, yaml| yaml, true, Some(link)).await
    }

    async fn build_with(
        nodes: &[(&str, serde_json::Value, Option<u32>)],
        edit: impl Fn(&TmuxServer, String) -> String,
        shared_state: bool,
        link: Option<&Link>,
    ) -> Self {
        let ns = TestNamespace::new().await;
        support::install_crds(ns.client.clone()).await;
        let shared = TmuxServer::new();
        let dir = tempfile::tempdir().unwrap();
        let mut made = Vec::new();
        for (suffix, labels, max) in nodes {
            let name = format!("{}-{suffix}", ns.name);
            let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
            let api: Api<Node> = Api::all(ns.client.clone());
            api.create(&PostParams::default(), &node).await.unwrap();
            let mut n = TestNode { name, tmux: TmuxServer::new(), agent: None };
            set_ready(&ns, &n.name, true).await;
            let yaml = edit(&shared, shared.agent_config_yaml()).replace(
                &format!("socket: {}", shared.socket().display()),
                &format!("socket: {}", n.tmux.socket().display()),
            );
            let yaml = if shared_state {
                yaml
            } else {
                yaml.replace(&shared.state().display().to_string(), &n.tmux.state().display().to_string())
            };
            let max = max.map(|m| format!("\n  maxSessions: {m}")).unwrap_or_default();
            let yaml = format!(
                "{yaml}\nplacement:\n  leaseNamespace: {}\n  leaseDurationSeconds: {LEASE_SECONDS}\n  nodeLostGraceSeconds: {GRACE_SECONDS}{max}\n",
                ns.name
            );
            let config = dir.path().join(format!("{suffix}.yaml"));
            std::fs::write(&config, yaml).unwrap();
            let kubeconfig = match link.filter(|_| made.is_empty()) {
                Some(link) => link.kubeconfig(&dir.path().join(format!("{suffix}.kubeconfig"))),
                None => support::control_plane().kubeconfig.clone(),
            };
            n.agent = Some(Process::start_with(
                &kubeconfig,
                &[
                    "agent".into(),
                    "--node".into(),
                    n.name.clone(),
                    "--config".into(),
                    config.display().to_string(),
                    "--admin-addr".into(),
                    "127.0.0.1:0".into(),
                ],
            ));
            made.push(n);
        }
        let controller = Process::start(&[
            "controller".into(),
            "--admin-addr=127.0.0.1:0".into(),
            format!("--lease-namespace={}", ns.name),
            format!("--node-lost-grace-seconds={GRACE_SECONDS}"),
            format!("--namespace={}", ns.name),
            // The nodes share one folder for the harnesses' HOME: a cordon may move their sessions.
            "--cordon-moves=true".into(),
        ]);
        Self { ns, shared, nodes: made, _controller: controller, dir }
    }

    fn node(&self, suffix: &str) -> &TestNode {
        let name = format!("{}-{suffix}", self.ns.name);
        self.nodes.iter().find(|n| n.name == name).unwrap()
    }

    fn sessions(&self) -> Api<WorkSession> {
        self.ns.api()
    }

    async fn create_session(&self, name: &str, spec: serde_json::Value) {
        let mut full = json!({"workItem": name, "harness": "standin", "workdir": self.shared.workdir()});
        full.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
        let ws: WorkSession = serde_json::from_value(json!({"metadata": {"name": name}, "spec": full})).unwrap();
        self.sessions().create(&PostParams::default(), &ws).await.unwrap();
    }

    async fn send(&self, session: &str, name: &str, prompt: &str) {
        let ev: WorkEvent =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"session": session, "prompt": prompt}}))
                .unwrap();
        self.ns.api::<WorkEvent>().create(&PostParams::default(), &ev).await.unwrap();
    }

    async fn await_session(&self, name: &str, what: &str, pred: impl Fn(&WorkSession) -> bool) -> WorkSession {
        let api = self.sessions();
        eventually(&format!("{name}: {what}"), || async { api.get(name).await.ok().filter(|ws| pred(ws)) }).await
    }

    async fn await_delivered(&self, event: &str) -> WorkEvent {
        let api: Api<WorkEvent> = self.ns.api();
        eventually(&format!("{event} Delivered"), || async {
            api.get(event)
                .await
                .ok()
                .filter(|e| e.status.as_ref().and_then(|s| s.phase) == Some(PromptPhase::Delivered))
        })
        .await
    }

    /// The first node goes: its agent and its tmux server (and harness) with it, and its Node turns NotReady.
    async fn lose_first_node(&mut self) {
        let mut agent = self.nodes[0].agent.take().unwrap();
        agent.0.kill().await.unwrap();
        self.nodes[0].tmux.kill_server();
        let harness_gone = self.nodes[0].tmux.runner.observe().await.map(|o| o.is_empty()).unwrap_or(true);
        assert!(harness_gone, "the first node's tmux server is gone, and its harness with it");
        set_ready(&self.ns, &self.nodes[0].name, false).await;
    }

    /// The tmux session the agents give `name`.
    fn tmux_session(&self, name: &str) -> String {
        format!("loop-{}_{name}", self.ns.name)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Nodes are cluster-wide: take them away with the test.
        for n in &self.nodes {
            let _ = support::tool("kubectl")
                .args(["delete", "node", &n.name, "--wait=false"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = &self.dir;
    }
}

async fn set_ready(ns: &TestNamespace, node: &str, ready: bool) {
    let api: Api<Node> = Api::all(ns.client.clone());
    let status = if ready { "True" } else { "Unknown" };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": status, "reason": "Test",
        "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
    api.patch_status(node, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

fn node_of(ws: &WorkSession) -> Option<String> {
    ws.spec.node_name.clone()
}

fn condition(ws: &WorkSession, type_: &str) -> Option<(String, String, String)> {
    let c = ws.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Running with its initial prompt known delivered: the harness made its conversation (a pane alive at the probe
/// may be a harness still starting, which a node lost then takes with it before it wrote anything).
fn first_words_in(ws: &WorkSession) -> bool {
    running(ws)
        && ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase)
            == Some(PromptPhase::Delivered)
}

fn running(ws: &WorkSession) -> bool {
    ws.status.as_ref().and_then(|s| s.phase) == Some(Phase::Running)
}

#[tokio::test]
async fn sessions_are_placed_by_capacity_and_selector_and_one_that_fits_nowhere_says_why() {
    let c = Cluster::new(&[
        ("a", json!({"pool": "x"}), Some(1)),
        ("b", json!({"pool": "x"}), Some(2)),
        ("c", json!({"pool": "y"}), None),
    ])
    .await;
    for name in ["one", "two", "three"] {
        c.create_session(name, json!({"nodeSelector": {"pool": "x"}})).await;
    }
    let mut on = Vec::new();
    for name in ["one", "two", "three"] {
        // The condition is written first, then the binding: both are awaited.
        let placed = |ws: &WorkSession| condition(ws, "Placed").is_some_and(|c| c.0 == "True") && node_of(ws).is_some();
        let ws = c.await_session(name, "Placed=True and bound", placed).await;
        let (_, reason, message) = condition(&ws, "Placed").unwrap();
        assert_eq!(reason, "Placed");
        assert_eq!(message, format!("placed on node {}", node_of(&ws).unwrap()));
        on.push(node_of(&ws).unwrap());
    }
    on.sort();
    let (a, b) = (c.node("a").name.clone(), c.node("b").name.clone());
    assert_eq!(on, [a.clone(), b.clone(), b.clone()], "a holds one, b two; c does not match the selector");

    c.create_session("four", json!({"nodeSelector": {"pool": "x"}})).await;
    let ws =
        c.await_session("four", "Placed=False", |ws| condition(ws, "Placed").is_some_and(|c| c.0 == "False")).await;
    let (_, reason, message) = condition(&ws, "Placed").unwrap();
    assert_eq!(reason, "NoNodeFits");
    assert!(message.contains(&format!("{a}: full (maxSessions)")), "{message}");
    assert!(message.contains("does not match nodeSelector"), "{message}");
    assert_eq!(node_of(&ws), None);

    // Placed, its harness runs there: the agent of the chosen node took it.
    c.create_session("other-pool", json!({"nodeSelector": {"pool": "y"}, "initialPrompt": "hello"})).await;
    let ws = c.await_session("other-pool", "running", running).await;
    assert_eq!(node_of(&ws).as_deref(), Some(c.node("c").name.as_str()));
    let observed = c.node("c").tmux.runner.observe().await.unwrap();
    assert_eq!(observed.liveness(&c.tmux_session("other-pool")), Liveness::Alive);
}

#[tokio::test]
async fn a_lost_nodes_session_resumes_on_another_node_and_its_waiting_event_is_delivered_once() {
    let mut c = Cluster::new(&[("a", json!({}), None), ("b", json!({}), None)]).await;
    let a = c.node("a").name.clone();
    c.create_session("item", json!({"nodeName": a, "initialPrompt": "the first words"})).await;
    let ws = c.await_session("item", "running on a, its first words in its conversation", first_words_in).await;
    let id = ws.status.as_ref().and_then(|s| s.harness_session_id.clone()).unwrap();

    c.lose_first_node().await;
    c.send("item", "item-1", "after the node was lost").await;

    let b = c.node("b").name.clone();
    let moved = |ws: &WorkSession| node_of(ws).as_deref() == Some(b.as_str()) && condition(ws, "NodeLost").is_some();
    let ws = c.await_session("item", "moved to b, NodeLost said", moved).await;
    let (status, reason, message) = condition(&ws, "NodeLost").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "MovedFromLostNode"), "{message}");
    assert!(message.contains(&a) && message.contains(&b), "{message}");
    let ev = c.await_delivered("item-1").await;
    let ws = c.await_session("item", "running on b", running).await;
    assert_eq!(ws.status.as_ref().and_then(|s| s.harness_session_id.clone()), Some(id.clone()), "the conversation");
    let (status, reason, _) = condition(&ws, "Resumed").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Resumed"));
    assert_eq!(ev.status.unwrap().harness_session_id.as_deref(), Some(id.as_str()));
    let delivered: Vec<_> = c.shared.prompts().into_iter().filter(|p| p.prompt == "after the node was lost").collect();
    assert_eq!(delivered.len(), 1, "delivered once: {delivered:?}");
    assert_eq!(delivered[0].conversation, id);
    let observed = c.node("b").tmux.runner.observe().await.unwrap();
    assert_eq!(observed.liveness(&c.tmux_session("item")), Liveness::Alive);

    // A burst a bridge acknowledged from a cache that still placed the session on a: labelled for the lost node,
    // whose agent (which would relabel them) is gone. The controller relabels them for b, whose agent delivers them.
    // Sent once the session is quiet on b (past the respawn's 10 s settle window, nothing left to look at again), so
    // that only a change of the events themselves can reach b's agent.
    let respawned = ws.status.as_ref().and_then(|s| s.last_respawn.as_ref()).map(|r| r.time.0).unwrap();
    let quiet = respawned.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(12)).unwrap();
    support::until("the session quiet on b", || async { k8s_openapi::jiff::Timestamp::now() > quiet }).await;
    let stale = worksession::api::node_label_value(&a);
    for i in 0..3 {
        let ev: WorkEvent = serde_json::from_value(json!({
            "metadata": {"name": format!("stale-{i}"), "labels": {
                worksession::api::SESSION_LABEL: "item", worksession::api::NODE_LABEL: stale}},
            "spec": {"session": "item", "prompt": format!("from a stale cache {i}")}
        }))
        .unwrap();
        c.ns.api::<WorkEvent>().create(&PostParams::default(), &ev).await.unwrap();
    }
    for i in 0..3 {
        c.await_delivered(&format!("stale-{i}")).await;
        let text = format!("from a stale cache {i}");
        let taken: Vec<_> = c.shared.prompts().into_iter().filter(|p| p.prompt == text).collect();
        assert_eq!(taken.len(), 1, "delivered once, on b: {taken:?}");
        assert_eq!(taken[0].conversation, id);
    }
}

/// A usage limit a session on one node was refused for parks its credential's sessions on another: a session made
/// there meanwhile waits with no refusal of its own (its agent learnt of the limit by the first session's label), and
/// both are answered once the limit is gone.
#[tokio::test]
async fn a_usage_limit_on_one_node_parks_its_credentials_sessions_on_another() {
    use kube::ResourceExt;
    let c = Cluster::new(&[("a", json!({}), None), ("b", json!({}), None)]).await;
    let (a, b) = (c.node("a").name.clone(), c.node("b").name.clone());
    let turns = |ws: &WorkSession| ws.status.as_ref().and_then(|s| s.usage.as_ref()).map_or(0, |u| u.turns);
    c.create_session("lim-a", json!({"nodeName": a, "harness": "standin-usage", "initialPrompt": "a: first"})).await;
    c.await_session("lim-a", "its first turn counted", |ws| turns(ws) == 1).await;
    let limited = c.shared.state().join("limited");
    std::fs::write(&limited, "").unwrap();
    c.send("lim-a", "lim-a-1", "a: second").await;
    let reason = |ws: &WorkSession| condition(ws, "Ready").map(|c| c.1).unwrap_or_default();
    let own_limit =
        |ws: &WorkSession| ws.status.as_ref().and_then(|s| s.usage.as_ref()).is_some_and(|u| u.limit.is_some());
    let labelled = |ws: &WorkSession| ws.labels().contains_key(worksession::api::USAGE_LIMITED_LABEL);
    c.await_session("lim-a", "refused, parked and labelled", |ws| reason(ws) == "UsageLimited" && labelled(ws)).await;

    // A session of the same credential on b, made now: parked by a's limit before it ever starts.
    c.create_session("lim-b", json!({"nodeName": b, "harness": "standin-usage", "initialPrompt": "b: first"})).await;
    let by_another = |ws: &WorkSession| {
        reason(ws) == "UsageLimited"
            && !own_limit(ws)
            && ws.status.as_ref().and_then(|s| s.phase) == Some(Phase::Parked)
    };
    let ws = c.await_session("lim-b", "parked by the limit on a, none of its own", by_another).await;
    let message = condition(&ws, "Ready").unwrap().2;
    assert!(message.starts_with("another session of its harness in this namespace"), "{message}");
    assert!(!c.shared.prompts().iter().any(|p| p.prompt == "b: first"), "nothing sent while parked");

    // The limit gone: each prompt is answered, and the label goes with a's limit.
    std::fs::remove_file(&limited).unwrap();
    c.await_delivered("lim-a-1").await;
    c.await_session("lim-b", "its first prompt answered", |ws| turns(ws) == 1).await;
    c.await_session("lim-a", "the limit and its label behind", |ws| !own_limit(ws) && !labelled(ws)).await;
}

#[tokio::test]
async fn a_cut_off_agent_stops_its_harness_when_it_continues_and_delivers_nothing() {
    let c = Cluster::new(&[("a", json!({}), None), ("b", json!({}), None)]).await;
    let (a, b) = (c.node("a").name.clone(), c.node("b").name.clone());
    c.create_session("item", json!({"nodeName": a, "initialPrompt": "the first words"})).await;
    c.await_session("item", "running on a, its first words in its conversation", first_words_in).await;
    let session = c.tmux_session("item");
    let old_harness = c.node("a").tmux.pane_pid(&session);

    // Cut off: the agent frozen past the grace while its node turns NotReady; the session moves to b.
    let frozen = c.node("a").agent.as_ref().unwrap();
    frozen.signal("-STOP");
    set_ready(&c.ns, &a, false).await;
    c.await_session("item", "moved to b", |ws| node_of(ws).as_deref() == Some(b.as_str())).await;
    c.send("item", "item-1", "while a was cut off").await;
    c.await_delivered("item-1").await;
    c.await_session("item", "running on b", running).await;

    // It continues: before anything else it stops its harness, and it never delivers the next event.
    frozen.signal("-CONT");
    support::until("the cut-off agent's harness stopped", || async {
        c.node("a").tmux.runner.observe().await.map(|o| o.liveness(&session) == Liveness::Absent).unwrap_or(true)
    })
    .await;
    c.send("item", "item-2", "after a came back").await;
    c.await_delivered("item-2").await;
    let prompts = c.shared.prompts();
    let from_a: Vec<_> = prompts.iter().filter(|p| p.pid == old_harness && p.prompt != "the first words").collect();
    assert!(from_a.is_empty(), "the cut-off node's harness took {from_a:?}");
    for text in ["while a was cut off", "after a came back"] {
        assert_eq!(prompts.iter().filter(|p| p.prompt == text).count(), 1, "{text}: delivered once, by b");
    }
    let observed = c.node("b").tmux.runner.observe().await.unwrap();
    assert_eq!(observed.liveness(&session), Liveness::Alive);
}

/// `worksession move NAME [--to NODE]`, as a person runs it.
fn move_cli(c: &Cluster, name: &str, to: Option<&str>) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_worksession"));
    cmd.args(["move", name, "-n", &c.ns.name]).env("KUBECONFIG", &support::control_plane().kubeconfig);
    if let Some(to) = to {
        cmd.args(["--to", to]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn a_move_on_purpose_hands_the_conversation_to_the_other_node_and_a_cordon_moves_it_back() {
    let c = Cluster::new(&[("a", json!({}), None), ("b", json!({}), None)]).await;
    let (a, b) = (c.node("a").name.clone(), c.node("b").name.clone());
    c.create_session("item", json!({"nodeName": a, "initialPrompt": "the first words"})).await;
    let ws = c.await_session("item", "running on a, its first words in its conversation", first_words_in).await;
    let id = ws.status.as_ref().and_then(|s| s.harness_session_id.clone()).unwrap();
    let session = c.tmux_session("item");

    // A node where no agent runs does not fit: the request waits, says why, and the harness runs on.
    move_cli(&c, "item", Some("nowhere"));
    let refused = |ws: &WorkSession| condition(ws, "Placed").is_some_and(|p| p.0 == "False");
    let ws = c.await_session("item", "the move refused", refused).await;
    let (_, reason, message) = condition(&ws, "Placed").unwrap();
    assert_eq!(reason, "NoNodeFits");
    assert!(message.contains("nowhere: no worksession agent runs there"), "{message}");
    assert_eq!(node_of(&ws).as_deref(), Some(a.as_str()));
    assert!(running(&ws));

    let said = move_cli(&c, "item", Some(&b));
    assert!(said.contains(&format!("a move to node {b} asked for")), "{said}");
    c.await_session("item", "on b", |ws| node_of(ws).as_deref() == Some(b.as_str())).await;
    let ws = c.sessions().get("item").await.unwrap();
    let annotations = ws.metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key(worksession::api::MOVE_ANNOTATION), "{annotations:?}");
    assert!(!annotations.contains_key(worksession::api::MOVE_REQUEST_ANNOTATION), "{annotations:?}");
    let on_a = c.node("a").tmux.runner.observe().await.unwrap();
    assert_eq!(on_a.liveness(&session), Liveness::Absent, "stopped on a before b took it");
    c.send("item", "item-1", "on the new node").await;
    let ev = c.await_delivered("item-1").await;
    assert_eq!(ev.status.unwrap().harness_session_id.as_deref(), Some(id.as_str()), "the same conversation");
    let ws = c.await_session("item", "running on b", running).await;
    assert_eq!(condition(&ws, "Resumed").map(|c| (c.0, c.1)), Some(("True".into(), "Resumed".into())));

    // b is cordoned: the controller asks for a move to a node that fits (a), and its agent hands it over.
    let nodes: Api<Node> = Api::all(c.ns.client.clone());
    let cordon = json!({"spec": {"unschedulable": true}});
    nodes.patch(&b, &PatchParams::default(), &Patch::Merge(&cordon)).await.unwrap();
    c.await_session("item", "back on a", |ws| node_of(ws).as_deref() == Some(a.as_str())).await;
    c.send("item", "item-2", "back on the first node").await;
    let ev = c.await_delivered("item-2").await;
    assert_eq!(ev.status.unwrap().harness_session_id.as_deref(), Some(id.as_str()));
    let prompts = c.shared.prompts();
    for text in ["on the new node", "back on the first node"] {
        let got: Vec<_> = prompts.iter().filter(|p| p.prompt == text).collect();
        assert_eq!(got.len(), 1, "{text}: once, in the one conversation: {got:?}");
        assert_eq!(got[0].conversation, id);
    }
}

/// Rooms on storage every node mounts (`rooms.shared`): a confined session moved to another node keeps its room (the
/// same uid, `HOME` and workdir), its conversation is resumed there confined, and the node it left stops every process
/// of that uid first (a child its harness left running outside tmux included), so nothing of the old node's harness
/// writes the room while the new node's runs.
#[tokio::test]
async fn a_confined_session_moves_with_its_room_on_shared_storage() {
    if rustix::process::getuid().as_raw() != 0 {
        return; // rooms take root's SETUID; the test command runs as root
    }
    // The workspace every node mounts: the rooms' owner files and homes, and the work item's workdir.
    let workspace = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(workspace.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (rooms, workdir) = (workspace.path().join(".rooms"), workspace.path().join("item"));
    std::fs::create_dir(&workdir).unwrap();
    let first_uid = 4_300_000;
    // Whatever happens, nothing of these uids outlives the test (a harness's detached child would otherwise live on).
    struct Reaped(u32);
    impl Drop for Reaped {
        fn drop(&mut self) {
            for uid in self.0..self.0 + 4 {
                let _ = std::process::Command::new("pkill").args(["-KILL", "-U", &uid.to_string()]).status();
            }
        }
    }
    let _reaped = Reaped(first_uid);
    let with_rooms = |shared: &TmuxServer, yaml: String| {
        // The stand-in keeps its conversations in its HOME, the room's.
        let own_state = format!("extraArgs: [--state, {}]\n", shared.state().display());
        let yaml = yaml.replace(&own_state, "extraArgs: []\n");
        let rooms =
            format!("rooms:\n  root: {}\n  firstUid: {first_uid}\n  count: 4\n  shared: true\n", rooms.display());
        format!("{yaml}{rooms}")
    };
    let c = Cluster::with_yaml(&[("a", json!({}), None), ("b", json!({}), None)], with_rooms).await;
    let (a, b) = (c.node("a").name.clone(), c.node("b").name.clone());
    let spec = json!({"nodeName": a, "initialPrompt": "the first words", "workdir": workdir});
    c.create_session("item", spec).await;
    let confined = |ws: &WorkSession| condition(ws, "Confined").is_some_and(|c| c.0 == "True") && running(ws);
    let ws = c.await_session("item", "running on a, confined", confined).await;
    let id = ws.status.as_ref().and_then(|s| s.harness_session_id.clone()).unwrap();
    let owner = format!("{}/item", c.ns.name);
    let uid_of = || -> u32 {
        let owners = std::fs::read_dir(rooms.join(".owners")).unwrap();
        let mut mine = owners
            .map(|e| e.unwrap().path())
            .filter(|p| std::fs::read_to_string(p).unwrap().lines().next() == Some(owner.as_str()));
        mine.next().expect("the session's owner file").file_name().unwrap().to_str().unwrap().parse().unwrap()
    };
    let uid = uid_of();
    let home = rooms.join(uid.to_string());
    let conversation = home.join(format!("conversations/{id}.jsonl"));
    until("the first words in the room's conversation", || async {
        std::fs::read_to_string(&conversation).is_ok_and(|t| t.contains("the first words"))
    })
    .await;
    // The harness leaves a child running outside its tmux session, as `setsid` or a daemonizing tool does.
    let left = workdir.join("left-behind.pid");
    let detach = format!("RUN setsid sleep 3600 >/dev/null 2>&1 </dev/null & echo $! > {}", left.display());
    c.send("item", "item-0", &detach).await;
    c.await_delivered("item-0").await;
    until("the left-behind child's pid", || async { std::fs::read_to_string(&left).is_ok_and(|p| p.ends_with('\n')) })
        .await;
    let child: u32 = std::fs::read_to_string(&left).unwrap().trim().parse().unwrap();
    // The uid a process runs as; `None` once it is gone (or dead, not yet reaped by its parent).
    let process_uid = |pid: u32| -> Option<u32> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let state = status.lines().find_map(|l| l.strip_prefix("State:"))?.trim();
        if state.starts_with('Z') || state.starts_with('X') {
            return None;
        }
        status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
    };
    assert_eq!(process_uid(child), Some(uid), "the child runs as the room's uid");
    let on_a = c.node("a").tmux.pane_pid(&c.tmux_session("item"));

    move_cli(&c, "item", Some(&b));
    c.await_session("item", "on b", |ws| node_of(ws).as_deref() == Some(b.as_str())).await;
    c.send("item", "item-1", "on the new node").await;
    let ev = c.await_delivered("item-1").await;
    assert_eq!(ev.status.unwrap().harness_session_id.as_deref(), Some(id.as_str()), "the same conversation");
    let ws = c.await_session("item", "running on b, confined", confined).await;
    assert_eq!(condition(&ws, "Resumed").map(|c| (c.0, c.1)), Some(("True".into(), "Resumed".into())));
    // The same room on b: its uid runs the harness there, and the move gave no other.
    assert_eq!(uid_of(), uid, "the room travelled with its session");
    let on_b = c.node("b").tmux.pane_pid(&c.tmux_session("item"));
    assert_eq!(process_uid(on_b), Some(uid), "b's harness runs as the room's uid");
    let absent = c.node("a").tmux.runner.observe().await.unwrap().liveness(&c.tmux_session("item"));
    assert_eq!(absent, Liveness::Absent, "a stopped its harness");
    // The room on a released: its harness and the child it left outside tmux are gone.
    assert_eq!(process_uid(on_a), None, "a's harness (pid {on_a}) is gone");
    assert_eq!(process_uid(child), None, "the child a's harness left (pid {child}) is gone");
    let events: Vec<String> = std::fs::read_to_string(&conversation).unwrap().lines().map(String::from).collect();
    assert!(events.iter().any(|e| e.contains("on the new node")), "the event in the same conversation");
}

/// The same move with the real Claude Code CLI offline (its HOME and the workdir on the shared folder): the
/// conversation the first node's CLI wrote is resumed by the second node's (`Resumed=True`), and the event after the
/// move lands in that same transcript.
#[tokio::test]
async fn a_move_with_the_real_claude_cli_resumes_the_same_transcript_on_the_new_node() {
    let c = Cluster::with_yaml(&[("a", json!({}), None), ("b", json!({}), None)], |shared, yaml| {
        // Offline, the CLI takes its command-line prompt some 12 s after it starts (measured): room to spare.
        let yaml = yaml.replace("confirmTimeoutSeconds: 15", "confirmTimeoutSeconds: 120");
        yaml + &support::claude::offline_profile(&shared.state(), &shared.workdir())
    })
    .await;
    let (a, b) = (c.node("a").name.clone(), c.node("b").name.clone());
    c.create_session("item", json!({"nodeName": a, "harness": "claude", "initialPrompt": "the first words"})).await;
    let delivered = |ws: &WorkSession| {
        ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase) == Some(PromptPhase::Delivered)
    };
    let ws = c.await_session("item", "its first words delivered on a", delivered).await;
    let id = ws.status.as_ref().and_then(|s| s.harness_session_id.clone()).unwrap();
    let transcript = || {
        let profile = worksession::harness::builtin()["claude"].conversation_path.clone().unwrap();
        let path = worksession::node::transcript::locate(
            &profile,
            &c.shared.state(),
            &c.shared.workdir().display().to_string(),
            &id,
        );
        std::fs::read_to_string(path).unwrap_or_default()
    };
    assert!(worksession::node::transcript::contains(&transcript(), "the first words"));

    move_cli(&c, "item", Some(&b));
    c.await_session("item", "on b", |ws| node_of(ws).as_deref() == Some(b.as_str())).await;
    c.send("item", "item-1", "after the move").await;
    let ev = c.await_delivered("item-1").await;
    let status = ev.status.unwrap();
    assert_eq!(
        (status.via, status.harness_session_id.as_deref()),
        (Some(worksession::api::Via::Resumed), Some(id.as_str()))
    );
    let ws =
        c.await_session("item", "resumed on b", |ws| condition(ws, "Resumed").is_some_and(|r| r.0 == "True")).await;
    assert_eq!(condition(&ws, "Resumed").unwrap().1, "Resumed");
    support::eventually("the event in the same transcript", || async {
        worksession::node::transcript::contains(&transcript(), "after the move").then_some(())
    })
    .await;
    let on_a = c.node("a").tmux.runner.observe().await.unwrap();
    assert_eq!(on_a.liveness(&c.tmux_session("item")), Liveness::Absent, "no second process on a");
}

/// Without shared storage the conversation stays on the lost node: the new node starts a fresh one, says why
/// (`Resumed=False`, `NodeLost`), keeps the old id, and delivers the waiting event to the fresh conversation.
#[tokio::test]
async fn without_shared_storage_a_lost_nodes_session_starts_fresh_elsewhere_and_says_why() {
    let mut c = Cluster::unshared(&[("a", json!({}), None), ("b", json!({}), None)]).await;
    let (a, b) = (c.node("a").name.clone(), c.node("b").name.clone());
    c.create_session("item", json!({"nodeName": a, "initialPrompt": "the first words"})).await;
    let ws = c.await_session("item", "running on a, its first words in its conversation", first_words_in).await;
    let old = ws.status.as_ref().and_then(|s| s.harness_session_id.clone()).unwrap();

    c.lose_first_node().await;
    c.send("item", "item-1", "after the node was lost").await;
    let ev = c.await_delivered("item-1").await;
    let ws =
        c.await_session("item", "running on b", |ws| running(ws) && node_of(ws).as_deref() == Some(b.as_str())).await;
    let (status, reason, message) = condition(&ws, "Resumed").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NodeLost"), "{message}");
    assert!(message.contains(&a), "names the lost node: {message}");
    let st = ws.status.unwrap();
    let fresh = st.harness_session_id.clone().unwrap();
    assert_ne!(fresh, old);
    assert!(st.previous_session_ids.contains(&old), "the way back is kept: {:?}", st.previous_session_ids);
    assert_eq!(ev.status.unwrap().harness_session_id.as_deref(), Some(fresh.as_str()));
    // Delivered once, with the handoff of what the lost conversation had taken in front of it.
    let on_b = standin::read_prompts(&c.node("b").tmux.state());
    let got: Vec<_> = on_b.iter().filter(|p| p.prompt.ends_with("\n\nafter the node was lost")).collect();
    assert_eq!(got.len(), 1, "delivered once: {on_b:?}");
    assert!(got[0].prompt.contains(&format!("conversation {old}")) && got[0].prompt.contains("[1] the first words"));
}

/// The fence itself, with the agent running and cut off from the API server (a partition, not a freeze): once its
/// Lease has not been renewed for its duration plus half the grace, it stops its harness by itself, before the
/// controller may move the session (its duration plus the whole grace after it last saw a renewal); the session then
/// moves and its event is delivered once, on the other node.
#[tokio::test]
async fn a_partitioned_agent_stops_its_harness_before_the_session_may_move() {
    let link = Link::new().await;
    let c = Cluster::with_link(&[("a", json!({}), None), ("b", json!({}), None)], &link).await;
    let (a, b) = (c.node("a").name.clone(), c.node("b").name.clone());
    c.create_session("item", json!({"nodeName": a, "initialPrompt": "the first words"})).await;
    c.await_session("item", "running on a, its first words in its conversation", first_words_in).await;
    let session = c.tmux_session("item");

    link.cut();
    let cut_at = std::time::Instant::now();
    set_ready(&c.ns, &a, false).await;
    support::until("the partitioned agent's own stop of its harness", || async {
        c.node("a").tmux.runner.observe().await.map(|o| o.liveness(&session) == Liveness::Absent).unwrap_or(true)
    })
    .await;
    // Stopped by the agent itself (it is still running, and cannot reach the API server), while the session is still
    // placed on a: nothing could have moved it yet.
    assert!(c.node("a").agent.as_ref().unwrap().0.id().is_some(), "the agent runs");
    let ws = c.sessions().get("item").await.unwrap();
    assert_eq!(
        node_of(&ws).as_deref(),
        Some(a.as_str()),
        "stopped before any move ({:?} after the cut)",
        cut_at.elapsed()
    );

    c.send("item", "item-1", "after the partition").await;
    c.await_session("item", "moved to b", |ws| node_of(ws).as_deref() == Some(b.as_str())).await;
    c.await_delivered("item-1").await;
    let prompts = c.shared.prompts();
    assert_eq!(prompts.iter().filter(|p| p.prompt == "after the partition").count(), 1, "delivered once");
}

/// Every write of the controller is from the version its decision read, or nothing: a decision from a cache that
/// still shows a session unbound after it was bound (a lagging watch, a second controller during a rollout) binds
/// nothing, where its conditions' write used to succeed over the newer version and hand the binding a version it never
/// decided from (a session bound twice, to two nodes).
#[tokio::test]
async fn a_binding_decided_from_a_stale_read_binds_nothing() {
    let ns = TestNamespace::new().await;
    support::install_crds(ns.client.clone()).await;
    let sessions: Api<WorkSession> = ns.api();
    let spec = json!({"workItem": "stale", "harness": "standin", "workdir": "/tmp"});
    let ws: WorkSession = serde_json::from_value(json!({"metadata": {"name": "stale"}, "spec": spec})).unwrap();
    sessions.create(&PostParams::default(), &ws).await.unwrap();
    let read = sessions.get("stale").await.unwrap();
    let bind = |node| worksession::controller::placement::controller::bind(&ns.client, &read, node, None);
    assert!(bind("node-a").await.unwrap().is_some(), "bound from the version read");
    assert_eq!(bind("node-b").await.unwrap(), None, "the same read again: the session left that version");
    let ws = sessions.get("stale").await.unwrap();
    assert_eq!(node_of(&ws).as_deref(), Some("node-a"));
    assert_eq!(condition(&ws, "Placed").map(|c| c.2), Some("placed on node node-a".into()), "no word of node-b");
}

/// An apply that leaves out a field its manager wrote before removes it: each of the controller's writes carries all
/// it wrote (its other conditions, its record of a move off a lost node), and the agent's never carries those, so a
/// later write of either keeps them.
#[tokio::test]
async fn the_controllers_status_survives_its_own_later_writes_and_the_agents() {
    use worksession::controller::placement::{Lost, controller::bind};
    use worksession::store::Store;
    let ns = TestNamespace::new().await;
    support::install_crds(ns.client.clone()).await;
    let sessions: Api<WorkSession> = ns.api();
    let spec = json!({"workItem": "kept", "harness": "standin", "workdir": "/tmp", "nodeName": "node-a"});
    let ws: WorkSession = serde_json::from_value(json!({"metadata": {"name": "kept"}, "spec": spec})).unwrap();
    sessions.create(&PostParams::default(), &ws).await.unwrap();
    let lost = ("node-a".to_string(), Lost::NodeNotReady);
    assert!(bind(&ns.client, &sessions.get("kept").await.unwrap(), "node-b", Some(&lost)).await.unwrap().is_some());
    let moved = |ws: &WorkSession| {
        let moved_from = ws.status.as_ref().and_then(|s| s.moved_from.as_ref()).map(|m| m.node.clone());
        (condition(ws, "NodeLost").map(|c| c.1), moved_from)
    };
    let said = (Some("MovedFromLostNode".to_string()), Some("node-a".to_string()));
    assert_eq!(moved(&sessions.get("kept").await.unwrap()), said);
    // A move on purpose later: the controller writes `Placed` alone.
    assert!(bind(&ns.client, &sessions.get("kept").await.unwrap(), "node-c", None).await.unwrap().is_some());
    let ws = sessions.get("kept").await.unwrap();
    assert_eq!(condition(&ws, "Placed").map(|c| c.2), Some("placed on node node-c".into()));
    assert_eq!(moved(&ws), said, "kept by the controller's own write");
    // The agent's status, with none of the controller's part in it.
    let store = worksession::store::kube::KubeStore::new(ns.client.clone(), "node-c");
    let mut status = ws.status.clone().unwrap();
    status.phase = Some(Phase::Starting);
    store.write_status(&ws, &status).await.unwrap();
    let ws = sessions.get("kept").await.unwrap();
    assert_eq!((ws.status.as_ref().and_then(|s| s.phase), moved(&ws)), (Some(Phase::Starting), said));
    let managers = ws
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.fields_v1.as_ref().is_some_and(|f| f.0.pointer("/f:status/f:movedFrom").is_some()));
    let managers: Vec<_> = managers.filter_map(|m| m.manager.clone()).collect();
    assert_eq!(managers, ["worksession-controller"], "the move's record is the controller's alone");
}

/// The agent records a spawn's intent only over the version of the session it read: a session bound to another node
/// between the agent's read and its spawn (a move landing while a returning agent reconciles) refuses the intent, and
/// no harness is started for it (the next read no longer shows it on this node).
#[tokio::test]
async fn an_agent_never_records_a_spawn_for_a_session_moved_since_it_read_it() {
    use worksession::store::Store;
    let ns = TestNamespace::new().await;
    support::install_crds(ns.client.clone()).await;
    let sessions: Api<WorkSession> = ns.api();
    let spec = json!({"workItem": "moved", "harness": "standin", "workdir": "/tmp", "nodeName": "node-a"});
    let ws: WorkSession = serde_json::from_value(json!({"metadata": {"name": "moved"}, "spec": spec})).unwrap();
    sessions.create(&PostParams::default(), &ws).await.unwrap();
    let read = sessions.get("moved").await.unwrap();
    // The controller moves it meanwhile.
    let bind = json!({"spec": {"nodeName": "node-b"}});
    sessions.patch("moved", &PatchParams::default(), &Patch::Merge(&bind)).await.unwrap();
    let store = worksession::store::kube::KubeStore::new(ns.client.clone(), "node-a");
    let intent = worksession::api::WorkSessionStatus { phase: Some(Phase::Starting), ..Default::default() };
    assert!(!store.write_intent(&read, &intent).await.unwrap(), "refused: the session changed since it was read");
    assert_eq!(sessions.get("moved").await.unwrap().status, None, "nothing recorded");
    let now = sessions.get("moved").await.unwrap();
    assert!(store.write_intent(&now, &intent).await.unwrap(), "over the version read, it is recorded");
}

/// An event labelled for a node its session has left (the bridge's cache older than a move, or a person's label) is
/// relabelled by that node's agent for the node the session is on now, whose agent delivers it: no agent's watch would
/// ever see it otherwise (the session idles, nothing else wakes it).
#[tokio::test]
async fn an_event_labelled_for_the_node_its_session_left_reaches_the_node_it_is_on() {
    let c = Cluster::new(&[("a", json!({}), None), ("b", json!({}), None)]).await;
    let (a, b) = (c.node("a").name.clone(), c.node("b").name.clone());
    c.create_session("away", json!({"nodeName": b, "initialPrompt": "hello"})).await;
    c.await_session("away", "running on b", running).await;
    let ev: WorkEvent = serde_json::from_value(json!({
        "metadata": {"name": "away-1", "labels": {worksession::api::NODE_LABEL: worksession::api::node_label_value(&a)}},
        "spec": {"session": "away", "prompt": "labelled for the node it is not on"},
    }))
    .unwrap();
    let events: Api<WorkEvent> = c.ns.api();
    events.create(&PostParams::default(), &ev).await.unwrap();
    let delivered = eventually("away-1 Delivered", || async {
        let ev = events.get("away-1").await.ok()?;
        (ev.status.as_ref().and_then(|s| s.phase) == Some(PromptPhase::Delivered)).then_some(ev)
    })
    .await;
    let label = delivered.metadata.labels.unwrap_or_default().remove(worksession::api::NODE_LABEL);
    assert_eq!(label, Some(worksession::api::node_label_value(&b)), "relabelled for b by a's agent");
    let taken: Vec<String> = c.shared.prompts().into_iter().map(|p| p.prompt).collect();
    assert_eq!(taken.iter().filter(|p| p.as_str() == "labelled for the node it is not on").count(), 1, "{taken:?}");
}
