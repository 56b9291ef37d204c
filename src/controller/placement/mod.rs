//! Placement, the cluster-level half of the pipeline: [`decide`] is the pure rule that says, for every
//! WorkSession, which node's agent runs it, from what the controller observed (the sessions, the Nodes, the agents'
//! Leases). [`controller`] observes (watches), asks [`decide`], and executes (binds `spec.nodeName`, labels the
//! session's events for their new node, writes the `Placed` and `NodeLost` conditions).
//!
//! The rules: a session without a node is placed on a node that runs a Ready agent (its Lease
//! renewed within its duration, its Node Ready and not cordoned), that serves its namespace, whose labels match its
//! `nodeSelector` and that has room (`maxSessions`), the least loaded first (spreading). A session whose node is
//! lost (its agent's Lease ran out a grace period ago and the Node is NotReady or gone) is placed again, unless its
//! `onNodeLost` says `Wait`.

pub mod controller;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::api::NodeLostPolicy;

/// What the controller knows of a node's agent, from its Lease.
#[derive(Clone, Debug)]
pub struct Agent {
    /// When the controller last saw the Lease's renewal change (its own clock: no clocks are compared).
    pub renewal_seen: Instant,
    /// The Lease's duration.
    pub duration: Duration,
    /// `placement.maxSessions`; `None`: no limit.
    pub max_sessions: Option<u32>,
    /// `placement.namespaces`; empty: all.
    pub namespaces: Vec<String>,
}

impl Agent {
    fn live(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.renewal_seen) < self.duration
    }

    fn serves(&self, namespace: &str) -> bool {
        self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace)
    }
}

/// What the controller knows of a Node.
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its `Ready` condition is True.
    pub ready: bool,
    /// Cordoned (`spec.unschedulable`).
    pub unschedulable: bool,
}

/// One session, as the placement sees it.
#[derive(Clone, Debug)]
pub struct Session {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `spec.nodeName`.
    pub node: Option<String>,
    /// `spec.nodeSelector`.
    pub selector: BTreeMap<String, String>,
    /// `spec.onNodeLost`.
    pub on_node_lost: NodeLostPolicy,
    /// Its [`crate::api::MOVE_REQUEST_ANNOTATION`], if a person asked for a move.
    pub move_request: Option<String>,
    /// Its [`crate::api::MOVE_ANNOTATION`], if a move was decided (its agent makes it).
    pub move_to: Option<String>,
    /// Its `NodeLost` condition says its node is lost (it waited there, or fitted nowhere else).
    pub said_lost: bool,
}

/// Everything observed.
#[derive(Debug)]
pub struct World {
    /// The sessions (not being deleted).
    pub sessions: Vec<Session>,
    /// Nodes by name.
    pub nodes: HashMap<String, Node>,
    /// Agents by node.
    pub agents: HashMap<String, Agent>,
    /// How long after its agent's Lease ran out a node is lost.
    pub grace: Duration,
    /// Whether a cordon moves a node's sessions off it (`--cordon-moves`): only where their conversations are on
    /// storage every node shares; otherwise the move would start each one fresh.
    pub cordon_moves: bool,
    /// When the controller started: a node whose agent's Lease it never saw is counted from then.
    pub started: Instant,
}

/// Why a node is lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The Node object is gone.
    NodeDeleted,
    /// The Node is NotReady (or never reported Ready).
    NodeNotReady,
}

/// What to do with one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Record `node` in `spec.nodeName`; `from` names the lost node it leaves.
    Bind {
        /// The chosen node.
        node: String,
        /// The node it was on, lost, and why.
        from: Option<(String, Lost)>,
    },
    /// Fits nowhere: stays where it is (unplaced, or on its lost node), with why.
    NoFit {
        /// Why no node fits.
        why: String,
        /// Its node is lost, and why.
        lost: Option<(String, Lost)>,
    },
    /// A move was asked for (`worksession move`) and fits on `node`, or its node is cordoned: its agent is to hand it
    /// to `node` (the controller writes the move's annotation and takes the request away).
    Move {
        /// The chosen node.
        node: String,
    },
    /// Its node, said lost, is live again: say so.
    Returned {
        /// The node.
        node: String,
    },
    /// Its node is lost and its policy says wait.
    Waits {
        /// The lost node.
        node: String,
        /// Why it is lost.
        lost: Lost,
    },
}

/// The plan for the whole fleet: a decision for each session that needs one (a session placed on a live node
/// needs none), and when to look again if nothing changes (the next moment a node may become lost).
#[derive(Debug, Default)]
pub struct FleetPlan {
    /// `(namespace, name)` → decision, in the sessions' order.
    pub decisions: Vec<((String, String), Action)>,
    /// When to decide again without a change.
    pub recheck_after: Option<Duration>,
    /// The nodes lost now, of the agents and the sessions known, by name.
    pub lost: Vec<String>,
}

/// How many nodes a `NoNodeFits` message names with their reason.
pub const WHY_NODES: usize = 8;

