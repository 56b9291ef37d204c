//! The plan is the whole decision: the finalizer (and which events go with a deleted session), expiring events, the
//! claims a spawn needs on the node and the room's record of a prepared checkout are ops the core decides, in the
//! executor's order.

use super::*;

#[test]
fn without_the_finalizer_the_plan_adds_it_and_nothing_else() {
    let mut case = Case::new(ran_old());
    case.finalized = false;
    let plan = case.decide();
    assert_eq!(ops(&plan), ["add finalizer"], "not the spawn the event asks for: the next reconcile decides it");
    assert_eq!((plan.status, plan.requeue_after), (ran_old(), Some(Duration::ZERO)), "status as recorded");
    case.deleting = true;
    let plan = case.decide();
    assert_eq!((ops(&plan), plan.requeue_after), (vec!["forget".to_string()], None), "going without it: not ours");
    assert!(plan.releases(), "nothing of the node is held for it, and its status is not written");
    assert_eq!(plan.status, ran_old());
}

/// Which events go with a deleted session is the core's rule: the executor reads them fresh (one written since this
/// reconcile read them too) and applies it.
#[test]
fn a_deleted_session_releases_its_finalizer_with_the_events_made_before_its_deletion_began() {
    let mut case = Case::new(ran_old());
    case.deleting = true;
    let plan = case.decide();
    let released = plan.ops.iter().find_map(|op| match op {
        Op::ReleaseFinalizer { deleting_since } => Some(*deleting_since),
        _ => None,
    });
    assert_eq!(released, Some(t(50)), "{plan:?}");
    assert!(crate::core::goes_with_its_session(Some(t(49)), t(50)));
    assert!(!crate::core::goes_with_its_session(Some(t(50)), t(50)), "made as the deletion began: kept");
    assert!(!crate::core::goes_with_its_session(Some(t(51)), t(50)), "a bridge acknowledged it after: kept");
    assert!(!crate::core::goes_with_its_session(None, t(50)), "when it was made is not known: kept");
}

#[test]
fn finished_events_expire_their_retention_after_they_finished_first_in_the_plan() {
    let mut case = Case::new(ran_old());
    case.liveness = Liveness::Alive;
    case.tmux = Some(ours());
    case.config.event_retention = Some(Duration::from_secs(60));
    case.finished = vec![FinishedWorkEvent::new("done-long-ago", t(0)), FinishedWorkEvent::new("done-lately", t(90))];
    let plan = case.decide();
    assert_eq!(ops(&plan)[..2], ["expire done-long-ago", "paste e1 into loop-ns_repo-12: please fix the bug"]);
    assert!(plan.requeue_after.is_some_and(|d| d <= Duration::from_secs(50)), "wakes for the next: {plan:?}");
    case.config.event_retention = None;
    assert!(!ops(&case.decide()).iter().any(|op| op.starts_with("expire")), "no retention: kept");
}

#[test]
fn a_spawn_claims_what_it_needs_of_the_node_before_its_intent() {
    // A fresh harness that shows its id after the start holds its workdir while it discovers it.
    let mut case = Case::new(WorkSessionStatus::default());
    case.spec.harness = "codex".into();
    let plan = case.decide();
    assert_eq!(ops(&plan)[..2], ["claim workdir /srv/work/repo", "record intent"]);
    // Adopting a conversation claims it; resuming its own recorded one claims nothing.
    let mut case = Case::new(WorkSessionStatus::default());
    case.spec.harness_session_id = Some(OLD.into());
    let plan = case.decide();
    assert_eq!(ops(&plan)[..3], [&format!("claim conversation {OLD}"), "record intent", RESUME_E1]);
    let plan = Case::new(ran_old()).decide();
    assert_eq!(ops(&plan)[..2], ["record intent", RESUME_E1]);
}

#[test]
fn a_checkout_the_agent_prepared_is_marked_for_the_room_before_the_spawn() {
    let prepared =
        Workspace::Prepared { branch: "worksession/repo-12".into(), commit: "0123abc".into(), adopted: false };
    let mut case = Case::new(ran_old());
    case.spec.workspace = Some(crate::api::WorkspaceSpec { url: "https://example.com/o/r.git".into(), r#ref: None });
    case.workspace = prepared.clone();
    case.room = Some(Ok(Room { uid: 200_001, home: "/srv/ws/.rooms/200001".into() }));
    case.config.rooms = Some(crate::node::room::RoomsConfig {
        root: "/srv/ws/.rooms".into(),
        first_uid: 200_000,
        count: 10,
        helper: "/usr/local/bin/worksession".into(),
        egress: None,
        shared: false,
        namespace_keys: None,
    });
    let plan = case.decide();
    assert_eq!(ops(&plan)[0], "mark prepared", "first: before anything that can fail");
    assert!(spawned(&plan).contains("--resume"), "{:?}", ops(&plan));
    // Whatever the decision: the preparation's result is read once, so it is recorded even when nothing spawns.
    case.spec.suspend = true;
    assert_eq!(ops(&case.decide())[0], "mark prepared");
    case.spec.suspend = false;
    let Workspace::Prepared { branch, commit, .. } = prepared.clone() else { unreachable!() };
    case.workspace = Workspace::Prepared { branch, commit, adopted: true };
    assert!(!ops(&case.decide()).contains(&"mark prepared".to_string()), "an adopted checkout is never handed over");
    case.workspace = prepared;
    case.room = None;
    assert!(!ops(&case.decide()).contains(&"mark prepared".to_string()), "no room: nothing to hand over");
}

/// A recorded intent whose spawn never ran (the agent was killed between the two) is run again, but a fresh harness
/// that discovers its id waits, as a first spawn would, while another session of its workdir discovers (a second
/// agent's reconcile may have taken the workdir meanwhile).
#[test]
fn a_spawn_run_again_waits_for_another_discovery_in_its_workdir() {
    let mut case = Case::new(WorkSessionStatus::default());
    case.spec.harness = "codex".into();
    let intent = case.decide().intent().unwrap().clone();
    case.status = intent;
    case.liveness = Liveness::Absent;
    case.discovering_here = Some("ns/other");
    let plan = case.decide();
    assert_eq!(ops(&plan), Vec::<String>::new(), "no claim it would lose, no spawn");
    assert_eq!(condition(&plan.status, READY), Some(("False", "WaitingForDiscovery")));
    assert!(plan.status.verification.is_some(), "the intent stays, to be run once the workdir is free");
    case.discovering_here = None;
    let plan = case.decide();
    assert_eq!(ops(&plan)[..2], ["claim workdir /srv/work/repo", "record intent"]);
    assert!(spawned(&plan).contains("codex"), "{:?}", ops(&plan));
}
