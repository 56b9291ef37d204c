//! Budgets: a session that spent what `spec.budget` allows, or whose namespace's sessions together spent what a
//! `WorkBudget` allows, sends no new prompt, is stopped after its turn with its conversation kept, keeps its prompts
//! waiting, and goes on once the budget is raised.

use super::*;
use crate::api::{BudgetSpec, Usage};

/// A live harness of `OLD` over a 1,000-token budget, with one prompt waiting.
fn spent_live(turn: Option<Turn>) -> Case {
    let tokens = crate::api::Tokens { input: 100, output: 20, cache_write: 30, cache_read: 900 };
    let models = vec![crate::api::ModelUsage { model: "claude-opus-5-5".into(), tokens, replies: 1 }];
    let usage = Usage { models, turns: 1, ..Default::default() };
    let mut case = Case::new(WorkSessionStatus { phase: Some(Phase::Running), usage: Some(usage), ..ran_old() });
    case.spec.budget = Some(BudgetSpec { tokens: Some(1000), cost: None });
    (case.liveness, case.tmux, case.turn) = (Liveness::Alive, Some(ours()), turn);
    case
}

/// `Ready`'s reason and message.
fn ready_of(status: &WorkSessionStatus) -> (String, String) {
    let c = status.conditions.iter().find(|c| c.type_ == READY.as_str()).expect("Ready");
    (c.reason.clone(), c.message.clone())
}

fn hook(hook: &str) -> Option<Turn> {
    Some(Turn { hook: hook.into(), at: Some(t(90)), message: None, kind: None })
}

#[test]
fn over_budget_mid_turn_nothing_new_is_sent_and_the_harness_works_on() {
    let plan = spent_live(hook("UserPromptSubmit")).decide();
    assert_eq!(ops(&plan), Vec::<String>::new(), "no paste, no stop while it works");
    assert_eq!(plan.status.phase, Some(Phase::Running));
}

#[test]
fn over_budget_after_its_turn_it_is_stopped_and_its_prompt_waits() {
    let mut case = spent_live(hook("Stop"));
    let plan = case.step();
    assert_eq!(
        ops(&plan),
        [format!("stop {}", case.config.tmux_session("ns/repo-12")), "session.budget_reached".into()]
    );
    assert_eq!(plan.status.phase, Some(Phase::Paused));
    let (reason, message) = ready_of(&plan.status);
    assert_eq!(reason, "BudgetReached");
    assert!(message.starts_with("spent 1050 of its budget of 1000 tokens; 1 prompt waits"), "{message}");
    assert_eq!(plan.status.harness_session_id.as_deref(), Some(OLD), "the conversation kept");

    // Stopped: no spawn for the waiting prompt, said once, the prompt still Pending.
    (case.liveness, case.tmux) = (Liveness::Absent, None);
    let plan = case.step();
    assert_eq!(ops(&plan), Vec::<String>::new(), "no spawn, no second Event");
    assert_eq!(plan.status.phase, Some(Phase::Paused));
    assert_eq!(case.events[0].phase, PromptPhase::Pending, "waits, never failed");

    // The budget raised: the conversation is resumed with the prompt that waited.
    case.spec.budget = Some(BudgetSpec { tokens: Some(5000), cost: None });
    let plan = case.decide();
    assert!(spawned(&plan).contains(&format!("--resume {OLD}")), "{:?}", ops(&plan));
    assert!(spawned(&plan).ends_with("please fix the bug"), "{:?}", ops(&plan));
}

#[test]
fn without_hooks_it_is_stopped_once_its_screen_is_quiet() {
    let mut case = spent_live(None);
    case.tmux = Some(SessionView { activity: t(99).as_second(), ..ours() });
    let plan = case.decide();
    assert!(!ops(&plan).iter().any(|op| op.starts_with("stop")), "it printed a second ago: {:?}", ops(&plan));
    assert!(plan.requeue_after.is_some());
    case.now = t(106);
    assert!(ops(&case.decide())[0].starts_with("stop"));
}

#[test]
fn a_cost_budget_with_an_unknown_cost_counts_as_reached() {
    let mut case = spent_live(hook("Stop"));
    case.spec.budget = Some(BudgetSpec { tokens: None, cost: Some("5".into()) });
    let message = ready_of(&case.decide().status).1;
    assert!(message.starts_with("spent an unknown cost (claude-opus-5-5 has no price"), "{message}");
    // Known and under, then reached: by the config's prices ($1,000 and $4,000 per million of each kind).
    let price =
        |dollars| crate::config::Price { input: dollars, output: dollars, cache_write: dollars, cache_read: dollars };
    for (dollars, phase) in [(1000.0, Phase::Running), (5000.0, Phase::Paused)] {
        let prices = std::collections::BTreeMap::from([("claude-opus-5-5".to_string(), Some(price(dollars)))]);
        case.config.prices = crate::config::Prices::with(prices).unwrap();
        assert_eq!(case.decide().status.phase, Some(phase), "${dollars} per million");
    }
}

