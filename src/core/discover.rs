//! Ids found after the start, part of decide: a harness that cannot be told its conversation's id (Codex CLI) shows
//! it once it runs, in a file of its store or on its screen. Until the executor finds it, `status.discoveringSince`
//! holds the spawn's time (the `ConversationId` condition says `Discovering`), `status.harnessSessionId` stays empty
//! and a death means a fresh start (`NoRecordedSession`). Two such harnesses started at once in one workdir could take
//! each other's id, so a fresh one waits while another session of its workdir is still discovering.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{ConditionType, Decision, DiscoveryReason, ReadyReason, find, set_condition};
use crate::api::{Phase, WorkSessionStatus, is_valid_session_id};
use crate::harness::Profile;

/// How often a harness whose id is being discovered is looked at.
pub const DISCOVERY_RECHECK: Duration = Duration::from_secs(2);

/// Whether `status` waits for the id of its running conversation.
pub fn discovering(status: &WorkSessionStatus) -> bool {
    discovering_since(status).is_some()
}

/// When the conversation being discovered was spawned: only what the harness wrote since then is its.
pub fn discovering_since(status: &WorkSessionStatus) -> Option<&Time> {
    status.discovering_since.as_ref().filter(|_| status.harness_session_id.is_none())
}

/// A status an agent before `discoveringSince` wrote while it discovered kept that in its `ConversationId` condition
/// alone (its time the spawn's): read once into the field, so the discovery goes on across the upgrade.
pub(super) fn carried_over(status: &mut WorkSessionStatus) {
    if status.discovering_since.is_none() && status.harness_session_id.is_none() {
        status.discovering_since =
            find(&status.conditions, DiscoveryReason::Discovering).map(|c| c.last_transition_time.clone());
    }
}

impl Decision<'_, '_> {
    /// A fresh conversation of a discovering harness survived its probe (spawned at `spawned`): its id is unknown.
    pub(super) fn start_discovering(&mut self, profile: &Profile, spawned: Time) {
        let place = match &profile.discover {
            Some(d) => d.path.clone().unwrap_or_else(|| "its screen".into()),
            None => return,
        };
        let message = format!("waiting for {} to show its conversation's id ({place})", self.input.object.spec.harness);
        let (generation, conditions) = (self.input.object.generation, &mut self.status.conditions);
        // Reset: the condition says since the spawn, as the state does.
        conditions.retain(|c| c.type_ != ConditionType::ConversationId.as_str());
        set_condition(conditions, DiscoveryReason::Discovering, false, &message, generation, spawned.0);
        // The executor counts only what was written since the spawn.
        self.status.discovering_since = Some(spawned);
        self.requeue(DISCOVERY_RECHECK);
    }

    /// A live harness whose id is being discovered: record it once the executor found it, else look again.
    pub(super) fn discover(&mut self) {
        if !discovering(&self.status) {
            return;
        }
        match self.input.evidence.discovered.as_deref().filter(|id| is_valid_session_id(id)) {
            Some(id) => {
                self.status.harness_session_id = Some(id.to_string());
                self.status.discovering_since = None;
                if let Some(r) = self.status.last_respawn.as_mut().filter(|r| r.harness_session_id.is_empty()) {
                    r.harness_session_id = id.to_string();
                }
                self.condition(DiscoveryReason::Discovered, true, format!("the harness runs conversation {id}"));
            }
            None => self.requeue(DISCOVERY_RECHECK),
        }
    }

    /// Before a fresh spawn of a discovering harness: whether another session of the workdir is still discovering
    /// (then this one waits, so neither can take the other's id).
    pub(super) fn waits_for_discovery(&mut self, profile: &Profile) -> bool {
        let Some(other) = self.input.evidence.discovering_here.as_deref().filter(|_| profile.discovers()) else {
            return false;
        };
        self.status.phase = Some(Phase::Pending);
        let message = format!(
            "WorkSession {other} in the same workdir is still discovering its conversation's id; starting now could \
             take each other's"
        );
        self.ready(false, ReadyReason::WaitingForDiscovery, message);
        self.requeue(DISCOVERY_RECHECK);
        true
    }
}
