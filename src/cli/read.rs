//! The read side for people: what `worksession get`, `peek` and the console read, with the user's own rights. The
//! API server through the user's kubeconfig (one list or get per read; for a reader that listens for changes,
//! `get -w` and the console's list, watched caches; Kubernetes Events and a session's WorkEvents read when a page
//! asks; the screen by `kubectl exec` into the agent pod) or a local directory (its manifests, its file-system
//! notifications, tmux on this machine). Read only: nothing here writes.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
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
            let ours = |ev: &WorkEvent| ev.spec.session == session && in_namespace(ev, namespace);
            Ok(self.work_events().await?.into_iter().filter(ours).collect())
        }
    }
    /// The WorkSession `namespace/name`, or why there is none to show.
    fn session(&self, namespace: &str, name: &str) -> impl Future<Output = Result<WorkSession, String>> + Send {
        async move {
            let ours = |ws: &WorkSession| ws.name_any() == name && in_namespace(ws, namespace);
            let found = self.sessions().await?.into_iter().find(ours);
            found.ok_or_else(|| format!("worksession {name:?} not found"))
        }
    }
    /// The files that hold no object it could read, with why (a directory's; none on a cluster); an error when the
    /// directory cannot be read.
    fn skipped(&self) -> Result<Vec<(PathBuf, String)>, String> {
        Ok(Vec::new())
    }
    /// Answers the permission request `id` of the WorkSession `namespace/name` as the reader's own user (the
    /// console's buttons; [`super::approve`]): what it answered, or why nothing was.
    fn answer(
        &self,
        namespace: &str,
        name: &str,
        id: String,
        decision: crate::api::Decision,
        reason: Option<String>,
    ) -> impl Future<Output = Result<String, String>> + Send {
        let _ = (namespace, name, id, decision, reason);
        async { Err("this reader cannot answer".to_string()) }
    }
    /// Why the changes stopped coming, while they do (a watch's error after it listed); `None` while they come.
    fn trouble(&self) -> Option<String> {
        None
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

/// Whether `object` is in `namespace` (a local manifest without one is in the default namespace, as `kubectl apply`
/// puts it).
pub fn in_namespace(object: &impl ResourceExt, namespace: &str) -> bool {
    object.namespace().as_deref().unwrap_or(crate::store::DEFAULT_NAMESPACE) == namespace
}

/// The API server, as the user's kubeconfig reaches it. A reader that asks for [`Source::changes`] (the console,
/// `get -w`) is served from watched caches, each watch started at its kind's first read; any other (`get`, `peek`)
/// reads with one call each, so it needs no right to watch.
pub struct Cluster {
    client: Client,
    namespace: Option<String>,
    agent_namespace: String,
    changes: watch::Sender<u64>,
    watching: std::sync::atomic::AtomicBool,
    sessions: OnceLock<Watched<WorkSession>>,
    events: OnceLock<Watched<WorkEvent>>,
}

/// A watched cache, and the watch's last error (a user who may not list every namespace sees why); the watch ends
/// with it.
struct Watched<K: kube::Resource<DynamicType = ()> + 'static> {
    cache: reflector::Store<K>,
    failing: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: kube::Resource<DynamicType = ()> + 'static> Drop for Watched<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long a screen may take (a `kubectl exec` that hangs is a screen not shown, its process killed).
pub const SCREEN_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a watched cache may take to list before a read says why it has nothing.
const LIST_TIMEOUT: Duration = Duration::from_secs(5);

impl Cluster {
    /// Reads the WorkSessions and WorkEvents of `namespace` (every namespace: `None`).
    pub fn new(client: Client, namespace: Option<String>) -> Self {
        let changes = watch::channel(0u64).0;
        let (sessions, events) = (OnceLock::new(), OnceLock::new());
        let agent_namespace = terminal::DEFAULT_AGENT_NAMESPACE.into();
        Self { client, namespace, agent_namespace, changes, watching: Default::default(), sessions, events }
    }

    /// The same, finding screens through the agent pods of the release in `namespace` (and nowhere else).
    pub fn with_agent_namespace(self, namespace: impl Into<String>) -> Self {
        Self { agent_namespace: namespace.into(), ..self }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// The objects of kind `K` in scope: from the watched cache once someone listens for changes (started at the
    /// first read), else by one list call.
    async fn read<K>(&self, cache: &OnceLock<Watched<K>>, what: &str) -> Result<Vec<K>, String>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        if !self.watching.load(std::sync::atomic::Ordering::Relaxed) {
            let list = self.api::<K>().list(&ListParams::default()).await;
            return list.map(|l| l.items).map_err(|e| format!("listing {what}: {e}"));
        }
        let watched = cache.get_or_init(|| watched(self.api(), &self.changes));
        let ready = tokio::time::timeout(LIST_TIMEOUT, watched.cache.wait_until_ready()).await;
        if !matches!(ready, Ok(Ok(()))) {
            let why = watched.failing.lock().unwrap_or_else(|p| p.into_inner()).clone();
            return Err(format!("listing {what}: {}", why.unwrap_or_else(|| "no answer yet".into())));
        }
        Ok(watched.cache.state().iter().map(|o| (**o).clone()).collect())
    }
}

/// A cache of what `api` reaches, kept by a watch that counts each change on `tx`.
fn watched<K>(api: Api<K>, tx: &watch::Sender<u64>) -> Watched<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (cache, writer) = reflector::store();
    let stream = reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    let tx = tx.clone();
    let failing = Arc::new(Mutex::new(None));
    let seen = failing.clone();
    let task = tokio::spawn(stream.for_each(move |event| {
        *seen.lock().unwrap_or_else(|p| p.into_inner()) = event.err().map(|e| e.to_string());
        tx.send_modify(|n| *n += 1);
        std::future::ready(())
    }));
    Watched { cache, failing, task }
}

