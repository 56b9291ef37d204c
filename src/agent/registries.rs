//! What the agent holds in memory for its node's sessions between reconciles, beside the pipeline: each registry
//! serves the next decision (gathered into its input) and is changed by executing a plan's ops. None is state of
//! record: an agent restart rebuilds them from the sessions' statuses, the rooms' owner files and the workspaces on
//! disk; the resets a key gateway was told are lost, and a parked session keeps the wake its status recorded.

use super::discovery::Discoveries;
use super::push::PushGrants;
use super::workspaces::Workspaces;
use crate::node::room::Rooms;
use k8s_openapi::jiff::Timestamp;

/// The node's registries.
#[derive(Default)]
pub struct Registries {
    /// The workspaces being prepared.
    pub workspaces: Workspaces,
    /// Conversation ids being discovered, and those taken.
    pub discoveries: Discoveries,
    /// Which session has which room (agent config `rooms`).
    pub rooms: Rooms,
    /// Spawns tmux refused, for the next decision.
    pub spawn_failures: SpawnFailures,
    /// The push tokens handed to harnesses (`workspaces.push`), for the next decision.
    pub push: PushGrants,
    /// The usage limits the sessions' statuses hold, by credential, for the decisions of its other sessions.
    pub limits: Limits,
    /// The namespaces' budgets and what each namespace's sessions spent.
    pub budgets: Budgets,
}

/// The namespaces' budgets ([`crate::api::WorkBudget`]) as last seen, each with what its namespace's sessions spent:
/// the controller's sum on a cluster (the agent sees only its node's sessions), the local driver's in local mode.
#[derive(Debug, Default)]
pub struct Budgets(std::sync::RwLock<BudgetsByNamespace>);

type BudgetsByNamespace = std::collections::BTreeMap<String, Vec<crate::core::NamespaceBudget>>;

impl Budgets {
    /// Takes `budgets` as every budget there is. Returns the namespaces whose sessions' decisions change: a budget
    /// came, went, changed its limits, or was reached or no longer is (a sum that grew short of a limit changes none).
    pub fn replace<'a>(&self, budgets: impl IntoIterator<Item = &'a crate::api::WorkBudget>) -> Vec<String> {
        use kube::ResourceExt;
        let mut by_namespace = BudgetsByNamespace::new();
        for budget in budgets {
            let (spent, created) = (budget.status.clone(), budget.creation_timestamp().map(|t| t.0));
            let known =
                crate::core::NamespaceBudget { name: budget.name_any(), limit: budget.spec.limit(), spent, created };
            by_namespace.entry(budget.namespace().unwrap_or_default()).or_default().push(known);
        }
        by_namespace.values_mut().for_each(|b| b.sort_by(|x, y| x.name.cmp(&y.name)));
        let mut held = self.0.write().unwrap_or_else(|e| e.into_inner());
        type Weighed<'a> = Vec<(&'a str, &'a crate::api::BudgetSpec, Option<bool>)>;
        fn weighed(budgets: Option<&Vec<crate::core::NamespaceBudget>>) -> Weighed<'_> {
            let reached = |b: &crate::core::NamespaceBudget| {
                b.spent.as_ref().map(|spent| crate::core::budget_reached(&b.limit, spent).is_some())
            };
            budgets.into_iter().flatten().map(|b| (b.name.as_str(), &b.limit, reached(b))).collect()
        }
        let namespaces: std::collections::BTreeSet<&String> = held.keys().chain(by_namespace.keys()).collect();
        let changed = namespaces.into_iter().filter(|ns| weighed(held.get(*ns)) != weighed(by_namespace.get(*ns)));
        let changed = changed.cloned().collect();
        *held = by_namespace;
        changed
    }

    /// The budgets of `namespace`.
    pub fn of(&self, namespace: &str) -> Vec<crate::core::NamespaceBudget> {
        let held = self.0.read().unwrap_or_else(|e| e.into_inner());
        held.get(namespace).cloned().unwrap_or_default()
    }
}

/// The usage limits the node's sessions' statuses hold ([`crate::api::UsageLimit`]), by session (`namespace/name`),
/// with the credential each spends: its namespace's sessions of its harness, which share the harness's account
/// (a key or a subscription) and never another tenant's: a refusal parks them together. And when a credential's
/// limit resets, where a key gateway relayed a refusal that said so. Shared with the egress proxy, which tells it.
#[derive(Clone, Debug, Default)]
pub struct Limits(std::sync::Arc<std::sync::Mutex<Known>>);

#[derive(Debug, Default)]
struct Known {
    /// Each session's credential, the refusal its status holds, and when that limit's wake came.
    sessions: std::collections::HashMap<String, Held>,
    /// When each credential's limit resets, as a gateway was last told, and when it was told.
    resets: std::collections::HashMap<String, crate::core::Reset>,
}

/// What a session's status says of its credential's limit.
#[derive(Clone, Debug)]
struct Held {
    credential: String,
    at: Option<Timestamp>,
    woke: Option<Timestamp>,
}

