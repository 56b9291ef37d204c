//! Idle suspension (product brief, "Idle"): a quiet live harness with nothing owed is stopped and the session goes
//! `Idle`; a prompt still owed or output within the period keeps it; an idle session stays stopped whatever its
//! restart policy until a prompt wakes it, which resumes its conversation and is no failure.

use super::*;
use crate::api::IdleSpec;

/// A running session of `OLD` whose window last printed before t(`quiet_since`) (in the second that ends then),
/// idle after 60 s, nothing pending.
fn quiet_since(quiet_since: i64) -> Case {
    let mut case = Case::new(WorkSessionStatus { phase: Some(Phase::Running), ..ran_old() });
    case.spec.idle = Some(IdleSpec { suspend_after_seconds: Some(60) });
    case.liveness = Liveness::Alive;
    case.events = Vec::new();
    let activity = t(quiet_since).as_second() - 1;
    case.tmux = Some(SessionView { alive: true, activity, ..ours() });
    case
}

#[test]
fn quiet_for_the_period_with_nothing_owed_the_harness_is_stopped_as_idle() {
    let mut case = quiet_since(40); // quiet for 60 s at t(100)
    let plan = case.step();
    assert_eq!(ops(&plan), ["stop loop-ns_repo-12", "session.idle"]);
    assert_eq!(plan.status.phase, Some(Phase::Idle));
    assert_eq!(condition(&plan.status, READY), Some(("False", "Idle")));
    assert_eq!(plan.status.idle_since, Some(Time(t(100))));
    assert_eq!((plan.status.failure_count, plan.status.respawn_count), (0, 0));
}

/// What `Ready` says of a stopped session comes from its state (phase, stopped for quiet, the period), not from what
/// the condition said before: the same words at the stop and at every decision after, whatever took its place meanwhile.
#[test]
fn a_stopped_sessions_ready_words_come_from_its_state_at_every_decision() {
    let ready = |plan: &Plan| plan.status.conditions.iter().find(|c| c.type_ == READY.as_str()).unwrap().clone();
    for archived in [false, true] {
        let mut case = quiet_since(0);
        case.spec.archived = archived;
        let stopped = ready(&case.step());
        case.liveness = Liveness::Absent;
        case.tmux = None;
        case.now = t(200);
        assert_eq!(ready(&case.step()), stopped, "archived: {archived}");
        case.status.conditions.clear(); // something else said it meanwhile, or the status came back without it
        let again = ready(&case.step());
        assert_eq!((again.reason, again.message), (stopped.reason, stopped.message), "archived: {archived}");
    }
}

/// tmux names the second of a window's last output, not the moment: output within it may have come at its end.
#[test]
fn quiet_counts_from_the_end_of_the_second_tmux_names() {
    let mut case = quiet_since(41); // tmux says 40: printed at t(40.999) at the latest
    case.now = t(100) + SignedDuration::from_millis(900);
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new(), "quiet for 59 s for all it knows");
    assert_eq!(plan.requeue_after, Some(Duration::from_millis(100)));
    case.now = t(101);
    assert_eq!(ops(&case.step()), ["stop loop-ns_repo-12", "session.idle"]);
}

#[test]
fn output_within_the_period_keeps_it_and_the_agent_comes_back_when_the_period_would_end() {
    let plan = quiet_since(70).step();
    assert_eq!(ops(&plan), Vec::<String>::new());
    assert_eq!(plan.status.phase, Some(Phase::Running));
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(30)));
}

#[test]
fn a_prompt_waiting_or_being_delivered_keeps_it() {
    let mut delivering_one = quiet_since(0);
    delivering_one.events = vec![delivering("e1", "hello", Via::Pasted)];
    delivering_one.now = t(100) + SignedDuration::from_millis(500); // not yet proven by the probe
    delivering_one.status.last_respawn.as_mut().unwrap().time = Time(t(99));
    assert!(!ops(&delivering_one.step()).iter().any(|o| o.starts_with("stop")));
    let mut waiting = quiet_since(0);
    waiting.events = vec![ev("e1", "hello")];
    let plan = waiting.step();
    assert_eq!(ops(&plan)[0], "paste e1 into loop-ns_repo-12: hello", "delivered, not stopped");
    assert_eq!(plan.status.phase, Some(Phase::Running));
}

