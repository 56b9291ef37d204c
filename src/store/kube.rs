//! The Kubernetes backend of [`Store`] and [`Sink`]: status by server-side apply under the agent's field manager,
//! reads from the agent's watches where they are as new as the agent's own writes and quorum reads where not ([`Caches`]:
//! a decision never starts from a status older than the agent's own last write), and creates under the bridge's
//! field manager.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use super::caches::{Caches, EventWrite};
use super::{Archived, FINALIZER, Sink, SinkError, Store, StoreError};
use crate::api::{
    DELETE_AT_ANNOTATION, LIFECYCLE_AT_ANNOTATION, WorkEvent, WorkEventStatus, WorkSession, WorkSessionStatus,
};
use crate::core::{Notice, Severity};

/// The Kubernetes store.
#[derive(Clone)]
pub struct KubeStore {
    client: Client,
    manager: String,
    recorder: Recorder,
    /// The agent's watches, once it has them: until then every read is fresh.
    caches: Arc<std::sync::OnceLock<Caches>>,
}

impl KubeStore {
    /// A store writing under the field manager `worksession-agent`: one for every node, so the node a session moved
    /// to owns its whole status (one per node would leave the old node's fields, an `Activity` say, for ever).
    pub fn new(client: Client, node: &str) -> Self {
        let manager = "worksession-agent".to_string();
        let reporter = Reporter { controller: "worksession-agent".into(), instance: Some(node.to_string()) };
        Self { recorder: Recorder::new(client.clone(), reporter), client, manager, caches: Default::default() }
    }

    fn apply(&self) -> PatchParams {
        PatchParams::apply(&self.manager).force()
    }

    /// Tells the caches how a write of `ws` went: its result, or (refused over the version read, or failed with its
    /// outcome unknown) that the session is to be read fresh.
    fn session_written(&self, ws: &WorkSession, result: kube::Result<WorkSession>) -> kube::Result<WorkSession> {
        if let Some(caches) = self.caches.get() {
            match &result {
                Ok(written) => caches.wrote_session(written),
                Err(_) => caches.behind_on(ws),
            }
        }
        result
    }

    /// The same for a write of the event `ev`, which `done` says when it succeeded.
    fn event_written<T>(
        &self,
        ev: &WorkEvent,
        result: kube::Result<T>,
        done: impl Fn(&T) -> EventWrite<'_>,
    ) -> kube::Result<T> {
        if let Some(caches) = self.caches.get() {
            caches.wrote_event(ev, result.as_ref().map_or(EventWrite::Unknown, &done));
        }
        result
    }
}

impl KubeStore {
    /// Applies the session's status, over the version `from` only when given (a precondition).
    async fn apply_status(
        &self,
        ws: &WorkSession,
        status: &WorkSessionStatus,
        from: Option<String>,
    ) -> Result<(), StoreError> {
        let api = Api::<WorkSession>::namespaced(self.client.clone(), &ns_of(ws));
        // The controller's conditions and its record of a move are the controller's: the agent's apply never carries
        // (and so never reverts) them.
        let mut status = status.clone();
        status.conditions.retain(|c| !crate::core::ConditionType::controllers().iter().any(|t| t.as_str() == c.type_));
        status.moved_from = None;
        let mut patch = json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkSession", "status": status});
        if let Some(version) = from {
            patch["metadata"] = json!({"resourceVersion": version});
        }
        let written = api.patch_status(&ws.name_any(), &self.apply(), &Patch::Apply(&patch)).await;
        self.session_written(ws, written)?;
        Ok(())
    }
}

fn ns_of<K: ResourceExt>(obj: &K) -> String {
    obj.namespace().unwrap_or_default()
}

impl Store for KubeStore {
    fn read_through(&self, caches: Caches) {
        let _ = self.caches.set(caches); // once: a second call changes nothing
    }

    async fn namespace_keys(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, StoreError> {
        let api = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.client.clone(), namespace);
        match api.get_opt(name).await {
            // A namespace the chart gave no Role: its sessions get no keys, as where it has no Secret.
            Err(kube::Error::Api(s)) if s.code == 403 => Ok(None),
            Err(e) => Err(e.into()),
            Ok(secret) => Ok(secret.map(|s| {
                let data = s.data.unwrap_or_default().into_iter();
                data.filter_map(|(key, value)| Some((key, String::from_utf8(value.0).ok()?))).collect()
            })),
        }
    }

