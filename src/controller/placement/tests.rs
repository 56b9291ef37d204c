//! The placement rule as a table.

use super::*;

const LEASE: Duration = Duration::from_secs(40);
const GRACE: Duration = Duration::from_secs(300);

struct Fleet {
    world: World,
    now: Instant,
}

impl Fleet {
    fn new() -> Self {
        let now = Instant::now() + Duration::from_secs(3600);
        let world = World {
            sessions: Vec::new(),
            nodes: HashMap::new(),
            agents: HashMap::new(),
            grace: GRACE,
            cordon_moves: true,
            started: now - Duration::from_secs(3000),
        };
        Self { world, now }
    }

    /// A Ready node running a live agent that renewed its Lease `ago`.
    fn node(mut self, name: &str, labels: &[(&str, &str)], max: Option<u32>, ago: Duration) -> Self {
        let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.world.nodes.insert(name.into(), Node { labels, ready: true, unschedulable: false });
        let agent = Agent { renewal_seen: self.now - ago, duration: LEASE, max_sessions: max, namespaces: vec![] };
        self.world.agents.insert(name.into(), agent);
        self
    }

    fn session(mut self, name: &str, node: Option<&str>) -> Self {
        self.world.sessions.push(Session {
            namespace: "team".into(),
            name: name.into(),
            node: node.map(Into::into),
            selector: BTreeMap::new(),
            on_node_lost: NodeLostPolicy::Move,
            move_request: None,
            move_to: None,
            said_lost: false,
        });
        self
    }

    fn with(mut self, change: impl FnOnce(&mut World)) -> Self {
        change(&mut self.world);
        self
    }

    fn decide(&self) -> Vec<(String, Action)> {
        decide(&self.world, self.now).decisions.into_iter().map(|((_, name), d)| (name, d)).collect()
    }
}

fn bind(node: &str) -> Action {
    Action::Bind { node: node.into(), from: None }
}

const NOW: Duration = Duration::ZERO;

#[test]
fn an_unplaced_session_goes_to_the_least_loaded_node_with_a_ready_agent() {
    let fleet = Fleet::new().node("a", &[], None, NOW).node("b", &[], None, NOW).session("busy", Some("a"));
    let fleet = fleet.session("new-1", None).session("new-2", None).session("new-3", None);
    // a holds one already: b first, then both have one, a by name, then b again.
    assert_eq!(fleet.decide(), [("new-1".into(), bind("b")), ("new-2".into(), bind("a")), ("new-3".into(), bind("b"))]);
}

#[test]
fn a_session_placed_on_a_live_node_needs_no_decision() {
    let fleet = Fleet::new().node("a", &[], None, NOW).session("s", Some("a"));
    assert!(fleet.decide().is_empty());
    let plan = decide(&fleet.world, fleet.now);
    assert_eq!(plan.recheck_after, Some(LEASE + GRACE), "looked at again when its node may be lost");
}

#[test]
fn the_node_selector_and_the_capacity_are_honoured() {
    let fleet = Fleet::new().node("gpu", &[("kind", "gpu")], Some(1), NOW).node("cpu", &[], None, NOW);
    let fleet = fleet.session("one", None).session("two", None).with(|w| {
        for s in &mut w.sessions {
            s.selector.insert("kind".into(), "gpu".into());
        }
    });
    let decided = fleet.decide();
    assert_eq!(decided[0], ("one".into(), bind("gpu")));
    let Action::NoFit { why, lost: None } = &decided[1].1 else { panic!("{decided:?}") };
    assert_eq!(why, "no node fits: cpu: does not match nodeSelector; gpu: full (maxSessions)");
}

#[test]
fn a_cordoned_node_a_notready_node_and_a_silent_agent_take_nothing() {
    let fleet = Fleet::new().node("cordoned", &[], None, NOW).node("down", &[], None, NOW);
    let fleet = fleet.node("silent", &[], None, LEASE).session("s", None).with(|w| {
        w.nodes.get_mut("cordoned").unwrap().unschedulable = true;
        w.nodes.get_mut("down").unwrap().ready = false;
    });
    let Action::NoFit { why, .. } = &fleet.decide()[0].1 else { panic!() };
    assert_eq!(why, "no node fits: cordoned: cordoned; down: NotReady; silent: its agent's Lease ran out");
}

#[test]
fn an_agent_that_does_not_serve_the_namespace_takes_none_of_it() {
    let fleet = Fleet::new().node("theirs", &[], None, NOW).session("s", None).with(|w| {
        w.agents.get_mut("theirs").unwrap().namespaces = vec!["other-team".into()];
    });
    let Action::NoFit { why, .. } = &fleet.decide()[0].1 else { panic!() };
    assert!(why.contains("does not serve this namespace"), "{why}");
}

