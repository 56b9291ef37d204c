//! The Kubernetes driver: a kube-runtime controller over the WorkSessions of one node (a field selector on
//! `spec.nodeName`), woken by their changes, by changes of the WorkEvents labelled for this node (a label selector on
//! [`NODE_LABEL`]; one whose session is elsewhere is relabelled for that session's node), by its own requeues
//! (verification deadlines, back-off), and by the tmux [`super::poll`] that notices panes dying.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use super::metrics::AddressedLabel;
use super::{Options, ReconcileError, Reconciler, poll};
use crate::api::{NODE_LABEL, WorkEvent, WorkSession, node_label_value};
use crate::store::Store;
use crate::tmux::TmuxRunner;

/// Reconciles running at once (each one at most per object); verification waits are requeues, not reconciles,
/// so this bounds memory and API load without making sessions wait on each other's probes.
pub const RECONCILE_CONCURRENCY: u16 = 64;
/// Requeue after a failed reconcile.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(5);

type Ctx<S> = Reconciler<S, TmuxRunner>;

/// Runs the agent of `node` until the process is asked to stop (SIGTERM or Ctrl-C): `client` watches the
/// WorkSessions and WorkEvents, `store` reads and writes them.
pub async fn run<S: Store + 'static>(client: Client, node: String, store: S, options: Options) -> std::io::Result<()> {
    let ready = Arc::new(AtomicBool::new(false));
    let ctx = Arc::new(super::reconciler(store, Some(node.clone()), options, ready.clone()).await?);

    let sessions: Api<WorkSession> = Api::all(client.clone());
    let events: Api<WorkEvent> = Api::all(client.clone());
    let selector = format!("spec.nodeName={node}");
    // Wait for the CRDs (and the API server) instead of exiting.
    while let Err(e) = sessions.list(&ListParams::default().fields(&selector).limit(1)).await {
        tracing::warn!(event = "agent.waiting", error = %e, "cannot list WorkSessions yet ({}); retrying", waiting_for(&e));
        tokio::time::sleep(ERROR_REQUEUE).await;
    }
    if let Err(e) = ctx.seed_claims().await {
        tracing::warn!(event = "agent.seed_failed", error = %e, "cannot list the sessions' conversations yet");
    }
    // Only this node's WorkSessions, and only the WorkEvents labelled for this node: with N nodes an event (and its
    // prompt) is sent to one agent, not N. The bridge labels what it creates; `worksession labeler` labels events
    // made by hand.
    let mine = watcher::Config::default().fields(&selector);
    let addressed_here = watcher::Config::default().labels(&format!("{NODE_LABEL}={}", node_label_value(&node)));
    let writer = reflector::store::Writer::default();
    let cache = writer.as_reader();
    let (poke, poked) = futures::channel::mpsc::unbounded();
    let (known, notices) = (cache.clone(), ctx.metrics.event_notices.clone());
    let (misaddressed, to_readdress) = futures::channel::mpsc::unbounded();
    let controller =
        Controller::for_stream(reflector(writer, watcher(sessions, mine)).applied_objects(), cache.clone())
            .watches(events, addressed_here, move |ev: WorkEvent| {
                let session = ObjectRef::new(&ev.spec.session).within(&ev.namespace()?);
                let addressed = known.get(&session).is_some();
                notices.get_or_create(&AddressedLabel { addressed: if addressed { "true" } else { "false" } }).inc();
                if !addressed {
                    let _ = misaddressed.unbounded_send(ev);
                }
                Some(session)
            })
            .reconcile_on(poked)
            .with_config(controller::Config::default().concurrency(RECONCILE_CONCURRENCY))
            .shutdown_on_signal();

    tracing::info!(event = "agent.started", node, "reconciling the WorkSessions of this node");
    let run = controller.run(reconcile, error_policy, ctx.clone()).for_each(|result| async move {
        if let Err(e) = result {
            tracing::debug!(error = %e, "controller");
        }
    });
    // The poll lives exactly as long as the controller: when the controller stops, the poll is dropped with it.
    let sessions = move || cache.state();
    tokio::select! {
        () = run => {}
        () = poll::run(&ctx, &ready, sessions, poke) => {}
        () = super::lease::run(client.clone(), node.clone(), &ctx) => {}
        () = readdress(client, &node, to_readdress) => {}
    }
    tracing::info!(event = "agent.stopped", "agent stopped");
    Ok(())
}

