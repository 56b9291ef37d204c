//! A world for end-to-end tests: a namespace, a tmux server, and an in-process agent for node `<namespace>` with
//! stand-in harness profiles.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::sync::Arc;
use std::time::Duration;

use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::standin::{Prompt, TmuxServer, standin_binary};
use crate::support::{TestNamespace, eventually};
use worksession::api::{EventPhase, Phase, WorkEvent, WorkSession};
use worksession::config::Config;
use worksession::tmux::Liveness;

pub const WAIT: Duration = Duration::from_secs(45);

pub struct World {
    pub ns: TestNamespace,
    pub tmux: TmuxServer,
    pub node: String,
    pub config: Arc<Config>,
    agent: Option<tokio::task::JoinHandle<()>>,
}

impl World {
    /// A namespace, a tmux server, and an agent for node `<namespace>` with stand-in profiles.
    pub async fn new() -> Self {
        Self::with_config("").await
    }

    /// The same, with `extra` YAML appended to the agent config.
    pub async fn with_config(extra: &str) -> Self {
        // The agent's logs, shown for a failing test.
        let filter =
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "worksession=debug".into());
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
        let ns = TestNamespace::new().await;
        crate::support::install_crds(ns.client.clone()).await;
        let tmux = TmuxServer::new();
        let profile = |flags: &str| {
            format!(
                "binary: {bin}\n    extraArgs: [--state, {state}{flags}]\n    interactive: [--session-id, '{{sessionId}}', '{{extraArgs}}', '--', '{{prompt}}']\n    resume: [--resume, '{{sessionId}}', '{{extraArgs}}', '--', '{{prompt}}']\n    resumeFailedPattern: No conversation found",
                bin = standin_binary().display(),
                state = tmux.state().display(),
            )
        };
        let yaml = format!(
            "tmux:\n  socket: {sock}\ndefaults:\n  resumeProbeSeconds: 1\n  resumeSettleSeconds: 30\nharnesses:\n  standin:\n    {a}\n  standin-slow:\n    {b}\n  standin-crash:\n    {c}\n",
            sock = tmux.socket().display(),
            a = profile(""),
            b = profile(", --resume-fail-delay, '3'"),
            c = profile(", --crash-after, '0.3'"),
        ) + extra;
        let config = Arc::new(Config::parse(&yaml, std::path::Path::new("test.yaml")).unwrap());
        let node = ns.name.clone();
        let mut world = World { ns, tmux, node, config, agent: None };
        world.start_agent();
        world
    }

    pub fn start_agent(&mut self) {
        self.start_agent_with_admin(None);
    }

    pub fn start_agent_with_admin(&mut self, admin_addr: Option<std::net::SocketAddr>) {
        self.start_agent_with(self.ns.client.clone(), admin_addr);
    }

    /// Starts the agent with `client`'s identity (for least-privilege checks).
    pub fn start_agent_as(&mut self, client: kube::Client) {
        self.start_agent_with(client, None);
    }

    fn start_agent_with(&mut self, client: kube::Client, admin_addr: Option<std::net::SocketAddr>) {
        let options = worksession::agent::Options {
            node: self.node.clone(),
            config: tokio::sync::watch::channel(self.config.clone()).1,
            admin_addr,
        };
        self.agent = Some(tokio::spawn(async move {
            worksession::agent::run(client, options).await.unwrap();
        }));
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
        eventually(&format!("{name}: {what}"), WAIT, || async { api.get(name).await.ok().filter(|ws| pred(ws)) }).await
    }

    pub async fn await_phase(&self, name: &str, phase: Phase) -> WorkSession {
        self.await_session(name, &format!("phase {phase:?}"), |ws| phase_of(ws) == Some(phase)).await
    }

    pub async fn await_event(&self, name: &str, phase: EventPhase) -> WorkEvent {
        let api = self.events();
        eventually(&format!("event {name} {phase:?}"), WAIT, || async {
            api.get(name).await.ok().filter(|e| e.status.as_ref().and_then(|s| s.phase) == Some(phase))
        })
        .await
    }

    /// The pid of the harness in the pane of `work_item`.
    pub fn harness_pid(&self, work_item: &str) -> u32 {
        let out = std::process::Command::new("tmux")
            .arg("-S")
            .arg(self.tmux.socket())
            .args(["list-panes", "-t", &format!("=loop-{work_item}:"), "-F", "#{pane_pid}"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().parse().expect("a pane pid")
    }

    /// Kills the harness process of `work_item`: the pane dies, as on a crash.
    pub async fn kill_harness(&self, work_item: &str) {
        let pid = self.harness_pid(work_item);
        std::process::Command::new("kill").arg("-9").arg(pid.to_string()).status().unwrap();
        self.tmux.await_liveness(&format!("loop-{work_item}"), Liveness::Dead).await;
    }

    pub fn prompts(&self) -> Vec<Prompt> {
        self.tmux.prompts()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop_agent();
    }
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
