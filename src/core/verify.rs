//! Verification without blocking: a spawn records a deadline in status and is requeued; at the deadline a live
//! pane has survived its probe (recorded; its boot prompt stays `Delivering` until known delivered), a dead one
//! failed (a resume falls back to a fresh conversation with the same boot prompt, a fresh one backs off). An intent
//! whose spawn never ran is run again; tmux refusing a spawn is judged here too.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::Liveness;
use super::resume::{Fresh, ResumeReason};
use super::spawn::boot_key;
use super::{Attempt, Decision, EventReason, Notice, PromptKey, ReadyReason, Settings, later, until};
use crate::api::{Phase, PromptPhase, Respawn, Verification, Via};
use crate::harness::Profile;

impl Decision<'_, '_> {
    /// A spawn is in flight: wait for its deadline, then judge it by the pane's liveness.
    pub(super) fn verify(&mut self, profile: &Profile, settings: Settings, mut v: Verification) {
        let input = self.input;
        let now = input.context.now;
        if self.spawn_never_ran(&v) {
            // The agent stopped between recording the intent and spawning: the same spawn, not a failure; a fresh
            // one of a discovering harness waits, as any would, while another session of its workdir discovers.
            if !v.resume && self.waits_for_discovery(profile) {
                return;
            }
            v.started = Time(now);
            v.deadline = Time(later(now, Duration::from_secs(settings.probe.into())));
            match self.spawn_op(profile, &v, self.boot_text(&v)) {
                Ok(op) => {
                    self.claim_for(profile, &v);
                    self.status.verification = Some(v.clone());
                    self.intent = Some(self.status.clone());
                    self.ops.push(op);
                    if let Some(key) = boot_key(&v) {
                        let via = if v.resume { Via::Resumed } else { Via::Fresh };
                        self.set_prompt(
                            key,
                            PromptPhase::Delivering,
                            Some(via),
                            Attempt::SentAt(self.offset_now(Some(via))),
                            None,
                        );
                    }
                    self.status.phase = Some(Phase::Verifying);
                    self.requeue(until(now, v.deadline.0));
                }
                Err(e) => {
                    self.status.verification = None;
                    let message = format!("the recorded spawn cannot be built again: {e}");
                    self.fresh_spawn_failed(ReadyReason::SpawnFailed, Notice::new(EventReason::SpawnFailed, message));
                }
            }
            return;
        }
        if input.observed.liveness == Liveness::Alive {
            if self.boot_send_unrecorded(&v) {
                return;
            }
            if now < v.deadline.0 {
                self.status.phase = Some(Phase::Verifying);
                self.requeue(until(now, v.deadline.0));
                return;
            }
            self.survived_probe(profile, v);
            self.deliver_to_live_pane(profile, settings);
            return;
        }
        // Dead (or gone) before or at the deadline.
        self.status.verification = None;
        let said = self.quote_last_output();
        if v.resume && profile.resume_busy(input.observed.last_output.trim()) {
            self.resume_held_elsewhere(&v.harness_session_id);
            return;
        }
        if v.resume {
            let message = format!(
                "resumed conversation {} died within the {}s probe{said}",
                v.harness_session_id, settings.probe
            );
            self.fall_back(profile, settings, boot_key(&v), ResumeReason::PaneDied, message);
            return;
        }
        if self.made_its_conversation(&v) {
            // It exists: the next respawn resumes it rather than starting yet another.
            self.status.harness_session_id = Some(v.harness_session_id.clone());
        }
        let message =
            format!("fresh conversation {} died within the {}s probe{said}", v.harness_session_id, settings.probe);
        self.fresh_spawn_failed(ReadyReason::PaneDied, Notice::new(EventReason::HarnessExited, message));
    }

    /// The spawn ran (its pane carries its tag) with its boot prompt on its command line, but the store still shows
    /// that prompt waiting: the status write after the spawn failed, or the agent stopped before it (the intent is
    /// written before the spawn, the send after). It was sent: recorded so now, and never sent again; the decision
    /// looks again once it is.
    fn boot_send_unrecorded(&mut self, v: &Verification) -> bool {
        let Some(key) = boot_key(v) else { return false };
        let ran = self.input.observed.view.is_some_and(|t| t.spawn == v.spawn);
        if !ran || !self.prompt(key).is_some_and(|p| p.phase == PromptPhase::Pending && p.created <= v.started.0) {
            return false; // not this spawn's, or an event made after it under the same name
        }
        let via = if v.resume { Via::Resumed } else { Via::Fresh };
        self.set_prompt(key, PromptPhase::Delivering, Some(via), Attempt::Counted, None);
        self.status.phase = Some(Phase::Verifying);
        self.requeue(Duration::ZERO);
        true
    }

