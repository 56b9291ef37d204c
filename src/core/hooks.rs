//! What a harness's hooks say, part of decide: the recorded id follows the conversation. A harness may move to a
//! new conversation under a new id while it runs (Claude Code on `/clear` or compaction, typed by a person through
//! `attach`); its `SessionStart` hook says so, and the next resume must take the conversation it moved to, not the one
//! it left. The ids it left are kept, newest first, so the way back is never lost.

use super::{Decision, EventReason, Notice};
use crate::api::is_valid_session_id;

/// How many earlier conversations a status keeps.
pub const PREVIOUS_KEPT: usize = 10;

impl Decision<'_, '_> {
    /// A live harness whose hooks name another conversation than the recorded one: record it.
    pub(super) fn follow_the_conversation(&mut self) {
        let Some(id) = self.input.evidence.hooked.filter(|id| is_valid_session_id(id)) else { return };
        if self.status.verification.is_some() || self.status.harness_session_id.as_deref() == Some(id) {
            return;
        }
        let previous = self.status.harness_session_id.replace(id.to_string());
        if let Some(old) = &previous {
            self.status.previous_session_ids.retain(|p| p != old && p != id);
            self.status.previous_session_ids.insert(0, old.clone());
            self.status.previous_session_ids.truncate(PREVIOUS_KEPT);
        }
        let was = previous.map(|old| format!(" (it left {old})")).unwrap_or_default();
        let message = format!("the harness moved to conversation {id}{was}; the next resume takes it");
        self.notice(Notice::new(EventReason::ConversationChanged, message));
    }
}
