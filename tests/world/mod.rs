//! A world for end-to-end tests: a namespace, a tmux server, an in-process agent for node `<namespace>` with
//! stand-in harness profiles, and an in-process labeler (as the chart runs one), which labels the events tests make
//! by hand so the agent's label-selected watch sees them.
#![allow(dead_code)] // each test binary uses a different part of this module

pub mod bridge;

use std::sync::Arc;

use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::standin::{Prompt, TmuxServer};
use crate::support::{TestNamespace, eventually};
use worksession::api::{Phase, PromptPhase, WorkEvent, WorkEventStatus, WorkSession, WorkSessionStatus};
use worksession::config::Config;

pub struct World {
    pub ns: TestNamespace,
    pub tmux: TmuxServer,
    pub node: String,
    pub config: Arc<Config>,
    agent: Option<tokio::task::JoinHandle<()>>,
    labeler: Option<tokio::task::JoinHandle<()>>,
}

impl World {
    /// A namespace, a tmux server, and an agent for node `<namespace>` with stand-in profiles.
    pub async fn new() -> Self {
        Self::with_config("").await
    }

    /// The same, with `extra` YAML appended to the agent config.
    pub async fn with_config(extra: &str) -> Self {
        Self::with_config_for(|_| extra.to_string()).await
    }

    /// The same, with YAML made for the world's tmux server (its folders) appended to the agent config.
    pub async fn with_config_for(extra: impl FnOnce(&TmuxServer) -> String) -> Self {
        Self::with_yaml(|tmux, yaml| yaml + &extra(tmux)).await
    }

    /// The same, with the agent config YAML rewritten by `edit`.
    pub async fn with_yaml(edit: impl FnOnce(&TmuxServer, String) -> String) -> Self {
        Self::with_tmux(TmuxServer::new(), edit).await
    }

