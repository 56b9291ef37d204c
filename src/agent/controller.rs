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
use super::{AgentOptions, ReconcileError, Reconciler, poll};
use crate::api::{NODE_LABEL, USAGE_LIMITED_LABEL, WorkBudget, WorkEvent, WorkSession, node_label_value};
use crate::node::tmux::{Tmux, TmuxRunner};
use crate::store::Store;
use crate::store::caches::{Caches, Watched};

/// Reconciles running at once (each one at most per object); verification waits are requeues, not reconciles,
/// so this bounds memory and API load without making sessions wait on each other's probes.
pub const RECONCILE_CONCURRENCY: u16 = 64;
/// Reconciles new WorkEvents start at once, beside the controller's ([`at_once`]): a burst beyond them waits for the
/// controller, as it gains little from a millisecond.
pub const AT_ONCE: usize = 16;
/// WorkEvents listed per page by the agent's watches.
pub const EVENTS_PAGE: u32 = 50;
/// Requeue after a failed reconcile.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(5);

/// The reconciler every pass shares, on the node's tmux.
type Agent<S> = Reconciler<S, TmuxRunner>;

/// Runs the agent of `node` until the process is asked to stop (SIGTERM or Ctrl-C): `client` watches the
/// WorkSessions and WorkEvents, `store` reads them (through the watches' caches) and writes them.
pub async fn run<S: Store + 'static>(
    client: Client,
    node: String,
    store: S,
    options: AgentOptions,
) -> std::io::Result<()> {
    let ready = Arc::new(AtomicBool::new(false));
    let (left_behind, to_relabel) = futures::channel::mpsc::unbounded();
    let mut reconciler = super::reconciler(store, Some(node.clone()), options, ready.clone()).await?;
    reconciler.left_behind = Some(left_behind.clone());
    let egress = reconciler.egress.take();
    let ctx = Arc::new(reconciler);

    let sessions: Api<WorkSession> = Api::all(client.clone());
    let events: Api<WorkEvent> = Api::all(client.clone());
    let selector = format!("spec.nodeName={node}");
    // Wait for the CRDs (and the API server) instead of exiting.
    listed(&sessions, &ListParams::default().fields(&selector).limit(1), "WorkSessions").await;
    // The namespaces' budgets before the first decision: a session a budget paused must not start on an empty view
    // (the watch below keeps them from then on).
    let budgets = listed(&Api::<WorkBudget>::all(client.clone()), &ListParams::default(), "WorkBudgets").await;
    ctx.registries.budgets.replace(&budgets.items);
    if let Err(e) = ctx.seed_claims().await {
        tracing::warn!(event = "agent.seed_failed", error = %e, "cannot list the sessions' conversations yet");
    }
    // Only this node's WorkSessions, and only the WorkEvents labelled for this node: with N nodes an event (and its
    // prompt) is sent to one agent, not N. The bridge labels what it creates; `worksession labeler` labels events
    // made by hand.
    // Listed by quorum reads, as a decision's fresh read would be: the caches start no older than the agent's last
    // writes before a restart.
    let mine = watcher::Config::default().fields(&selector).list_semantic(watcher::ListSemantic::MostRecent);
    // Events are listed a few at a time: a prompt may be a megabyte, and a page is held whole while it is read.
    let addressed_here = watcher::Config::default()
        .labels(&format!("{NODE_LABEL}={}", node_label_value(&node)))
        .list_semantic(watcher::ListSemantic::MostRecent)
        .page_size(EVENTS_PAGE);
    // And the events labelled for no node yet, which a decision sees as a fresh read would (they wake nothing here:
    // the labeler labels them, and that wakes).
    let unlabelled = watcher::Config::default()
        .labels(&format!("!{NODE_LABEL}"))
        .list_semantic(watcher::ListSemantic::MostRecent)
        .page_size(EVENTS_PAGE);
    let writer = reflector::store::Writer::default();
    let cache = writer.as_reader();
    let (events_writer, unlabelled_writer) = (reflector::store::Writer::default(), reflector::store::Writer::default());
    // A decision reads the caches of the very streams that wake it (each reflector stores a change before passing it
    // on), and reads fresh while a stream lists again (its store is replaced only at the listing's end).
    let caches = Caches::new(cache.clone(), events_writer.as_reader(), unlabelled_writer.as_reader(), &node);
    ctx.store.read_through(caches.clone());
    // Only the prompts of the namespaces this agent serves are kept: the others' are none of its business, and a
    // flood of events costs only the agents that serve their namespace. An event of another namespace labelled for
    // this node still wakes its relabelling, without its prompt; one labelled for none is not kept at all.
    let config = ctx.config.clone();
    let serves = move |ev: &WorkEvent| config.borrow().placement.serves(&ev.namespace().unwrap_or_default());
    let (keeps, kept) = (serves.clone(), serves);
    let unlabelled = watcher(events.clone(), unlabelled).filter(move |event| {
        std::future::ready(match event {
            Ok(watcher::Event::Apply(ev) | watcher::Event::InitApply(ev)) => keeps(ev),
            _ => true,
        })
    });
    let unlabelled = reflector(unlabelled_writer, unlabelled.modify(crate::api::slim))
        .inspect(caches.follow(Watched::Unlabelled))
        .default_backoff()
        .for_each(|_| std::future::ready(()));
    let addressed = watcher(events, addressed_here).modify(move |ev| {
        crate::api::slim(ev);
        if !kept(ev) {
            ev.spec.prompt.clear();
        }
    });
    let (wake_now, woken_now) = futures::channel::mpsc::channel(AT_ONCE);
    let events = reflector(events_writer, addressed)
        .inspect(caches.follow(Watched::Events))
        .inspect(new_event_wakes(wake_now, cache.clone()));
    let (refusals, egress_view) = egress.map(|link| (link.refusals, link.sessions)).unzip();
    let (poke, poked) = futures::channel::mpsc::unbounded();
    let (known, notices) = (cache.clone(), ctx.metrics.event_notices.clone());
    let misaddressed = left_behind.clone();
    // The cache keeps what a decision or a wake reads, not the objects' bookkeeping: every session's managedFields
    // (two managers' worth of status fields) would be most of what the agent holds at a thousand sessions.
    let watched = watcher(sessions, mine).modify(crate::api::slim);
    let budgets = budgets_watched(client.clone(), ctx.clone(), cache.clone());
    let watched = reflector(writer, watched).inspect(caches.follow(Watched::Sessions));
    let controller = Controller::for_stream(watched.applied_objects(), cache.clone())
        .watches_stream(events.touched_objects(), move |ev: WorkEvent| {
            let session = ObjectRef::new(&ev.spec.session).within(&ev.namespace()?);
            let addressed = known.get(&session).is_some();
            notices.get_or_create(&AddressedLabel { addressed: if addressed { "true" } else { "false" } }).inc();
            if !addressed {
                let _ = misaddressed.unbounded_send((session.namespace.clone()?, session.name.clone()));
            }
            Some(session)
        })
        .reconcile_on(futures::stream::select(poked, budgets))
        .with_config(controller::Config::default().concurrency(RECONCILE_CONCURRENCY))
        .shutdown_on_signal();

    tracing::info!(event = "agent.started", node, "reconciling the WorkSessions of this node");
    let run = controller.run(reconcile, error_policy, ctx.clone()).for_each(|result| async move {
        if let Err(e) = result {
            tracing::debug!(error = %e, "controller");
        }
    });
    // The poll lives exactly as long as the controller: when the controller stops, the poll is dropped with it.
    let relabel_cache = cache.clone();
    let client_for_limits = client.clone();
    let (refused_cache, shown_cache) = (cache.clone(), cache.clone());
    let sessions = move || cache.state();
    tokio::select! {
        () = run => {}
        () = poll::run(&ctx, &ready, sessions, poke.clone()) => {}
        () = fenced(client.clone(), node.clone(), &ctx) => {}
        () = relabel_left_behind(client, &node, relabel_cache, left_behind, to_relabel) => {}
        () = told(&ctx, refused_cache, refusals) => {}
        () = shown(shown_cache, egress_view) => {}
        () = limited_elsewhere(client_for_limits, &node, &ctx) => {}
        () = unlabelled => {}
        () = at_once(&ctx, woken_now, poke) => {}
    }
    tracing::info!(event = "agent.stopped", "agent stopped");
    Ok(())
}

