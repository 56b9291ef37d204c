//! The read side for people: what `worksession get`, `peek` and the console read, with the user's own rights. The
//! API server (watched caches of the WorkSessions and WorkEvents in scope through the user's kubeconfig; Kubernetes
//! Events read when a session's page asks; the screen by `kubectl exec` into the agent pod) or a local directory (its
//! manifests, its file-system notifications, tmux on this machine). Read only: nothing here writes.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::api::ListParams;
use kube::runtime::reflector::{self, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;

use super::terminal;
use crate::api::{WorkEvent, WorkSession};
use crate::config::Config;
use crate::store::{Changes, Listing};

/// A Kubernetes Event about a session, as its page shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KubeEvent {
    /// When it last happened.
    pub time: String,
    /// `Normal` or `Warning`.
    pub kind: String,
    /// Its reason (`Respawned`, `ResumeFailed`, ...).
    pub reason: String,
    /// Its words.
    pub note: String,
    /// How many times.
    pub count: i32,
}

/// What people read.
pub trait Source: Send + Sync + 'static {
    /// Every WorkSession in scope, as last seen.
    fn sessions(&self) -> impl Future<Output = Result<Vec<WorkSession>, String>> + Send;
    /// Every WorkEvent in scope, as last seen.
    fn work_events(&self) -> impl Future<Output = Result<Vec<WorkEvent>, String>> + Send;
    /// A receiver that sees every change of either (a watch event, a file written) from now on, one per reader: a
    /// change that comes while a reader is busy is not lost.
    fn changes(&self) -> watch::Receiver<u64>;
    /// The WorkEvents of a session.
    fn events(&self, namespace: &str, session: &str) -> impl Future<Output = Result<Vec<WorkEvent>, String>> + Send {
        async move {
            let ours = |ev: &WorkEvent| {
                ev.spec.session == session
                    && ev.namespace().as_deref().unwrap_or(crate::store::DEFAULT_NAMESPACE) == namespace
            };
            Ok(self.work_events().await?.into_iter().filter(ours).collect())
        }
    }
    /// The files that hold no object it could read, with why (a directory's; none on a cluster).
    fn skipped(&self) -> Vec<(PathBuf, String)> {
        Vec::new()
    }
    /// The Kubernetes Events about a session (none in local mode).
    fn kube_events(
        &self,
        namespace: &str,
        session: &str,
    ) -> impl Future<Output = Result<Vec<KubeEvent>, String>> + Send;
    /// The last `lines` lines the session's pane shows now, with their colours (`capture-pane -e`) when `colours`.
    fn screen(
        &self,
        ws: &WorkSession,
        lines: usize,
        colours: bool,
    ) -> impl Future<Output = Result<String, String>> + Send;
}

/// The API server, as the user's kubeconfig reaches it.
pub struct Cluster {
    client: Client,
    sessions: Watched<WorkSession>,
    events: Watched<WorkEvent>,
    changes: watch::Receiver<u64>,
}

/// A watched cache, and the watch's last error (a user who may not list every namespace sees why).
struct Watched<K: kube::Resource<DynamicType = ()> + 'static> {
    cache: reflector::Store<K>,
    failing: Arc<Mutex<Option<String>>>,
}

/// How long a screen may take (a `kubectl exec` that hangs is a screen not shown, its process killed).
pub const SCREEN_TIMEOUT: Duration = Duration::from_secs(10);

impl Cluster {
    /// Watches the WorkSessions and WorkEvents of `namespace` (every namespace: `None`).
    pub fn new(client: Client, namespace: Option<String>) -> Self {
        let (tx, changes) = watch::channel(0u64);
        let sessions = watched(&client, namespace.as_deref(), &tx);
        let events = watched(&client, namespace.as_deref(), &tx);
        Self { client, sessions, events, changes }
    }

    /// The cache once listed, or why it is not.
    async fn listed<K>(watched: &Watched<K>, what: &str) -> Result<Vec<K>, String>
    where
        K: kube::Resource<DynamicType = ()> + Clone + 'static,
    {
        let cache = &watched.cache;
        let ready = tokio::time::timeout(Duration::from_secs(5), cache.wait_until_ready()).await;
        if !matches!(ready, Ok(Ok(()))) {
            let why = watched.failing.lock().unwrap_or_else(|p| p.into_inner()).clone();
            return Err(why.unwrap_or_else(|| format!("the API server has not listed the {what} yet")));
        }
        Ok(cache.state().iter().map(|o| (**o).clone()).collect())
    }
}

