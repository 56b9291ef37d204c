//! Storage, below the agent and the bridge: what the agent reads and writes ([`Store`]) and where the bridge writes
//! ([`Sink`]). Two backends implement both: [`kube`] (the API server) and [`local`] (a directory of manifests).
//! Only `main.rs` picks one; the agent and the bridge are generic over these traits.

pub mod caches;
pub mod kube;
pub mod local;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;

use crate::api::{WorkEvent, WorkEventStatus, WorkSession, WorkSessionStatus};
use crate::core::Notice;
use crate::words::ErrorCategory;

/// The agent's finalizer on each WorkSession it has started: its tmux session is stopped before the object goes.
pub const FINALIZER: &str = "worksession.dev/agent";

/// The namespace of an object whose manifest names none (local mode's, and what a driver assumes for it).
pub const DEFAULT_NAMESPACE: &str = "default";

/// A store call that failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The API server refused or could not be reached.
    #[error("kubernetes API: {0}")]
    Kube(#[from] ::kube::Error),
    /// A local file could not be read or written.
    #[error("{0}")]
    Local(String),
}

impl StoreError {
    /// A short stable category for metrics.
    pub fn category(&self) -> ErrorCategory {
        match self {
            StoreError::Kube(::kube::Error::Api(_)) => ErrorCategory::ApiRefused,
            StoreError::Kube(_) => ErrorCategory::ApiUnreachable,
            StoreError::Local(_) => ErrorCategory::LocalStore,
        }
    }
}

