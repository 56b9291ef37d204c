//! The workspace gate: a session with `spec.workspace` spawns only once its checkout is prepared; the
//! preparation runs beside the reconcile while the session is `Preparing`; a failure says what git printed and backs
//! off; a session that goes removes its worktree (the executor keeps one holding uncommitted work).

use super::*;
use crate::api::WorkspaceSpec;

/// A first start of a session with a workspace, its event waiting.
fn with_workspace(workspace: Workspace) -> Case {
    let mut case = Case::new(WorkSessionStatus::default());
    case.spec.workspace = Some(WorkspaceSpec { url: "https://github.com/octo/api.git".into(), r#ref: None });
    case.liveness = Liveness::Absent;
    case.workspace = workspace;
    case
}

#[test]
fn not_prepared_the_preparation_starts_and_nothing_spawns() {
    let mut case = with_workspace(Workspace::Missing);
    let plan = case.step();
    assert_eq!(ops(&plan), ["prepare workspace"]);
    assert_eq!(plan.status.phase, Some(Phase::Preparing));
    assert_eq!(condition(&plan.status, WORKSPACE_READY), Some(("False", "Preparing")));
    assert_eq!(condition(&plan.status, READY), Some(("False", "Preparing")));
    assert_eq!(plan.requeue_after, Some(PREPARE_RECHECK));
}

#[test]
fn while_it_prepares_the_session_waits_and_looks_again() {
    let mut case = with_workspace(Workspace::Preparing);
    let plan = case.step();
    assert!(ops(&plan).is_empty(), "{:?}", ops(&plan));
    assert_eq!(plan.status.phase, Some(Phase::Preparing));
    assert_eq!(plan.requeue_after, Some(PREPARE_RECHECK));
}

#[test]
fn prepared_the_condition_names_the_commit_and_the_harness_spawns_with_the_event() {
    let prepared =
        Workspace::Prepared { branch: "worksession/repo-12".into(), commit: "0123abc".into(), adopted: false };
    let mut case = with_workspace(prepared);
    case.status.failure_count = 2; // earlier failed preparations
    let plan = case.step();
    let c = plan.status.conditions.iter().find(|c| c.type_ == WORKSPACE_READY.as_str()).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Prepared"));
    assert!(c.message.contains("worksession/repo-12") && c.message.contains("0123abc"), "{}", c.message);
    assert_eq!(ops(&plan)[..2], ["record intent", "workspace.prepared"]);
    assert!(spawned(&plan).contains("please fix the bug"), "{:?}", ops(&plan));
    assert_eq!(plan.status.failure_count, 0);
}

/// A workdir that is not there, with nothing to clone into it, is a person's mistake: the session says so, spawns
/// nothing (no crash loop, no back-off), keeps its prompts and looks again; a live harness is left alone.
#[test]
fn a_missing_workdir_without_a_workspace_says_so_and_nothing_spawns() {
    let mut case = Case::new(WorkSessionStatus::default());
    (case.liveness, case.workspace) = (Liveness::Absent, Workspace::NoWorkdir);
    let plan = case.step();
    assert!(ops(&plan).is_empty(), "{:?}", ops(&plan));
    assert_eq!(plan.status.phase, Some(Phase::Pending));
    assert_eq!(condition(&plan.status, READY), Some(("False", "WorkdirMissing")));
    let ready = plan.status.conditions.iter().find(|c| c.type_ == READY.as_str()).unwrap();
    assert!(ready.message.contains(&case.spec.workdir), "{}", ready.message);
    assert_eq!((plan.status.failure_count, plan.requeue_after), (0, Some(CONFLICT_RECHECK)));
    case.workspace = Workspace::Ready;
    assert!(spawned(&case.step()).contains("please fix the bug"), "spawned once it is there");
    let mut live = Case::new(ran_old());
    (live.liveness, live.tmux, live.workspace) =
        (Liveness::Alive, Some(SessionView { alive: true, ..ours() }), Workspace::NoWorkdir);
    assert_eq!(ops(&live.step())[0], "paste e1 into loop-ns_repo-12: please fix the bug", "a live harness goes on");
}

#[test]
fn prepared_before_a_respawn_goes_ahead_without_git() {
    let mut case = with_workspace(Workspace::Ready);
    let plan = case.step();
    assert!(!ops(&plan).iter().any(|o| o.contains("workspace")), "{:?}", ops(&plan));
    assert!(!spawned(&plan).is_empty());
}

#[test]
fn a_failure_says_what_git_printed_and_backs_off_then_tries_again() {
    let mut case =
        with_workspace(Workspace::Failed("fatal: repository 'https://github.com/octo/api.git/' not found".into()));
    let plan = case.step();
    assert_eq!(ops(&plan), ["workspace.failed"]);
    assert_eq!(plan.status.phase, Some(Phase::BackOff));
    let c = plan.status.conditions.iter().find(|c| c.type_ == WORKSPACE_READY.as_str()).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "PrepareFailed"));
    assert!(c.message.contains("not found"), "{}", c.message);
    assert_eq!(plan.requeue_after, Some(BACKOFF_BASE));

    // Within the back-off nothing runs; after it, the preparation starts again.
    case.workspace = Workspace::Missing;
    case.now = t(105);
    let plan = case.step();
    assert!(ops(&plan).is_empty(), "{:?}", ops(&plan));
    assert_eq!(plan.requeue_after, Some(std::time::Duration::from_secs(5)));
    case.now = t(111);
    assert_eq!(ops(&case.step()), ["prepare workspace"]);
}

#[test]
fn a_live_harness_is_never_held_up_by_its_workspace() {
    let mut case = with_workspace(Workspace::Missing);
    case.status = WorkSessionStatus { phase: Some(Phase::Running), ..ran_old() };
    case.liveness = Liveness::Alive;
    case.tmux = Some(SessionView { alive: true, ..ours() });
    let plan = case.step();
    assert!(!ops(&plan).contains(&"prepare workspace".to_string()), "{:?}", ops(&plan));
}

#[test]
fn a_deleted_session_removes_its_workspace_before_releasing_the_finalizer() {
    let mut case = with_workspace(Workspace::Ready);
    case.deleting = true;
    assert_eq!(ops(&case.step()), ["stop loop-ns_repo-12", "remove workspace", "release finalizer"]);
}

/// A namespace checks out only the repositories its list allows; the rest is refused, waiting for a
/// change, with nothing prepared or spawned.
#[test]
fn a_repository_outside_the_namespaces_list_is_refused() {
    let mut case = Case::new(WorkSessionStatus::default());
    case.spec.workspace = Some(crate::api::WorkspaceSpec { url: "https://github.com/other/x.git".into(), r#ref: None });
    case.workspace = Workspace::Missing;
    case.config.workspaces.repositories =
        Some([("ns".to_string(), vec!["https://github.com/octo/*".to_string()])].into());
    let plan = case.decide();
    assert_eq!(ops(&plan), Vec::<String>::new(), "nothing prepared, nothing spawned");
    assert_eq!(plan.status.phase, Some(Phase::Failed));
    assert_eq!(condition(&plan.status, READY), Some(("False", "WorkspaceNotAllowed")));
    case.spec.workspace.as_mut().unwrap().url = "https://github.com/octo/api.git".into();
    assert_eq!(ops(&case.decide()), ["prepare workspace"], "allowed: prepared");
}
