//! The node agent on Kubernetes: a kube-runtime controller over the WorkSessions of one node (a field selector
//! on `spec.nodeName`), woken by their changes, by changes of WorkEvents addressed to them, by its own requeues
//! (verification deadlines, back-off), and by a tmux poll that notices panes dying.

pub mod reconcile;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::ListParams;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::api::{WorkEvent, WorkSession};
use crate::config::Config;
use crate::store::KubeStore;
use crate::telemetry::{Admin, AgentMetrics};
use crate::tmux::{Liveness, TmuxRunner};
pub use reconcile::{Observer, ReconcileError, Reconciler};

/// How often tmux is polled for panes that died.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Reconciles running at once (each one at most per object); verification waits are requeues, not reconciles,
/// so this bounds memory and API load without making sessions wait on each other's probes.
pub const RECONCILE_CONCURRENCY: u16 = 64;
/// Requeue after a failed reconcile.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(5);

/// How to run the agent.
pub struct Options {
    /// This node's name.
    pub node: String,
    /// The config, kept current by a [`crate::config::Reloader`] (or fixed).
    pub config: watch::Receiver<Arc<Config>>,
    /// Where to serve `/metrics`, `/livez`, `/readyz` (`None`: not served).
    pub admin_addr: Option<SocketAddr>,
}

type Ctx = Reconciler<KubeStore, TmuxRunner>;

/// Runs the agent until the process is asked to stop (SIGTERM or Ctrl-C).
pub async fn run(client: Client, options: Options) -> std::io::Result<()> {
    let mut registry = Registry::with_prefix("worksession_agent");
    let metrics = AgentMetrics::register(&mut registry);
    let ready = Arc::new(AtomicBool::new(false));
    if let Some(addr) = options.admin_addr {
        Admin::new(registry, ready.clone()).serve(addr).await?;
    }
    let socket = options.config.borrow().tmux.socket.clone();
    let tmux = TmuxRunner::new(socket);
    let node = options.node.clone();
    let ctx = Arc::new(Reconciler {
        store: KubeStore::new(client.clone(), &node),
        observer: Observer::new(tmux),
        node: Some(node.clone()),
        config: options.config.clone(),
        metrics,
    });

    let sessions: Api<WorkSession> = Api::all(client.clone());
    let events: Api<WorkEvent> = Api::all(client);
    let selector = format!("spec.nodeName={node}");
    // Wait for the CRDs (and the API server) instead of exiting.
    while let Err(e) = sessions.list(&ListParams::default().fields(&selector).limit(1)).await {
        tracing::warn!(event = "agent.waiting", error = %e, "cannot list WorkSessions yet (are the CRDs installed?); retrying");
        tokio::time::sleep(ERROR_REQUEUE).await;
    }
    let mine = watcher::Config::default().fields(&selector);
    let (poke, poked) = futures::channel::mpsc::unbounded();
    let controller = Controller::new(sessions, mine)
        // Every WorkEvent, labelled or made by hand, wakes the session it names (only this node's are reconciled).
        .watches(events, watcher::Config::default(), |ev: WorkEvent| {
            ev.namespace().map(|ns| ObjectRef::new(&ev.spec.session).within(&ns))
        })
        .reconcile_on(poked)
        .with_config(controller::Config::default().concurrency(RECONCILE_CONCURRENCY))
        .shutdown_on_signal();
    let store = controller.store();

    tokio::spawn({
        let (ctx, ready) = (ctx.clone(), ready.clone());
        async move {
            // Wake sessions whose liveness changed since the last poll: dead panes are noticed within a second.
            let mut seen: HashMap<ObjectRef<WorkSession>, Liveness> = HashMap::new();
            let mut tick = tokio::time::interval(POLL_INTERVAL);
            loop {
                tick.tick().await;
                let obs = match ctx.observer.since(Instant::now()).await {
                    Ok(obs) => obs,
                    Err(e) => {
                        tracing::warn!(event = "tmux.observe_failed", error = %e, "cannot observe tmux");
                        continue;
                    }
                };
                if !ready.swap(true, Ordering::Relaxed) {
                    tracing::info!(event = "agent.ready", sessions = obs.len(), "API and tmux answer");
                }
                let config = ctx.config.borrow().clone();
                let mut now_seen = HashMap::with_capacity(seen.len());
                for ws in store.state() {
                    let key = ObjectRef::from_obj(&*ws);
                    let liveness = obs.liveness(&config.tmux_session(&ws.spec.work_item));
                    // A change since the last poll, or a pane that is not alive while status says Running (a
                    // respawn and a death can both fall between two polls).
                    let running = ws.status.as_ref().and_then(|s| s.phase) == Some(crate::api::Phase::Running);
                    if seen.get(&key) != Some(&liveness) || (running && liveness != Liveness::Alive) {
                        tracing::debug!(event = "tmux.liveness_changed", session = %key, ?liveness, "waking the session");
                        if poke.unbounded_send(key.clone()).is_err() {
                            return;
                        }
                    }
                    now_seen.insert(key, liveness);
                }
                seen = now_seen;
            }
        }
    });

    tracing::info!(event = "agent.started", node, "reconciling the WorkSessions of this node");
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "controller");
            }
        })
        .await;
    tracing::info!(event = "agent.stopped", "agent stopped");
    Ok(())
}

async fn reconcile(ws: Arc<WorkSession>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let (namespace, name) = (ws.namespace().unwrap_or_default(), ws.name_any());
    Ok(match ctx.reconcile(&namespace, &name).await? {
        Some(after) => Action::requeue(after.max(Duration::from_millis(10))),
        None => Action::await_change(),
    })
}

fn error_policy(ws: Arc<WorkSession>, error: &ReconcileError, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(event = "reconcile.failed", namespace = ws.namespace(), name = ws.name_any(), category = error.category(), error = %error, "reconcile failed; retrying");
    Action::requeue(ERROR_REQUEUE)
}

/// How often local mode looks at its directory and tmux (changes are picked up within this).
pub const LOCAL_INTERVAL: Duration = Duration::from_millis(250);

/// Runs the agent in local mode on `dir` until the process is asked to stop: every session in the directory is
/// reconciled every [`LOCAL_INTERVAL`] (a reconcile that changes nothing writes nothing).
pub async fn run_local(dir: std::path::PathBuf, config: watch::Receiver<Arc<Config>>) -> std::io::Result<()> {
    let store = crate::local::LocalStore::new(&dir)?;
    let socket = config.borrow().tmux.socket.clone();
    let mut registry = Registry::with_prefix("worksession_agent");
    let ctx = Reconciler {
        store,
        observer: Observer::new(TmuxRunner::new(socket)),
        node: None,
        config,
        metrics: AgentMetrics::register(&mut registry),
    };
    tracing::info!(event = "agent.started", dir = %dir.display(), "reconciling the WorkSessions of a directory");
    let mut tick = tokio::time::interval(LOCAL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = shutdown();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {}
        }
        let sessions = match ctx.store.sessions() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(event = "local.scan_failed", error = %e, "cannot read the directory");
                continue;
            }
        };
        for (_, ws) in sessions {
            let (namespace, name) = (ws.namespace().unwrap_or_default(), ws.name_any());
            if let Err(e) = ctx.reconcile(&namespace, &name).await {
                tracing::warn!(event = "reconcile.failed", name, category = e.category(), error = %e, "reconcile failed; retrying");
            }
        }
    }
    tracing::info!(event = "agent.stopped", "agent stopped");
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown() {
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