#[test]
fn unset_or_zero_never_stops_and_the_agent_config_gives_the_default() {
    let mut off = quiet_since(-10_000);
    off.spec.idle = Some(IdleSpec { suspend_after_seconds: Some(0) });
    off.config.defaults.idle_suspend_after_seconds = Some(60);
    assert_eq!(ops(&off.step()), Vec::<String>::new(), "0 in the spec turns it off");
    let mut unset = quiet_since(-10_000);
    unset.spec.idle = None;
    assert_eq!(ops(&unset.step()), Vec::<String>::new(), "off unless set");
    unset.config.defaults.idle_suspend_after_seconds = Some(60);
    assert_eq!(ops(&unset.step()), ["stop loop-ns_repo-12", "session.idle"], "the config's default");
}

#[test]
fn an_idle_session_stays_stopped_whatever_its_policy_until_a_prompt_wakes_it_resumed_and_no_failure() {
    let mut case = quiet_since(0);
    case.spec.restart_policy = RestartPolicy::Always;
    case.step();
    // The stopped session is gone from tmux: nothing respawns it.
    case.liveness = Liveness::Absent;
    case.tmux = None;
    case.now = t(200);
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new());
    assert_eq!((plan.status.phase, condition(&plan.status, READY)), (Some(Phase::Idle), Some(("False", "Idle"))));
    // A prompt wakes it: the recorded conversation is resumed with the prompt as its boot prompt.
    case.events = vec![ev("e1", "please fix the bug")];
    let plan = case.step();
    assert_eq!(ops(&plan)[..2], ["record intent", "session.woken"]);
    assert_eq!(spawned(&plan), RESUME_E1);
    assert_eq!(plan.status.idle_since, None);
    assert_eq!((plan.status.failure_count, plan.status.next_retry_time.clone()), (0, None), "not a failure");
    case.liveness = Liveness::Alive;
    case.now = t(203);
    let plan = case.step();
    assert_eq!(condition(&plan.status, RESUMED), Some(("True", "Resumed")));
    assert_eq!(plan.status.phase, Some(Phase::Running));
}

/// A workdir removed while the session is stopped holds only a spawn: idle stays idle, and the prompt that would
/// wake it waits with the reason, the session still idle (whatever its restart policy), until the directory is there.
#[test]
fn an_idle_session_whose_workdir_is_gone_stays_idle_until_a_prompt_would_spawn() {
    let mut case = quiet_since(0);
    case.spec.restart_policy = RestartPolicy::Never;
    case.step();
    (case.liveness, case.tmux, case.workspace) = (Liveness::Absent, None, Workspace::NoWorkdir);
    let plan = case.step();
    assert_eq!((plan.status.phase, condition(&plan.status, READY)), (Some(Phase::Idle), Some(("False", "Idle"))));
    assert_eq!(plan.requeue_after, None, "a stopped session is not looked at again");
    case.events = vec![ev("e1", "please fix the bug")];
    for _ in 0..2 {
        let plan = case.step();
        assert_eq!(ops(&plan), Vec::<String>::new());
        assert_eq!(
            (plan.status.phase, condition(&plan.status, READY)),
            (Some(Phase::Idle), Some(("False", "WorkdirMissing"))),
            "still the stopped session the prompt wakes, looked at again"
        );
        assert_eq!(plan.requeue_after, Some(CONFLICT_RECHECK));
    }
    case.workspace = Workspace::Ready;
    let plan = case.step();
    assert_eq!(ops(&plan)[..2], ["record intent", "session.woken"], "said once, when it wakes");
    assert_eq!(spawned(&plan), RESUME_E1, "woken once the directory is there");
}

