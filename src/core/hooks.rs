//! What a harness's hooks say, part of decide. The recorded id follows the conversation: a harness may move to a
//! new conversation under a new id while it runs (Claude Code on `/clear` or compaction, typed by a person through
//! `attach`); its `SessionStart` hook says so, and the next resume must take the conversation it moved to, not the one
//! it left. The ids it left are kept, newest first, so the way back is never lost. And the `Activity` condition says
//! what the harness does, by its latest turn event: working on a prompt, waiting for a person, or idle.

use k8s_openapi::jiff::Timestamp;

use super::{ActivityReason, ConditionType, Decision, EventReason, Notice};
use crate::api::is_valid_session_id;
use crate::harness::hooks::Turn;

/// What a turn event says the harness does, in its words where it has them.
pub fn activity(turn: &Turn) -> (ActivityReason, String) {
    let words = turn.message.clone().filter(|m| !m.trim().is_empty());
    match (turn.hook.as_str(), turn.kind.as_deref()) {
        ("UserPromptSubmit", _) => (ActivityReason::Working, "the harness took a prompt and works on it".into()),
        ("PermissionDecided", _) => (ActivityReason::Working, "the harness was answered and works on".into()),
        ("PermissionRequest", _) => (ActivityReason::WaitingForApproval, "the harness asks for permission".into()),
        ("StopFailure", _) => (ActivityReason::TurnFailed, words.unwrap_or_else(|| "the harness's turn failed".into())),
        ("Notification", Some("idle_prompt")) | ("Stop", _) | ("SessionStart", _) => {
            (ActivityReason::Idle, words.unwrap_or_else(|| "the harness waits for a prompt".into()))
        }
        _ => (ActivityReason::WaitingForInput, words.unwrap_or_else(|| "the harness waits for a person".into())),
    }
}

/// Since when the harness has been without work, by its hooks: `None` while it works on a turn (its screen may be
/// quiet through a long tool call) or asks for permission, else the latest turn event's time (`Some(None)`: not known).
pub fn quiet_since(turn: &Turn) -> Option<Option<Timestamp>> {
    // A request waiting for its answer is not quiet either: a stop would deny it.
    let busy = matches!(activity(turn).0, ActivityReason::Working | ActivityReason::WaitingForApproval);
    (!busy).then_some(turn.at)
}

/// How many earlier conversations a status keeps.
pub const PREVIOUS_KEPT: usize = 10;

impl Decision<'_, '_> {
    /// Records `id` as the session's conversation (`None`: one whose id is yet to be discovered); the one it leaves
    /// goes first in `previousSessionIds` (the way back).
    pub(super) fn record_conversation(&mut self, id: Option<&str>) {
        let previous = std::mem::replace(&mut self.status.harness_session_id, id.map(str::to_string));
        let Some(old) = previous.filter(|old| Some(old.as_str()) != id) else { return };
        self.status.previous_session_ids.retain(|p| *p != old && Some(p.as_str()) != id);
        self.status.previous_session_ids.insert(0, old);
        self.status.previous_session_ids.truncate(PREVIOUS_KEPT);
    }

    /// A live harness whose hooks name another conversation than the recorded one: record it.
    pub(super) fn follow_the_conversation(&mut self) {
        let Some(id) = self.input.evidence.hooked.as_deref().filter(|id| is_valid_session_id(id)) else { return };
        if self.status.verification.is_some() || self.status.harness_session_id.as_deref() == Some(id) {
            return;
        }
        let previous = self.status.harness_session_id.clone();
        self.record_conversation(Some(id));
        let was = previous.map(|old| format!(" (it left {old})")).unwrap_or_default();
        let message = format!("the harness moved to conversation {id}{was}; the next resume takes it");
        self.notice(Notice::new(EventReason::ConversationChanged, message));
    }

    /// A live harness with hooks: the `Activity` condition from its latest turn event, and an Event when it begins to
    /// wait for a person.
    pub(super) fn follow_the_activity(&mut self) {
        let Some(turn) = self.input.evidence.turn.as_ref() else { return };
        let (mut reason, mut message) = activity(turn);
        // Its request waits for an answer: its own notice of the dialog says no more than that.
        let asking = self.status.approval.as_ref().is_some_and(|a| a.waiting());
        if asking && matches!(reason, ActivityReason::WaitingForInput | ActivityReason::WaitingForApproval) {
            (reason, message) = (ActivityReason::WaitingForApproval, self.asking());
        }
        // A turn its model's API refused for a limit sends no hook of its end (Claude Code): its record says so.
        let limit = self.status.usage.as_ref().and_then(|u| u.limit.as_ref());
        let after_the_turn = |l: &&crate::api::UsageLimit| l.time.as_ref().map(|t| t.0) >= turn.at;
        if let Some(limit) = limit.filter(after_the_turn).filter(|_| reason == ActivityReason::Working) {
            (reason, message) = (ActivityReason::UsageLimited, limit.message.clone());
        }
        if !self.condition(reason, reason == ActivityReason::Working, message.clone()) {
            return; // said already
        }
        match reason {
            ActivityReason::WaitingForInput => self.notice(Notice::new(EventReason::WaitingForInput, message)),
            ActivityReason::TurnFailed => self.notice(Notice::new(EventReason::TurnFailed, message)),
            ActivityReason::UsageLimited => self.notice(Notice::new(EventReason::UsageLimited, message)),
            // Its Event is the request's own (`ApprovalRequested`).
            ActivityReason::Working | ActivityReason::Idle | ActivityReason::WaitingForApproval => {}
        }
    }

    /// No harness runs: nothing to say it does.
    pub(super) fn forget_the_activity(&mut self) {
        self.status.conditions.retain(|c| c.type_ != ConditionType::Activity.as_str());
    }
}
