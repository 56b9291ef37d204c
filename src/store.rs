//! The object store the agent acts on: WorkSessions and WorkEvents, their status, finalizers and reports.
//!
//! [`KubeStore`] is the Kubernetes one (status by server-side apply under the agent's field manager, reads that
//! are quorum reads, so a decision never starts from a status older than the agent's own last write); local mode
//! implements the same trait over a directory.

use std::future::Future;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use crate::api::{EventPhase, WorkEvent, WorkEventStatus, WorkSession, WorkSessionStatus};
use crate::core::{Notice, Severity};

/// The agent's finalizer on each WorkSession it has started: its tmux session is stopped before the object goes.
pub const FINALIZER: &str = "worksession.dev/agent";

/// A store call that failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The API server refused or could not be reached.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A local file could not be read or written.
    #[error("{0}")]
    Local(String),
}

impl StoreError {
    /// A short stable category for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            StoreError::Kube(kube::Error::Api(_)) => "api_refused",
            StoreError::Kube(_) => "api_unreachable",
            StoreError::Local(_) => "local_store",
        }
    }
}

/// What the agent reads and writes.
pub trait Store: Send + Sync {
    /// The WorkSession, fresh (not from a cache), or `None` when it is gone.
    fn session(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<WorkSession>, StoreError>> + Send;
    /// Every WorkEvent addressed to the session, fresh.
    fn events(&self, namespace: &str, session: &str)
    -> impl Future<Output = Result<Vec<WorkEvent>, StoreError>> + Send;
    /// Records the session's status.
    fn write_status(
        &self,
        ws: &WorkSession,
        status: &WorkSessionStatus,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
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
    /// Reports a notice on the session (a Kubernetes Event); failures here are logged, not fatal.
    fn record(&self, ws: &WorkSession, notice: &Notice) -> impl Future<Output = ()> + Send;
}

/// Undelivered events (`Pending` or `Delivering`, or no status yet), oldest first.
///
/// Creation time has one-second resolution, so ties are broken by the creation resourceVersion (an integer on
/// etcd-backed servers) and then the name.
pub fn undelivered(mut events: Vec<WorkEvent>) -> Vec<WorkEvent> {
    events.retain(|e| {
        let phase = e.status.as_ref().and_then(|s| s.phase);
        !matches!(phase, Some(EventPhase::Delivered | EventPhase::Failed))
    });
    let key = |e: &WorkEvent| {
        let created = e.metadata.creation_timestamp.clone().map(|t| t.0);
        let rv = e.metadata.resource_version.as_deref().and_then(|v| v.parse::<u64>().ok()).unwrap_or(u64::MAX);
        (created, rv, e.name_any())
    };
    events.sort_by_cached_key(key);
    events
}

/// The Kubernetes store.
#[derive(Clone)]
pub struct KubeStore {
    client: Client,
    manager: String,
    recorder: Recorder,
}

impl KubeStore {
    /// A store writing under the field manager `worksession-agent/<node>`.
    pub fn new(client: Client, node: &str) -> Self {
        let manager = format!("worksession-agent/{node}");
        let reporter = Reporter { controller: "worksession-agent".into(), instance: Some(node.to_string()) };
        Self { recorder: Recorder::new(client.clone(), reporter), client, manager }
    }

    fn apply(&self) -> PatchParams {
        PatchParams::apply(&self.manager).force()
    }
}

fn ns_of<K: ResourceExt>(obj: &K) -> String {
    obj.namespace().unwrap_or_default()
}

impl Store for KubeStore {
    async fn session(&self, namespace: &str, name: &str) -> Result<Option<WorkSession>, StoreError> {
        Ok(Api::<WorkSession>::namespaced(self.client.clone(), namespace).get_opt(name).await?)
    }

    async fn events(&self, namespace: &str, session: &str) -> Result<Vec<WorkEvent>, StoreError> {
        let api = Api::<WorkEvent>::namespaced(self.client.clone(), namespace);
        let list = api.list(&ListParams::default().fields(&format!("spec.session={session}"))).await?;
        Ok(list.items)
    }

    async fn write_status(&self, ws: &WorkSession, status: &WorkSessionStatus) -> Result<(), StoreError> {
        let api = Api::<WorkSession>::namespaced(self.client.clone(), &ns_of(ws));
        let patch = json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkSession", "status": status});
        api.patch_status(&ws.name_any(), &self.apply(), &Patch::Apply(&patch)).await?;
        Ok(())
    }

    async fn write_event_status(&self, ev: &WorkEvent, status: &WorkEventStatus) -> Result<(), StoreError> {
        let api = Api::<WorkEvent>::namespaced(self.client.clone(), &ns_of(ev));
        let patch = json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkEvent", "status": status});
        api.patch_status(&ev.name_any(), &self.apply(), &Patch::Apply(&patch)).await?;
        Ok(())
    }

    async fn delete_event(&self, ev: &WorkEvent) -> Result<(), StoreError> {
        let api = Api::<WorkEvent>::namespaced(self.client.clone(), &ns_of(ev));
        match api.delete(&ev.name_any(), &Default::default()).await {
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Ok(_) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn set_finalizer(&self, ws: &WorkSession, present: bool) -> Result<WorkSession, StoreError> {
        let api = Api::<WorkSession>::namespaced(self.client.clone(), &ns_of(ws));
        let mut finalizers: Vec<String> = ws.finalizers().iter().filter(|f| *f != FINALIZER).cloned().collect();
        if present {
            finalizers.push(FINALIZER.into());
        }
        // The resourceVersion makes this a compare-and-swap on the finalizer list.
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": ws.resource_version()}});
        Ok(api.patch(&ws.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?)
    }

    async fn record(&self, ws: &WorkSession, notice: &Notice) {
        let reference: ObjectReference = ws.object_ref(&());
        let mut note = notice.message.clone();
        if note.len() > 1000 {
            let mut cut = 1000;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
        }
        let event = Event {
            type_: match notice.severity {
                Severity::Normal => EventType::Normal,
                Severity::Warning => EventType::Warning,
            },
            reason: notice.reason.into(),
            note: Some(note),
            action: notice.log_event.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, reason = notice.reason, "could not record a Kubernetes Event");
        }
    }
}

/// Delivered or failed events finished `retention` ago or longer, and how long until the next one is.
pub fn expired(
    events: &[WorkEvent],
    now: k8s_openapi::jiff::Timestamp,
    retention: std::time::Duration,
) -> (Vec<&WorkEvent>, Option<std::time::Duration>) {
    use k8s_openapi::jiff::SignedDuration;
    let retention = SignedDuration::try_from(retention).unwrap_or(SignedDuration::MAX);
    let (mut due, mut next) = (Vec::new(), None::<std::time::Duration>);
    for e in events {
        let Some(st) = &e.status else { continue };
        let finished = match st.phase {
            Some(EventPhase::Delivered) => st.delivered_at.as_ref().map(|t| t.0),
            Some(EventPhase::Failed) => e.metadata.creation_timestamp.as_ref().map(|t| t.0),
            _ => None,
        };
        let Some(end) = finished.and_then(|t| t.checked_add(retention).ok()) else { continue };
        match std::time::Duration::try_from(end.duration_since(now)) {
            Ok(left) if !left.is_zero() => next = Some(next.map_or(left, |n| n.min(left))),
            _ => due.push(e),
        }
    }
    (due, next)
}

/// The status an [`crate::core::EventUpdate`] gives an event.
pub fn event_status(ev: &WorkEvent, update: &crate::core::EventUpdate, now: Time) -> WorkEventStatus {
    let old = ev.status.clone().unwrap_or_default();
    WorkEventStatus {
        phase: Some(update.phase),
        delivered_at: (update.phase == EventPhase::Delivered).then_some(now),
        via: update.via,
        harness_session_id: update.harness_session_id.clone().or(old.harness_session_id),
        attempts: old.attempts + u32::from(update.attempt),
        message: update.message.clone(),
    }
}
