//! What a route gives the sessions it creates beside their harness and workdir (below [`super`]): `egress` (the hosts
//! their harnesses may reach), `budget` (what their conversations may spend) and `approval` (how their permission
//! requests are answered without a person), each read with its keys checked (a misspelt one is refused, not read as
//! nothing) and by the same rules as a WorkSession's spec.

use serde::Deserialize;

use crate::api::{BudgetSpec, EgressSpec};

/// A route's `egress`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressFile {
    hosts: Vec<String>,
}

impl EgressFile {
    /// The sessions' `spec.egress`, or the problem with it.
    pub fn into_spec(self) -> Result<EgressSpec, String> {
        match crate::api::egress_hosts_problem(&self.hosts) {
            Some(problem) => Err(problem),
            None => Ok(EgressSpec { hosts: self.hosts }),
        }
    }
}

/// A route's `budget`: the default `spec.budget` of the sessions it creates.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetFile {
    tokens: Option<u64>,
    cost: Option<String>,
}

impl BudgetFile {
    /// The sessions' `spec.budget`, or the key at fault and its problem.
    pub fn into_spec(self) -> Result<BudgetSpec, (&'static str, String)> {
        let budget = BudgetSpec { tokens: self.tokens, cost: self.cost };
        match crate::api::budget_problem(&budget) {
            Some(problem) => Err(problem),
            None => Ok(budget),
        }
    }
}

/// A route's `approval`, as its sessions' `spec.approval` takes it; a misspelt key is refused.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalFile {
    wait_seconds: Option<u32>,
    #[serde(default)]
    rules: Vec<RuleFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    r#match: String,
    decision: crate::api::Decision,
}

impl ApprovalFile {
    pub fn into_spec(self) -> crate::api::ApprovalSpec {
        let rules =
            self.rules.into_iter().map(|r| crate::api::ApprovalRule { r#match: r.r#match, decision: r.decision });
        crate::api::ApprovalSpec { wait_seconds: self.wait_seconds, rules: rules.collect() }
    }
}