/// The list `params` select of `api`, once the API server gives it: a refusal (no CRD, no RBAC, no answer) is said,
/// and waited out.
async fn listed<K>(api: &Api<K>, params: &ListParams, kind: &str) -> kube::api::ObjectList<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    loop {
        match api.list(params).await {
            Ok(list) => return list,
            Err(e) => {
                tracing::warn!(event = "agent.waiting", error = %e, "cannot list {kind} yet ({}); retrying", waiting_for(&e));
                tokio::time::sleep(ERROR_REQUEUE).await;
            }
        }
    }
}

/// Every WorkBudget as the controller last summed it, kept in the node's registry for the decisions. A change that
/// matters to them (a budget reached, raised, removed) wakes every session of its namespace: a paused one may go on,
/// a live one between turns is stopped. The registry is written before the wake, so the reconcile reads the change.
fn budgets_watched<S: Store + 'static>(
    client: Client,
    ctx: Arc<Agent<S>>,
    sessions: reflector::Store<WorkSession>,
) -> impl futures::Stream<Item = ObjectRef<WorkSession>> + Send {
    let writer = reflector::store::Writer::default();
    let cache = writer.as_reader();
    let watched = watcher(Api::<WorkBudget>::all(client), watcher::Config::default()).modify(crate::api::slim);
    reflector(writer, watched)
        .default_backoff()
        .filter_map(move |event| {
            let woken = match event {
                // While listed again, the cache keeps the old list until the new one is whole.
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => None,
                Ok(_) => {
                    let changed = ctx.registries.budgets.replace(cache.state().iter().map(AsRef::as_ref));
                    let of = |ws: &&Arc<WorkSession>| changed.iter().any(|ns| ws.namespace().as_ref() == Some(ns));
                    let woken: Vec<_> =
                        sessions.state().iter().filter(of).map(|ws| ObjectRef::from_obj(ws.as_ref())).collect();
                    Some(futures::stream::iter(woken))
                }
                Err(e) => {
                    tracing::warn!(event = "agent.budgets_unwatched", error = %e, "cannot watch the WorkBudgets");
                    None
                }
            };
            futures::future::ready(woken)
        })
        .flatten()
}