/// What the agent reads and writes.
pub trait Store: Send + Sync {
    /// Reads the sessions and events through `caches` (the agent's watches) from now on, where the backend can: the
    /// Kubernetes one does; local mode's reads are of files, and it ignores them.
    fn read_through(&self, caches: caches::Caches) {
        let _ = caches;
    }
    /// Every WorkSession the store holds (all namespaces), fresh.
    fn sessions(&self) -> impl Future<Output = Result<Vec<WorkSession>, StoreError>> + Send;
    /// The WorkSession at least as new as this store's own last write of it, or `None` when it is gone.
    fn session(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<WorkSession>, StoreError>> + Send;
    /// Every WorkEvent addressed to the session, at least as new as this store's own last writes of them.
    fn events(&self, namespace: &str, session: &str)
    -> impl Future<Output = Result<Vec<WorkEvent>, StoreError>> + Send;
    /// The same, read fresh: one made a moment ago by anyone included.
    fn events_fresh(
        &self,
        namespace: &str,
        session: &str,
    ) -> impl Future<Output = Result<Vec<WorkEvent>, StoreError>> + Send {
        self.events(namespace, session)
    }
    /// Records the session's status.
    fn write_status(
        &self,
        ws: &WorkSession,
        status: &WorkSessionStatus,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Records the intent of a spawn as the session's status, only over the very version `ws` was read at: where a
    /// controller may hand the session to another node meanwhile (Kubernetes), a session changed since refuses it
    /// (`Ok(false)`, nothing written), so no harness is started for a session that left the node between the read and
    /// the spawn.
    fn write_intent(
        &self,
        ws: &WorkSession,
        status: &WorkSessionStatus,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Records an event's status.
    fn write_event_status(
        &self,
        ev: &WorkEvent,
        status: &WorkEventStatus,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Deletes a WorkEvent whose retention ran out.
    fn delete_event(&self, ev: &WorkEvent) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Adds or removes the agent's finalizer; returns the updated session.
    fn set_finalizer(
        &self,
        ws: &WorkSession,
        present: bool,
    ) -> impl Future<Output = Result<WorkSession, StoreError>> + Send;
    /// Hands the session to `node`: `spec.nodeName` becomes `node` and [`crate::api::MOVE_ANNOTATION`] goes, only
    /// while the annotation still asks for `node`.
    fn move_to(&self, ws: &WorkSession, node: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Puts [`crate::api::USAGE_LIMITED_LABEL`] on the session (`on`) or takes it off.
    fn label_limited(&self, ws: &WorkSession, on: bool) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Reports a notice on the session (a Kubernetes Event); failures here are logged, not fatal.
    fn record(&self, ws: &WorkSession, notice: &Notice) -> impl Future<Output = ()> + Send;
    /// The Secret `name` of `namespace` as `key → value` (values as UTF-8), for a spawn's keys
    /// (`rooms.namespaceKeys`); `None` where there is none, or none the agent may read.
    fn namespace_keys(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<BTreeMap<String, String>>, StoreError>> + Send;
}

/// A store that says what changed, for the agent's driver where there are no watches (local mode).
pub trait Changes: Store {
    /// Resolves when the store may have changed (a file-system notification); never, when it cannot tell.
    fn changed(&self) -> impl Future<Output = ()> + Send;
    /// The names of the sessions whose manifest, status or events changed since the last call (the store's own
    /// writes included, as a watch reports them).
    fn touched(&self) -> Result<std::collections::HashSet<String>, StoreError>;
    /// Every WorkBudget, without a status: where there is no controller, the driver sums what the sessions spent.
    fn budgets(&self) -> Result<Vec<crate::api::WorkBudget>, StoreError>;
}

/// A write that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The API server is unreachable or refused for a reason a retry can fix: answer 503.
    #[error("API server unavailable: {0}")]
    Unavailable(String),
    /// The API server refused the object itself: answer 422.
    #[error("refused by the API server: {0}")]
    Rejected(String),
}

impl From<::kube::Error> for SinkError {
    fn from(e: ::kube::Error) -> Self {
        match &e {
            ::kube::Error::Api(s) if s.code == 400 || s.code == 422 => SinkError::Rejected(s.message.clone()),
            _ => SinkError::Unavailable(e.to_string()),
        }
    }
}

/// The bridge's edge to the object store (cloned into tasks beside a delivery).
pub trait Sink: Clone + Send + Sync + 'static {
    /// The WorkSession `namespace/name`; when missing, `create` is created (if given). `None`: missing and not
    /// created.
    fn session(
        &self,
        namespace: &str,
        name: &str,
        create: Option<WorkSession>,
    ) -> impl Future<Output = Result<Option<WorkSession>, SinkError>> + Send;
    /// How many WorkSessions of `namespace` carry the label `key=value`, as the store holds them now.
    fn count_sessions(
        &self,
        namespace: &str,
        label: (&str, &str),
    ) -> impl Future<Output = Result<usize, SinkError>> + Send;
    /// Creates `event`; `Ok(false)` when it already exists (a redelivery).
    fn create_event(&self, namespace: &str, event: &WorkEvent) -> impl Future<Output = Result<bool, SinkError>> + Send;
    /// Archives the WorkSession `namespace/name` (`archived`: `spec.archived` set, with [`crate::api::DELETE_AT_ANNOTATION`]
    /// at `delete_at` when given) or reopens it (both cleared), as GitHub said it happened `at`: a change older than
    /// the last one recorded ([`crate::api::LIFECYCLE_AT_ANNOTATION`]) is [`Archived::Outdated`] and writes nothing.
    fn archive(
        &self,
        namespace: &str,
        name: &str,
        archived: bool,
        delete_at: Option<k8s_openapi::jiff::Timestamp>,
        at: Option<k8s_openapi::jiff::Timestamp>,
    ) -> impl Future<Output = Result<Archived, SinkError>> + Send;
    /// The WorkSession of `namespace` that carries the label `key=value`, if one does.
    fn find_session(
        &self,
        namespace: &str,
        label: (&str, &str),
    ) -> impl Future<Output = Result<Option<WorkSession>, SinkError>> + Send;
    /// Sets (`Some`) or removes (`None`) labels and annotations of the WorkSession `namespace/name`; `Ok(false)` when
    /// it does not exist.
    fn mark_session(
        &self,
        namespace: &str,
        name: &str,
        labels: &[(&str, Option<&str>)],
        annotations: &[(&str, Option<&str>)],
    ) -> impl Future<Output = Result<bool, SinkError>> + Send;
    /// Rewrites the annotation `key` of the WorkSession `namespace/name` to what `change` makes of its value, read
    /// fresh and written over that very version (`None` from `change`: nothing to write); whether it was written.
    fn update_annotation<F>(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
        change: F,
    ) -> impl Future<Output = Result<bool, SinkError>> + Send
    where
        F: Fn(Option<&str>) -> Option<String> + Send + Sync;
    /// The WorkEvent `namespace/name`, fresh.
    fn event(&self, namespace: &str, name: &str) -> impl Future<Output = Result<Option<WorkEvent>, SinkError>> + Send;
    /// Replaces the prompt of `event`, only over the version it was read at and only while no delivery of it has
    /// begun; `Ok(false)` when either changed.
    fn set_prompt(&self, event: &WorkEvent, prompt: &str) -> impl Future<Output = Result<bool, SinkError>> + Send;
    /// Reports on the WorkSession `namespace/name` what the bridge did not do for it and why (a Kubernetes Event;
    /// local mode logs it only). Failures are logged, not returned.
    fn note(&self, namespace: &str, name: &str, reason: &str, message: &str) -> impl Future<Output = ()> + Send;
    /// Deletes every archived WorkSession whose [`crate::api::DELETE_AT_ANNOTATION`] time is before `now`; returns
    /// their `namespace/name`s.
    fn delete_due(
        &self,
        now: k8s_openapi::jiff::Timestamp,
    ) -> impl Future<Output = Result<Vec<String>, SinkError>> + Send;
    /// Whether the API server answers (for `/readyz`).
    fn ready(&self) -> impl Future<Output = bool> + Send;
}

/// What a lifecycle write ([`Sink::archive`]) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Archived {
    /// There is no such WorkSession.
    Missing,
    /// Archived or reopened.
    Written,
    /// A later closing or reopening was recorded already: nothing written.
    Outdated,
}

/// Whether a lifecycle change at `at` is older than the one `ws` records.
pub fn outdated(ws: &WorkSession, at: Option<k8s_openapi::jiff::Timestamp>) -> bool {
    use ::kube::ResourceExt;
    let recorded = ws.annotations().get(crate::api::LIFECYCLE_AT_ANNOTATION);
    let recorded = recorded.and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
    matches!((recorded, at), (Some(recorded), Some(at)) if at < recorded)
}

/// What `worksession get` lists of a store that is not the API server (local mode's directory): everything it holds,
/// and the files it skipped with why (on a cluster, `get` reads the API server with the user's own credentials).
pub trait Listing: Send + Sync {
    /// Every WorkSession.
    fn listed_sessions(&self) -> Result<Vec<WorkSession>, StoreError>;
    /// Every WorkEvent.
    fn listed_events(&self) -> Result<Vec<WorkEvent>, StoreError>;
    /// The files that hold no object it could read, with why.
    fn skipped(&self) -> Result<Vec<(PathBuf, String)>, StoreError>;
}