    async fn sessions(&self) -> Result<Vec<WorkSession>, StoreError> {
        Ok(Api::<WorkSession>::all(self.client.clone()).list(&ListParams::default()).await?.items)
    }

    async fn session(&self, namespace: &str, name: &str) -> Result<Option<WorkSession>, StoreError> {
        let caches = self.caches.get();
        if let Some(ws) = caches.and_then(|c| c.session(namespace, name)) {
            return Ok(Some(ws));
        }
        let since = caches.map(Caches::reading);
        let ws = Api::<WorkSession>::namespaced(self.client.clone(), namespace).get_opt(name).await?;
        if let (Some(caches), Some(since)) = (caches, since) {
            caches.read_session(namespace, name, ws.as_ref(), since);
        }
        Ok(ws)
    }

    async fn events(&self, namespace: &str, session: &str) -> Result<Vec<WorkEvent>, StoreError> {
        let caches = self.caches.get();
        if let Some(events) = caches.and_then(|c| c.events(namespace, session)) {
            return Ok(events);
        }
        let since = caches.map(Caches::reading);
        let events = self.events_fresh(namespace, session).await?;
        if let (Some(caches), Some(since)) = (caches, since) {
            caches.read_events(namespace, session, &events, since);
        }
        Ok(events)
    }

    async fn events_fresh(&self, namespace: &str, session: &str) -> Result<Vec<WorkEvent>, StoreError> {
        let api = Api::<WorkEvent>::namespaced(self.client.clone(), namespace);
        let list = api.list(&ListParams::default().fields(&format!("spec.session={session}"))).await?;
        Ok(list.items)
    }

    async fn write_status(&self, ws: &WorkSession, status: &WorkSessionStatus) -> Result<(), StoreError> {
        self.apply_status(ws, status, None).await
    }

    async fn write_intent(&self, ws: &WorkSession, status: &WorkSessionStatus) -> Result<bool, StoreError> {
        // The version read: the controller's writes (its conditions, a binding elsewhere) change it first.
        match self.apply_status(ws, status, ws.resource_version()).await {
            Err(StoreError::Kube(kube::Error::Api(s))) if s.code == 409 => Ok(false),
            result => result.map(|()| true),
        }
    }

    async fn write_event_status(&self, ev: &WorkEvent, status: &WorkEventStatus) -> Result<(), StoreError> {
        let api = Api::<WorkEvent>::namespaced(self.client.clone(), &ns_of(ev));
        let patch = json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkEvent", "status": status});
        let written = api.patch_status(&ev.name_any(), &self.apply(), &Patch::Apply(&patch)).await;
        self.event_written(ev, written, |now| EventWrite::Wrote(now))?;
        Ok(())
    }

    async fn delete_event(&self, ev: &WorkEvent) -> Result<(), StoreError> {
        let api = Api::<WorkEvent>::namespaced(self.client.clone(), &ns_of(ev));
        let deleted = match api.delete(&ev.name_any(), &Default::default()).await {
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            result => result.map(drop),
        };
        self.event_written(ev, deleted, |()| EventWrite::Deleted)?;
        Ok(())
    }

