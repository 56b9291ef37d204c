//! The node agent: observe (one shared tmux call) → decide (the pure [`crate::core`]) → execute → status, for
//! every WorkSession of its node. [`reconcile`] is one pass for one session, generic over the [`Store`] and
//! [`crate::node::tmux::Tmux`] edges; two drivers run it: [`controller`] on Kubernetes (kube-runtime, woken by watches,
//! requeues and the [`poll`]) and [`on_changes`] on a store that reports its changes (local mode).

pub mod controller;
pub mod discovery;
pub mod error;
pub mod evidence;
pub mod lease;
pub mod metrics;
pub mod on_changes;
pub mod poll;
pub mod push;
pub mod reconcile;
pub mod record;
pub mod refusals;
pub mod registries;
pub mod turns;
pub mod usage;
pub mod workspaces;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::config::Config;
use crate::node::tmux::TmuxRunner;
use crate::store::Store;
use crate::telemetry::Admin;
pub use controller::run;
pub use error::ReconcileError;
pub use metrics::AgentMetrics;
pub use on_changes::run_on_changes;
pub use reconcile::{Failpoint, Observer, Reconciler};

/// What ties the egress proxy to the sessions this agent holds (with egress; the cluster driver takes it).
pub struct EgressLink {
    /// The proxy's refusals of rooms' connections, to record as Events on their sessions.
    pub refusals: tokio::sync::mpsc::Receiver<refusals::Refused>,
    /// The driver's view of its sessions, where the proxy reads a session's own hosts once the view is filled.
    pub sessions: Arc<std::sync::OnceLock<kube::runtime::reflector::Store<crate::api::WorkSession>>>,
}

/// Where the sessions whose events are labelled for this node but that are on another go (namespace, name): the
/// cluster driver relabels those events for that node.
pub type LeftBehind = futures::channel::mpsc::UnboundedSender<(String, String)>;

/// How to run the agent.
pub struct AgentOptions {
    /// The config, kept current by a [`crate::config::Reloader`] (or fixed).
    pub config: watch::Receiver<Arc<Config>>,
    /// Where to serve `/metrics`, `/livez`, `/readyz` (`None`: not served).
    pub admin_addr: Option<SocketAddr>,
    /// Told the address the admin endpoints listen on once bound (port 0 in `admin_addr` picks a free one).
    pub admin_listening: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
    /// Where a reconcile stops forever, as if the agent were killed there (crash tests only; `None` otherwise).
    pub failpoint: Option<Failpoint>,
}

/// The reconciler both drivers share: metrics registered and served, tmux on the configured socket.
async fn reconciler<S: Store>(
    store: S,
    node: Option<String>,
    options: AgentOptions,
    ready: Arc<AtomicBool>,
) -> std::io::Result<Reconciler<S, TmuxRunner>> {
    let mut registry = Registry::with_prefix("worksession_agent");
    let metrics = AgentMetrics::register(&mut registry);
    if let Some(addr) = options.admin_addr {
        let bound = Admin::new(registry, ready).serve(addr).await?;
        if let Some(listening) = options.admin_listening {
            let _ = listening.send(bound);
        }
    }
    if let (Some(_), Some(home)) = (&options.config.borrow().rooms, &options.config.borrow().harness_home) {
        // With rooms the shared HOME of an install without them (old transcripts) is the agent's alone.
        use std::os::unix::fs::PermissionsExt;
        if home.is_dir() && std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o700)).is_err() {
            tracing::warn!(event = "rooms.home_open", home = %home.display(), "cannot close the shared HOME");
        }
    }
    let rooms = options.config.borrow().rooms.clone();
    let mut egress_link = None;
    // Told by the key gateways when a credential's limit resets.
    let limits = registries::Limits::default();
    if let Some((rooms, egress)) = rooms.and_then(|r| Some((r.clone(), r.egress?))) {
        // The rooms' one way out, on loopback of the network they share with the agent; as at the agent's start, like
        // the rest of `rooms` (the rooms' harnesses were held to its port when they started).
        use crate::node::egress::{Holding, Proxy, Seen};
        let (refused, forwarded) = (metrics.egress_refused.clone(), metrics.gateway_requests.clone());
        let (tell, told) = tokio::sync::mpsc::channel(refusals::QUEUE);
        let gateway_limits = limits.clone();
        let sessions = Arc::new(std::sync::OnceLock::new());
        egress_link = Some(EgressLink { refusals: told, sessions: sessions.clone() });
        let count = move |seen: Seen<'_>| match seen {
            Seen::Refused { refusal, host, owner } => {
                refused.get_or_create(&metrics::ReasonLabel { reason: refusal.as_str() }).inc();
                if let Some(owner) = owner {
                    let said = refusals::Refused { owner: owner.into(), host: host.into(), reason: refusal.as_str() };
                    let _ = tell.try_send(said);
                }
            }
            Seen::Forwarded(f) => {
                let namespace = f.owner.as_deref().and_then(|o| o.split_once('/')).map_or("", |(ns, _)| ns);
                let label = metrics::GatewayLabel { gateway: f.gateway.clone(), namespace: namespace.to_string() };
                forwarded.get_or_create(&label).inc();
                if let (Some(owner), Some(reset)) = (&f.owner, f.reset) {
                    gateway_limits.told(owner, reset, k8s_openapi::jiff::Timestamp::now());
                }
            }
        };
        // A session's own hosts, as the cluster driver's view holds its spec: no read of the API server per
        // connection, and a change applies to the next one.
        let holding = Box::new(move |owner: &str| {
            let Some(view) = sessions.get() else { return Holding::NotYetKnown };
            let Some((namespace, name)) = owner.split_once('/') else { return Holding::NotHere };
            match view.get(&kube::runtime::reflector::ObjectRef::new(name).within(namespace)) {
                Some(ws) => Holding::Here(ws.spec.egress.as_ref().map(|e| e.hosts.clone()).unwrap_or_default()),
                None => Holding::NotHere,
            }
        });
        let proxy = Proxy::new(egress, rooms)?.with_sessions(holding);
        let listener = proxy.bind().await?;
        // Each tunnel holds two descriptors: the soft limit raised to the hard one.
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let _ = setrlimit(Resource::Nofile, Rlimit { current: limit.maximum, ..limit });
        tokio::spawn(proxy.serve(listener, count));
    }
    let tmux = options.config.borrow().tmux.clone();
    let runner = TmuxRunner::new(tmux.socket).with_start_server(tmux.start_server);
    let (config, failpoint) = (options.config, options.failpoint);
    let rooms_at_start = config.borrow().rooms.clone();
    let observer = Observer::new(runner).counting(metrics.tmux_observations.clone());
    let fence_node = node.clone();
    Ok(Reconciler {
        store,
        observer,
        node,
        config,
        metrics,
        failpoint,
        registries: registries::Registries { limits, ..Default::default() },
        turns: Default::default(),
        rooms_at_start,
        rooms_reload_refused: Default::default(),
        fence: fence_node.is_some().then(lease::Fence::default),
        left_behind: None,
        egress: egress_link,
    })
}