impl Source for Cluster {
    async fn sessions(&self) -> Result<Vec<WorkSession>, String> {
        self.read(&self.sessions, "WorkSessions").await
    }

    async fn work_events(&self) -> Result<Vec<WorkEvent>, String> {
        self.read(&self.events, "WorkEvents").await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.watching.store(true, std::sync::atomic::Ordering::Relaxed);
        self.changes.subscribe()
    }

    async fn session(&self, namespace: &str, name: &str) -> Result<WorkSession, String> {
        let api: Api<WorkSession> = Api::namespaced(self.client.clone(), namespace);
        match api.get_opt(name).await {
            Ok(Some(ws)) => Ok(ws),
            Ok(None) => Err(format!("worksession {name:?} not found")),
            Err(e) => Err(format!("reading worksession {name:?}: {e}")),
        }
    }

    async fn events(&self, namespace: &str, session: &str) -> Result<Vec<WorkEvent>, String> {
        // One field-selected list in the session's namespace: a page needs no right to watch WorkEvents.
        let api: Api<WorkEvent> = Api::namespaced(self.client.clone(), namespace);
        let params = ListParams::default().fields(&format!("spec.session={session}"));
        api.list(&params).await.map(|l| l.items).map_err(|e| format!("listing WorkEvents: {e}"))
    }

    /// A watch's last error, until its next event (an API server gone, credentials expired): the cache holds what
    /// it last saw. A watch that comes back without a change says nothing, so this may outlast the trouble.
    fn trouble(&self) -> Option<String> {
        let sessions = self.sessions.get().map(|w| w.failing.clone());
        let events = self.events.get().map(|w| w.failing.clone());
        [sessions, events].into_iter().flatten().find_map(|f| f.lock().unwrap_or_else(|p| p.into_inner()).clone())
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

    async fn answer(
        &self,
        namespace: &str,
        name: &str,
        id: String,
        decision: crate::api::Decision,
        reason: Option<String>,
    ) -> Result<String, String> {
        let ws = self.session(namespace, name).await?;
        let by = super::approve::who_am_i(&self.client).await;
        let (event, what) = super::approve::answer_event(&ws, Some(id), decision, reason, by)?;
        let api: Api<WorkEvent> = Api::namespaced(self.client.clone(), namespace);
        match api.create(&kube::api::PostParams::default(), &event).await {
            Ok(_) => Ok(super::approve::said(&event, &what)),
            Err(kube::Error::Api(e)) if e.code == 409 => Err(super::approve::made_before(&event)),
            Err(e) => Err(format!("creating the answer: {e}")),
        }
    }

    async fn screen(&self, ws: &WorkSession, lines: usize, colours: bool) -> Result<String, String> {
        let namespace = &self.agent_namespace;
        let pod = terminal::agent_pod(&self.client, namespace, terminal::node_of(ws)?).await?;
        let args = terminal::capture_args(&terminal::session_of(ws, &Config::default()), lines, colours);
        output(terminal::kubectl_tmux(namespace, &pod, &args, false)).await
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

impl<L: Listing + Changes + 'static> Source for Local<L>
where
    Arc<L>: crate::store::Sink,
{
    async fn sessions(&self) -> Result<Vec<WorkSession>, String> {
        self.store.listed_sessions().map_err(|e| e.to_string())
    }

    async fn work_events(&self) -> Result<Vec<WorkEvent>, String> {
        self.store.listed_events().map_err(|e| e.to_string())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    fn skipped(&self) -> Result<Vec<(PathBuf, String)>, String> {
        self.store.skipped().map_err(|e| e.to_string())
    }

    async fn kube_events(&self, _namespace: &str, _session: &str) -> Result<Vec<KubeEvent>, String> {
        Ok(Vec::new()) // local mode records no Events: the agent's log is the record
    }

    async fn answer(
        &self,
        namespace: &str,
        name: &str,
        id: String,
        decision: crate::api::Decision,
        reason: Option<String>,
    ) -> Result<String, String> {
        let by = std::env::var("USER").ok().map(|u| format!("local:{u}"));
        super::approve::answer(&self.store, (namespace, name), Some(id), decision, reason, by).await
    }

    async fn screen(&self, ws: &WorkSession, lines: usize, colours: bool) -> Result<String, String> {
        let args = terminal::capture_args(&terminal::session_of(ws, &self.config), lines, colours);
        output(terminal::local_tmux(self.config.tmux.socket.as_deref(), &args)).await
    }
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
