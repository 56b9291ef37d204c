//! The pure decision core: from what is desired (spec, config, pending events) and what is observed (tmux
//! liveness, the clock) to a [`Plan`]: operations to run and the status to record. No I/O happens here.
//!
//! It carries the seed design's `_try_resume` table ([`try_resume`]) and the product brief's steps: delete and
//! suspend, paste into a live pane, respawn a dead one with the oldest pending event as boot prompt, verify
//! without blocking (a deadline in status, requeued), fall back to a fresh conversation, put the boot event back
//! when a resumed pane dies within the settle window, and back off like kubelet.
//!
//! The executor's contract: write [`Plan::intent`] (if any) first, then run [`Plan::ops`] in order, stopping at the
//! first failure; when a [`Op::Spawn`] fails, decide again with [`Input::spawn_failure`] set and the intent as
//! status; finally write [`Plan::status`] and requeue after [`Plan::requeue_after`].

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::{
    self, EventPhase, Phase, Respawn, RestartPolicy, Verification, Via, WorkSessionSpec, WorkSessionStatus,
};
use crate::config::Config;
use crate::harness::{ArgvError, Mode, Profile, clean_prompt};
use crate::tmux::{Liveness, Spawn};

mod conditions;
mod plan;
pub mod queue;
pub use conditions::{READY, RESUMED, set_condition};
pub use plan::{EventUpdate, Input, Notice, Op, PendingEvent, Plan, Severity};

#[cfg(test)]
mod tests;

/// The `Resumed` condition's reasons, one per row of the decision table.
pub mod reason {
    /// The recorded conversation was resumed and survived the probe.
    pub const RESUMED: &str = "Resumed";
    /// `resumeOnRespawn` is off.
    pub const RESUME_DISABLED: &str = "ResumeDisabled";
    /// No conversation is recorded (nor given in `spec.harnessSessionId`).
    pub const NO_RECORDED_SESSION: &str = "NoRecordedSession";
    /// The recorded id does not have the shape of a session id.
    pub const INVALID_SESSION_ID: &str = "InvalidSessionId";
    /// The harness profile has no resume argv.
    pub const HARNESS_CANNOT_RESUME: &str = "HarnessCannotResume";
    /// tmux could not start the resume.
    pub const RESUME_SPAWN_FAILED: &str = "ResumeSpawnFailed";
    /// The resumed pane died within the probe.
    pub const PANE_DIED: &str = "PaneDied";
    /// The resumed pane died after the probe, within the settle window.
    pub const PANE_DIED_AFTER_PROBE: &str = "PaneDiedAfterProbe";
}

/// Kubelet's back-off: the first quick failure respawns at once, then 10 s doubling to 5 min.
pub const BACKOFF_BASE: Duration = Duration::from_secs(10);
/// The longest back-off.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// Longer boot prompts are pasted after verification instead of riding on the command line (tmux refuses
/// commands over about 16 KiB).
pub const ARGV_PROMPT_LIMIT: usize = 8 * 1024;
/// A harness that ran this long is healthy: its death is not a failure, and the failure count resets.
pub const HEALTHY_AFTER: Duration = Duration::from_secs(600);

/// Why a spawn is fresh rather than resumed: a row of the decision table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fresh {
    /// The `Resumed` condition's reason.
    pub reason: &'static str,
    /// Why, for the condition message.
    pub message: String,
    /// Whether to report `session.resume_failed` (opting out and having nothing to resume are silent).
    pub loud: bool,
}