/// A cache of the objects of kind `K` in `namespace` (every one: `None`), kept by a watch that counts each change on
/// `tx`.
fn watched<K>(client: &Client, namespace: Option<&str>, tx: &watch::Sender<u64>) -> Watched<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let (cache, writer) = reflector::store();
    let stream = reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    let tx = tx.clone();
    let failing = Arc::new(Mutex::new(None));
    let seen = failing.clone();
    tokio::spawn(stream.for_each(move |event| {
        *seen.lock().unwrap_or_else(|p| p.into_inner()) = event.err().map(|e| e.to_string());
        tx.send_modify(|n| *n += 1);
        std::future::ready(())
    }));
    Watched { cache, failing }
}

impl Source for Cluster {
    async fn sessions(&self) -> Result<Vec<WorkSession>, String> {
        Self::listed(&self.sessions, "WorkSessions").await
    }

    async fn work_events(&self) -> Result<Vec<WorkEvent>, String> {
        Self::listed(&self.events, "WorkEvents").await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    async fn kube_events(&self, namespace: &str, session: &str) -> Result<Vec<KubeEvent>, String> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let params =
            ListParams::default().fields(&format!("involvedObject.kind=WorkSession,involvedObject.name={session}"));
        let list = api.list(&params).await.map_err(|e| format!("listing Events: {e}"))?;
        Ok(list
            .items
            .into_iter()
            .map(|e| {
                let time = e.last_timestamp.map(|t| t.0.to_string()).or_else(|| e.event_time.map(|t| t.0.to_string()));
                KubeEvent {
                    time: time.unwrap_or_default(),
                    kind: e.type_.unwrap_or_default(),
                    reason: e.reason.unwrap_or_default(),
                    note: e.message.unwrap_or_default(),
                    count: e.count.unwrap_or(1),
                }
            })
            .collect())
    }

    async fn screen(&self, ws: &WorkSession, lines: usize, colours: bool) -> Result<String, String> {
        let node = ws.spec.node_name.as_deref();
        let node =
            node.ok_or_else(|| format!("{} is not placed on a node yet (see its Placed condition)", ws.name_any()))?;
        let (namespace, pod) = terminal::agent_pod(&self.client, node).await?;
        let args = screen_args(&terminal::session_of(ws, &Config::default()), lines, colours);
        output(terminal::kubectl_tmux(&namespace, &pod, &args, false)).await
    }
}

/// A local directory of manifests (the store `main` opens on it, watching), and tmux on this machine.
pub struct Local<L> {
    store: Arc<L>,
    config: Config,
    changes: watch::Receiver<u64>,
}

impl<L: Listing + Changes + 'static> Local<L> {
    /// Reads `store`, with the agent config `config` (for the tmux socket and session names). One task waits for the
    /// store's notifications (it wakes one waiter) and tells every page.
    pub fn new(store: L, config: Config) -> Self {
        let store = Arc::new(store);
        let (tx, changes) = watch::channel(0u64);
        let waiting = store.clone();
        tokio::spawn(async move {
            loop {
                waiting.changed().await;
                tx.send_modify(|n| *n += 1);
                if tx.is_closed() {
                    break; // no console listens any more
                }
            }
        });
        Self { store, config, changes }
    }
}

impl<L: Listing + Changes + 'static> Source for Local<L> {
    async fn sessions(&self) -> Result<Vec<WorkSession>, String> {
        self.store.listed_sessions().map_err(|e| e.to_string())
    }

    async fn work_events(&self) -> Result<Vec<WorkEvent>, String> {
        self.store.listed_events().map_err(|e| e.to_string())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    fn skipped(&self) -> Vec<(PathBuf, String)> {
        self.store.skipped().unwrap_or_else(|e| vec![(PathBuf::from("."), e.to_string())])
    }

    async fn kube_events(&self, _namespace: &str, _session: &str) -> Result<Vec<KubeEvent>, String> {
        Ok(Vec::new()) // local mode records no Events: the agent's log is the record
    }

    async fn screen(&self, ws: &WorkSession, lines: usize, colours: bool) -> Result<String, String> {
        let args = screen_args(&terminal::session_of(ws, &self.config), lines, colours);
        output(terminal::local_tmux(self.config.tmux.socket.as_deref(), &args)).await
    }
}

fn screen_args(session: &str, lines: usize, colours: bool) -> Vec<String> {
    if colours { terminal::screen_args(session, lines) } else { terminal::peek_args(session, lines) }
}

/// A command's standard output, or its error words; killed when it takes over [`SCREEN_TIMEOUT`] or its page went.
async fn output(cmd: std::process::Command) -> Result<String, String> {
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let out = tokio::time::timeout(SCREEN_TIMEOUT, cmd.output())
        .await
        .map_err(|_| format!("no screen within {}s", SCREEN_TIMEOUT.as_secs()))?
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}
