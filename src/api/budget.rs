//! A namespace's budget, `WorkBudget`: what all the WorkSessions of its namespace may spend together. Its status is
//! their `status.usage` summed ([`spent`]), by `worksession controller` on a cluster and by the agent in local mode;
//! each decision about a session of the namespace weighs the sum against the limit.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{BUDGET_COST_PATTERN, Usage};

/// What the WorkSessions of one namespace may spend together: tokens, an estimated cost, or both.
#[allow(clippy::duplicated_attributes)] // printcolumn(...) repeats `type_` by design
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "worksession.dev",
    version = "v1alpha1",
    kind = "WorkBudget",
    namespaced,
    shortname = "wb",
    status = "WorkBudgetStatus",
    doc = "What the WorkSessions of a namespace may spend together: once their sum reaches it, each is stopped after \
           its turn (its conversation kept) and its prompts wait until the budget is raised or removed.",
    printcolumn(name = "Tokens", type_ = "integer", json_path = ".spec.tokens"),
    printcolumn(name = "Cost", type_ = "string", json_path = ".spec.cost"),
    printcolumn(name = "Spent", type_ = "integer", json_path = ".status.tokens"),
    printcolumn(name = "Spent-Cost", type_ = "string", json_path = ".status.estimatedCost"),
    printcolumn(name = "Sessions", type_ = "integer", json_path = ".status.sessions"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.tokens) || has(self.cost)", "message": "a WorkBudget names tokens, cost or both"}
]))]
pub struct WorkBudgetSpec {
    /// Tokens of every kind together, over the namespace's sessions (their `status.usage.tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub tokens: Option<u64>,
    /// US dollars over the namespace's sessions (their `status.usage.estimatedCost`), a decimal such as `"50"` or
    /// `"120.50"`. While a session's cost is unknown (a model without a price), the sum's is too, and a cost budget
    /// counts as reached: spending on is never a guess.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = BUDGET_COST_PATTERN))]
    pub cost: Option<String>,
}

impl WorkBudgetSpec {
    /// The limits, as a session's own budget states them.
    pub fn limit(&self) -> super::BudgetSpec {
        super::BudgetSpec { tokens: self.tokens, cost: self.cost.clone() }
    }

    /// What the CRD refuses in it, for local mode, which checks a manifest by the same rules: the field and why.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if self.tokens.is_none() && self.cost.is_none() {
            return Some(("spec", "a WorkBudget names tokens, cost or both".into()));
        }
        let (field, why) = super::budget_problem(&self.limit())?;
        Some((if field == "budget.tokens" { "spec.tokens" } else { "spec.cost" }, why))
    }
}

/// What the namespace's WorkSessions spent, as last summed.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WorkBudgetStatus {
    /// Tokens of every kind, every session together.
    #[serde(default)]
    pub tokens: u64,
    /// The estimated cost in US dollars, every session together; absent while a session's cost is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_cost: Option<String>,
    /// The models without a price that spent tokens, in any session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 128)))]
    pub unpriced_models: Vec<String>,
    /// The sessions summed: every WorkSession of the namespace (a deleted one's spending leaves the sum with it).
    #[serde(default)]
    pub sessions: u64,
}

/// What the sessions of `namespace` among `sessions` spent together ([`spent`]).
pub fn spent_in<'a>(
    namespace: Option<&str>,
    sessions: impl IntoIterator<Item = &'a super::WorkSession>,
) -> WorkBudgetStatus {
    use kube::ResourceExt;
    let of_namespace = sessions.into_iter().filter(|ws| ws.namespace().as_deref() == namespace);
    spent(of_namespace.map(|ws| ws.status.as_ref().and_then(|s| s.usage.as_ref())))
}

/// The sum of `usages`: every session's tokens and estimated cost (unknown where one is), the models without a price.
pub fn spent<'a>(usages: impl IntoIterator<Item = Option<&'a Usage>>) -> WorkBudgetStatus {
    let mut sum = WorkBudgetStatus::default();
    let mut cost = Some(0.0_f64);
    for usage in usages {
        sum.sessions += 1;
        let Some(usage) = usage else { continue };
        sum.tokens = sum.tokens.saturating_add(usage.tokens).min(super::MAX_COUNT);
        let own = match usage.estimated_cost.as_deref() {
            Some(c) => c.parse::<f64>().ok(),
            None if usage.tokens == 0 => Some(0.0),
            None => None,
        };
        cost = cost.zip(own).map(|(a, b)| a + b);
        for model in &usage.unpriced_models {
            if !sum.unpriced_models.contains(model) && sum.unpriced_models.len() < 64 {
                sum.unpriced_models.push(model.clone());
            }
        }
    }
    sum.estimated_cost = cost.map(|c| format!("{c:.4}"));
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(tokens: u64, cost: Option<&str>, unpriced: &[&str]) -> Usage {
        Usage {
            tokens,
            estimated_cost: cost.map(Into::into),
            unpriced_models: unpriced.iter().map(|m| m.to_string()).collect(),
            ..Usage::default()
        }
    }

    #[test]
    fn a_budget_names_a_limit_in_the_shapes_the_crd_takes() {
        let spec = |tokens: Option<u64>, cost: Option<&str>| WorkBudgetSpec { tokens, cost: cost.map(Into::into) };
        assert_eq!(spec(None, None).problem().unwrap().1, "a WorkBudget names tokens, cost or both");
        assert_eq!(spec(Some(0), None).problem().unwrap().0, "spec.tokens");
        assert_eq!(spec(None, Some("5 dollars")).problem().unwrap().0, "spec.cost");
        assert_eq!(spec(Some(1000), Some("12.50")).problem(), None);
    }

    #[test]
    fn the_sum_counts_every_session_and_its_cost_is_unknown_where_one_is() {
        let (a, b) = (usage(100, Some("0.5000"), &[]), usage(50, Some("0.2500"), &[]));
        let sum = spent([Some(&a), None, Some(&b)]);
        assert_eq!((sum.tokens, sum.estimated_cost.as_deref(), sum.sessions), (150, Some("0.7500"), 3));
        // A session that spent nothing yet has no cost to know.
        let fresh = usage(0, None, &[]);
        assert_eq!(spent([Some(&a), Some(&fresh)]).estimated_cost.as_deref(), Some("0.5000"));
        let unpriced = usage(10, None, &["m-x"]);
        let sum = spent([Some(&a), Some(&unpriced)]);
        assert_eq!((sum.tokens, sum.estimated_cost, sum.unpriced_models), (110, None, vec!["m-x".to_string()]));
    }
}
