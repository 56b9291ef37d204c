//! The placement on Kubernetes: observe (watches of the WorkSessions, the Nodes, and the agents' Leases, kept in
//! reflector caches) → decide ([`super::decide`], over the whole fleet at once) → execute (bind, label the events,
//! write the conditions). It wakes on a change of anything watched, or when the plan says a node may become lost;
//! with nothing changing it does nothing.
//!
//! Every write is a compare-and-swap on the `resourceVersion` the decision read, the conditions' apply too, and a
//! binding, like a Pod's, is made from that version or not at all: a decision from a cache that lags (or a second
//! controller's, an old one still stopping) can never bind one session twice, so the Deployment needs no leader
//! election; it runs one replica because one is enough (docs/scale.md), with the Recreate strategy so that a rollout
//! never has two count a node's room at once (an evicted or partitioned pod can still overlap its replacement; then
//! a node's last place may be given twice, never a session).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node as KubeNode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::{Action, Agent, Lost, Node, Session, World, decide};
use crate::agent::lease::{LEASE_LABEL, MAX_SESSIONS_ANNOTATION, NAMESPACES_ANNOTATION};
use crate::api::{MovedFrom, NODE_LABEL, WorkEvent, WorkSession, node_label_value};
use crate::core::{ConditionType, NodeLostReason, PlacedReason, Reason, set_condition};

/// The field manager of the bindings and of the conditions the controller writes.
pub const FIELD_MANAGER: &str = "worksession-controller";
/// The longest the controller sleeps with nothing changing (a safety net: every change wakes it).
pub const IDLE_RECHECK: Duration = Duration::from_secs(300);
/// How long after a failed write the controller tries again.
pub const ERROR_RECHECK: Duration = Duration::from_secs(5);
/// For how long after a session was moved off a lost node the events labelled for that node are looked for: a
/// bridge whose cache had not seen the move yet labels what it writes for the lost node, whose agent (which would
/// relabel it) is gone. Caches see a move within seconds; this is long past that.
pub const RELABEL_WINDOW: Duration = Duration::from_secs(600);
/// How often, within that window, they are looked for.
pub const RELABEL_EVERY: Duration = Duration::from_secs(5);
/// How many sessions' writes are in flight at once.
pub const WRITES_AT_ONCE: usize = 16;
/// At most one decision per this long: every agent's Lease renewal is a change (1,000 nodes renew 100 times a
/// second), and one decision over the whole fleet serves all that arrived meanwhile.
pub const DECISION_INTERVAL: Duration = Duration::from_secs(1);

/// How to run the placement.
#[derive(Clone, Debug)]
pub struct PlacementOptions {
    /// Where the agents' Leases are (`--lease-namespace`, the agents' `placement.leaseNamespace`).
    pub lease_namespace: String,
    /// How long after its agent's Lease ran out a NotReady or deleted node is lost (`--node-lost-grace-seconds`, the
    /// agents' `placement.nodeLostGraceSeconds`).
    pub grace: Duration,
    /// Place only the sessions of this namespace (`--namespace`); `None`: every namespace.
    pub namespace: Option<String>,
    /// Whether a cordon moves a node's sessions off it (`--cordon-moves`; the chart: with a shared volume claim).
    pub cordon_moves: bool,
}