    /// The spawn survived its probe: record it. Its boot prompt stays `Delivering` until known delivered.
    fn survived_probe(&mut self, profile: &Profile, v: Verification) {
        let now = self.input.context.now;
        self.status.verification = None;
        // A harness that shows its id after the start: the spawn's placeholder is no conversation's id.
        let discovers = !v.resume && profile.discovers();
        let id = if discovers { String::new() } else { v.harness_session_id.clone() };
        let shown = if discovers { "(its id is being discovered)".to_string() } else { id.clone() };
        let first = self.status.last_respawn.is_none();
        let reason = if v.resume {
            let message = format!("resumed the existing conversation {id}");
            self.condition(ResumeReason::Resumed, true, message);
            ResumeReason::Resumed.to_string()
        } else {
            let why = v.fresh_reason.as_deref().and_then(ResumeReason::from_name);
            let why = why.unwrap_or(ResumeReason::NoRecordedSession);
            let message = v.fresh_message.clone().unwrap_or_default();
            self.condition(why, false, format!("started a fresh conversation {shown}: {message}"));
            why.to_string()
        };
        if self.status.harness_session_id.as_ref() != Some(&id) {
            self.status.unresumable_session_id = None;
            self.status.unresumable_message = None;
        }
        // A fresh conversation (a fallback) keeps the way back to the one it replaces.
        self.record_conversation((!discovers).then_some(id.as_str()));
        if discovers {
            self.start_discovering(profile, v.started.clone());
        }
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
        self.notice(Notice::survived(first, v.resume, format!("{what} {shown} in {}", self.session)));
    }

    /// The spawn just planned failed.
    pub(super) fn tmux_refused_spawn(&mut self, profile: &Profile, settings: Settings, v: Verification, failure: &str) {
        if v.resume {
            let message = format!("tmux could not start the resume of {}: {failure}", v.harness_session_id);
            self.fall_back(profile, settings, boot_key(&v), ResumeReason::ResumeSpawnFailed, message);
            return;
        }
        let message = format!("tmux could not start the harness: {failure}");
        self.fresh_spawn_failed(ReadyReason::SpawnFailed, Notice::new(EventReason::SpawnFailed, message));
    }

    /// A resume failed after tmux ran it: report it and fall back to a fresh conversation with the same boot prompt.
    fn fall_back(
        &mut self,
        profile: &Profile,
        settings: Settings,
        boot: Option<PromptKey<'_>>,
        why: ResumeReason,
        message: String,
    ) {
        self.condition(why, false, message.clone());
        self.notice(Notice::resume_failed(why, message.clone()));
        // Its send went to a harness that is gone (or never ran): the fresh one gets it with nothing counted, unless
        // it has gone to too many harnesses that died.
        let mut boot = boot;
        if let Some(p) = boot.and_then(|k| self.prompt(k)).filter(|p| p.phase == PromptPhase::Delivering) {
            if p.returns + 1 >= super::deliver::RETURN_LIMIT {
                boot = None;
            }
            self.return_prompt(&p, "its resume failed; it goes to the fresh conversation");
        }
        // Over its budget (the resumed harness spent before it died): nothing starts until the budget is raised.
        if let Some(over) = self.paused.clone() {
            self.paused(&over);
            return;
        }
        // Parked (another session of its account refused meanwhile): the fresh conversation waits for the wake.
        if let Some(wake) = self.parked {
            self.parked_stopped(wake);
            return;
        }
        self.respawn_fresh(profile, settings, boot, Fresh { reason: why, message, reported: true });
    }

    /// `: <the dead pane's last lines>`, or nothing when it printed nothing.
    pub(super) fn quote_last_output(&self) -> String {
        let output = self.input.observed.last_output.trim();
        if output.is_empty() { String::new() } else { format!(": {output}") }
    }
}