impl Limits {
    fn lock(&self) -> std::sync::MutexGuard<'_, Known> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Follows the status `session` records (`None`: it is gone).
    pub(super) fn recorded(&self, session: &str, harness: &str, status: Option<&crate::api::WorkSessionStatus>) {
        let mut known = self.lock();
        let Some(status) = status else {
            known.sessions.remove(session);
            return;
        };
        let limit = status.usage.as_ref().and_then(|u| u.limit.as_ref());
        let at = limit.and_then(|l| l.time.as_ref()).map(|t| t.0);
        let woke = limit.filter(|l| l.woken).and_then(|l| l.wake_time.as_ref()).map(|t| t.0);
        let credential = crate::core::credential(session, harness);
        known.sessions.insert(session.to_string(), Held { credential, at, woke });
    }

    /// Takes the wake of `session`'s limit on `credential` at `now`, unless another session of it woke less than
    /// `spread` before (checked and taken under one lock: of two reconciles that decided at once, one wakes);
    /// `Err` names that session.
    pub(super) fn take_wake(
        &self,
        session: &str,
        credential: &str,
        now: Timestamp,
        spread: std::time::Duration,
    ) -> Result<(), String> {
        let mut known = self.lock();
        let near = |woke: Timestamp| now.duration_since(woke).unsigned_abs() < spread;
        let other = known
            .sessions
            .iter()
            .find(|(s, held)| *s != session && held.credential == credential && held.woke.is_some_and(near));
        if let Some((other, _)) = other {
            return Err(other.clone());
        }
        let held = Held { credential: credential.to_string(), at: None, woke: None };
        let entry = known.sessions.entry(session.to_string()).or_insert(held);
        (entry.credential, entry.woke) = (credential.to_string(), Some(now));
        Ok(())
    }

    /// A gateway relayed a refusal of `session`'s request, at `now`, whose limit resets `at`: the latest word on its
    /// credential (resets gone by are forgotten).
    pub fn told(&self, session: &str, at: Timestamp, now: Timestamp) {
        let mut known = self.lock();
        known.resets.retain(|_, reset| reset.at > now);
        let Some(held) = known.sessions.get(session).cloned() else { return };
        known.resets.insert(held.credential, crate::core::Reset { at, told: now });
    }

    /// The other sessions on the credential of `session`, which runs `harness`, whose statuses hold a limit.
    pub fn of(&self, session: &str, harness: &str) -> Vec<crate::core::Limited> {
        let credential = crate::core::credential(session, harness);
        let known = self.lock();
        let peers = known.sessions.iter().filter(|(s, held)| *s != session && held.credential == credential);
        let limited = |(s, held): (&String, &Held)| {
            Some(crate::core::Limited { session: s.clone(), at: held.at?, woke: held.woke })
        };
        peers.filter_map(limited).collect()
    }

    /// When the limit of the credential of `session`, which runs `harness`, resets, as a gateway was last told.
    pub fn reset(&self, session: &str, harness: &str) -> Option<crate::core::Reset> {
        self.lock().resets.get(&crate::core::credential(session, harness)).copied()
    }

    /// Forgets `session`, gone from this agent's view (deleted, or no longer its to serve).
    pub fn forget(&self, session: &str) {
        self.lock().sessions.remove(session);
    }
}

/// Spawns tmux refused, by session (`namespace/name`): the spawn's tag and what tmux said, told to that session's
/// decisions while its recorded intent is that spawn's.
#[derive(Debug, Default)]
pub struct SpawnFailures(std::sync::Mutex<std::collections::HashMap<String, (String, String)>>);

impl SpawnFailures {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (String, String)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn put(&self, session: &str, spawn: &str, message: String) {
        self.lock().insert(session.to_string(), (spawn.to_string(), message));
    }

    /// What tmux said when it refused `session`'s spawn tagged `spawn`, if it did.
    pub fn of(&self, session: &str, spawn: &str) -> Option<String> {
        self.lock().get(session).filter(|(tag, _)| tag == spawn).map(|(_, message)| message.clone())
    }