/// Places sessions and moves those of lost nodes until the process is asked to stop; sets `ready` once the caches
/// are filled.
pub async fn run(client: Client, options: PlacementOptions, ready: Arc<AtomicBool>) {
    let (sessions, sessions_writer) = reflector::store::<WorkSession>();
    let (nodes, nodes_writer) = reflector::store::<KubeNode>();
    let (leases, leases_writer) = reflector::store::<Lease>();
    let watched: Api<WorkSession> = match &options.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    // The caches keep what a decision reads, not the objects' bookkeeping (nor a Node's list of images).
    let session_changes =
        reflector::reflector(sessions_writer, watcher(watched, Default::default()).modify(crate::api::slim));
    let node_stream = watcher(Api::all(client.clone()), Default::default()).modify(|n: &mut KubeNode| {
        crate::api::slim(n);
        if let Some(status) = n.status.as_mut() {
            status.images = None;
        }
    });
    let node_changes = reflector::reflector(nodes_writer, node_stream);
    let agents = watcher::Config::default().labels(&format!("{LEASE_LABEL}=true"));
    let lease_changes =
        reflector::reflector(leases_writer, watcher(Api::namespaced(client.clone(), &options.lease_namespace), agents));
    let mut changes = futures::stream::select_all([
        session_changes.default_backoff().map(|_| ()).boxed(),
        node_changes.default_backoff().map(|_| ()).boxed(),
        lease_changes.default_backoff().map(|_| ()).boxed(),
    ]);
    // The streams fill the caches only while polled, and a watch not read holds up the API server's writes to what
    // it watches (measured: 3 bindings a second while the writes waited on the unread watch), so a task of its own
    // reads them all the time and says when something changed.
    let changed = Arc::new(tokio::sync::Notify::new());
    let pump = Pump(tokio::spawn({
        let changed = changed.clone();
        async move {
            while changes.next().await.is_some() {
                changed.notify_one();
            }
        }
    }));
    let _ = tokio::join!(sessions.wait_until_ready(), nodes.wait_until_ready(), leases.wait_until_ready());
    ready.store(true, Ordering::Relaxed);
    tracing::info!(event = "placement.started", lease_namespace = options.lease_namespace, grace = ?options.grace, "placing WorkSessions");
    let started = Instant::now();
    let mut renewals = Renewals::new();
    let mut bound = Bound::new();
    let mut recheck = Duration::ZERO;
    let mut last = Instant::now() - DECISION_INTERVAL;
    // The lost nodes sessions were moved off, and when the last was: their events are looked for a while. A
    // controller that starts counts every node lost then (a move its predecessor made may be that recent).
    let mut left: HashMap<String, Instant> = HashMap::new();
    let mut first = true;
    loop {
        tokio::select! {
            () = changed.notified() => {}
            () = tokio::time::sleep(recheck) => {}
        }
        if pump.0.is_finished() {
            return;
        }
        // Everything that arrives meanwhile is in the caches: one decision for the lot.
        tokio::time::sleep_until((last + DECISION_INTERVAL).into()).await;
        last = Instant::now();
        let now = Instant::now();
        let world = observe(&sessions, &nodes, &leases, &mut renewals, &mut bound, &options, started, now);
        let plan = decide(&world, now);
        let failed = execute(&client, &sessions, &plan.decisions, &mut bound).await;
        recheck = if failed { ERROR_RECHECK } else { plan.recheck_after.unwrap_or(IDLE_RECHECK).min(IDLE_RECHECK) };
        if std::mem::take(&mut first) {
            left.extend(plan.lost.iter().map(|n| (n.clone(), now)));
        }
        for (_, decision) in &plan.decisions {
            if let Action::Bind { from: Some((lost, _)), .. } = decision {
                left.insert(lost.clone(), now);
            }
        }
        left.retain(|_, moved| now.saturating_duration_since(*moved) < RELABEL_WINDOW);
        for node in left.keys() {
            if let Err(e) = relabel(&client, &sessions, node, options.namespace.as_deref()).await {
                tracing::warn!(event = "placement.relabel_failed", node, error = %e, "relabelling the events of a lost node failed; trying again");
            }
        }
        if !left.is_empty() {
            recheck = recheck.min(RELABEL_EVERY);
        }
    }
}

/// The task reading the watches, stopped with the placement.
struct Pump(tokio::task::JoinHandle<()>);