/// The seed's `_try_resume`, before tmux: the recorded id to resume, or why the spawn is fresh.
///
/// The rows after tmux (`ResumeSpawnFailed`, `PaneDied`, `PaneDiedAfterProbe`) are decided from their outcomes.
pub fn try_resume(
    spec: &WorkSessionSpec,
    status: &WorkSessionStatus,
    profile: &Profile,
    enabled: bool,
) -> Result<String, Fresh> {
    if !enabled {
        return Err(Fresh { reason: reason::RESUME_DISABLED, message: "resumeOnRespawn is off".into(), loud: false });
    }
    let Some(id) = status.harness_session_id.as_ref().or(spec.harness_session_id.as_ref()) else {
        let message = "no conversation is recorded to resume".into();
        return Err(Fresh { reason: reason::NO_RECORDED_SESSION, message, loud: false });
    };
    if !api::is_valid_session_id(id) {
        let message = format!("recorded session id {id:?} does not match {}", api::SESSION_ID_PATTERN);
        return Err(Fresh { reason: reason::INVALID_SESSION_ID, message, loud: true });
    }
    if status.unresumable_session_id.as_ref() == Some(id) {
        let message = format!("the harness could not find conversation {id} after a resume");
        return Err(Fresh { reason: reason::PANE_DIED_AFTER_PROBE, message, loud: false });
    }
    if profile.resume.is_none() {
        let message = format!("the {} harness cannot resume a conversation in interactive mode", spec.harness);
        return Err(Fresh { reason: reason::HARNESS_CANNOT_RESUME, message, loud: true });
    }
    Ok(id.clone())
}

/// The resume settings of a session: its spec over the config's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Settings {
    enabled: bool,
    probe: u32,
    settle: u32,
}

fn settings(spec: &WorkSessionSpec, config: &Config) -> Settings {
    let r = spec.resume.clone().unwrap_or_default();
    let d = config.defaults;
    Settings {
        enabled: r.enabled.unwrap_or(d.resume_on_respawn),
        probe: r.probe_seconds.unwrap_or(d.resume_probe_seconds),
        settle: r.settle_seconds.unwrap_or(d.resume_settle_seconds),
    }
}

/// The back-off before respawning after `failures` consecutive quick failures.
pub fn backoff(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::ZERO,
        n => BACKOFF_BASE.saturating_mul(1 << (n - 2).min(16)).min(BACKOFF_MAX),
    }
}