    /// Forgets a failure once `session`'s recorded status verifies another spawn (`verifying`) or none.
    pub(super) fn settle(&self, session: &str, verifying: Option<&str>) {
        let mut failures = self.lock();
        if failures.get(session).is_some_and(|(tag, _)| Some(tag.as_str()) != verifying) {
            failures.remove(session);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused spawn is told to every decision while the recorded intent is that spawn's (one that returned early,
    /// the tmux server gone, still finds it), and forgotten once a status verifies another spawn or none.
    #[test]
    fn a_refused_spawn_is_told_until_a_status_moves_past_it() {
        let failures = SpawnFailures::default();
        failures.put("ns/a", "spawn-1", "no server".into());
        assert_eq!(failures.of("ns/a", "spawn-1").as_deref(), Some("no server"));
        assert_eq!(failures.of("ns/a", "spawn-2"), None, "another spawn's intent: not this failure");
        failures.settle("ns/a", Some("spawn-1"));
        assert_eq!(failures.of("ns/a", "spawn-1").as_deref(), Some("no server"), "still that intent: kept");
        failures.settle("ns/a", Some("spawn-2"));
        assert_eq!(failures.of("ns/a", "spawn-1"), None, "moved past it: forgotten");
        failures.put("ns/b", "spawn-3", "no server".into());
        failures.settle("ns/b", None);
        assert_eq!(failures.of("ns/b", "spawn-3"), None, "gone or verifying nothing: forgotten");
    }

    /// A budget's change wakes its namespace only when a decision there would change: it came or went, its limits
    /// changed, or it was reached or no longer is.
    #[test]
    fn a_budget_wakes_its_namespace_when_its_limits_or_whether_it_is_reached_change() {
        let budget = |ns: &str, tokens: u64, spent: u64| {
            let mut b =
                crate::api::WorkBudget::new("team", crate::api::WorkBudgetSpec { tokens: Some(tokens), cost: None });
            b.metadata.namespace = Some(ns.into());
            b.status = Some(crate::api::WorkBudgetStatus { tokens: spent, ..Default::default() });
            b
        };
        let budgets = Budgets::default();
        assert_eq!(budgets.replace([&budget("a", 100, 10), &budget("b", 100, 10)]), ["a", "b"], "they came");
        assert_eq!(budgets.replace([&budget("a", 100, 50), &budget("b", 100, 10)]), Vec::<String>::new(), "it grew");
        assert_eq!(budgets.of("a")[0].spent.as_ref().map(|s| s.tokens), Some(50), "what it spent is held all the same");
        assert_eq!(budgets.replace([&budget("a", 100, 100), &budget("b", 100, 10)]), ["a"], "reached");
        assert_eq!(budgets.replace([&budget("a", 200, 100), &budget("b", 100, 10)]), ["a"], "raised");
        assert_eq!(budgets.replace([&budget("a", 200, 100)]), ["b"], "gone");
        assert!(budgets.of("b").is_empty());
    }

    /// Of two sessions of one credential whose wakes were decided at once, one wakes; the other waits the spread.
    #[test]
    fn no_two_wakes_of_a_credential_are_taken_within_the_spread() {
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let spread = std::time::Duration::from_secs(10);
        let limits = Limits::default();
        assert_eq!(limits.take_wake("ns/a", "ns/claude", at(100), spread), Ok(()));
        assert_eq!(limits.take_wake("ns/b", "ns/claude", at(100), spread), Err("ns/a".into()));
        assert_eq!(limits.take_wake("ns/b", "ns/codex", at(100), spread), Ok(()), "another credential");
        assert_eq!(limits.take_wake("ns/a", "ns/claude", at(105), spread), Ok(()), "its own wake again");
        assert_eq!(limits.take_wake("ns/c", "ns/claude", at(114), spread), Err("ns/a".into()));
        assert_eq!(limits.take_wake("ns/c", "ns/claude", at(115), spread), Ok(()));
    }

    /// A limit is told to the other sessions of its namespace and harness alone, and forgotten with it.
    #[test]
    fn a_limit_is_told_to_its_credentials_other_sessions_alone() {
        use crate::api::{Usage, UsageLimit, WorkSessionStatus};
        let at = k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap();
        let limit =
            UsageLimit { time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at)), ..Default::default() };
        let limited =
            WorkSessionStatus { usage: Some(Usage { limit: Some(limit), ..Default::default() }), ..Default::default() };
        let limits = Limits::default();
        limits.recorded("ns/a", "claude", Some(&limited));
        let told = |s: &str, h: &str| limits.of(s, h).into_iter().map(|l| (l.session, l.at)).collect::<Vec<_>>();
        assert_eq!(told("ns/b", "claude"), [("ns/a".to_string(), at)]);
        assert_eq!(told("ns/a", "claude"), [], "not to itself");
        assert_eq!(told("ns/b", "codex"), [], "another harness: another account");
        assert_eq!(told("other/b", "claude"), [], "another namespace: another tenant");
        limits.recorded("ns/a", "claude", Some(&WorkSessionStatus::default()));
        assert_eq!(told("ns/b", "claude"), [], "its limit behind");
        limits.recorded("ns/a", "claude", Some(&limited));
        limits.recorded("ns/a", "claude", None);
        assert_eq!(told("ns/b", "claude"), [], "gone");
        // A gateway's word on when the limit resets: for the credential of the session it relayed, once it is known.
        let (reset, now) = (crate::core::Reset { at, told: at }, at);
        limits.told("ns/unknown", at, now);
        limits.recorded("ns/a", "claude", Some(&limited));
        limits.told("ns/a", at, now);
        assert_eq!((limits.reset("ns/b", "claude"), limits.reset("ns/b", "codex")), (Some(reset), None));
        assert_eq!(limits.reset("other/a", "claude"), None, "another tenant's account");
        // The latest word replaces the one before; one gone by is forgotten at the next.
        let later = at.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(60)).unwrap();
        limits.told("ns/a", later, at);
        assert_eq!(limits.reset("ns/b", "claude").map(|r| r.at), Some(later));
        limits.forget("ns/a");
        limits.told("ns/a", at, later);
        assert_eq!(limits.reset("ns/b", "claude"), None, "gone by, and its session forgotten");
    }
}
