//! Verification without blocking: a spawn records a deadline in status and is requeued; at the deadline a live
//! pane has survived its probe (recorded, its boot event delivered), a dead one failed (a resume falls back to a
//! fresh conversation with the same event, a fresh one backs off). tmux refusing a spawn is judged here too.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::resume::{Fresh, ResumeReason};
use super::{Decision, Notice, NoticeKind, Op, RESUMED, Settings, until};
use crate::api::{EventPhase, Phase, Respawn, Verification, Via};
use crate::harness::{Profile, clean_prompt};
use crate::tmux::Liveness;

impl Decision<'_, '_> {
    /// A spawn is in flight: wait for its deadline, then judge it by the pane's liveness.
    pub(super) fn verify(&mut self, profile: &Profile, settings: Settings, v: Verification) {
        let input = self.input;
        let now = input.now;
        if input.liveness == Liveness::Alive {
            if now < v.deadline.0 {
                self.status.phase = Some(Phase::Verifying);
                self.requeue(until(now, v.deadline.0));
                return;
            }
            self.survived_probe(v);
            return;
        }
        // Dead (or gone) before or at the deadline.
        self.status.verification = None;
        let output = input.last_output.trim();
        let said = if output.is_empty() { String::new() } else { format!(": {output}") };
        if v.resume {
            let message = format!(
                "resumed conversation {} died within the {}s probe{said}",
                v.harness_session_id, settings.probe
            );
            self.fall_back(profile, settings, v.event, ResumeReason::PaneDied, message);
            return;
        }
        let message =
            format!("fresh conversation {} died within the {}s probe{said}", v.harness_session_id, settings.probe);
        self.fresh_spawn_failed(v.event.as_deref(), "PaneDied", Notice::new(NoticeKind::HarnessExited, message));
    }
    /// The spawn survived its probe: record it and deliver its boot event.
    pub(super) fn survived_probe(&mut self, v: Verification) {
        let now = self.input.now;
        self.status.verification = None;
        let id = v.harness_session_id.clone();
        let first = self.status.last_respawn.is_none();
        let reason = if v.resume {
            let message = format!("resumed the existing conversation {id}");
            self.condition(RESUMED, true, ResumeReason::Resumed.as_str(), message);
            ResumeReason::Resumed.to_string()
        } else {
            let reason = v.fresh_reason.clone().unwrap_or_else(|| ResumeReason::NoRecordedSession.to_string());
            let message = v.fresh_message.clone().unwrap_or_default();
            self.condition(RESUMED, false, &reason, format!("started a fresh conversation {id}: {message}"));
            reason
        };
        if self.status.harness_session_id.as_ref() != Some(&id) {
            self.status.unresumable_session_id = None;
        }
        self.status.harness_session_id = Some(id.clone());
        if !first {
            self.status.respawn_count += 1;
        }
        self.status.last_respawn = Some(Respawn {
            time: Time(now),
            resumed: v.resume,
            reason,
            harness_session_id: id.clone(),
            event: v.event.clone(),
        });
        let what = if v.resume { "resumed the existing conversation" } else { "started a fresh conversation" };
        let kind =
            if first { NoticeKind::Started { resumed: v.resume } } else { NoticeKind::Respawned { resumed: v.resume } };
        self.notice(Notice::new(kind, format!("{what} {id} in {}", self.session)));
        if let Some(event) = &v.event {
            let boot = self.input.events.iter().find(|e| &e.name == event);
            if let (true, Some(boot)) = (v.paste_prompt, boot) {
                let text = clean_prompt(&boot.prompt).into_owned();
                self.ops.push(Op::Paste { session: self.session.clone(), event: event.clone(), text });
            }
            let via = if v.resume { Via::Resumed } else { Via::Fresh };
            self.event(event, EventPhase::Delivered, Some(via), false, None);
            self.notice(Notice::new(NoticeKind::Delivered, format!("event {event} was the boot prompt ({via:?})")));
        }
        self.status.phase = Some(Phase::Running);
        self.ready(true, "Running", "the harness is running");
        // Events that arrived meanwhile go in next, pasted, in order.
        if self.input.events.iter().any(|e| Some(&e.name) != v.event.as_ref()) {
            self.requeue(Duration::ZERO);
        }
    }

    /// The spawn just planned failed.
    pub(super) fn tmux_refused_spawn(&mut self, profile: &Profile, settings: Settings, v: Verification, failure: &str) {
        if v.resume {
            let message = format!("tmux could not start the resume of {}: {failure}", v.harness_session_id);
            self.fall_back(profile, settings, v.event, ResumeReason::ResumeSpawnFailed, message);
            return;
        }
        let message = format!("tmux could not start the harness: {failure}");
        self.fresh_spawn_failed(v.event.as_deref(), "SpawnFailed", Notice::new(NoticeKind::SpawnFailed, message));
    }
    /// A resume failed after tmux ran it: report it and fall back to a fresh conversation with the same event.
    pub(super) fn fall_back(
        &mut self,
        profile: &Profile,
        settings: Settings,
        event: Option<String>,
        why: ResumeReason,
        message: String,
    ) {
        self.condition(RESUMED, false, why.as_str(), message.clone());
        self.notice(Notice::resume_failed(why, message.clone()));
        self.respawn_fresh(profile, settings, event, Some(Fresh { reason: why, message, reported: true }));
    }
}