/// The usage limits of the sessions other nodes run (those their agents labelled [`USAGE_LIMITED_LABEL`]) kept in
/// this node's registry of limits, for as long as the agent runs: a credential's sessions are parked together
/// whatever node runs each. This node's own sessions are its reconciles' to follow.
async fn limited_elsewhere<S: Store>(client: Client, node: &str, ctx: &Agent<S>) {
    let marked = watcher::Config::default().labels(USAGE_LIMITED_LABEL);
    let watched = watcher(Api::<WorkSession>::all(client), marked).modify(crate::api::slim).default_backoff();
    let elsewhere = |ws: &WorkSession| ws.spec.node_name.as_deref() != Some(node);
    let mut watched = std::pin::pin!(watched);
    // The sessions followed from here, and those a listing again found: one it did not is forgotten at its end (a
    // deletion or an unlabelling while the watch was down sends no event).
    let (mut followed, mut listed) = (std::collections::HashSet::new(), std::collections::HashSet::new());
    while let Some(event) = watched.next().await {
        let limits = &ctx.registries.limits;
        match event {
            Ok(watcher::Event::Apply(ws) | watcher::Event::InitApply(ws)) => {
                let identity = crate::api::identity(&ws);
                if elsewhere(&ws) {
                    limits.recorded(&identity, &ws.spec.harness, ws.status.as_ref());
                    listed.insert(identity.clone());
                    followed.insert(identity);
                } else {
                    followed.remove(&identity); // moved here: this node's reconciles follow it
                }
            }
            // Deleted, or its label taken off: its limit is behind.
            Ok(watcher::Event::Delete(ws)) if elsewhere(&ws) => {
                let identity = crate::api::identity(&ws);
                limits.forget(&identity);
                followed.remove(&identity);
            }
            Ok(watcher::Event::Init) => listed.clear(),
            Ok(watcher::Event::InitDone) => {
                for gone in followed.difference(&listed) {
                    limits.forget(gone);
                }
                followed.clone_from(&listed);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(event = "agent.limits_unwatched", error = %e, "cannot watch the usage limits of other nodes")
            }
        }
    }
    // Never the reason the agent stops.
    std::future::pending().await
}

/// The egress proxy's refusals recorded as Events on their sessions, for as long as the agent runs (with egress).
async fn told<S: Store, T: Tmux>(
    ctx: &Reconciler<S, T>,
    cache: reflector::Store<WorkSession>,
    refusals: Option<tokio::sync::mpsc::Receiver<super::refusals::Refused>>,
) {
    if let Some(refusals) = refusals {
        super::refusals::tell(&ctx.store, cache, refusals).await;
    }
    // Never the reason the agent stops.
    std::future::pending().await
}