impl Drop for Pump {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The bindings made whose result the cache does not show yet: by session, the resourceVersions it had before (the
/// one the decision read, the one its conditions' write made) and the node. While the cache holds one of those, the
/// session counts as on that node (its load; and no second binding, which its compare-and-swap would refuse anyway).
type Bound = HashMap<(String, String), (Vec<String>, String)>;

/// By node: the last renewal seen of its agent's Lease and what the controller made of it (kept when the Lease goes:
/// a deleted Lease is one that stopped being renewed, not one never seen).
type Renewals = HashMap<String, (String, Agent)>;

/// The placement's view of the caches; `renewals` keeps when each Lease's renewal was last seen to change.
#[allow(clippy::too_many_arguments)] // the caches, the memory of what was seen and done, the settings, the clock
fn observe(
    sessions: &Store<WorkSession>,
    nodes: &Store<KubeNode>,
    leases: &Store<Lease>,
    renewals: &mut Renewals,
    bound: &mut Bound,
    options: &PlacementOptions,
    started: Instant,
    now: Instant,
) -> World {
    for lease in leases.state() {
        let Some(spec) = &lease.spec else { continue };
        let Some(node) = spec.holder_identity.clone() else { continue };
        if lease.name_any() != crate::agent::lease::lease_name(&node) {
            continue; // a Lease names the node it is for: one cannot speak for another node under its own name
        }
        let renewed = spec.renew_time.as_ref().map(|t| t.0.to_string()).unwrap_or_default();
        let seen = match renewals.get(&node) {
            Some((was, agent)) if *was == renewed => agent.renewal_seen,
            _ => now,
        };
        let annotations = lease.annotations();
        let max_sessions = annotations.get(MAX_SESSIONS_ANNOTATION).and_then(|m| m.parse().ok());
        let namespaces = annotations
            .get(NAMESPACES_ANNOTATION)
            .map(|n| n.split(',').filter(|n| !n.is_empty()).map(str::to_string).collect())
            .unwrap_or_default();
        let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(40).max(1) as u64);
        renewals.insert(node, (renewed, Agent { renewal_seen: seen, duration, max_sessions, namespaces }));
    }
    let agents = renewals.iter().map(|(node, (_, agent))| (node.clone(), agent.clone())).collect();
    let nodes = nodes
        .state()
        .iter()
        .map(|n| {
            let ready = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let unschedulable = n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
            let labels = n.labels().clone();
            (n.name_any(), Node { labels, ready, unschedulable })
        })
        .collect();
    let cached = sessions.state();
    bound.retain(|(ns, name), (versions, _)| {
        let ws = sessions.get(&reflector::ObjectRef::new(name).within(ns));
        ws.is_some_and(|ws| ws.resource_version().is_some_and(|v| versions.contains(&v)))
    });
    let mut sessions: Vec<Session> = cached
        .iter()
        .filter(|ws| ws.metadata.deletion_timestamp.is_none())
        .map(|ws| Session {
            namespace: ws.namespace().unwrap_or_default(),
            name: ws.name_any(),
            node: bound
                .get(&(ws.namespace().unwrap_or_default(), ws.name_any()))
                .map(|(_, node)| node.clone())
                .or_else(|| ws.spec.node_name.clone()),
            selector: ws.spec.node_selector.clone(),
            on_node_lost: ws.spec.on_node_lost,
            move_request: ws.annotations().get(crate::api::MOVE_REQUEST_ANNOTATION).cloned(),
            move_to: ws.annotations().get(crate::api::MOVE_ANNOTATION).cloned(),
            said_lost: ws.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| c.type_ == ConditionType::NodeLost.as_str() && c.status == "True")
            }),
        })
        .collect();
    // The oldest first, as people made them.
    sessions.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    World { sessions, nodes, agents, grace: options.grace, cordon_moves: options.cordon_moves, started }
}

