//! The labeler, beside the pipeline: the one component that labels WorkEvents made without [`NODE_LABEL`] (by hand,
//! `kubectl create`) with their session's node, so each agent can watch only its own node's events. It watches only
//! unlabelled events (`!worksession.dev/node`), reads the session each names, and patches the label; the label takes
//! the event out of this watch and into its agent's. The bridge labels what it creates, so it never waits on this.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use serde_json::json;

use crate::api::{NODE_LABEL, WorkEvent, WorkSession, node_label_value};

/// The field manager of the label.
pub const FIELD_MANAGER: &str = "worksession-labeler";
/// How long an event naming a missing session waits before it is looked at again (a session made after its event;
/// an agent would not deliver it either until the session exists).
pub const NO_SESSION_REQUEUE: Duration = Duration::from_secs(30);
/// How long an unlabelled WorkEvent whose WorkSession does not exist is kept before it is deleted: its session was
/// deleted before any agent started it (so no agent's finalizer removed its events), or never came. Events carry no
/// owner reference (the bridge writes them from its cache); this and the agent's finalizer are what remove them.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(600);
/// Requeue after a failed patch.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(5);

/// The labeler's metrics, under the prefix `worksession_labeler`.
#[derive(Clone, Default)]
pub struct LabelerMetrics {
    /// Events labelled.
    pub labelled: Counter,
    /// Events whose session did not exist when looked at.
    pub no_session: Counter,
    /// Events deleted because their session had not existed for [`ORPHAN_GRACE`].
    pub orphans_deleted: Counter,
    /// Failed reads or patches.
    pub errors: Counter,
}

/// What every labelling pass shares.
struct Labeler {
    client: Client,
    metrics: LabelerMetrics,
}

impl LabelerMetrics {
    /// The metrics, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register("labelled", "WorkEvents labelled with their session's node", metrics.labelled.clone());
        registry.register("no_session", "WorkEvents whose session did not exist (yet)", metrics.no_session.clone());
        registry.register(
            "orphans_deleted",
            "Unlabelled WorkEvents deleted because their session had not existed for 10 minutes",
            metrics.orphans_deleted.clone(),
        );
        registry.register("errors", "Failed reads or patches", metrics.errors.clone());
        metrics
    }
}

/// Returns once unlabelled WorkEvents can be listed (the API server answers, the CRDs are there, RBAC allows it).
pub async fn wait_until_listable(client: &Client) {
    let events: Api<WorkEvent> = Api::all(client.clone());
    let unlabelled = format!("!{NODE_LABEL}");
    while let Err(e) = events.list_metadata(&ListParams::default().labels(&unlabelled).limit(1)).await {
        tracing::warn!(event = "labeler.waiting", error = %e, "cannot list WorkEvents yet; retrying");
        tokio::time::sleep(ERROR_REQUEUE).await;
    }
}

/// Labels unlabelled WorkEvents in every namespace until the process is asked to stop.
pub async fn run(client: Client, metrics: LabelerMetrics) {
    let events: Api<WorkEvent> = Api::all(client.clone());
    let unlabelled = format!("!{NODE_LABEL}");
    tracing::info!(event = "labeler.started", "labelling WorkEvents that have no {NODE_LABEL} label");
    let ctx = Arc::new(Labeler { client, metrics });
    let labelling = Controller::new(events, watcher::Config::default().labels(&unlabelled)).shutdown_on_signal().run(
        label,
        error_policy,
        ctx,
    );
    labelling.for_each(|_| async {}).await;
    tracing::info!(event = "labeler.stopped", "labeler stopped");
}

async fn label(ev: Arc<WorkEvent>, ctx: Arc<Labeler>) -> Result<Action, kube::Error> {
    let (namespace, name) = (ev.namespace().unwrap_or_default(), ev.name_any());
    if ev.labels().contains_key(NODE_LABEL) {
        return Ok(Action::await_change()); // labelled meanwhile (the cache lags the patch)
    }
    let sessions: Api<WorkSession> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(ws) = sessions.get_opt(&ev.spec.session).await? else {
        let created = ev.creation_timestamp().map(|t| t.0);
        if created.is_some_and(|t| t + ORPHAN_GRACE <= k8s_openapi::jiff::Timestamp::now()) {
            return delete_orphan(&ctx, &ev).await;
        }
        ctx.metrics.no_session.inc();
        tracing::info!(
            event = "labeler.no_session",
            namespace,
            name,
            session = ev.spec.session,
            "its WorkSession does not exist; looking again later"
        );
        return Ok(Action::requeue(NO_SESSION_REQUEUE));
    };
    let Some(node) = ws.spec.node_name.as_deref().map(node_label_value) else {
        // Not placed yet: the placement labels its events when it places it.
        return Ok(Action::requeue(NO_SESSION_REQUEUE));
    };
    // The resourceVersion makes the patch a compare-and-swap: the label describes the spec.session it was read
    // for, not one changed meanwhile.
    let patch = json!({"metadata": {"labels": {NODE_LABEL: node}, "resourceVersion": ev.resource_version()}});
    let events: Api<WorkEvent> = Api::namespaced(ctx.client.clone(), &namespace);
    match events
        .patch(
            &name,
            &PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() },
            &Patch::Merge(&patch),
        )
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Action::await_change()), // deleted meanwhile
        // Changed meanwhile (its status written, or labelled by another labeler): the watch brings the new version,
        // unless it is labelled and so leaves the selector. Not a failure.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            tracing::debug!(
                event = "labeler.conflict",
                namespace,
                name,
                "changed meanwhile; waiting for the new version"
            );
            return Ok(Action::await_change());
        }
        result => result?,
    };
    ctx.metrics.labelled.inc();
    tracing::info!(event = "labeler.labelled", namespace, name, node, "labelled for its session's node");
    Ok(Action::await_change())
}

/// Deletes an event whose session has not existed for [`ORPHAN_GRACE`] (only this very object: a precondition on its
/// UID).
async fn delete_orphan(ctx: &Labeler, ev: &WorkEvent) -> Result<Action, kube::Error> {
    let (namespace, name) = (ev.namespace().unwrap_or_default(), ev.name_any());
    let events: Api<WorkEvent> = Api::namespaced(ctx.client.clone(), &namespace);
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions { uid: ev.uid(), resource_version: None }),
        ..Default::default()
    };
    match events.delete(&name, &params).await {
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        result => drop(result?),
    }
    ctx.metrics.orphans_deleted.inc();
    tracing::info!(
        event = "labeler.orphan_deleted",
        namespace,
        name,
        session = ev.spec.session,
        "its WorkSession has not existed for {}s: deleted",
        ORPHAN_GRACE.as_secs()
    );
    Ok(Action::await_change())
}

fn error_policy(ev: Arc<WorkEvent>, error: &kube::Error, ctx: Arc<Labeler>) -> Action {
    ctx.metrics.errors.inc();
    tracing::warn!(event = "labeler.failed", namespace = ev.namespace(), name = ev.name_any(), error = %error, "labelling failed; retrying");
    Action::requeue(ERROR_REQUEUE)
}