/// The driver's view of its sessions handed to the egress proxy once it is filled (with egress): before, a lookup
/// finding nothing would be taken for a session not held here.
async fn shown(
    cache: reflector::Store<WorkSession>,
    view: Option<Arc<std::sync::OnceLock<reflector::Store<WorkSession>>>>,
) {
    if let Some(view) = view
        && cache.wait_until_ready().await.is_ok()
    {
        let _ = view.set(cache);
    }
    // Never the reason the agent stops.
    std::future::pending().await
}

/// The agent's Lease renewed and its fence kept, for as long as the agent runs (on a cluster, where it has one).
async fn fenced<S: Store, T: Tmux>(client: Client, node: String, ctx: &Reconciler<S, T>) {
    match &ctx.fence {
        Some(fence) => super::lease::run(client, node, fence, &ctx.config, ctx.observer.tmux()).await,
        None => std::future::pending().await,
    }
}

/// Sessions whose events labelled for this node go to the node each is on now: those of events labelled here whose
/// session this agent does not hold, and those a reconcile read elsewhere (this agent's cache had not seen them move).
/// An event labelled from a view older than a move (the bridge's cache, or a person's label) would otherwise wake no
/// agent: this one serves not its session, and the new node's watches only its own label. Each is tried again after
/// [`ERROR_REQUEUE`] when the API server refuses or cannot be reached.
async fn relabel_left_behind(
    client: Client,
    node: &str,
    cache: reflector::Store<WorkSession>,
    again: super::LeftBehind,
    mut left: futures::channel::mpsc::UnboundedReceiver<(String, String)>,
) {
    // Until this agent's cache is filled every session looks elsewhere.
    let _ = cache.wait_until_ready().await;
    while let Some((namespace, session)) = left.next().await {
        if let Err(e) = relabel(&client, node, &namespace, &session).await {
            tracing::warn!(event = "event.relabel_failed", namespace, session, error = %e, "trying again");
            let again = again.clone();
            tokio::spawn(async move {
                tokio::time::sleep(ERROR_REQUEUE).await;
                let _ = again.unbounded_send((namespace, session));
            });
        }
    }
    std::future::pending().await
}