#[test]
fn an_idle_session_stays_idle_while_the_tmux_server_is_gone() {
    let mut case = quiet_since(0);
    case.spec.restart_policy = RestartPolicy::Always;
    case.config.tmux.start_server = false;
    case.step();
    case.liveness = Liveness::Absent;
    case.tmux = None;
    case.server = false;
    let plan = case.step();
    assert_eq!(
        (plan.status.phase, condition(&plan.status, READY)),
        (Some(Phase::Idle), Some(("False", "TmuxUnavailable")))
    );
    // The server back (empty): still idle, nothing respawned without a prompt.
    case.server = true;
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new());
    assert_eq!((plan.status.phase, condition(&plan.status, READY)), (Some(Phase::Idle), Some(("False", "Idle"))));
}

// A closed work item archives its session (`spec.archived`), the stop of an idle one with a short period.

#[test]
fn a_closed_work_item_stops_its_quiet_harness_within_a_minute_as_archived() {
    let mut case = quiet_since(39); // quiet for 61 s at t(100); the session's own idle period is an hour
    case.spec.idle = Some(IdleSpec { suspend_after_seconds: Some(3600) });
    case.spec.archived = true;
    let plan = case.step();
    assert_eq!(ops(&plan), ["stop loop-ns_repo-12", "session.archived"]);
    assert_eq!(
        (plan.status.phase, condition(&plan.status, READY)),
        (Some(Phase::Archived), Some(("False", "Archived")))
    );
    assert_eq!((plan.status.failure_count, plan.status.respawn_count), (0, 0), "not a death");
    // Without an idle period of its own, archived: the same minute.
    let mut unset = quiet_since(39);
    unset.spec.idle = None;
    unset.spec.archived = true;
    assert_eq!(ops(&unset.step()), ["stop loop-ns_repo-12", "session.archived"]);
    // One that printed within the minute works on: it is stopped once quiet.
    let mut busy = quiet_since(70);
    busy.spec.archived = true;
    let plan = busy.step();
    assert_eq!((ops(&plan), plan.requeue_after), (Vec::<String>::new(), Some(Duration::from_secs(30))));
}

/// A session archived while it ran with restartPolicy Always, its harness since stopped.
fn archived_and_stopped() -> Case {
    let mut case = quiet_since(0);
    case.spec.archived = true;
    case.spec.restart_policy = RestartPolicy::Always;
    case.step();
    case.liveness = Liveness::Absent;
    case.tmux = None;
    case.now = t(200);
    case
}

#[test]
fn an_archived_session_is_not_started_but_a_prompt_wakes_it_and_reopening_resumes_it() {
    let mut case = archived_and_stopped();
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new(), "whatever its restart policy");
    assert_eq!(plan.status.phase, Some(Phase::Archived));
    // A comment on the closed work item: resumed with it, never lost to the archive.
    case.events = vec![ev("e1", "please fix the bug")];
    let plan = case.step();
    assert_eq!(ops(&plan)[..2], ["record intent", "session.woken"]);
    assert_eq!(spawned(&plan), RESUME_E1);
    // Reopened: the conversation is resumed at once, nothing waiting.
    let mut case = archived_and_stopped();
    case.step();
    case.spec.archived = false;
    let plan = case.step();
    assert_eq!(ops(&plan)[..2], ["record intent", "session.woken"]);
    assert_eq!(spawned(&plan), format!("spawn loop-ns_repo-12 claude --resume {OLD}"));
}

#[test]
fn a_session_not_running_when_its_work_item_closes_reads_archived_and_never_starts() {
    let mut case = Case::new(WorkSessionStatus::default()); // never started
    case.events = Vec::new();
    case.spec.archived = true;
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new());
    assert_eq!(
        (plan.status.phase, condition(&plan.status, READY)),
        (Some(Phase::Archived), Some(("False", "Archived")))
    );
}

#[test]
fn restart_policy_never_does_not_keep_a_prompt_from_waking_an_archived_session() {
    let mut case = archived_and_stopped();
    case.spec.restart_policy = RestartPolicy::Never;
    case.step();
    case.events = vec![ev("e1", "please fix the bug")];
    let plan = case.step();
    assert_eq!(spawned(&plan), RESUME_E1, "stopped on purpose is not an exit");
}