/// Executes each decision; returns whether a write failed (to look again soon).
async fn execute(
    client: &Client,
    cache: &Store<WorkSession>,
    decisions: &[((String, String), Action)],
    bound: &mut Bound,
) -> bool {
    // Sessions are independent: their writes go out a few at a time, as the agent's reconciles do. Each write owns
    // what it needs (borrowed, a stream of them would not be `Send` for every lifetime).
    let writes: Vec<_> = decisions.iter().map(|d| one(client.clone(), cache.clone(), d.clone())).collect();
    let results: Vec<_> = futures::stream::iter(writes).buffer_unordered(WRITES_AT_ONCE).collect().await;
    let mut failed = false;
    for result in results.into_iter().flatten() {
        match result {
            Ok(Some((key, binding))) => drop(bound.insert(key, binding)),
            Ok(None) => {}
            Err(()) => failed = true,
        }
    }
    failed
}

/// A binding made: the session, the resourceVersions it had before it, and the node.
type Binding = ((String, String), (Vec<String>, String));

/// Executes one decision: `None` when the session is gone from the cache, else whether the writes failed (logged)
/// and the binding made, if any.
async fn one(
    client: Client,
    cache: Store<WorkSession>,
    ((namespace, name), decision): ((String, String), Action),
) -> Option<Result<Option<Binding>, ()>> {
    let client = &client;
    let ws = cache.get(&reflector::ObjectRef::new(&name).within(&namespace))?;
    let result = match &decision {
        Action::Bind { node, from } => match bind(client, &ws, node, from.as_ref()).await {
            Ok(Some(version)) => {
                let versions = ws.resource_version().into_iter().chain([version]).collect();
                return Some(Ok(Some(((namespace, name), (versions, node.clone())))));
            }
            result => result.map(drop),
        },
        Action::NoFit { why, lost } => {
            let mut conditions = vec![condition(PlacedReason::NoNodeFits, false, why)];
            if let Some((node, lost)) = lost {
                conditions.push(lost_condition(node, lost, &format!("; {why}")));
            }
            write_status(client, &ws, conditions, None).await.map(drop)
        }
        Action::Move { node } => ask_to_move(client, &ws, node).await,
        Action::Returned { node } => {
            let back = condition(NodeLostReason::NodeReturned, false, &format!("node {node} is back"));
            write_status(client, &ws, vec![back], None).await.map(drop)
        }
        Action::Waits { node, lost } => {
            let waits = lost_condition(node, lost, "; waiting for it to return (onNodeLost: Wait)");
            write_status(client, &ws, vec![waits], None).await.map(drop)
        }
    };
    Some(result.map(|()| None).map_err(|e| {
        tracing::warn!(event = "placement.write_failed", namespace, name, error = %e, "will try again");
    }))
}

/// Binds the session `ws`, as the decision read it, to `node` (`from`: the lost node it leaves): says in status where
/// it goes, records `node` as the session's, then labels its events for that node's agent, each from the version read
/// or not at all; the resourceVersion it was bound from, if it was (not when the session changed since: the next
/// decision sees the change).
pub async fn bind(
    client: &Client,
    ws: &WorkSession,
    node: &str,
    from: Option<&(String, Lost)>,
) -> Result<Option<String>, kube::Error> {
    let (namespace, name) = (ws.namespace().unwrap_or_default(), ws.name_any());
    let sessions: Api<WorkSession> = Api::namespaced(client.clone(), &namespace);
    // The conditions first: the new node's agent reads the session as soon as it is bound, and a resume that finds
    // no conversation there is told by `NodeLost` that the node was lost.
    let mut conditions = vec![condition(PlacedReason::Placed, true, &format!("placed on node {node}"))];
    let mut moved = None;
    if let Some((lost, why)) = from {
        let message = format!("node {lost} was lost ({}); placed again on node {node}", lost_words(why));
        conditions.push(condition(NodeLostReason::MovedFromLostNode, false, &message));
        moved = Some(MovedFrom { node: lost.clone(), time: Time(Timestamp::now()), message });
    }
    let version = match write_status(client, ws, conditions, moved).await? {
        Written::Stale => return Ok(None),
        Written::At(version) => Some(version),
        Written::Nothing => ws.resource_version(),
    };
    // The resourceVersion makes the binding a compare-and-swap: bound from the version decided on (or the one its
    // conditions, written from it, made), or not at all.
    // A move asked or decided before the node was lost is over: the session is placed anew.
    let patch = json!({"metadata": {"resourceVersion": version, "annotations": {
        crate::api::MOVE_ANNOTATION: null, crate::api::MOVE_REQUEST_ANNOTATION: null}}, "spec": {"nodeName": node}});
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    match sessions.patch(&name, &params, &Patch::Merge(&patch)).await {
        // Changed meanwhile (bound by another, its spec changed): the watch brings it to the next decision, which
        // writes the conditions again.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => return Ok(None),
        result => drop(result?),
    }
    match from {
        None => tracing::info!(event = "placement.placed", namespace, name, node, "placed"),
        Some((lost, why)) => {
            tracing::warn!(
                event = "placement.moved",
                namespace,
                name,
                from = lost,
                node,
                ?why,
                "its node is lost: moved"
            )
        }
    }
    label_events(client, &namespace, &name, node).await?;
    Ok(version)
}