    async fn set_finalizer(&self, ws: &WorkSession, present: bool) -> Result<WorkSession, StoreError> {
        let api = Api::<WorkSession>::namespaced(self.client.clone(), &ns_of(ws));
        let mut finalizers: Vec<String> = ws.finalizers().iter().filter(|f| *f != FINALIZER).cloned().collect();
        if present {
            finalizers.push(FINALIZER.into());
        }
        // The resourceVersion makes this a compare-and-swap on the finalizer list.
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": ws.resource_version()}});
        let written = api.patch(&ws.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await;
        Ok(self.session_written(ws, written)?)
    }

    async fn move_to(&self, ws: &WorkSession, node: &str) -> Result<(), StoreError> {
        let api = Api::<WorkSession>::namespaced(self.client.clone(), &ns_of(ws));
        // Read fresh (the intent was just written), then one compare-and-swap: the session is handed over and the
        // request taken away together, only from the version that still asks for this node.
        let Some(now) = api.get_opt(&ws.name_any()).await? else { return Ok(()) };
        if now.annotations().get(crate::api::MOVE_ANNOTATION).map(String::as_str) != Some(node) {
            return Err(StoreError::Local(format!("the move to {node} was withdrawn or changed meanwhile")));
        }
        if now.spec.node_name != ws.spec.node_name {
            return Err(StoreError::Local("the session was placed elsewhere meanwhile".into()));
        }
        let patch = json!({
            "metadata": {"resourceVersion": now.resource_version(), "annotations": {crate::api::MOVE_ANNOTATION: null}},
            "spec": {"nodeName": node},
        });
        let written = api.patch(&ws.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await;
        self.session_written(ws, written)?;
        Ok(())
    }

    async fn label_limited(&self, ws: &WorkSession, on: bool) -> Result<(), StoreError> {
        let api = Api::<WorkSession>::namespaced(self.client.clone(), &ns_of(ws));
        let value = if on { json!("true") } else { json!(null) };
        let patch = json!({"metadata": {"labels": {crate::api::USAGE_LIMITED_LABEL: value}}});
        match self.session_written(ws, api.patch(&ws.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await)
        {
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()), // gone meanwhile
            result => result.map(drop).map_err(StoreError::from),
        }
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
            type_: match notice.reason.severity() {
                Severity::Normal => EventType::Normal,
                Severity::Warning => EventType::Warning,
            },
            reason: notice.reason.as_str().into(),
            note: Some(note),
            action: notice.reason.log_event().into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, reason = notice.reason.as_str(), "could not record a Kubernetes Event");
        }
    }
}

/// The Kubernetes sink.
#[derive(Clone)]
pub struct KubeSink {
    client: Client,
    /// Every WorkSession, as a watch keeps it: what a delivery reads (a fresh read per delivery held the bridge to
    /// 0.62x of creating WorkEvents directly). Nothing a delivery takes from it can be wrong in a way that loses an
    /// event: the event names its session by name (no owner reference by UID), and a session missing here is read
    /// fresh before one is created.
    sessions: reflector::Store<WorkSession>,
    synced: Arc<AtomicBool>,
    /// Records what the bridge did not do for a session (a CI prompt past its bound).
    recorder: Recorder,
}

impl KubeSink {
    /// Writes through `client`; starts the watch of WorkSessions (in every namespace: routes may name any).
    pub fn new(client: Client) -> Self {
        let (sessions, writer) = reflector::store();
        let synced = Arc::new(AtomicBool::new(false));
        let watched = watcher(Api::<WorkSession>::all(client.clone()), watcher::Config::default());
        let stream = reflector(writer, watched.modify(crate::api::slim));
        tokio::spawn(stream.default_backoff().for_each(|_| std::future::ready(())));
        tokio::spawn({
            let (sessions, synced) = (sessions.clone(), synced.clone());
            async move {
                if sessions.wait_until_ready().await.is_ok() {
                    synced.store(true, Ordering::Relaxed);
                }
            }
        });
        let reporter = Reporter { controller: "worksession-bridge".into(), instance: None };
        Self { recorder: Recorder::new(client.clone(), reporter), client, sessions, synced }
    }
}

/// What [`KubeSink::swap`] did.
#[derive(Debug, PartialEq, Eq)]
enum Swapped {
    /// There is no such WorkSession.
    Missing,
    /// The patch said there was nothing to write.
    Unchanged,
    /// Written over the version read.
    Written,
}

