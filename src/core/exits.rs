//! Exits: a harness that died is recorded (a failure unless it ran long enough to be healthy) and counted toward
//! kubelet-style back-off; a resumed pane that dies within the settle window is a late resume failure
//! (`PaneDiedAfterProbe`). Either way every prompt sent to it and not known delivered goes back to `Pending`, and
//! the message quotes what the dead pane printed last. A resume the harness refused because another process of its
//! own holds the conversation is busy elsewhere: tried again after a back-off, never a fresh conversation.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::Liveness;
use super::resume::ResumeReason;
use super::{Decision, EventReason, HEALTHY_AFTER, Notice, ReadyReason, Settings, backoff, later};
use crate::api::Phase;
use crate::harness::Profile;

impl Decision<'_, '_> {
    /// A resumed pane that dies within the settle window: its prompts go back to `Pending`, and when its last lines
    /// say the harness cannot find the conversation, the next spawn is fresh. So does one whose last lines say so
    /// later, before it ran long enough to be healthy: a CLI slowed by a loaded node says it after the settle window
    /// (Gemini CLI 13 s after its start, measured beside a build), and resuming it again would fail the same way for
    /// ever.
    pub(super) fn resumed_pane_died_while_settling(&mut self, profile: &Profile, settings: Settings) -> bool {
        let input = self.input;
        let Some(r) = self.status.last_respawn.clone() else { return false };
        let now = input.context.now;
        let within = now < later(r.time.0, Duration::from_secs(settings.settle.into()));
        let unresumable = profile.resume_failed(input.observed.last_output.trim());
        let said_early = unresumable && now < later(r.time.0, HEALTHY_AFTER);
        if !(r.resumed && (within || said_early) && input.observed.liveness == Liveness::Dead) {
            return false;
        }
        let after = if within { format!("within {}s", settings.settle) } else { "before it was healthy".into() };
        let mut message = format!("resumed conversation {} died after the probe, {after}", r.harness_session_id);
        if unresumable {
            message.push_str("; the harness cannot find it, so the next spawn is fresh");
        }
        message.push_str(&self.quote_last_output());
        if unresumable {
            self.status.unresumable_session_id = Some(r.harness_session_id.clone());
            self.status.unresumable_message = Some(message.clone());
        }
        self.condition(ResumeReason::PaneDiedAfterProbe, false, message.clone());
        self.notice(Notice::resume_failed(ResumeReason::PaneDiedAfterProbe, message.clone()));
        self.return_unconfirmed(&message);
        self.status.phase = Some(Phase::Pending);
        let ready = "the resumed harness died after the probe; its prompts will be sent again";
        self.ready(false, ReadyReason::HarnessNotRunning, ready);
        self.count_failure(); // a resume that keeps dying backs off like any crash (the first retry is immediate)
        self.requeue(Duration::ZERO); // its prompts are pending again: respawn with them next
        true
    }

    /// A resumed pane that died saying another process of the harness holds the conversation, before it ran long
    /// enough to be healthy (the real CLI says so 12-19 s after its start offline, later than the settle window a
    /// test may set; a harness that ran for ten minutes was not refused, whatever its last lines quote).
    pub(super) fn resumed_pane_refused_as_busy(&mut self, profile: &Profile) -> bool {
        let input = self.input;
        let Some(r) = self.status.last_respawn.clone() else { return false };
        let early = input.context.now < later(r.time.0, HEALTHY_AFTER);
        let refused = early
            && input.observed.liveness == Liveness::Dead
            && profile.resume_busy(input.observed.last_output.trim());
        if r.resumed && refused {
            self.resume_held_elsewhere(&r.harness_session_id);
        }
        r.resumed && refused
    }

    /// The harness refused a resume because another process of its own holds the conversation (Claude Code's
    /// background sessions): nothing is wrong with the conversation, so no fresh one replaces it. Its prompts wait,
    /// and the same conversation is resumed again after a back-off, until the other process lets it go.
    pub(super) fn resume_held_elsewhere(&mut self, id: &str) {
        let message = format!(
            "conversation {id} is held by another process of the harness; it is resumed again after a back-off, \
             never replaced by a fresh one{}",
            self.quote_last_output()
        );
        self.condition(ResumeReason::ConversationBusy, false, message.clone());
        self.notice(Notice::resume_failed(ResumeReason::ConversationBusy, message.clone()));
        self.return_unconfirmed(&message);
        self.status.phase = Some(Phase::Pending);
        let ready = format!("conversation {id} is busy elsewhere; its prompts wait");
        self.ready(false, ReadyReason::HarnessNotRunning, ready);
        self.count_failure();
        self.requeue(backoff(self.status.failure_count));
    }

    /// A running harness died: a failure unless it ran long enough to count as healthy.
    pub(super) fn record_exit(&mut self) {
        let now = self.input.context.now;
        let started = self.status.last_respawn.as_ref().map(|r| r.time.0);
        let healthy = started.is_some_and(|t| later(t, HEALTHY_AFTER) <= now);
        let message = format!("the harness in {} exited{}", self.session, self.quote_last_output());
        self.notice(Notice::new(EventReason::HarnessExited, message));
        if healthy {
            self.status.failure_count = 0;
            self.status.next_retry_time = None;
        } else {
            self.count_failure();
        }
    }

    /// Counts one quick failure and sets the next retry time.
    pub(super) fn count_failure(&mut self) {
        let now = self.input.context.now;
        self.status.failure_count += 1;
        self.status.last_failure_time = Some(Time(now));
        let delay = backoff(self.status.failure_count);
        self.status.next_retry_time = (!delay.is_zero()).then(|| Time(later(now, delay)));
    }

    /// A fresh spawn failed: its boot prompt goes back to `Pending` (unless its transcript shows it arrived), and the
    /// failure counts toward back-off.
    pub(super) fn fresh_spawn_failed(&mut self, ready_reason: ReadyReason, notice: Notice) {
        let message = notice.message.clone();
        // The boot prompt is the only one sent while a spawn is verified.
        self.return_unconfirmed(&message);
        self.notice(notice);
        self.status.phase = Some(Phase::Pending);
        self.ready(false, ready_reason, message);
        self.count_failure();
        self.requeue(backoff(self.status.failure_count));
    }
}
