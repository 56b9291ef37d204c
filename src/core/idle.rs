//! Idle suspension, part of decide: a live harness that has printed nothing for `suspendAfterSeconds` (tmux's own
//! window activity, from the one observation), with no prompt waiting or being delivered, is stopped and the session
//! goes `Idle`. Where its hooks speak, it must also have finished its turn (never while it works on one), and the
//! period counts from then at the earliest. An idle stop is not a death: it never counts toward back-off, and the session stays `Idle` (whatever
//! its `restartPolicy`) until a prompt wakes it through the normal respawn path, resume first.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::{Decision, EventReason, Notice, Op, ReadyReason, Settings, Workspace, later, until};
use crate::api::Phase;

/// The first words of an archived session's `Ready` message.
const ARCHIVED: &str = "its work item is closed (spec.archived); the next event resumes the conversation";

impl Decision<'_, '_> {
    /// After the live pane's prompts are handled: stop it when it has been quiet for the idle period and nothing is
    /// owed to it, else come back when the period would end.
    pub(super) fn idle_check(&mut self, settings: Settings) {
        let input = self.input;
        let Some(after) = settings.idle else { return };
        if !self.prompts().is_empty() || !self.ops.is_empty() {
            return; // a prompt waits or is being delivered: not idle
        }
        // tmux's clock of the window: its last output, or its creation. Unknown: never judged idle. tmux names the
        // second, so the output was at the end of it at the latest: counted from there, a period is never cut short.
        let Some(screen_quiet) = input
            .observed
            .view
            .map(|t| t.activity)
            .filter(|a| *a > 0)
            .and_then(|a| Timestamp::from_second(a.saturating_add(1)).ok())
        else {
            return;
        };
        // With hooks, the harness's own word: never while it works on a turn (a long tool call prints nothing), and
        // quiet since its turn ended at the earliest.
        let quiet_since = match input.evidence.turn.as_ref().map(super::hooks::quiet_since) {
            Some(None) => return,
            Some(Some(ended)) => ended.map_or(screen_quiet, |t| t.max(screen_quiet)),
            None => screen_quiet,
        };
        let due = later(quiet_since, Duration::from_secs(after.into()));
        if input.context.now < due {
            self.requeue(until(input.context.now, due));
            return;
        }
        self.ops.push(Op::Stop { session: self.session.clone() });
        self.status.idle_since = Some(Time(input.context.now));
        self.status.phase = Some(if settings.archived { Phase::Archived } else { Phase::Idle });
        let (reason, message) = self.stopped(settings);
        self.ready(false, reason, message.clone());
        let event = if settings.archived { EventReason::Archived } else { EventReason::IdleStopped };
        self.notice(Notice::new(event, message));
    }

    /// What `Ready` says of a session stopped on purpose, from its state alone (archived or idle, stopped for quiet
    /// or never running, the idle period): the same words at every decision, so they change only when that does.
    fn stopped(&self, settings: Settings) -> (ReadyReason, String) {
        let for_quiet = self.status.idle_since.is_some();
        if self.status.phase == Some(Phase::Archived) {
            let how = if for_quiet { "; stopped once quiet" } else { "" };
            return (ReadyReason::Archived, format!("{ARCHIVED}{how}, the conversation kept"));
        }
        let how = settings.idle.map_or("as idle".into(), |after| format!("after {after}s without output"));
        (ReadyReason::Idle, format!("stopped {how}; the next event resumes the conversation"))
    }

    /// Not running: whether the session stays idle or archived (nothing waits for it, and an archived one is still
    /// archived). A prompt that waits wakes it; so does an archived session's work item reopening.
    pub(super) fn stays_idle(&mut self, waiting: usize, settings: Settings) -> bool {
        let archived = self.input.object.spec.archived;
        if self.status.phase == Some(Phase::Archived) && !archived {
            self.woken("its work item reopened: the conversation is resumed".into());
            return false;
        }
        // One that failed (restartPolicy Never, an exit) stays failed: reopening must not bring it back. One that was
        // not running when its work item closed reads archived too, and nothing starts it.
        if archived && waiting == 0 && self.status.phase != Some(Phase::Failed) {
            self.status.phase = Some(Phase::Archived);
        }
        if !matches!(self.status.phase, Some(Phase::Idle | Phase::Archived)) {
            return false;
        }
        if waiting == 0 {
            // Said at every decision: what else said it meanwhile (a tmux server that went away) gives way.
            let (reason, message) = self.stopped(settings);
            self.ready(false, reason, message);
            return true;
        }
        let what = if self.status.phase == Some(Phase::Archived) { "archived" } else { "idle" };
        self.woken(format!("{waiting} prompt(s) wake the {what} harness"));
        false
    }

    /// Said once the spawn goes ahead: a spawn held for a missing workdir leaves the session stopped, and wakes it
    /// (and says so) when the directory is there.
    fn woken(&mut self, message: String) {
        if self.input.evidence.workspace != Workspace::NoWorkdir {
            self.status.idle_since = None;
            self.notice(Notice::new(EventReason::Woken, message));
        }
    }
}