#[test]
fn no_agent_at_all_says_so() {
    let fleet = Fleet::new().session("s", None);
    assert_eq!(fleet.decide()[0].1, Action::NoFit { why: "no node runs a worksession agent".into(), lost: None });
}

#[test]
fn a_node_notready_whose_agent_is_silent_past_the_grace_is_lost_and_its_session_placed_again() {
    let fleet = Fleet::new().node("gone", &[], None, LEASE + GRACE).node("b", &[], None, NOW);
    let fleet = fleet.session("s", Some("gone")).with(|w| w.nodes.get_mut("gone").unwrap().ready = false);
    let from = Some(("gone".to_string(), Lost::NodeNotReady));
    assert_eq!(fleet.decide(), [("s".into(), Action::Bind { node: "b".into(), from })]);
}

#[test]
fn within_the_grace_a_silent_node_is_not_lost_yet_and_is_looked_at_when_it_may_be() {
    let silent = LEASE + GRACE - Duration::from_secs(10);
    let fleet = Fleet::new().node("gone", &[], None, silent).node("b", &[], None, NOW);
    let fleet = fleet.session("s", Some("gone")).with(|w| w.nodes.get_mut("gone").unwrap().ready = false);
    let plan = decide(&fleet.world, fleet.now);
    assert!(plan.decisions.is_empty());
    assert_eq!(plan.recheck_after, Some(Duration::from_secs(10)));
    assert!(plan.lost.is_empty(), "not lost yet");
}

#[test]
fn the_plan_names_the_nodes_lost_now() {
    let fleet = Fleet::new().node("gone", &[], None, LEASE + GRACE).node("b", &[], None, NOW);
    let fleet = fleet.session("s", Some("gone")).with(|w| w.nodes.get_mut("gone").unwrap().ready = false);
    assert_eq!(decide(&fleet.world, fleet.now).lost, ["gone"]);
}

#[test]
fn a_ready_node_whose_agent_is_silent_is_not_lost() {
    // The kubelet runs: the DaemonSet restarts the agent there, and moving would risk two harnesses.
    let fleet = Fleet::new().node("a", &[], None, LEASE + GRACE * 2).node("b", &[], None, NOW).session("s", Some("a"));
    assert!(fleet.decide().is_empty());
}

#[test]
fn a_deleted_node_is_lost_once_its_agent_is_silent_past_the_grace() {
    let fleet = Fleet::new().node("gone", &[], None, LEASE + GRACE).node("b", &[], None, NOW);
    let fleet = fleet.session("s", Some("gone")).with(|w| drop(w.nodes.remove("gone")));
    let from = Some(("gone".to_string(), Lost::NodeDeleted));
    assert_eq!(fleet.decide(), [("s".into(), Action::Bind { node: "b".into(), from })]);
}

#[test]
fn a_session_on_a_node_whose_agent_was_never_seen_counts_from_the_controllers_start() {
    let fleet = Fleet::new().node("b", &[], None, NOW).session("s", Some("never"));
    let fleet = fleet.with(|w| w.started = Instant::now() + Duration::from_secs(3600) - GRACE / 2);
    assert!(fleet.decide().is_empty(), "half the grace since the start: not yet");
    let fleet = fleet.with(|w| w.started -= GRACE);
    let from = Some(("never".to_string(), Lost::NodeDeleted));
    assert_eq!(fleet.decide(), [("s".into(), Action::Bind { node: "b".into(), from })]);
}

#[test]
fn a_session_whose_policy_is_wait_stays_on_its_lost_node() {
    let fleet = Fleet::new().node("gone", &[], None, LEASE + GRACE).node("b", &[], None, NOW);
    let fleet = fleet.session("s", Some("gone")).with(|w| {
        w.nodes.get_mut("gone").unwrap().ready = false;
        w.sessions[0].on_node_lost = NodeLostPolicy::Wait;
    });
    assert_eq!(fleet.decide(), [("s".into(), Action::Waits { node: "gone".into(), lost: Lost::NodeNotReady })]);
}

#[test]
fn a_lost_nodes_session_that_fits_nowhere_says_both() {
    let fleet = Fleet::new().node("gone", &[], None, LEASE + GRACE).session("s", Some("gone"));
    let fleet = fleet.with(|w| w.nodes.get_mut("gone").unwrap().ready = false);
    let Action::NoFit { why, lost } = &fleet.decide()[0].1 else { panic!() };
    assert_eq!(lost, &Some(("gone".into(), Lost::NodeNotReady)));
    assert!(why.contains("gone: its agent's Lease ran out"), "{why}");
}

