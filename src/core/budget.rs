//! Budgets, part of decide: a session whose conversations spent what `spec.budget` allows (`status.usage`), or whose
//! namespace's sessions together spent what one of its `WorkBudget`s allows, takes no new prompt; its live harness is
//! stopped once its turn is over and nothing sent to it is unconfirmed (the conversation kept), and it stays `Paused`,
//! its prompts waiting, until the budget is raised or removed. A pause is not a death: it never counts toward back-off.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::{ActivityReason, Decision, EventReason, NamespaceBudget, Notice, Op, ReadyReason, later, until};
use crate::api::{BudgetSpec, Phase, PromptPhase, WorkBudgetStatus};

/// How long a harness without hooks must have printed nothing before it is taken to be between turns.
pub const PAUSE_QUIET: Duration = Duration::from_secs(5);
/// How long a WorkBudget may go without a sum before it counts as reached: `worksession controller` sums it within
/// moments; one that never does (no controller runs) must not leave the namespace unbounded.
pub const UNSUMMED_GRACE: Duration = Duration::from_secs(60);

/// Why a session may spend no more: which budget its spending reached, and what a person changes to go on.
#[derive(Clone, Debug)]
pub(super) struct Over {
    why: String,
    remedy: String,
}

/// What `spent` of `limit` says, if it reached it: the first limit reached, as "N of its budget of M tokens". An unknown
/// cost (a model without a price) reaches a cost budget once anything was spent: spending on is never a guess.
pub fn reached(limit: &BudgetSpec, spent: &WorkBudgetStatus) -> Option<String> {
    if let Some(tokens) = limit.tokens.filter(|limit| spent.tokens >= *limit) {
        return Some(format!("{} of its budget of {tokens} tokens", spent.tokens));
    }
    let dollars = limit.cost.as_deref()?;
    let limit_value = dollars.parse::<f64>().ok()?;
    match spent.estimated_cost.as_deref().and_then(|c| c.parse::<f64>().ok()) {
        Some(cost) if cost >= limit_value => Some(format!("${cost:.4} of its budget of ${dollars}")),
        Some(_) => None,
        None if spent.tokens == 0 => None,
        None => Some(format!(
            "an unknown cost ({} has no price in the agent config's prices) against its budget of ${dollars}",
            spent.unpriced_models.join(", ")
        )),
    }
}

impl Decision<'_, '_> {
    /// Why the session may spend no more, if it may not: its own budget (`spec.budget`) first, then its namespace's
    /// ([`crate::api::WorkBudget`]s, by name).
    pub(super) fn over_budget(&self) -> Option<Over> {
        let usage = self.status.usage.clone().unwrap_or_default();
        let own = WorkBudgetStatus {
            tokens: usage.tokens,
            estimated_cost: usage.estimated_cost,
            unpriced_models: usage.unpriced_models,
            sessions: 1,
        };
        let budget = self.input.object.spec.budget.as_ref();
        if let Some(what) = budget.and_then(|budget| reached(budget, &own)) {
            return Some(Over { why: format!("spent {what}"), remedy: "raise or remove spec.budget".into() });
        }
        let mut budgets: Vec<&NamespaceBudget> = self.input.evidence.budgets.iter().collect();
        budgets.sort_by(|a, b| a.name.cmp(&b.name));
        let now = self.input.context.now;
        budgets.into_iter().find_map(|budget| {
            let Some(spent) = &budget.spent else {
                let made = budget.created.unwrap_or(now);
                return (now >= later(made, UNSUMMED_GRACE)).then(|| Over {
                    why: format!(
                        "its namespace's WorkBudget {} has had no sum for {} s (worksession controller writes it)",
                        budget.name,
                        UNSUMMED_GRACE.as_secs()
                    ),
                    remedy: format!("run worksession controller, or remove WorkBudget {}", budget.name),
                });
            };
            let what = reached(&budget.limit, spent)?;
            Some(Over {
                why: format!("its namespace's sessions spent {what} (WorkBudget {})", budget.name),
                remedy: format!("raise or remove WorkBudget {}", budget.name),
            })
        })
    }

    /// A live harness over its budget: stopped once its turn is over and nothing sent to it waits for its word;
    /// meanwhile it is looked at again.
    pub(super) fn pause_when_quiet(&mut self, over: &Over) {
        let input = self.input;
        if self.prompts().iter().any(|p| p.phase == PromptPhase::Delivering) || !self.ops.is_empty() {
            // The prompts' own requeues and hooks bring it back; a paste recorded now, this.
            self.requeue(Duration::from_secs(1));
            return;
        }
        let between_turns = match input.evidence.turn.as_ref().map(super::hooks::activity) {
            Some((
                ActivityReason::Working | ActivityReason::WaitingForInput | ActivityReason::WaitingForApproval,
                _,
            )) => false,
            Some(_) => true,
            // No hooks: quiet on screen for a while.
            None => {
                let printed = input.observed.view.map(|v| v.activity).filter(|a| *a > 0);
                let quiet_from = printed.and_then(|a| Timestamp::from_second(a.saturating_add(1)).ok());
                match quiet_from.map(|t| later(t, PAUSE_QUIET)) {
                    Some(due) if input.context.now < due => {
                        self.requeue(until(input.context.now, due));
                        return;
                    }
                    _ => {}
                }
                true
            }
        };
        if !between_turns {
            return; // its turn's end (a hook) wakes the session
        }
        self.ops.push(Op::Stop { session: self.session.clone() });
        self.paused(over);
    }

    /// Not running and over its budget: no spawn; prompts wait.
    pub(super) fn paused(&mut self, over: &Over) {
        let waiting = self.prompts().len();
        let prompts = if waiting == 1 { "1 prompt waits" } else { &format!("{waiting} prompts wait") };
        let Over { why, remedy } = over;
        let message = format!("{why}; {prompts}: {remedy} to go on, the conversation kept");
        if self.status.phase != Some(Phase::Paused) {
            self.notice(Notice::new(EventReason::BudgetReached, message.clone()));
        }
        self.status.phase = Some(Phase::Paused);
        self.ready(false, ReadyReason::BudgetReached, message);
    }
}