impl KubeSink {
    /// Reads the WorkSession `namespace/name` fresh and merges `patch` of it into that very version (its
    /// resourceVersion a precondition), reading again while others write between; `None` from `patch`: nothing to
    /// write.
    async fn swap(
        &self,
        namespace: &str,
        name: &str,
        patch: impl Fn(&WorkSession) -> Option<serde_json::Value>,
    ) -> Result<Swapped, SinkError> {
        let api = Api::<WorkSession>::namespaced(self.client.clone(), namespace);
        for _ in 0..5 {
            let Some(ws) = api.get_opt(name).await? else { return Ok(Swapped::Missing) };
            let Some(mut patch) = patch(&ws) else { return Ok(Swapped::Unchanged) };
            patch["metadata"]["resourceVersion"] = json!(ws.resource_version());
            match api.patch(name, &bridge_patch(), &Patch::Merge(&patch)).await {
                Ok(_) => return Ok(Swapped::Written),
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Swapped::Missing),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(SinkError::Unavailable(format!("WorkSession {namespace}/{name} kept changing; retry")))
    }
}

fn bridge_patch() -> PatchParams {
    PatchParams { field_manager: Some("worksession-bridge".into()), ..Default::default() }
}

fn post() -> PostParams {
    PostParams { field_manager: Some("worksession-bridge".into()), ..Default::default() }
}

impl Sink for KubeSink {
    async fn session(
        &self,
        namespace: &str,
        name: &str,
        create: Option<WorkSession>,
    ) -> Result<Option<WorkSession>, SinkError> {
        if self.synced.load(Ordering::Relaxed)
            && let Some(ws) = self.sessions.get(&ObjectRef::new(name).within(namespace))
        {
            return Ok(Some((*ws).clone()));
        }
        // Not in the cache (made a moment ago, or never): read fresh before creating.
        let api = Api::<WorkSession>::namespaced(self.client.clone(), namespace);
        if let Some(ws) = api.get_opt(name).await? {
            return Ok(Some(ws));
        }
        let Some(ws) = create else { return Ok(None) };
        match api.create(&post(), &ws).await {
            Ok(ws) => Ok(Some(ws)),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(api.get_opt(name).await?), // made meanwhile
            Err(e) => Err(e.into()),
        }
    }

    async fn archive(
        &self,
        namespace: &str,
        name: &str,
        archived: bool,
        delete_at: Option<Timestamp>,
        at: Option<Timestamp>,
    ) -> Result<Archived, SinkError> {
        let delete_at = delete_at.filter(|_| archived).map(|t| t.to_string());
        // GitHub's time compared with the one recorded, over that very version: two deliveries of one work item (a
        // late `closed`, a `reopened`) never both win.
        let patch = |ws: &WorkSession| {
            if super::outdated(ws, at) {
                return None;
            }
            let mut annotations = serde_json::Map::new();
            annotations.insert(DELETE_AT_ANNOTATION.into(), json!(delete_at));
            if let Some(at) = at {
                annotations.insert(LIFECYCLE_AT_ANNOTATION.into(), json!(at.to_string()));
            }
            Some(json!({"metadata": {"annotations": annotations}, "spec": {"archived": archived}}))
        };
        Ok(match self.swap(namespace, name, patch).await? {
            Swapped::Missing => Archived::Missing,
            Swapped::Unchanged => Archived::Outdated,
            Swapped::Written => Archived::Written,
        })
    }

    async fn find_session(
        &self,
        namespace: &str,
        (key, value): (&str, &str),
    ) -> Result<Option<WorkSession>, SinkError> {
        let labelled = |ws: &WorkSession| {
            ws.namespace().as_deref() == Some(namespace) && ws.labels().get(key).is_some_and(|v| v == value)
        };
        if self.synced.load(Ordering::Relaxed)
            && let Some(ws) = self.sessions.state().into_iter().find(|ws| labelled(ws))
        {
            return Ok(Some((*ws).clone()));
        }
        let api = Api::<WorkSession>::namespaced(self.client.clone(), namespace);
        let list = api.list(&ListParams::default().labels(&format!("{key}={value}"))).await?;
        Ok(list.items.into_iter().next())
    }