#[test]
fn a_move_to_any_node_chooses_one_other_than_its_own() {
    let fleet = Fleet::new().node("a", &[], None, NOW).node("b", &[], None, NOW).session("s", Some("a"));
    let fleet = fleet.with(|w| w.sessions[0].move_request = Some(crate::api::ANY_NODE.into()));
    assert_eq!(fleet.decide(), [("s".into(), Action::Move { node: "b".into() })]);
}

#[test]
fn a_move_to_a_named_node_goes_there_only_if_it_fits() {
    let fleet = Fleet::new().node("a", &[], None, NOW).node("b", &[], None, NOW).node("c", &[], None, NOW);
    let fleet = fleet.session("s", Some("a")).with(|w| w.sessions[0].move_request = Some("c".into()));
    assert_eq!(fleet.decide(), [("s".into(), Action::Move { node: "c".into() })], "not b, the least loaded");
    let full = fleet.with(|w| w.agents.get_mut("c").unwrap().max_sessions = Some(0));
    assert_eq!(
        full.decide(),
        [("s".into(), Action::NoFit { why: "no node fits: c: full (maxSessions)".into(), lost: None })]
    );
    let nowhere = full.with(|w| w.sessions[0].move_request = Some("x".into()));
    let Action::NoFit { why, .. } = &nowhere.decide()[0].1 else { panic!() };
    assert_eq!(why, "no node fits: x: no worksession agent runs there");
}

#[test]
fn a_decided_move_is_its_agents_to_make() {
    let fleet = Fleet::new().node("a", &[], None, NOW).node("b", &[], None, NOW).session("s", Some("a"));
    let fleet = fleet.with(|w| w.sessions[0].move_to = Some("b".into()));
    assert!(fleet.decide().is_empty());
}

#[test]
fn a_cordoned_nodes_sessions_move_off_it_unless_they_wait() {
    let fleet = Fleet::new().node("a", &[], None, NOW).node("b", &[], None, NOW).session("s", Some("a"));
    let fleet = fleet.session("stays", Some("a")).with(|w| {
        w.nodes.get_mut("a").unwrap().unschedulable = true;
        w.sessions[1].on_node_lost = NodeLostPolicy::Wait;
    });
    assert_eq!(fleet.decide(), [("s".into(), Action::Move { node: "b".into() })]);
}

/// Without storage every node shares, a cordon moves nothing (a move would start each conversation fresh): the
/// sessions go on where they are, no new one is placed there, and a move asked for by a person still happens.
#[test]
fn without_shared_storage_a_cordon_keeps_its_sessions_where_they_are() {
    let fleet = Fleet::new().node("a", &[], None, NOW).node("b", &[], None, NOW).session("s", Some("a"));
    let fleet = fleet.session("new", None).with(|w| {
        w.nodes.get_mut("a").unwrap().unschedulable = true;
        w.cordon_moves = false;
    });
    assert_eq!(fleet.decide(), [("new".into(), Action::Bind { node: "b".into(), from: None })]);
    let fleet = fleet.with(|w| w.sessions[0].move_request = Some(crate::api::ANY_NODE.into()));
    assert!(fleet.decide().contains(&("s".into(), Action::Move { node: "b".into() })));
}

#[test]
fn a_move_that_fits_nowhere_says_why() {
    let fleet = Fleet::new().node("a", &[], None, NOW).session("s", Some("a"));
    let fleet = fleet.with(|w| w.sessions[0].move_request = Some(crate::api::ANY_NODE.into()));
    let Action::NoFit { why, lost: None } = &fleet.decide()[0].1 else { panic!() };
    assert_eq!(why, "no node fits: a: its own node");
}

#[test]
fn why_nothing_fits_names_a_few_nodes_and_counts_the_rest() {
    let mut fleet = Fleet::new();
    for i in 0..20 {
        fleet = fleet.node(&format!("n{i:02}"), &[], Some(0), NOW);
    }
    let Action::NoFit { why, .. } = &fleet.session("s", None).decide()[0].1 else { panic!() };
    assert!(why.starts_with("no node fits: n00: full (maxSessions); n01:"), "{why}");
    assert!(why.ends_with("n07: full (maxSessions); and 12 more nodes"), "{why}");
}

#[test]
fn a_node_said_lost_that_is_back_is_said_back() {
    let fleet = Fleet::new().node("a", &[], None, NOW).session("s", Some("a"));
    let fleet = fleet.with(|w| w.sessions[0].said_lost = true);
    assert_eq!(fleet.decide(), [("s".into(), Action::Returned { node: "a".into() })]);
}