#[test]
fn a_budget_that_is_no_budget_is_refused() {
    let mut spec = spec();
    spec.budget = Some(BudgetSpec { tokens: Some(0), cost: None });
    assert_eq!(crate::api::validate_spec(&spec).unwrap_err().field, "budget.tokens");
    for cost in ["", "-1", "1e3", "5 dollars", "1.1234567"] {
        spec.budget = Some(BudgetSpec { tokens: None, cost: Some(cost.into()) });
        assert_eq!(crate::api::validate_spec(&spec).unwrap_err().field, "budget.cost", "{cost:?}");
    }
    spec.budget = Some(BudgetSpec { tokens: Some(1), cost: Some("12.50".into()) });
    assert!(crate::api::validate_spec(&spec).is_ok());
}

#[test]
fn an_idle_or_archived_session_with_nothing_waiting_stays_so_over_budget() {
    for (phase, archived) in [(Phase::Idle, false), (Phase::Archived, true)] {
        let mut case = spent_live(None);
        (case.liveness, case.tmux, case.events) = (Liveness::Absent, None, vec![]);
        (case.status.phase, case.spec.archived) = (Some(phase), archived);
        let plan = case.decide();
        assert_eq!(plan.status.phase, Some(phase), "{phase:?}");
        assert!(!ops(&plan).contains(&"session.budget_reached".to_string()), "{:?}", ops(&plan));
        // A prompt for it, or its work item reopening, waits for the budget instead.
        case.events = vec![ev("e1", "please fix the bug")];
        assert_eq!(case.decide().status.phase, Some(Phase::Paused), "{phase:?}");
        (case.events, case.spec.archived) = (vec![], false);
        if phase == Phase::Archived {
            assert_eq!(case.decide().status.phase, Some(Phase::Paused), "reopened");
        }
    }
}

#[test]
fn a_paste_an_agent_made_before_it_stopped_is_recorded_while_over_budget() {
    let mut case = spent_live(hook("Stop"));
    // The earlier agent pasted e1 and stopped before recording it: its tag is on the tmux session.
    case.tmux = Some(SessionView { pasted: format!("{}/1/7", case.events[0].tag), ..ours() });
    let plan = case.decide();
    assert!(ops(&plan).contains(&"event e1 Delivering via Pasted".to_string()), "{:?}", ops(&plan));
    assert!(!ops(&plan).iter().any(|op| op.starts_with("stop")), "not stopped before its word");
}

#[test]
fn nothing_new_is_sent_while_the_count_catches_up_with_the_record() {
    let mut case = spent_live(hook("Stop"));
    case.spec.budget = Some(BudgetSpec { tokens: Some(1_000_000), cost: None });
    let more = crate::core::UsageRead { conversation: OLD.into(), more: true, ..Default::default() };
    case.usage = Some(more);
    let plan = case.decide();
    assert!(!ops(&plan).iter().any(|op| op.starts_with("paste")), "{:?}", ops(&plan));
    case.usage = None;
    assert!(ops(&case.decide()).iter().any(|op| op.starts_with("paste")), "caught up: sent");
}

#[test]
fn an_archived_session_over_budget_with_a_prompt_waiting_is_paused_after_its_turn() {
    let mut case = spent_live(hook("Stop"));
    case.spec.archived = true;
    let plan = case.decide();
    assert_eq!(plan.status.phase, Some(Phase::Paused), "{:?}", ops(&plan));
    assert!(ops(&plan)[0].starts_with("stop"));
}

#[test]
fn a_harness_that_exited_under_restart_policy_never_stays_failed_over_budget() {
    let mut case = spent_live(None);
    (case.liveness, case.tmux) = (Liveness::Dead, Some(SessionView { alive: false, ..ours() }));
    case.spec.restart_policy = RestartPolicy::Never;
    let plan = case.step();
    assert_eq!(plan.status.phase, Some(Phase::Failed), "{:?}", ops(&plan));
    // A raise does not bring it back.
    case.spec.budget = None;
    assert!(!ops(&case.decide()).iter().any(|op| op.starts_with("spawn")));
}

#[test]
fn a_session_paused_with_nothing_waiting_goes_on_when_its_budget_is_raised() {
    let mut case = spent_live(hook("Stop"));
    case.events.clear();
    case.status = case.step().status;
    assert_eq!(case.status.phase, Some(Phase::Paused));
    (case.liveness, case.tmux) = (Liveness::Absent, None);
    assert!(!ops(&case.decide()).iter().any(|op| op.starts_with("spawn")), "still over budget");
    case.spec.budget = None;
    assert!(spawned(&case.decide()).contains(&format!("--resume {OLD}")), "resumed without a prompt");
}