    /// The same, on the tmux server `tmux` (made in a folder of the test's choosing).
    pub async fn with_tmux(tmux: TmuxServer, edit: impl FnOnce(&TmuxServer, String) -> String) -> Self {
        // The agent's logs, shown for a failing test.
        let filter =
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "worksession=debug".into());
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
        let ns = TestNamespace::new().await;
        crate::support::install_crds(ns.client.clone()).await;
        let yaml = with_lease_in(&ns.name, edit(&tmux, tmux.agent_config_yaml()));
        let config = Arc::new(Config::parse(&yaml, std::path::Path::new("test.yaml")).unwrap());
        let node = ns.name.clone();
        let client = ns.client.clone();
        let mut world = World { ns, tmux, node, config, agent: None, labeler: None };
        world.start_labeler_as(client);
        world.start_agent();
        world
    }

    /// (Re)starts the labeler with `client`'s identity, summing this world's WorkBudgets alone (every world runs one:
    /// several summing one budget from caches of different freshness would write it in turn).
    pub fn start_labeler_as(&mut self, client: kube::Client) {
        if let Some(labeler) = self.labeler.take() {
            labeler.abort();
        }
        let namespace = Some(self.ns.name.clone());
        self.labeler = Some(tokio::spawn(async move {
            worksession::controller::run(client, None, None, namespace).await.unwrap();
        }));
    }

    pub fn start_agent(&mut self) {
        self.start_agent_full(self.ns.client.clone(), None, None);
    }

    /// Restarts the agent serving its admin endpoints on a loopback port it picks itself (a port chosen here and
    /// bound there could be taken meanwhile by a parallel test); returns the address.
    pub async fn restart_agent_with_admin(&mut self) -> std::net::SocketAddr {
        self.stop_agent();
        let (listening, bound) = tokio::sync::oneshot::channel();
        self.start_agent_full(self.ns.client.clone(), Some(("127.0.0.1:0".parse().unwrap(), listening)), None);
        bound.await.expect("the agent's admin address")
    }

    /// Starts the agent with `client`'s identity (for least-privilege checks).
    pub fn start_agent_as(&mut self, client: kube::Client) {
        self.start_agent_full(client, None, None);
    }

    fn start_agent_full(
        &mut self,
        client: kube::Client,
        admin: Option<(std::net::SocketAddr, tokio::sync::oneshot::Sender<std::net::SocketAddr>)>,
        failpoint: Option<worksession::agent::Failpoint>,
    ) {
        let (admin_addr, admin_listening) = admin.unzip();
        let options = worksession::agent::AgentOptions {
            config: tokio::sync::watch::channel(self.config.clone()).1,
            admin_addr,
            admin_listening,
            failpoint,
        };
        let node = self.node.clone();
        let store = worksession::store::kube::KubeStore::new(client.clone(), &node);
        self.agent = Some(tokio::spawn(async move {
            worksession::agent::run(client, node, store, options).await.unwrap();
        }));
    }

    /// Restarts the agent with the agent config YAML rewritten by `edit`.
    pub fn restart_agent_with_yaml(&mut self, edit: impl FnOnce(String) -> String) {
        let yaml = with_lease_in(&self.ns.name, edit(self.tmux.agent_config_yaml()));
        self.config = Arc::new(Config::parse(&yaml, std::path::Path::new("test.yaml")).unwrap());
        self.stop_agent();
        self.start_agent();
    }

    pub fn stop_agent(&mut self) {
        if let Some(agent) = self.agent.take() {
            agent.abort();
        }
    }

    pub fn sessions(&self) -> Api<WorkSession> {
        self.ns.api()
    }

    pub fn events(&self) -> Api<WorkEvent> {
        self.ns.api()
    }

    pub async fn create_session(&self, name: &str, spec: serde_json::Value) {
        let mut full =
            json!({"workItem": name, "nodeName": self.node, "harness": "standin", "workdir": self.tmux.workdir()});
        full.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
        let ws: WorkSession = serde_json::from_value(json!({
            "apiVersion": "worksession.dev/v1alpha1", "kind": "WorkSession", "metadata": {"name": name}, "spec": full,
        }))
        .unwrap();
        self.sessions().create(&PostParams::default(), &ws).await.unwrap();
    }

    /// A WorkEvent as `kubectl create` would make it: no labels.
    pub async fn send(&self, session: &str, name: &str, prompt: &str) {
        let ev: WorkEvent = serde_json::from_value(json!({
            "apiVersion": "worksession.dev/v1alpha1", "kind": "WorkEvent", "metadata": {"name": name},
            "spec": {"session": session, "prompt": prompt},
        }))
        .unwrap();
        self.events().create(&PostParams::default(), &ev).await.unwrap();
    }

    pub async fn await_session(&self, name: &str, what: &str, pred: impl Fn(&WorkSession) -> bool) -> WorkSession {
        let api = self.sessions();
        eventually(&format!("{name}: {what}"), || async { api.get(name).await.ok().filter(|ws| pred(ws)) }).await
    }

    pub async fn await_phase(&self, name: &str, phase: Phase) -> WorkSession {
        self.await_session(name, &format!("phase {phase:?}"), |ws| phase_of(ws) == Some(phase)).await
    }

    pub async fn await_event(&self, name: &str, phase: PromptPhase) -> WorkEvent {
        let api = self.events();
        crate::support::poll(&format!("event {name} {phase:?}"), crate::support::WAIT, || async {
            let event = api.get(name).await.map_err(|e| e.to_string())?;
            match &event.status {
                Some(s) if s.phase == Some(phase) => Ok(event),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }

    /// Prints what a person attached to each tmux session would see, and each session's hook file: what a failing
    /// test's log cannot say about the harness.
    fn show_screens(&self) {
        for session in self.tmux_text(&["list-sessions", "-F", "#{session_name}"]).lines() {
            let screen = self.screen(session);
            eprintln!("--- the screen of {session}:\n{}", last_lines(&screen, 20));
            let name = session.rsplit_once('_').map_or(session, |(_, name)| name);
            let hooks = worksession::node::hook::file_of(&self.tmux.state(), &format!("{}/{name}", self.ns.name));
            if let Ok(said) = std::fs::read_to_string(hooks) {
                eprintln!("--- its hook file:\n{}", last_lines(&said, 6));
            }
        }
    }

    /// What a person attached to the tmux session `session` sees now (empty if it is gone).
    pub fn screen(&self, session: &str) -> String {
        self.tmux_text(&["capture-pane", "-p", "-t", &format!("={session}:")])
    }

    /// What the world's tmux server prints for `args`.
    fn tmux_text(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("tmux").arg("-S").arg(self.tmux.socket()).args(args).output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
    }

    /// The tmux session of the WorkSession `name` (`loop-<namespace>_<name>`).
    pub fn tmux_session(&self, name: &str) -> String {
        format!("loop-{}_{name}", self.ns.name)
    }

    /// Types `keys` into the tmux session `session`'s pane as a person attached to it would, then Enter.
    pub fn type_in(&self, session: &str, keys: &str) {
        let target = format!("={session}:");
        for args in [vec!["send-keys", "-t", &target, "-l", keys], vec!["send-keys", "-t", &target, "Enter"]] {
            let status =
                std::process::Command::new("tmux").arg("-S").arg(self.tmux.socket()).args(&args).status().unwrap();
            assert!(status.success(), "tmux {args:?}");
        }
    }

    /// The pid of the harness in the pane of the WorkSession `name`.
    pub fn harness_pid(&self, name: &str) -> u32 {
        self.tmux.pane_pid(&self.tmux_session(name))
    }

    /// Kills the harness process of the WorkSession `name`: the pane dies, as on a crash.
    pub async fn kill_harness(&self, name: &str) {
        self.tmux.kill_harness(&self.tmux_session(name)).await;
    }

    pub fn prompts(&self) -> Vec<Prompt> {
        self.tmux.prompts()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.show_screens();
        }
        self.stop_agent();
        if let Some(labeler) = self.labeler.take() {
            labeler.abort();
        }
    }
}

/// The last `n` lines of `text` that are not blank.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub fn phase_of(ws: &WorkSession) -> Option<Phase> {
    ws.status.as_ref().and_then(|s| s.phase)
}

