//! The resume table, whose rows decide whether a respawn resumes the recorded conversation or starts a fresh one, and
//! the reason each row gives the `Resumed` condition.
//!
//! [`try_resume`] holds the rows decided before tmux runs anything; the rows after tmux (`ResumeSpawnFailed`,
//! `PaneDied`, `PaneDiedAfterProbe`) are decided from their outcomes in [`super::verify`] and [`super::exits`].

use crate::api::{self, WorkSessionSpec, WorkSessionStatus};
use crate::harness::Profile;

crate::words::words! {
    /// The `Resumed` condition's reasons, one per row of the decision table.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ResumeReason {
        /// The recorded conversation was resumed and survived the probe.
        Resumed,
        /// `resumeOnRespawn` is off.
        ResumeDisabled,
        /// No conversation is recorded (nor given in `spec.harnessSessionId`).
        NoRecordedSession,
        /// The recorded id does not have the shape of a session id.
        InvalidSessionId,
        /// The harness profile has no resume argv.
        HarnessCannotResume,
        /// tmux could not start the resume.
        ResumeSpawnFailed,
        /// The resumed pane died within the probe.
        PaneDied,
        /// The resumed pane died after the probe, within the settle window.
        PaneDiedAfterProbe,
        /// The harness's store has no conversation under the recorded id: it is not resumed.
        ConversationNotFound,
        /// Another process of the harness holds the conversation (its own background supervisor): it is resumed
        /// again after a back-off, never replaced by a fresh one.
        ConversationBusy,
        /// The session's node was lost and the conversation did not come with it (its state was not on storage this
        /// node mounts): a fresh conversation, the old id kept in `previousSessionIds`.
        NodeLost,
    }
}

/// Why a spawn is fresh rather than resumed: a row of the decision table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fresh {
    /// The `Resumed` condition's reason.
    pub reason: ResumeReason,
    /// Why, for the condition message.
    pub message: String,
    /// Whether the failure is reported as `session.resume_failed` (opting out and having nothing to resume are
    /// silent: nothing failed).
    pub reported: bool,
}

impl Fresh {
    fn silent(reason: ResumeReason, message: String) -> Self {
        Self { reason, message, reported: false }
    }

    fn reported(reason: ResumeReason, message: String) -> Self {
        Self { reason, message, reported: true }
    }
}

/// The conversation a respawn would resume: the recorded one, else the one `spec.harnessSessionId` gives to adopt.
pub fn candidate<'s>(spec: &'s WorkSessionSpec, status: &'s WorkSessionStatus) -> Option<&'s String> {
    status.harness_session_id.as_ref().or(spec.harness_session_id.as_ref())
}

/// The resume table before tmux: the recorded id to resume, or why the spawn is fresh.
///
/// `found` is whether the harness's store holds the conversation (`None`: the profile names no store).
pub fn try_resume(
    spec: &WorkSessionSpec,
    status: &WorkSessionStatus,
    profile: &Profile,
    enabled: bool,
    found: Option<bool>,
) -> Result<String, Fresh> {
    if !enabled {
        return Err(Fresh::silent(ResumeReason::ResumeDisabled, "resumeOnRespawn is off".into()));
    }
    let Some(id) = candidate(spec, status) else {
        return Err(Fresh::silent(ResumeReason::NoRecordedSession, "no conversation is recorded to resume".into()));
    };
    if !api::is_valid_session_id(id) {
        let message = format!("recorded session id {id:?} does not match {}", api::SESSION_ID_PATTERN);
        return Err(Fresh::reported(ResumeReason::InvalidSessionId, message));
    }
    if status.unresumable_session_id.as_ref() == Some(id) {
        // The late failure's own message quotes what the dying pane printed: keep it.
        let message = match &status.unresumable_message {
            Some(message) => message.clone(),
            None => format!("the harness could not find conversation {id} after a resume"),
        };
        return Err(Fresh::silent(ResumeReason::PaneDiedAfterProbe, message));
    }
    if profile.resume.is_none() {
        let message = format!("the {} harness cannot resume a conversation in interactive mode", spec.harness);
        return Err(Fresh::reported(ResumeReason::HarnessCannotResume, message));
    }
    if found == Some(false) {
        let message = format!("the {} harness has no conversation {id} in its store", spec.harness);
        return Err(Fresh::reported(ResumeReason::ConversationNotFound, message));
    }
    Ok(id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip_through_their_names() {
        for &reason in ResumeReason::ALL {
            assert_eq!(ResumeReason::from_name(reason.as_str()), Some(reason));
            assert_eq!(reason.to_string(), format!("{reason:?}"));
        }
        assert_eq!(ResumeReason::from_name("Bogus"), None);
    }
}
