//! What the agent holds in memory for its node's sessions between reconciles, beside the pipeline: each registry
//! serves the next decision (gathered into its input) and is changed by executing a plan's ops. None is state of
//! record: an agent restart rebuilds them from the sessions' statuses, the rooms' owner files and the workspaces on
//! disk.

use super::discovery::Discoveries;
use super::push::PushGrants;
use super::workspaces::Workspaces;
use crate::node::room::Rooms;

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
}

/// The usage limits the node's sessions' statuses hold ([`crate::api::UsageLimit`]), by session (`namespace/name`),
/// with the credential each spends: its namespace's sessions of its harness, which share the harness's account
/// (a key or a subscription) and never another tenant's: a refusal parks them together.
#[derive(Debug, Default)]
pub struct Limits(std::sync::Mutex<std::collections::HashMap<String, (String, k8s_openapi::jiff::Timestamp)>>);

impl Limits {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (String, k8s_openapi::jiff::Timestamp)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The credential of the session `namespace/…` that runs `harness`.
    pub fn credential(session: &str, harness: &str) -> String {
        let namespace = session.split_once('/').map_or("", |(namespace, _)| namespace);
        format!("{namespace}/{harness}")
    }

    /// Follows the status `session` records (`None`: it is gone).
    pub(super) fn recorded(&self, session: &str, harness: &str, status: Option<&crate::api::WorkSessionStatus>) {
        let limit = status.and_then(|s| s.usage.as_ref()).and_then(|u| u.limit.as_ref());
        match limit.and_then(|l| l.time.as_ref()) {
            Some(at) => {
                self.lock().insert(session.to_string(), (Self::credential(session, harness), at.0));
            }
            None => {
                self.lock().remove(session);
            }
        }
    }

    /// The other sessions on the credential of `session`, which runs `harness`, whose statuses hold a limit.
    pub fn of(&self, session: &str, harness: &str) -> Vec<crate::core::Limited> {
        let credential = Self::credential(session, harness);
        let limits = self.lock();
        let peers = limits.iter().filter(|(s, (c, _))| *s != session && *c == credential);
        peers.map(|(s, (_, at))| crate::core::Limited { session: s.clone(), at: *at }).collect()
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
    }
}
