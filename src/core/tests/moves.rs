//! A move on purpose: an idle session moves at once, a busy one after its current prompt is known
//! delivered; the status goes first, then the harness stops, then the session is handed over, and nothing more is
//! written by this node.

use super::*;

/// A running session of `OLD` asked to move to `node-b`, nothing pending.
fn asked_to_move() -> Case {
    let mut case = Case::new(WorkSessionStatus { phase: Some(Phase::Running), ..ran_old() });
    case.liveness = Liveness::Alive;
    case.tmux = Some(SessionView { alive: true, ..ours() });
    case.events = Vec::new();
    case.move_to = Some("node-b");
    case
}

#[test]
fn an_idle_session_asked_to_move_is_stopped_and_handed_over_at_once() {
    let plan = asked_to_move().step();
    assert_eq!(ops(&plan), ["record intent", "stop loop-ns_repo-12", "session.moved", "move to node-b"]);
    assert_eq!(plan.status.phase, Some(Phase::Pending));
    assert_eq!(condition(&plan.status, READY), Some(("False", "Moving")));
    assert!(plan.releases(), "the status is not written after the hand-over: the next node's now");
    assert_eq!(plan.status.harness_session_id.as_deref(), Some(OLD), "the conversation goes with it");
}

/// A session with a room leaves nothing of it behind: the harness stops, the room is released (its uid's every
/// process killed, its workdir moved aside), and only then is the session handed over.
#[test]
fn a_session_leaving_a_node_releases_its_room_there() {
    let mut case = asked_to_move();
    super::isolation::rooms_on(&mut case);
    case.room = Some(Ok(super::isolation::room()));
    let plan = case.step();
    assert_eq!(
        ops(&plan),
        ["record intent", "stop loop-ns_repo-12", "release room", "session.moved", "move to node-b"]
    );
    // A room the gate refuses now (its workdir no longer allowed, say) may still hold processes: released all the same.
    case.room = Some(Err("the workdir is not allowed"));
    assert!(ops(&case.step()).contains(&"release room".to_string()));
    // On storage every node shares, the room goes with the session: only its processes here are stopped.
    case.room = Some(Ok(super::isolation::room()));
    case.config.rooms.as_mut().unwrap().shared = true;
    let plan = case.step();
    assert_eq!(ops(&plan), ["record intent", "stop loop-ns_repo-12", "leave room", "session.moved", "move to node-b"]);
}

#[test]
fn a_busy_session_moves_only_after_its_current_prompt_is_known_delivered() {
    let mut busy = asked_to_move();
    busy.events = vec![delivering("e1", "hello", Via::Pasted)];
    busy.now = t(100);
    let plan = busy.step();
    assert!(!ops(&plan).iter().any(|o| o.starts_with("move") || o.starts_with("stop")), "{:?}", ops(&plan));
    assert!(plan.requeue_after.is_some_and(|d| d <= Duration::from_secs(1)), "looked at again soon");

    let mut confirmed = asked_to_move();
    confirmed.events = Vec::new(); // delivered meanwhile
    assert!(ops(&confirmed.step()).contains(&"move to node-b".to_string()));
}

#[test]
fn a_dead_sessions_prompt_being_delivered_goes_back_to_wait_for_the_new_node() {
    let mut dead = asked_to_move();
    dead.liveness = Liveness::Dead;
    dead.tmux = Some(SessionView { alive: false, ..ours() });
    dead.events = vec![delivering("e1", "hello", Via::Pasted)];
    let plan = dead.step();
    let ops = ops(&plan);
    assert!(ops.contains(&"event e1 Pending".to_string()), "{ops:?}");
    assert_eq!(ops.last().map(String::as_str), Some("move to node-b"));
}

/// The first spawn on a node the session came to from a lost node, whose resume finds no conversation (no shared
/// storage), is fresh with a reason that says the node was lost, and keeps the old id.
#[test]
fn a_failed_resume_after_a_lost_node_says_the_node_was_lost() {
    let mut case = Case::new(ran_old());
    let moved = "node a was lost (NotReady); placed again on node b";
    let message = moved.into();
    case.status.moved_from = Some(crate::api::MovedFrom { node: "a".into(), time: Time(t(50)), message });
    case.step();
    case.output = "No conversation found with session ID: 0a0b0c0d-old";
    case.liveness = Liveness::Dead;
    let plan = case.step();
    let fresh = plan.status.verification.as_ref().unwrap();
    assert_eq!(fresh.fresh_reason.as_deref(), Some("NodeLost"), "the fresh spawn's reason");
    case.liveness = Liveness::Alive;
    case.now = t(103);
    let plan = case.step();
    assert_eq!(plan.status.previous_session_ids, [OLD]);
    let resumed = plan.status.conditions.iter().find(|c| c.type_ == RESUMED.as_str()).unwrap();
    assert_eq!((resumed.status.as_str(), resumed.reason.as_str()), ("False", "NodeLost"));
    assert!(
        resumed.message.contains(moved) && resumed.message.contains("No conversation found"),
        "{}",
        resumed.message
    );
}
