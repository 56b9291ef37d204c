//! Budgets, part of decide: a session whose conversations spent what `spec.budget` allows (`status.usage`) takes no
//! new prompt; its live harness is stopped once its turn is over and nothing sent to it is unconfirmed (the
//! conversation kept), and it stays `Paused`, its prompts waiting, until the budget is raised or removed. A pause is
//! not a death: it never counts toward back-off.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::{ActivityReason, Decision, EventReason, Notice, Op, ReadyReason, later, until};
use crate::api::{Phase, PromptPhase};

/// How long a harness without hooks must have printed nothing before it is taken to be between turns.
pub const PAUSE_QUIET: Duration = Duration::from_secs(5);

impl Decision<'_, '_> {
    /// Why the session may spend no more, if it may not: the first of its budget's limits its usage reached.
    pub(super) fn over_budget(&self) -> Option<String> {
        let budget = self.input.object.spec.budget.as_ref()?;
        let usage = self.status.usage.clone().unwrap_or_default();
        if let Some(limit) = budget.tokens.filter(|limit| usage.tokens >= *limit) {
            return Some(format!("spent {} of its budget of {limit} tokens", usage.tokens));
        }
        let limit = budget.cost.as_deref()?;
        let dollars = limit.parse::<f64>().ok()?;
        match usage.estimated_cost.as_deref().and_then(|c| c.parse::<f64>().ok()) {
            Some(cost) if cost >= dollars => Some(format!("spent ${cost:.4} of its budget of ${limit}")),
            Some(_) => None,
            None if usage.tokens == 0 => None,
            None => Some(format!(
                "its cost is unknown ({} has no price in the agent config's prices) and its budget is ${limit}",
                usage.unpriced_models.join(", ")
            )),
        }
    }

    /// A live harness over its budget: stopped once its turn is over and nothing sent to it waits for its word;
    /// meanwhile it is looked at again.
    pub(super) fn pause_when_quiet(&mut self, why: &str) {
        let input = self.input;
        if self.prompts().iter().any(|p| p.phase == PromptPhase::Delivering) || !self.ops.is_empty() {
            // The prompts' own requeues and hooks bring it back; a paste recorded now, this.
            self.requeue(Duration::from_secs(1));
            return;
        }
        let between_turns = match input.evidence.turn.as_ref().map(super::hooks::activity) {
            Some((ActivityReason::Working | ActivityReason::WaitingForInput, _)) => false,
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
        self.paused(why);
    }

    /// Not running and over its budget: no spawn; prompts wait.
    pub(super) fn paused(&mut self, why: &str) {
        let waiting = self.prompts().len();
        let prompts = if waiting == 1 { "1 prompt waits" } else { &format!("{waiting} prompts wait") };
        let message = format!("{why}; {prompts}: raise or remove spec.budget to go on, the conversation kept");
        if self.status.phase != Some(Phase::Paused) {
            self.notice(Notice::new(EventReason::BudgetReached, message.clone()));
        }
        self.status.phase = Some(Phase::Paused);
        self.ready(false, ReadyReason::BudgetReached, message);
    }
}