/// Names `node` in the session's move annotation (its agent hands it over once no prompt is being delivered).
async fn ask_to_move(client: &Client, ws: &WorkSession, node: &str) -> Result<(), kube::Error> {
    let (namespace, name) = (ws.namespace().unwrap_or_default(), ws.name_any());
    let sessions: Api<WorkSession> = Api::namespaced(client.clone(), &namespace);
    let from = ws.spec.node_name.as_deref().unwrap_or_default();
    let placed = condition(PlacedReason::Placed, true, &format!("placed on node {node} (moved from {from})"));
    let version = match write_status(client, ws, vec![placed], None).await? {
        Written::Stale => return Ok(()),
        Written::At(version) => Some(version),
        Written::Nothing => ws.resource_version(),
    };
    let patch = json!({"metadata": {"resourceVersion": version,
        "annotations": {crate::api::MOVE_ANNOTATION: node, crate::api::MOVE_REQUEST_ANNOTATION: null}}});
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    match sessions.patch(&name, &params, &Patch::Merge(&patch)).await {
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
        result => {
            result?;
            tracing::info!(event = "placement.move_asked", namespace, name, node, "asked its agent to move it");
            Ok(())
        }
    }
}

/// The WorkEvents labelled for the lost `node` whose session is on another node now: each such session's events are
/// labelled for its node, whose agent then sees and delivers them.
async fn relabel(
    client: &Client,
    sessions: &reflector::Store<WorkSession>,
    node: &str,
    namespace: Option<&str>,
) -> Result<(), kube::Error> {
    let events: Api<WorkEvent> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let labelled = ListParams::default().labels(&format!("{NODE_LABEL}={}", node_label_value(node)));
    let mut done = std::collections::HashSet::new();
    for ev in events.list(&labelled).await?.items {
        let namespace = ev.namespace().unwrap_or_default();
        let key = reflector::ObjectRef::<WorkSession>::new(&ev.spec.session).within(&namespace);
        let Some(now_on) = sessions.get(&key).and_then(|ws| ws.spec.node_name.clone()) else { continue };
        if now_on != node && done.insert(key) {
            tracing::info!(
                event = "placement.relabelled",
                namespace,
                session = ev.spec.session,
                from = node,
                to = now_on,
                "events labelled for a lost node relabelled for the session's node"
            );
            label_events(client, &namespace, &ev.spec.session, &now_on).await?;
        }
    }
    Ok(())
}