/// Labels the events of `session` still labelled for `node` for the node the session is on now, read fresh; nothing
/// when it is here, nowhere yet, or gone.
async fn relabel(client: &Client, node: &str, namespace: &str, session: &str) -> Result<(), kube::Error> {
    let sessions: Api<WorkSession> = Api::namespaced(client.clone(), namespace);
    let there = sessions.get_opt(session).await?.and_then(|ws| ws.spec.node_name).filter(|there| there != node);
    let Some(there) = there else { return Ok(()) };
    let events: Api<WorkEvent> = Api::namespaced(client.clone(), namespace);
    let here = format!("{NODE_LABEL}={}", node_label_value(node));
    let listed = events.list(&ListParams::default().fields(&format!("spec.session={session}")).labels(&here)).await?;
    for ev in listed.items {
        // Only from the version listed: an event changed meanwhile and still labelled here is noticed again.
        let patch = serde_json::json!({"metadata": {"resourceVersion": ev.resource_version(),
            "labels": {NODE_LABEL: node_label_value(&there)}}});
        let name = ev.name_any();
        match events.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => tracing::info!(
                event = "event.relabelled",
                namespace,
                name,
                node = there,
                "labelled for its session's node"
            ),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What wakes a session at once ([`at_once`]): a WorkEvent with no status yet, as the watch shows it changed (just
/// created, or just relabelled for this node), for one of this node's sessions; not as a listing shows it (an
/// agent's start reconciles everything through the controller anyway). A burst beyond what the channel holds waits
/// for the controller.
fn new_event_wakes(
    mut wake: futures::channel::mpsc::Sender<(String, String)>,
    sessions: reflector::Store<WorkSession>,
) -> impl FnMut(&Result<watcher::Event<WorkEvent>, watcher::Error>) {
    move |event| {
        let Ok(watcher::Event::Apply(ev)) = event else { return };
        let Some(namespace) = ev.namespace() else { return };
        let session = ObjectRef::new(&ev.spec.session).within(&namespace);
        if ev.status.is_none() && sessions.get(&session).is_some() {
            let _ = wake.try_send((namespace, session.name));
        }
    }
}

/// Reconciles the sessions of new WorkEvents as they come, [`AT_ONCE`] at a time, each unless a reconcile of it runs
/// or waits already. The controller's wake of the same session (the same event woke it too) starts at the next tick
/// of kube-runtime's timer wheel, a millisecond or two later on the path a prompt takes; it waits for this one's turn
/// and decides from what it did, and when to look again is its to say (this one's is dropped: each effect this one
/// has is a write that wakes the controller after it anyway). One that failed is handed to the controller (`retry`),
/// which reconciles the session again at once, its own failure retried by its error policy. Ends only with the
/// agent: the reconciles running then end with it, as at a crash, which the intent written before every effect
/// covers.
async fn at_once<S: Store + 'static>(
    ctx: &Arc<Agent<S>>,
    mut woken: futures::channel::mpsc::Receiver<(String, String)>,
    retry: futures::channel::mpsc::UnboundedSender<ObjectRef<WorkSession>>,
) {
    // Each on a task of its own, as the controller's are: run inside this one (the agent's, which also reads the
    // watches) a reconcile's work held up the watches until the API server dropped them as too slow (the fleet
    // bench: 20 agents on two cores). Held here, so they end with the agent.
    let mut running = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            Some((namespace, name)) = woken.next(), if running.len() < AT_ONCE => {
                let (ctx, retry) = (ctx.clone(), retry.clone());
                running.spawn(async move {
                    if let Some(Err(e)) = ctx.reconcile_if_free(&namespace, &name).await {
                        tracing::debug!(error = %e, namespace, name, "reconcile on a new event failed; the controller tries again");
                        let _ = retry.unbounded_send(ObjectRef::new(&name).within(&namespace));
                    }
                });
            }
            Some(done) = running.join_next(), if !running.is_empty() => {
                // A reconcile that panicked takes the agent down, as one of the controller's does.
                if let Err(e) = done
                    && e.is_panic()
                {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
            else => std::future::pending::<()>().await,
        }
    }
}

async fn reconcile<S: Store>(ws: Arc<WorkSession>, ctx: Arc<Agent<S>>) -> Result<Action, ReconcileError> {
    let (namespace, name) = (ws.namespace().unwrap_or_default(), ws.name_any());
    Ok(match ctx.reconcile(&namespace, &name).await? {
        Some(after) => Action::requeue(after.max(Duration::from_millis(10))),
        None => Action::await_change(),
    })
}

fn error_policy<S: Store>(ws: Arc<WorkSession>, error: &ReconcileError, _ctx: Arc<Agent<S>>) -> Action {
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
    fn only_an_event_new_to_a_session_here_wakes_it_at_once() {
        let session: WorkSession = serde_json::from_value(serde_json::json!({
            "apiVersion": "worksession.dev/v1alpha1", "kind": "WorkSession",
            "metadata": {"name": "here", "namespace": "ns"},
            "spec": {"workItem": "w", "harness": "claude", "workdir": "/tmp"},
        }))
        .unwrap();
        let mut sessions = reflector::store::Writer::default();
        sessions.apply_watcher_event(&watcher::Event::Apply(session));
        let event = |session: &str, status: Option<serde_json::Value>| -> WorkEvent {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "worksession.dev/v1alpha1", "kind": "WorkEvent",
                "metadata": {"name": "e", "namespace": "ns"},
                "spec": {"session": session, "prompt": "hello"}, "status": status,
            }))
            .unwrap()
        };
        let (wake, mut woken) = futures::channel::mpsc::channel(8);
        let mut wakes = new_event_wakes(wake, sessions.as_reader());
        wakes(&Ok(watcher::Event::InitApply(event("here", None)))); // listed: the controller's start covers it
        wakes(&Ok(watcher::Event::Delete(event("here", None))));
        wakes(&Ok(watcher::Event::Apply(event("here", Some(serde_json::json!({"phase": "Delivering"}))))));
        wakes(&Ok(watcher::Event::Apply(event("elsewhere", None)))); // not a session of this node
        wakes(&Ok(watcher::Event::Apply(event("here", None))));
        drop(wakes);
        assert_eq!(woken.try_recv().ok(), Some(("ns".to_string(), "here".to_string())));
        assert!(woken.try_recv().is_err(), "nothing else woke it");
    }

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