fn secs(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

fn until(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(then.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// Decides what to do for one WorkSession.
pub fn decide(input: &Input) -> Plan {
    Decision::new(input).run()
}

/// One decision being built.
struct Decision<'a, 'i> {
    input: &'i Input<'a>,
    session: String,
    status: WorkSessionStatus,
    intent: Option<WorkSessionStatus>,
    ops: Vec<Op>,
    requeue_after: Option<Duration>,
}

impl<'a, 'i> Decision<'a, 'i> {
    fn new(input: &'i Input<'a>) -> Self {
        let mut status = input.status.clone();
        status.observed_generation = input.generation;
        let session = input.config.tmux_session(&input.spec.work_item);
        status.tmux_session = Some(session.clone());
        Self { input, session, status, intent: None, ops: Vec::new(), requeue_after: None }
    }

    fn plan(self) -> Plan {
        Plan { intent: self.intent, ops: self.ops, status: self.status, requeue_after: self.requeue_after }
    }

    fn condition(&mut self, type_: &str, ok: bool, reason: &str, message: impl Into<String>) {
        let (generation, now) = (self.input.generation, self.input.now);
        set_condition(&mut self.status.conditions, type_, ok, reason, &message.into(), generation, now);
    }

    fn ready(&mut self, ok: bool, reason: &str, message: impl Into<String>) {
        self.condition(READY, ok, reason, message);
    }

    fn requeue(&mut self, after: Duration) {
        self.requeue_after = Some(self.requeue_after.map_or(after, |d| d.min(after)));
    }

    fn event(&mut self, event: &str, phase: EventPhase, via: Option<Via>, attempt: bool, message: Option<String>) {
        let harness_session_id =
            matches!(phase, EventPhase::Delivered).then(|| self.status.harness_session_id.clone()).flatten();
        self.ops.push(Op::Event(EventUpdate { event: event.into(), phase, via, harness_session_id, attempt, message }));
    }

    fn notice(&mut self, notice: Notice) {
        self.ops.push(Op::Notice(notice));
    }

    fn run(mut self) -> Plan {
        let input = self.input;
        if input.deleting {
            self.ops.push(Op::Stop { session: self.session.clone() });
            self.ops.push(Op::ReleaseFinalizer);
            return self.plan();
        }
        let profile = match self.validate() {
            Ok(profile) => profile,
            Err((reason, message)) => {
                // Cannot run as specified: wait for a change; leave whatever runs alone.
                self.status.phase = Some(Phase::Failed);
                self.status.verification = None;
                self.ready(false, reason, message);
                return self.plan();
            }
        };
        if input.spec.suspend {
            if input.liveness != Liveness::Absent {
                self.ops.push(Op::Stop { session: self.session.clone() });
            }
            self.status.phase = Some(Phase::Suspended);
            self.status.verification = None;
            self.ready(false, "Suspended", "spec.suspend is set; events wait");
            return self.plan();
        }
        let settings = settings(input.spec, input.config);
        if let Some(failure) = input.spawn_failure
            && let Some(v) = self.status.verification.take()
        {
            self.spawn_failed(profile, settings, v, failure);
            return self.plan();
        }
        if let Some(v) = self.status.verification.clone() {
            self.verify(profile, settings, v);
            return self.plan();
        }
        match input.liveness {
            Liveness::Alive => self.running(),
            Liveness::Dead | Liveness::Absent => self.dead(profile, settings),
        }
        self.plan()
    }

    /// What the CRD schema cannot check (or local mode has no schema for).
    fn validate(&self) -> Result<&'a Profile, (&'static str, String)> {
        let spec = self.input.spec;
        if let Err(e) = api::validate_spec(spec) {
            return Err(("InvalidSpec", e.to_string()));
        }
        let Some(profile) = self.input.config.harnesses.get(&spec.harness) else {
            let known: Vec<&str> = self.input.config.harnesses.keys().map(String::as_str).collect();
            return Err((
                "UnknownHarness",
                format!("no harness profile {:?} (known: {})", spec.harness, known.join(", ")),
            ));
        };
        if profile.interactive.is_none() {
            return Err(("HarnessCannotBeHosted", ArgvError::NotHostable(spec.harness.clone()).to_string()));
        }
        Ok(profile)
    }

    /// Alive and not verifying: adopt it, and deliver pending events by pasting them.
    fn running(&mut self) {
        let now = self.input.now;
        self.status.phase = Some(Phase::Running);
        self.ready(true, "Running", "the harness is running");
        let healthy_since = self.status.last_respawn.as_ref().map(|r| r.time.0);
        if self.status.failure_count > 0 && healthy_since.is_some_and(|t| t + secs(HEALTHY_AFTER) <= now) {
            self.status.failure_count = 0;
            self.status.next_retry_time = None;
        }
        for e in self.input.events {
            let text = clean_prompt(&e.prompt).into_owned();
            self.ops.push(Op::Paste { session: self.session.clone(), event: e.name.clone(), text });
            self.event(&e.name, EventPhase::Delivered, Some(Via::Pasted), true, None);
            let message = format!("pasted event {} into the live pane", e.name);
            self.notice(Notice::normal("Delivered", "event.delivered", message));
        }
    }

    /// Dead or absent, nothing in flight: record a death, then respawn if there is a reason to.
    fn dead(&mut self, profile: &Profile, settings: Settings) {
        let input = self.input;
        let now = input.now;
        if self.status.phase == Some(Phase::Running) {
            if self.died_while_settling(profile, settings) {
                return;
            }
            self.died();
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
                self.notice(Notice::warning("BackOff", "session.backoff", message));
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
            Ok(id) => self.spawn(profile, settings, Mode::Resume, id, event, prompt, None),
            Err(fresh) => {
                if fresh.loud {
                    self.notice(Notice::resume_failed(fresh.reason, fresh.message.clone()));
                }
                let id = input.new_session_id.to_string();
                self.spawn(profile, settings, Mode::Fresh, id, event, prompt, Some(fresh));
            }
        }
    }

    /// A resumed pane that dies within the settle window: its boot event goes back to `Pending`.
    fn died_while_settling(&mut self, profile: &Profile, settings: Settings) -> bool {
        let input = self.input;
        let Some(r) = self.status.last_respawn.clone() else { return false };
        let within = input.now < r.time.0 + SignedDuration::from_secs(settings.settle.into());
        if !(r.resumed && within && input.liveness == Liveness::Dead) {
            return false;
        }
        let output = input.last_output.trim();
        let mut message =
            format!("resumed conversation {} died after the probe, within {}s", r.harness_session_id, settings.settle);
        if profile.resume_failed(output) {
            self.status.unresumable_session_id = Some(r.harness_session_id.clone());
            message.push_str("; the harness cannot find it, so the next spawn is fresh");
        }
        if !output.is_empty() {
            message.push_str(&format!(": {output}"));
        }
        self.condition(RESUMED, false, reason::PANE_DIED_AFTER_PROBE, message.clone());
        self.notice(Notice::resume_failed(reason::PANE_DIED_AFTER_PROBE, message.clone()));
        if let Some(event) = &r.event {
            self.event(event, EventPhase::Pending, None, false, Some(message));
        }
        self.status.phase = Some(Phase::Pending);
        self.ready(
            false,
            "HarnessNotRunning",
            "the resumed harness died after the probe; its event will be redelivered",
        );
        self.failed(); // a resume that keeps dying backs off like any crash (the first retry is immediate)
        self.requeue(Duration::ZERO); // the boot event is pending again: respawn with it next
        true
    }

    /// A running harness died: a failure unless it ran long enough to count as healthy.
    fn died(&mut self) {
        let now = self.input.now;
        let started = self.status.last_respawn.as_ref().map(|r| r.time.0);
        let healthy = started.is_some_and(|t| t + secs(HEALTHY_AFTER) <= now);
        let output = self.input.last_output.trim();
        let mut message = format!("the harness in {} exited", self.session);
        if !output.is_empty() {
            message.push_str(&format!(": {output}"));
        }
        self.notice(Notice::warning("HarnessExited", "session.exited", message));
        if healthy {
            self.status.failure_count = 0;
            self.status.next_retry_time = None;
        } else {
            self.failed();
        }
    }

    /// Counts one quick failure and sets the next retry time.
    fn failed(&mut self) {
        let now = self.input.now;
        self.status.failure_count += 1;
        self.status.last_failure_time = Some(Time(now));
        let delay = backoff(self.status.failure_count);
        self.status.next_retry_time = (!delay.is_zero()).then(|| Time(now + secs(delay)));
    }

    /// Plans a spawn: the intent (with its verification) is recorded first.
    #[allow(clippy::too_many_arguments)]
    fn spawn(
        &mut self,
        profile: &Profile,
        settings: Settings,
        mode: Mode,
        id: String,
        event: Option<String>,
        prompt: Option<&str>,
        fresh: Option<Fresh>,
    ) {
        let input = self.input;
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
                        self.notice(Notice::warning("DeliveryFailed", "event.failed", format!("event {event}: {e}")));
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

    /// The spawn just planned failed.
    fn spawn_failed(&mut self, profile: &Profile, settings: Settings, v: Verification, failure: &str) {
        if v.resume {
            let message = format!("tmux could not start the resume of {}: {failure}", v.harness_session_id);
            self.fall_back(profile, settings, v.event, reason::RESUME_SPAWN_FAILED, message);
            return;
        }
        let message = format!("tmux could not start the harness: {failure}");
        self.fresh_failed(
            v.event.as_deref(),
            "SpawnFailed",
            Notice::warning("SpawnFailed", "session.spawn_failed", message),
        );
    }

    /// A resume failed after tmux ran it: report it and fall back to a fresh conversation with the same event.
    fn fall_back(
        &mut self,
        profile: &Profile,
        settings: Settings,
        event: Option<String>,
        why: &'static str,
        message: String,
    ) {
        self.condition(RESUMED, false, why, message.clone());
        self.notice(Notice::resume_failed(why, message.clone()));
        self.respawn_fresh(profile, settings, event, Some(Fresh { reason: why, message, loud: true }));
    }

    /// A fresh spawn failed: its boot event goes back to `Pending`, and the failure counts toward back-off.
    fn fresh_failed(&mut self, event: Option<&str>, ready_reason: &'static str, notice: Notice) {
        let message = notice.message.clone();
        self.give_back(event, &message);
        self.notice(notice);
        self.status.phase = Some(Phase::Pending);
        self.ready(false, ready_reason, message);
        self.failed();
        self.requeue(backoff(self.status.failure_count));
    }

    /// A fresh spawn for `event` after a failed resume (its prompt is looked up among the pending events).
    fn respawn_fresh(&mut self, profile: &Profile, settings: Settings, event: Option<String>, fresh: Option<Fresh>) {
        let input = self.input;
        let prompt = match &event {
            Some(name) => input.events.iter().find(|e| &e.name == name).map(|e| e.prompt.as_str()),
            None if self.status.last_respawn.is_none() => input.spec.initial_prompt.as_deref(),
            None => None,
        };
        let id = input.new_session_id.to_string();
        self.spawn(profile, settings, Mode::Fresh, id, event, prompt, fresh);
    }

    /// Puts a boot event back to `Pending`.
    fn give_back(&mut self, event: Option<&str>, message: &str) {
        if let Some(event) = event {
            self.event(event, EventPhase::Pending, None, false, Some(message.to_string()));
        }
    }

    /// A spawn is in flight: wait for its deadline, then judge it by the pane's liveness.
    fn verify(&mut self, profile: &Profile, settings: Settings, v: Verification) {
        let input = self.input;
        let now = input.now;
        if input.liveness == Liveness::Alive {
            if now < v.deadline.0 {
                self.status.phase = Some(Phase::Verifying);
                self.requeue(until(now, v.deadline.0));
                return;
            }
            self.verified(v);
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
            self.fall_back(profile, settings, v.event, reason::PANE_DIED, message);
            return;
        }
        let message =
            format!("fresh conversation {} died within the {}s probe{said}", v.harness_session_id, settings.probe);
        self.fresh_failed(v.event.as_deref(), "PaneDied", Notice::warning("HarnessExited", "session.exited", message));
    }

    /// The spawn survived its probe: record it and deliver its boot event.
    fn verified(&mut self, v: Verification) {
        let now = self.input.now;
        self.status.verification = None;
        let id = v.harness_session_id.clone();
        let first = self.status.last_respawn.is_none();
        let reason = if v.resume {
            let message = format!("resumed the existing conversation {id}");
            self.condition(RESUMED, true, reason::RESUMED, message);
            reason::RESUMED.to_string()
        } else {
            let reason = v.fresh_reason.clone().unwrap_or_else(|| reason::NO_RECORDED_SESSION.into());
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
        let (reason, log_event) =
            if first { ("Started", "session.started") } else { ("Respawned", "session.respawned") };
        self.notice(Notice {
            resumed: Some(v.resume),
            ..Notice::normal(reason, log_event, format!("{what} {id} in {}", self.session))
        });
        if let Some(event) = &v.event {
            let boot = self.input.events.iter().find(|e| &e.name == event);
            if let (true, Some(boot)) = (v.paste_prompt, boot) {
                let text = clean_prompt(&boot.prompt).into_owned();
                self.ops.push(Op::Paste { session: self.session.clone(), event: event.clone(), text });
            }
            let via = if v.resume { Via::Resumed } else { Via::Fresh };
            self.event(event, EventPhase::Delivered, Some(via), false, None);
            self.notice(Notice::normal(
                "Delivered",
                "event.delivered",
                format!("event {event} was the boot prompt ({via:?})"),
            ));
        }
        self.status.phase = Some(Phase::Running);
        self.ready(true, "Running", "the harness is running");
        // Events that arrived meanwhile go in next, pasted, in order.
        if self.input.events.iter().any(|e| Some(&e.name) != v.event.as_ref()) {
            self.requeue(Duration::ZERO);
        }
    }
}
