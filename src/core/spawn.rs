//! Spawning: a session whose harness is not running respawns it when there is a reason to (a pending event, the
//! first start, `restartPolicy: Always`), after any back-off, resuming the recorded conversation when the resume
//! table allows, with the oldest pending event as its boot prompt. The intent is recorded before tmux runs.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;

use super::resume::{Fresh, try_resume};
use super::{ARGV_PROMPT_LIMIT, Decision, Notice, NoticeKind, Op, Settings, until};
use crate::api::{EventPhase, Phase, RestartPolicy, Verification};
use crate::harness::{Mode, Profile, clean_prompt};
use crate::tmux::Spawn;

/// One spawn to plan.
pub(super) struct SpawnRequest<'p> {
    /// Resume the recorded conversation, or start a fresh one.
    pub mode: Mode,
    /// The conversation id: the recorded one to resume, or the new one.
    pub id: String,
    /// The boot event, whose prompt rides on the command line.
    pub event: Option<String>,
    /// The boot prompt (the event's, or `initialPrompt` on the first start).
    pub prompt: Option<&'p str>,
    /// Why it is fresh (a row of the resume table), when it is.
    pub fresh: Option<Fresh>,
}

impl Decision<'_, '_> {
    /// Dead or absent, nothing in flight: record a death, then respawn if there is a reason to.
    pub(super) fn not_running(&mut self, profile: &Profile, settings: Settings) {
        let input = self.input;
        let now = input.now;
        if self.status.phase == Some(Phase::Running) {
            if self.resumed_pane_died_while_settling(profile, settings) {
                return;
            }
            self.record_exit();
        }
        let first_start = self.status.last_respawn.is_none();
        let boot = input.events.first();
        let wanted = boot.is_some() || first_start || input.spec.restart_policy == RestartPolicy::Always;
        if input.spec.restart_policy == RestartPolicy::Never && !first_start {
            self.status.phase = Some(Phase::Failed);
            let waiting = input.events.len();
            self.ready(
                false,
                "HarnessExited",
                format!("the harness exited and restartPolicy is Never ({waiting} events wait)"),
            );
            return;
        }
        if !wanted {
            self.status.phase = Some(Phase::Pending);
            self.ready(false, "HarnessNotRunning", "the harness is not running; the next event respawns it");
            return;
        }
        if let Some(retry) = self.status.next_retry_time.clone().filter(|t| t.0 > now) {
            if self.status.phase != Some(Phase::BackOff) {
                let message = format!("{} quick failures; respawning at {}", self.status.failure_count, retry.0);
                self.notice(Notice::new(NoticeKind::BackOff, message));
            }
            self.status.phase = Some(Phase::BackOff);
            let message = format!("back-off after {} quick failures until {}", self.status.failure_count, retry.0);
            self.ready(false, "BackOff", message);
            self.requeue(until(now, retry.0));
            return;
        }
        let prompt = match boot {
            Some(e) => Some(e.prompt.as_str()),
            None if first_start => input.spec.initial_prompt.as_deref(),
            None => None,
        };
        let event = boot.map(|e| e.name.clone());
        match try_resume(input.spec, &self.status, profile, settings.enabled) {
            Ok(id) => {
                let request = SpawnRequest { mode: Mode::Resume, id, event, prompt, fresh: None };
                self.spawn(profile, settings, request);
            }
            Err(fresh) => {
                if fresh.reported {
                    self.notice(Notice::resume_failed(fresh.reason, fresh.message.clone()));
                }
                let id = input.new_session_id.to_string();
                self.spawn(
                    profile,
                    settings,
                    SpawnRequest { mode: Mode::Fresh, id, event, prompt, fresh: Some(fresh) },
                );
            }
        }
    }
    /// A fresh spawn for `event` after a failed resume (its prompt is looked up among the pending events).
    pub(super) fn respawn_fresh(
        &mut self,
        profile: &Profile,
        settings: Settings,
        event: Option<String>,
        fresh: Option<Fresh>,
    ) {
        let input = self.input;
        let prompt = match &event {
            Some(name) => input.events.iter().find(|e| &e.name == name).map(|e| e.prompt.as_str()),
            None if self.status.last_respawn.is_none() => input.spec.initial_prompt.as_deref(),
            None => None,
        };
        let id = input.new_session_id.to_string();
        self.spawn(profile, settings, SpawnRequest { mode: Mode::Fresh, id, event, prompt, fresh });
    }
    /// Plans a spawn: the intent (with its verification) is recorded first.
    pub(super) fn spawn(&mut self, profile: &Profile, settings: Settings, request: SpawnRequest<'_>) {
        let input = self.input;
        let SpawnRequest { mode, id, event, prompt, fresh } = request;
        let prompt = prompt.map(clean_prompt);
        let paste_prompt = prompt.as_ref().is_some_and(|p| p.len() > ARGV_PROMPT_LIMIT);
        let argv_prompt = prompt.as_deref().filter(|_| !paste_prompt);
        let argv = match profile.argv(&input.spec.harness, mode, &id, argv_prompt) {
            Ok(argv) => argv,
            Err(e) => {
                // Only the prompt can make a hostable profile refuse: the event cannot be delivered by this harness.
                self.status.phase = Some(Phase::Pending);
                match &event {
                    Some(event) => {
                        self.event(event, EventPhase::Failed, None, true, Some(e.to_string()));
                        self.notice(Notice::new(NoticeKind::DeliveryFailed, format!("event {event}: {e}")));
                        self.requeue(Duration::ZERO);
                    }
                    None => self.ready(false, "InvalidPrompt", format!("initialPrompt: {e}")),
                }
                return;
            }
        };
        let now = input.now;
        let (fresh_reason, fresh_message) = match fresh {
            Some(f) => (Some(f.reason.to_string()), Some(f.message)),
            None => (None, None),
        };
        self.status.verification = Some(Verification {
            started: Time(now),
            deadline: Time(now + SignedDuration::from_secs(settings.probe.into())),
            resume: mode == Mode::Resume,
            harness_session_id: id,
            event: event.clone(),
            fresh_reason,
            fresh_message,
            paste_prompt,
        });
        self.status.phase = Some(Phase::Starting);
        self.ready(false, "Starting", "spawning the harness");
        self.intent = Some(self.status.clone());
        let workdir = input.spec.workdir.clone().into();
        self.ops.push(Op::Spawn(Spawn {
            session: self.session.clone(),
            workdir,
            binary: profile.binary.clone(),
            argv,
        }));
        // After the spawn: nothing waits on an API write between the decision and the harness starting.
        if let Some(event) = &event {
            self.event(event, EventPhase::Delivering, None, true, None);
        }
        self.status.phase = Some(Phase::Verifying);
        self.ready(false, "Verifying", format!("waiting {}s to verify the harness survived", settings.probe));
        self.requeue(Duration::from_secs(settings.probe.into()));
    }
}