pub fn condition(ws: &WorkSession, type_: &str) -> Option<(String, String, String)> {
    let c = ws.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

pub fn recorded_id(ws: &WorkSession) -> String {
    ws.status.as_ref().and_then(|s| s.harness_session_id.clone()).expect("a recorded session id")
}

impl crate::scenarios::Rig for World {
    async fn create_session(&self, name: &str, spec: serde_json::Value) {
        World::create_session(self, name, spec).await;
    }

    async fn send(&self, session: &str, name: &str, prompt: &str) {
        World::send(self, session, name, prompt).await;
    }

    async fn send_command(&self, session: &str, name: &str, prompt: &str) {
        let ev: WorkEvent = serde_json::from_value(json!({
            "apiVersion": "worksession.dev/v1alpha1", "kind": "WorkEvent", "metadata": {"name": name},
            "spec": {"session": session, "prompt": prompt, "command": true},
        }))
        .unwrap();
        self.events().create(&PostParams::default(), &ev).await.unwrap();
    }

    async fn session_status(&self, name: &str) -> WorkSessionStatus {
        let ws = self.sessions().get_opt(name).await.unwrap();
        ws.and_then(|ws| ws.status).unwrap_or_default()
    }

    async fn event_status(&self, name: &str) -> WorkEventStatus {
        let ev = self.events().get_opt(name).await.unwrap();
        ev.and_then(|ev| ev.status).unwrap_or_default()
    }

    async fn session_gone(&self, name: &str) -> bool {
        self.sessions().get_opt(name).await.unwrap().is_none()
    }

    async fn patch_spec(&self, name: &str, patch: serde_json::Value) {
        let patch = json!({"spec": patch});
        self.sessions()
            .patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
            .await
            .unwrap();
    }

    async fn delete_session(&self, name: &str) {
        self.sessions().delete(name, &Default::default()).await.unwrap();
    }

    async fn notes(&self, session: &str, reason: &str) -> Option<Vec<String>> {
        let events: Api<k8s_openapi::api::events::v1::Event> = self.ns.api();
        let list = events.list(&Default::default()).await.unwrap();
        let of = list.items.into_iter().filter(|e| {
            e.reason.as_deref() == Some(reason) && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(session)
        });
        Some(of.filter_map(|e| e.note).collect())
    }

    async fn apply_budget(&self, name: &str, spec: serde_json::Value) {
        let budget = json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkBudget", "metadata": {"name": name}, "spec": spec});
        let budgets: Api<worksession::api::WorkBudget> = self.ns.api();
        let params = kube::api::PatchParams::apply("worksession-tests").force();
        budgets.patch(name, &params, &kube::api::Patch::Apply(&budget)).await.unwrap();
    }

    fn restart_agent_with(&mut self, failpoint: Option<worksession::agent::Failpoint>) {
        self.stop_agent();
        self.start_agent_full(self.ns.client.clone(), None, failpoint);
    }

    fn tmux(&self) -> &TmuxServer {
        &self.tmux
    }

    fn namespace(&self) -> String {
        self.ns.name.clone()
    }

    fn node(&self) -> String {
        self.node.clone()
    }

    fn bridge(&self, yaml: &str) -> axum::Router {
        crate::support::bridge_router(yaml, worksession::store::kube::KubeSink::new(self.ns.client.clone()))
    }

    async fn answer(
        &self,
        session: &str,
        id: Option<&str>,
        decision: worksession::api::Decision,
        reason: Option<&str>,
    ) -> Result<String, String> {
        let sink = worksession::store::kube::KubeSink::new(self.ns.client.clone());
        let (id, reason, by) = (id.map(String::from), reason.map(String::from), Some("tester".to_string()));
        worksession::cli::approve::answer(&sink, (&self.ns.name, session), id, decision, reason, by).await
    }
}

/// The agent config with its Lease in the test's own namespace, as the chart puts it in the release's (where the
/// chart's Role allows it), unless the test placed it itself.
pub fn with_lease_in(namespace: &str, yaml: String) -> String {
    if yaml.contains("\nplacement:") || yaml.starts_with("placement:") {
        return yaml;
    }
    format!("{yaml}\nplacement:\n  leaseNamespace: {namespace}\n")
}