    async fn mark_session(
        &self,
        namespace: &str,
        name: &str,
        labels: &[(&str, Option<&str>)],
        annotations: &[(&str, Option<&str>)],
    ) -> Result<bool, SinkError> {
        let map = |pairs: &[(&str, Option<&str>)]| {
            pairs.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()
        };
        let patch = json!({"metadata": {"labels": map(labels), "annotations": map(annotations)}});
        let api = Api::<WorkSession>::namespaced(self.client.clone(), namespace);
        match api.patch(name, &bridge_patch(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn update_annotation<F>(&self, namespace: &str, name: &str, key: &str, change: F) -> Result<bool, SinkError>
    where
        F: Fn(Option<&str>) -> Option<String> + Send + Sync,
    {
        let patch = |ws: &WorkSession| {
            let value = change(ws.annotations().get(key).map(String::as_str))?;
            Some(json!({"metadata": {"annotations": {key: value}}}))
        };
        Ok(self.swap(namespace, name, patch).await? == Swapped::Written)
    }

    async fn event(&self, namespace: &str, name: &str) -> Result<Option<WorkEvent>, SinkError> {
        Ok(Api::<WorkEvent>::namespaced(self.client.clone(), namespace).get_opt(name).await?)
    }

    async fn set_prompt(&self, event: &WorkEvent, prompt: &str) -> Result<bool, SinkError> {
        if event.status.as_ref().is_some_and(|s| s.phase.is_some_and(|p| p != crate::api::PromptPhase::Pending)) {
            return Ok(false);
        }
        let api = Api::<WorkEvent>::namespaced(self.client.clone(), &ns_of(event));
        // Over the version read: an agent that began the delivery wrote its status, which moved it.
        let patch = json!({"metadata": {"resourceVersion": event.resource_version()}, "spec": {"prompt": prompt}});
        match api.patch(&event.name_any(), &bridge_patch(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn note(&self, namespace: &str, name: &str, reason: &str, message: &str) {
        let api = Api::<WorkSession>::namespaced(self.client.clone(), namespace);
        let reference = match api.get_opt(name).await {
            Ok(Some(ws)) => ws.object_ref(&()),
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, reason, "could not read the session to record a Kubernetes Event");
                return;
            }
        };
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(message.chars().take(1000).collect()),
            action: "Deliver".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, reason, "could not record a Kubernetes Event");
        }
    }

    async fn delete_due(&self, now: Timestamp) -> Result<Vec<String>, SinkError> {
        let due = self.sessions.state().into_iter().filter(|ws| {
            let at = ws.annotations().get(DELETE_AT_ANNOTATION).and_then(|t| t.parse::<Timestamp>().ok());
            // Only a session a route made, stopped as archived (not one a comment woke, working on it).
            let stopped = ws.status.as_ref().and_then(|s| s.phase) == Some(crate::api::Phase::Archived);
            let routed = ws.labels().contains_key(crate::api::ROUTE_LABEL);
            ws.spec.archived
                && stopped
                && routed
                && ws.metadata.deletion_timestamp.is_none()
                && at.is_some_and(|t| t <= now)
        });
        let mut deleted = Vec::new();
        for ws in due {
            let (namespace, name) = (ws.namespace().unwrap_or_default(), ws.name_any());
            let api = Api::<WorkSession>::namespaced(self.client.clone(), &namespace);
            // Only the very object the cache showed archived (reopened since, it has another resourceVersion).
            let preconditions = kube::api::Preconditions { uid: ws.uid(), resource_version: ws.resource_version() };
            let params = kube::api::DeleteParams { preconditions: Some(preconditions), ..Default::default() };
            match api.delete(&name, &params).await {
                Ok(_) => deleted.push(format!("{namespace}/{name}")),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(deleted)
    }

    async fn count_sessions(&self, namespace: &str, (key, value): (&str, &str)) -> Result<usize, SinkError> {
        let api = Api::<WorkSession>::namespaced(self.client.clone(), namespace);
        let list = api.list_metadata(&ListParams::default().labels(&format!("{key}={value}"))).await?;
        // One being deleted is going: it makes room.
        Ok(list.items.iter().filter(|ws| ws.metadata.deletion_timestamp.is_none()).count())
    }

    async fn create_event(&self, namespace: &str, event: &WorkEvent) -> Result<bool, SinkError> {
        let api = Api::<WorkEvent>::namespaced(self.client.clone(), namespace);
        match api.create(&post(), event).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn ready(&self) -> bool {
        self.client.apiserver_version().await.is_ok()
    }
}