/// The placement rule.
pub fn decide(world: &World, now: Instant) -> FleetPlan {
    let mut load: HashMap<String, u32> = HashMap::new();
    for s in &world.sessions {
        if let Some(node) = &s.node {
            *load.entry(node.clone()).or_default() += 1;
        }
    }
    let mut plan = FleetPlan::default();
    let mut recheck = |d: Duration| plan.recheck_after = Some(plan.recheck_after.map_or(d, |r: Duration| r.min(d)));
    let mut decisions = Vec::new();
    for s in &world.sessions {
        let key = (s.namespace.clone(), s.name.clone());
        let lost = match &s.node {
            None => None,
            Some(node) => match lost(world, node, now) {
                Ok(lost) => Some((node.clone(), lost)),
                Err(wait) => {
                    if let Some(wait) = wait {
                        recheck(wait);
                    }
                    if s.said_lost {
                        decisions.push((key.clone(), Action::Returned { node: node.clone() }));
                    }
                    // On a live node: moved only when asked (a person's request, or a cordon), once decided by
                    // nobody else (a decided move is its agent's to make).
                    let cordoned = world.nodes.get(node).is_some_and(|n| n.unschedulable);
                    let only = s.move_request.as_deref().filter(|r| *r != crate::api::ANY_NODE);
                    let cordon_moves = cordoned && world.cordon_moves && s.on_node_lost == NodeLostPolicy::Move;
                    let asked = s.move_request.is_some() || cordon_moves;
                    if asked && s.move_to.is_none() {
                        match choose_among(world, s, &load, now, only) {
                            Ok(to) => {
                                *load.entry(to.to_string()).or_default() += 1;
                                decisions.push((key, Action::Move { node: to.to_string() }));
                            }
                            Err(why) => decisions.push((key, Action::NoFit { why, lost: None })),
                        }
                    }
                    continue;
                }
            },
        };
        if let Some((node, why)) = &lost
            && s.on_node_lost == NodeLostPolicy::Wait
        {
            decisions.push((key, Action::Waits { node: node.clone(), lost: why.clone() }));
            continue;
        }
        match choose(world, s, &load, now) {
            Ok(node) => {
                if let Some((from, _)) = &lost {
                    load.entry(from.clone()).and_modify(|n| *n = n.saturating_sub(1));
                }
                *load.entry(node.to_string()).or_default() += 1;
                decisions.push((key, Action::Bind { node: node.to_string(), from: lost }));
            }
            Err(why) => decisions.push((key, Action::NoFit { why, lost })),
        }
    }
    plan.decisions = decisions;
    let mut nodes: Vec<&String> =
        world.agents.keys().chain(world.sessions.iter().filter_map(|s| s.node.as_ref())).collect();
    nodes.sort();
    nodes.dedup();
    plan.lost = nodes.into_iter().filter(|n| lost(world, n, now).is_ok()).cloned().collect();
    plan
}

/// Whether `node` is lost: `Ok(why)`, or `Err(Some(when it may be))`, or `Err(None)` (not while its agent is live).
fn lost(world: &World, node: &str, now: Instant) -> Result<Lost, Option<Duration>> {
    let agent = world.agents.get(node);
    // The Lease ran out at its last renewal seen and its duration; a Lease never seen, from the controller's start.
    let out_since = agent.map_or(world.started, |a| a.renewal_seen + a.duration);
    let lost_at = out_since + world.grace;
    if agent.is_some_and(|a| a.live(now)) {
        return Err(Some(lost_at.saturating_duration_since(now)));
    }
    let why = match world.nodes.get(node) {
        None => Lost::NodeDeleted,
        Some(n) if !n.ready => Lost::NodeNotReady,
        // Its Node is Ready: the kubelet runs, so the agent (a DaemonSet pod) is restarted there; moving would risk
        // two harnesses.
        Some(_) => return Err(None),
    };
    if now >= lost_at { Ok(why) } else { Err(Some(lost_at - now)) }
}

/// The node for `s`: the least loaded that fits, ties by name; or why none fits.
fn choose<'w>(world: &'w World, s: &Session, load: &HashMap<String, u32>, now: Instant) -> Result<&'w str, String> {
    choose_among(world, s, load, now, None)
}

/// The same among the agents' nodes, or only `only`.
fn choose_among<'w>(
    world: &'w World,
    s: &Session,
    load: &HashMap<String, u32>,
    now: Instant,
    only: Option<&str>,
) -> Result<&'w str, String> {
    let mut why = Vec::new();
    let mut best: Option<(&str, u32)> = None;
    let mut names: Vec<&String> = world.agents.keys().filter(|n| only.is_none_or(|o| o == n.as_str())).collect();
    names.sort();
    if let Some(only) = only.filter(|_| names.is_empty()) {
        return Err(format!("no node fits: {only}: no worksession agent runs there"));
    }
    for name in names {
        let agent = &world.agents[name];
        let n = load.get(name).copied().unwrap_or(0);
        let refusal = match world.nodes.get(name) {
            _ if !agent.live(now) => Some("its agent's Lease ran out"),
            None => Some("no Node object"),
            Some(node) if !node.ready => Some("NotReady"),
            Some(node) if node.unschedulable => Some("cordoned"),
            Some(node) if !s.selector.iter().all(|(k, v)| node.labels.get(k) == Some(v)) => {
                Some("does not match nodeSelector")
            }
            Some(_) if !agent.serves(&s.namespace) => Some("its agent does not serve this namespace"),
            Some(_) if agent.max_sessions.is_some_and(|max| n >= max) => Some("full (maxSessions)"),
            Some(_) if s.node.as_deref() == Some(name.as_str()) => Some("its own node"),
            Some(_) => None,
        };
        match refusal {
            Some(r) => why.push(format!("{name}: {r}")),
            None if best.is_none_or(|(_, m)| n < m) => best = Some((name, n)),
            None => {}
        }
    }
    match best {
        Some((name, _)) => Ok(name),
        None if why.is_empty() => Err("no node runs a worksession agent".into()),
        // A condition's message for people (and for every tenant who can read the session): the first few nodes say
        // why, the rest are counted.
        None if why.len() > WHY_NODES => {
            let more = why.len() - WHY_NODES;
            Err(format!("no node fits: {}; and {more} more nodes", why[..WHY_NODES].join("; ")))
        }
        None => Err(format!("no node fits: {}", why.join("; "))),
    }
}

#[cfg(test)]
mod tests;