#[test]
fn nothing_starts_while_the_count_catches_up_under_a_budget() {
    let mut case = spent_live(None);
    case.spec.budget = Some(BudgetSpec { tokens: Some(1_000_000), cost: None });
    (case.liveness, case.tmux) = (Liveness::Absent, None);
    case.usage = Some(crate::core::UsageRead { conversation: OLD.into(), more: true, ..Default::default() });
    let plan = case.decide();
    assert!(!ops(&plan).iter().any(|op| op.starts_with("spawn")), "{:?}", ops(&plan));
    assert!(plan.requeue_after.is_some());
    case.usage = None;
    assert!(ops(&case.decide()).iter().any(|op| op.starts_with("spawn")), "caught up: it starts");
}

/// A budget of the namespace, `limit` tokens, of which its sessions spent `spent`.
fn namespace_budget(name: &str, limit: u64, spent: u64) -> crate::core::NamespaceBudget {
    crate::core::NamespaceBudget {
        name: name.into(),
        limit: BudgetSpec { tokens: Some(limit), cost: None },
        spent: Some(crate::api::WorkBudgetStatus { tokens: spent, sessions: 3, ..Default::default() }),
        created: Some(t(0)),
    }
}

#[test]
fn its_namespaces_budget_reached_by_all_its_sessions_pauses_it_after_its_turn_and_a_raise_resumes_it() {
    let mut case = spent_live(hook("Stop"));
    case.spec.budget = None;
    case.budgets = vec![namespace_budget("team", 100_000, 20_000)];
    assert_eq!(case.decide().status.phase, Some(Phase::Running), "under the namespace's budget: it goes on");

    // The namespace's sessions together reached it: this one's turn is over, so it is stopped; its prompt waits.
    case.budgets = vec![namespace_budget("team", 100_000, 20_000), namespace_budget("cap", 50_000, 50_000)];
    let plan = case.step();
    assert_eq!(
        ops(&plan),
        [format!("stop {}", case.config.tmux_session("ns/repo-12")), "session.budget_reached".into()]
    );
    let (reason, message) = ready_of(&plan.status);
    assert_eq!(reason, "BudgetReached");
    assert_eq!(
        message,
        "its namespace's sessions spent 50000 of its budget of 50000 tokens (WorkBudget cap); 1 prompt waits: \
         raise or remove WorkBudget cap to go on, the conversation kept"
    );

    // Stopped, nothing starts while it holds; raised, the conversation resumes with the prompt that waited.
    (case.liveness, case.tmux) = (Liveness::Absent, None);
    assert_eq!(ops(&case.step()), Vec::<String>::new());
    assert_eq!(case.events[0].phase, PromptPhase::Pending, "waits, never failed");
    case.budgets[1].limit.tokens = Some(80_000);
    let plan = case.decide();
    assert!(spawned(&plan).contains(&format!("--resume {OLD}")), "{:?}", ops(&plan));
    assert!(spawned(&plan).ends_with("please fix the bug"), "{:?}", ops(&plan));
}

#[test]
fn a_new_session_in_a_namespace_over_its_budget_waits_for_its_first_spawn() {
    let mut case = Case::new(WorkSessionStatus::default());
    case.budgets = vec![namespace_budget("team", 1000, 1000)];
    let plan = case.decide();
    assert!(spawned(&plan).is_empty(), "{:?}", ops(&plan));
    assert_eq!(plan.status.phase, Some(Phase::Paused));
    // Its namespace's cost is unknown and its budget is in dollars: reached as well.
    case.budgets = vec![crate::core::NamespaceBudget {
        name: "team".into(),
        limit: BudgetSpec { tokens: None, cost: Some("50".into()) },
        spent: Some(crate::api::WorkBudgetStatus {
            tokens: 10,
            unpriced_models: vec!["m-x".into()],
            ..Default::default()
        }),
        created: Some(t(0)),
    }];
    let message = ready_of(&case.decide().status).1;
    assert!(message.starts_with("its namespace's sessions spent an unknown cost (m-x has no price"), "{message}");
    case.budgets.clear();
    assert!(!spawned(&case.decide()).is_empty(), "its budget removed, it starts");
}

#[test]
fn a_namespace_budget_nobody_sums_counts_as_reached_after_a_minute() {
    let mut case = Case::new(WorkSessionStatus::default());
    let unsummed = |created: i64| crate::core::NamespaceBudget {
        name: "team".into(),
        limit: BudgetSpec { tokens: Some(1000), cost: None },
        spent: None,
        created: Some(t(created)),
    };
    // Made just now: the controller sums it within moments; nothing holds the session meanwhile.
    case.budgets = vec![unsummed(90)];
    assert!(!spawned(&case.decide()).is_empty());
    // A minute and no sum: no controller runs, and the namespace is not left unbounded.
    case.budgets = vec![unsummed(40)];
    let plan = case.decide();
    assert!(spawned(&plan).is_empty(), "{:?}", ops(&plan));
    let message = ready_of(&plan.status).1;
    assert!(message.starts_with("its namespace's WorkBudget team has had no sum for 60 s"), "{message}");
}