/// Labels the session's WorkEvents for `node`'s agent (the label narrows each agent's watch).
async fn label_events(client: &Client, namespace: &str, session: &str, node: &str) -> Result<(), kube::Error> {
    let events: Api<WorkEvent> = Api::namespaced(client.clone(), namespace);
    let value = node_label_value(node);
    let listed = events.list(&ListParams::default().fields(&format!("spec.session={session}"))).await?;
    for ev in listed.items.iter().filter(|ev| ev.labels().get(NODE_LABEL) != Some(&value)) {
        let patch = json!({"metadata": {"labels": {NODE_LABEL: value}}});
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        match events.patch(&ev.name_any(), &params, &Patch::Merge(&patch)).await {
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            result => drop(result?),
        }
    }
    Ok(())
}

fn lost_words(lost: &Lost) -> &'static str {
    match lost {
        Lost::NodeDeleted => "its Node is gone and its agent's Lease ran out the grace period ago",
        Lost::NodeNotReady => "NotReady, and its agent's Lease ran out the grace period ago",
    }
}

fn lost_condition(node: &str, lost: &Lost, rest: &str) -> Condition {
    let reason = match lost {
        Lost::NodeDeleted => NodeLostReason::NodeDeleted,
        Lost::NodeNotReady => NodeLostReason::NodeNotReady,
    };
    condition(reason, true, &format!("node {node}: {}{rest}", lost_words(lost)))
}

fn condition<R: Reason>(reason: R, ok: bool, message: &str) -> Condition {
    let mut one = Vec::new();
    set_condition(&mut one, reason, ok, message, None, Timestamp::now());
    one.remove(0)
}

/// What writing conditions did.
#[derive(Debug)]
enum Written {
    /// They were as they are: nothing written.
    Nothing,
    /// Written; the session's new resourceVersion.
    At(String),
    /// Not written: the session changed since the version the decision read (the watch brings the change, and the
    /// next decision sees it).
    Stale,
}

/// Applies the controller's part of the session's status under its field manager, over the version `ws` was read at
/// only: `conditions` where they differ from what its status says (a transition keeps its time otherwise), and
/// `moved` when given. An apply that left out a field the controller wrote before would remove it, so each carries
/// all the controller owns: its other conditions and its last move as they are.
async fn write_status(
    client: &Client,
    ws: &WorkSession,
    conditions: Vec<Condition>,
    moved: Option<MovedFrom>,
) -> Result<Written, kube::Error> {
    let status = ws.status.as_ref();
    let current = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let same = |c: &Condition| {
        current
            .iter()
            .any(|o| o.type_ == c.type_ && o.status == c.status && o.reason == c.reason && o.message == c.message)
    };
    let changed: Vec<Condition> = conditions
        .into_iter()
        .filter(|c| !same(c))
        .map(|mut c| {
            if let Some(was) = current.iter().find(|o| o.type_ == c.type_ && o.status == c.status) {
                c.last_transition_time = was.last_transition_time.clone();
            }
            c
        })
        .collect();
    if changed.is_empty() && moved.is_none() {
        return Ok(Written::Nothing);
    }
    let ours = |c: &&Condition| ConditionType::controllers().iter().any(|t| t.as_str() == c.type_);
    let mut conditions: Vec<Condition> =
        current.iter().filter(ours).filter(|c| !changed.iter().any(|n| n.type_ == c.type_)).cloned().collect();
    conditions.extend(changed);
    let moved = moved.or_else(|| status.and_then(|s| s.moved_from.clone()));
    let api: Api<WorkSession> = Api::namespaced(client.clone(), &ws.namespace().unwrap_or_default());
    // From the version decided on, or not at all (a resourceVersion in an apply is a precondition): conditions
    // written over a newer version would hand the binding that follows a version it never decided from.
    let mut patch = json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkSession",
        "metadata": {"resourceVersion": ws.resource_version()}, "status": {"conditions": conditions}});
    if let Some(moved) = moved {
        patch["status"]["movedFrom"] = json!(moved);
    }
    match api.patch_status(&ws.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)).await {
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Written::Stale),
        result => Ok(result?.resource_version().map_or(Written::Nothing, Written::At)),
    }
}