/// Events labelled for this node whose session this agent does not serve: each is relabelled for the node its session
/// is on now, read fresh, whose agent then delivers it. An event labelled from a view older than a move (the bridge's
/// cache, or a person's label) would otherwise wake no agent: this one's serves not its session, and the new node's
/// watches only its own label. A session that is not there, or is here after all (this agent's cache still filling),
/// leaves the event as it is.
async fn readdress(client: Client, node: &str, mut misaddressed: futures::channel::mpsc::UnboundedReceiver<WorkEvent>) {
    while let Some(ev) = misaddressed.next().await {
        let Some(namespace) = ev.namespace() else { continue };
        let sessions: Api<WorkSession> = Api::namespaced(client.clone(), &namespace);
        let there = match sessions.get_opt(&ev.spec.session).await {
            Ok(ws) => ws.and_then(|ws| ws.spec.node_name).filter(|there| there != node),
            Err(e) => {
                tracing::warn!(event = "event.readdress_failed", namespace, name = ev.name_any(), error = %e, "cannot read its session");
                continue;
            }
        };
        let Some(there) = there else { continue };
        let events: Api<WorkEvent> = Api::namespaced(client.clone(), &namespace);
        // Only from the version seen: an event relabelled or changed meanwhile is left to whoever changed it.
        let patch = serde_json::json!({"metadata": {"resourceVersion": ev.resource_version(),
            "labels": {NODE_LABEL: node_label_value(&there)}}});
        match events.patch(&ev.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => tracing::info!(
                event = "event.readdressed",
                namespace,
                name = ev.name_any(),
                node = there,
                "labelled for its session's node"
            ),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
            Err(e) => {
                tracing::warn!(event = "event.readdress_failed", namespace, name = ev.name_any(), error = %e, "cannot label it for its session's node")
            }
        }
    }
    std::future::pending().await
}

async fn reconcile<S: Store>(ws: Arc<WorkSession>, ctx: Arc<Ctx<S>>) -> Result<Action, ReconcileError> {
    let (namespace, name) = (ws.namespace().unwrap_or_default(), ws.name_any());
    Ok(match ctx.reconcile(&namespace, &name).await? {
        Some(after) => Action::requeue(after.max(Duration::from_millis(10))),
        None => Action::await_change(),
    })
}

fn error_policy<S: Store>(ws: Arc<WorkSession>, error: &ReconcileError, _ctx: Arc<Ctx<S>>) -> Action {
    tracing::warn!(event = "reconcile.failed", namespace = ws.namespace(), name = ws.name_any(), category = error.category().as_str(), error = %error, "reconcile failed; retrying");
    Action::requeue(ERROR_REQUEUE)
}

/// What the agent waits for when it cannot list WorkSessions: the words an operator acts on.
fn waiting_for(e: &kube::Error) -> &'static str {
    match e {
        kube::Error::Api(s) if s.code == 404 => "the CRDs are not installed: kubectl apply -f crds/",
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => "its ServiceAccount is not allowed to: check the RBAC",
        kube::Error::Api(_) => "the API server refuses",
        // Found on a real node: a pod without a route to the API server logged "are the CRDs installed?".
        _ => "the API server does not answer",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_says_what_to_fix() {
        let api = |code| kube::Error::Api(kube::core::Status { code, ..Default::default() }.boxed());
        assert!(waiting_for(&api(404)).contains("CRDs are not installed"));
        assert!(waiting_for(&api(403)).contains("RBAC"));
        assert_eq!(waiting_for(&api(500)), "the API server refuses");
        let unreachable = kube::Error::Service("connection refused".into());
        assert_eq!(waiting_for(&unreachable), "the API server does not answer");
    }
}
