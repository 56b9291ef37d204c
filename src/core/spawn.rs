//! Spawning: a session whose harness is not running respawns it when there is a reason to (a prompt waiting, the
//! first start, `restartPolicy: Always`), after any back-off, resuming the recorded conversation when the resume
//! table allows, with the first waiting prompt as its boot prompt. The intent is recorded before tmux runs, and the
//! spawn tags its tmux session so that an intent whose spawn never ran is run again, the same.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::resume::{Fresh, ResumeReason, try_resume};
use super::session::{Liveness, Spawn};
use super::{
    ARGV_PROMPT_LIMIT, Attempt, Claim, Confinement, Decision, EventReason, Notice, Op, PromptKey, ReadyReason,
    Settings, later, until,
};
use crate::api::{Phase, PromptPhase, RestartPolicy, Verification, Via};
use crate::harness::hooks::Launch;
use crate::harness::{ArgvError, Mode, Profile, clean_prompt};

/// One spawn to plan.
pub(super) struct SpawnRequest<'p> {
    /// Resume the recorded conversation, or start a fresh one.
    pub mode: Mode,
    /// The conversation id: the recorded one to resume, or the new one.
    pub id: String,
    /// The boot prompt's key and text, riding on the command line.
    pub boot: Option<(PromptKey<'p>, &'p str)>,
    /// Why it is fresh (a row of the resume table), when it is.
    pub fresh: Option<Fresh>,
}

impl<'a, 'i> Decision<'a, 'i> {
    /// Dead or absent, nothing in flight: record a death, then respawn if there is a reason to.
    pub(super) fn not_running(&mut self, profile: &Profile, settings: Settings) {
        let input = self.input;
        let now = input.context.now;
        if self.status.phase == Some(Phase::Running) {
            if self.resumed_pane_refused_as_busy(profile) || self.resumed_pane_died_while_settling(profile, settings) {
                return;
            }
            self.record_exit();
        }
        // Whatever was sent to a pane that is gone, and not known delivered, waits again.
        let failed = self.return_unconfirmed("its pane died before it was known delivered; it will be sent again");
        let first_start = self.status.last_respawn.is_none();
        let mut waiting = self.prompts();
        waiting.retain(|p| !failed.contains(&p.key));
        // Those the transcript showed were just recorded delivered.
        waiting.retain(|p| {
            !(p.phase == PromptPhase::Delivering && input.evidence.confirmed.iter().any(|k| k == p.key.as_str()))
        });
        let reopened = self.status.phase == Some(Phase::Archived) && !input.object.spec.archived;
        // Stopped on purpose (idle, archived, paused), not exited: restartPolicy Never does not keep a prompt from
        // waking it.
        let stopped = matches!(self.status.phase, Some(Phase::Idle | Phase::Archived | Phase::Paused));
        // Idle or archived with nothing waiting stays so, over budget or not; anything that would start it waits
        // while over budget.
        let quiet = self.status.phase == Some(Phase::Idle) || input.object.spec.archived;
        // One that failed for good (restartPolicy Never after an exit) stays failed: a raise must not bring it back.
        let never = input.object.spec.restart_policy == RestartPolicy::Never && !first_start && !stopped;
        let failed = never || self.status.phase == Some(Phase::Failed);
        let stays = failed || (quiet && waiting.is_empty());
        if let Some(why) = self.paused.clone().filter(|_| !stays) {
            self.paused(&why);
            return;
        }
        if let Some(wake) = self.parked.filter(|_| !stays) {
            self.parked_stopped(wake);
            return;
        }
        if self.stays_idle(waiting.len(), settings) {
            return;
        }
        // A harness its budget stopped goes on once the budget is raised, as it was stopped mid-work.
        let raised = self.status.phase == Some(Phase::Paused);
        let always = input.object.spec.restart_policy == RestartPolicy::Always;
        let wanted = !waiting.is_empty() || reopened || raised || first_start || always;
        if input.object.spec.restart_policy == RestartPolicy::Never && !first_start && !stopped {
            self.status.phase = Some(Phase::Failed);
            let message = format!("the harness exited and restartPolicy is Never ({} prompts wait)", waiting.len());
            self.ready(false, ReadyReason::HarnessExited, message);
            return;
        }
        if !wanted {
            self.status.phase = Some(Phase::Pending);
            self.ready(false, ReadyReason::HarnessNotRunning, "the harness is not running; the next event respawns it");
            return;
        }
        // Under a budget, nothing starts on a count that has yet to catch up with the record (read on within a second).
        if input.object.spec.budget.is_some() && input.evidence.usage.as_ref().is_some_and(|r| r.more) {
            self.requeue(super::usage::READ_AGAIN);
            return;
        }
        if !self.workdir_ready() {
            return;
        }
        if let Some(retry) = self.status.next_retry_time.clone().filter(|t| t.0 > now) {
            if self.status.phase != Some(Phase::BackOff) {
                let message = format!("{} quick failures; respawning at {}", self.status.failure_count, retry.0);
                self.notice(Notice::new(EventReason::BackOff, message));
            }
            self.status.phase = Some(Phase::BackOff);
            let message = format!("back-off after {} quick failures until {}", self.status.failure_count, retry.0);
            self.ready(false, ReadyReason::BackOff, message);
            self.requeue(until(now, retry.0));
            return;
        }
        // A prompt too long for a command line is pasted once the harness is ready, like any live paste; so is one a
        // person made a harness command (`spec.command`: it goes as it is, into the input box).
        // So is one whose command line has no place for it (a profile's resume without `{prompt}`), and every one of a
        // harness in a room: a process's command line is readable by every user of its PID namespace (measured on
        // the node: another room read it from /proc), and rooms share one.
        let roomed = matches!(input.evidence.room, Confinement::Room(_));
        let on_argv =
            |p: &&super::deliver::Prompt<'_>| clean_prompt(p.text).len() <= ARGV_PROMPT_LIMIT && !p.command && !roomed;
        let boot =
            |mode| waiting.first().filter(on_argv).filter(|_| profile.takes_prompt(mode)).map(|p| (p.key, p.text));
        let found = input.evidence.conversation_found;
        match try_resume(input.object.spec, &self.status, profile, settings.enabled, found) {
            Ok(id) => {
                let boot = boot(Mode::Resume);
                self.spawn(profile, settings, SpawnRequest { mode: Mode::Resume, id, boot, fresh: None })
            }
            Err(fresh) => {
                let boot = boot(Mode::Fresh);
                if fresh.reported {
                    self.notice(Notice::resume_failed(fresh.reason, fresh.message.clone()));
                }
                let id = input.context.new_session_id.to_string();
                self.spawn(profile, settings, SpawnRequest { mode: Mode::Fresh, id, boot, fresh: Some(fresh) });
            }
        }
    }

    /// A fresh spawn after a failed resume, with the same boot prompt.
    pub(super) fn respawn_fresh(
        &mut self,
        profile: &Profile,
        settings: Settings,
        boot: Option<PromptKey<'_>>,
        fresh: Fresh,
    ) {
        let input = self.input;
        let boot = boot.and_then(|key| self.prompt(key)).filter(|_| profile.takes_prompt(Mode::Fresh));
        let boot = boot.map(|p| (p.key, p.text));
        let id = input.context.new_session_id.to_string();
        self.spawn(profile, settings, SpawnRequest { mode: Mode::Fresh, id, boot, fresh: Some(fresh) });
    }

    /// A resume that failed on the first spawn since the session came here from a lost node: the conversation stayed
    /// on that node (no shared storage), and the reason says so.
    fn after_a_lost_node(&self, fresh: Fresh) -> Fresh {
        let failed = matches!(fresh.reason, ResumeReason::ConversationNotFound | ResumeReason::PaneDied);
        let Some(moved) = &self.input.object.status.moved_from else { return fresh };
        let first_here = self.status.last_respawn.as_ref().is_none_or(|r| r.time.0 <= moved.time.0);
        if !failed || !first_here {
            return fresh;
        }
        let message = format!("{}; its conversation did not come with it: {}", moved.message, fresh.message);
        Fresh { reason: ResumeReason::NodeLost, message, reported: fresh.reported }
    }

    /// Plans a spawn: the intent (with its verification) is recorded first.
    pub(super) fn spawn(&mut self, profile: &Profile, settings: Settings, request: SpawnRequest<'_>) {
        let input = self.input;
        let now = input.context.now;
        if request.mode == Mode::Fresh && self.waits_for_discovery(profile) {
            return;
        }
        let SpawnRequest { mode, id, boot, fresh } = request;
        let fresh = fresh.map(|f| self.after_a_lost_node(f));
        if let Some(fresh) = &fresh {
            self.hand_over(profile, fresh);
        }
        // A boot prompt rides on the command line with the handoff it claims when both fit; else it is pasted once
        // the harness is ready (one a dead resume was given waits again, with nothing counted).
        let fits =
            |(key, text): &(PromptKey<'_>, &str)| self.carried_len(*key, &clean_prompt(text)) <= ARGV_PROMPT_LIMIT;
        // Nor on a room's. A safety net: a prompt a dead resume carried is back to Pending before its fallback.
        let roomed = matches!(input.evidence.room, Confinement::Room(_));
        let (boot, dropped) = match boot {
            Some(b) if !fits(&b) || roomed => (None, Some(b.0)),
            other => (other, None),
        };
        if let Some(key) = dropped.filter(|k| self.prompt(*k).is_some_and(|p| p.phase == PromptPhase::Delivering)) {
            let why = match roomed {
                true => "never on a room's command line: pasted once the harness is ready",
                false => "too long for the command line with its handoff: pasted once the harness is ready",
            };
            // Returned already (by the death or the failed resume that led here): only its place changes.
            self.set_prompt(key, PromptPhase::Pending, None, Attempt::No, Some(why.into()));
        }
        if let Some((key, _)) = boot {
            self.claim_handoff(key);
        }
        let (fresh_reason, fresh_message) = match fresh {
            Some(f) => (Some(f.reason.to_string()), Some(f.message)),
            None => (None, None),
        };
        let v = Verification {
            started: Time(now),
            deadline: Time(later(now, Duration::from_secs(settings.probe.into()))),
            resume: mode == Mode::Resume,
            harness_session_id: id,
            event: boot.and_then(|(key, _)| match key {
                PromptKey::Event(name) => Some(name.to_string()),
                PromptKey::Initial => None,
            }),
            fresh_reason,
            fresh_message,
            initial_prompt: boot.is_some_and(|(key, _)| key == PromptKey::Initial),
            spawn: input.context.new_session_id.to_string(),
        };
        let op = match self.spawn_op(profile, &v, boot.map(|(_, text)| text)) {
            Ok(op) => op,
            Err(e) => {
                // Only the prompt can make a hostable profile refuse: this harness cannot take it.
                self.status.phase = Some(Phase::Pending);
                let key = boot.map_or(PromptKey::Initial, |(key, _)| key);
                self.set_prompt(key, PromptPhase::Failed, None, Attempt::Counted, Some(e.to_string()));
                self.notice(Notice::new(EventReason::DeliveryFailed, format!("{key}: {e}")));
                self.requeue(Duration::ZERO);
                return;
            }
        };
        let boot_key = boot.map(|(key, _)| key);
        // An initial prompt this command line does not carry (too long, or a resume without `{prompt}`) is recorded
        // as owed before the spawn: once the spawn is on record, an untracked one reads as a session adopted
        // mid-life, which is never sent it.
        let owed = super::initial_prompt_owed(input.object.spec, &self.status) == Some(PromptPhase::Pending);
        if owed && boot_key != Some(PromptKey::Initial) && self.status.initial_prompt.is_none() {
            self.set_prompt(PromptKey::Initial, PromptPhase::Pending, None, Attempt::No, None);
        }
        self.claim_for(profile, &v);
        self.status.verification = Some(v);
        if self.session != self.configured {
            // The dead harness of an older session name: cleared, and the spawn takes the configured name.
            self.ops.push(Op::Stop { session: self.session.clone() });
            self.session = self.configured.clone();
        }
        self.status.tmux_session = Some(self.session.clone());
        self.status.phase = Some(Phase::Starting);
        self.ready(false, ReadyReason::Starting, "spawning the harness");
        self.intent = Some(self.status.clone());
        self.ops.push(op);
        // After the spawn: nothing waits on an API write between the decision and the harness starting.
        if let Some(key) = boot_key {
            let via = if mode == Mode::Resume { Via::Resumed } else { Via::Fresh };
            self.set_prompt(key, PromptPhase::Delivering, Some(via), Attempt::SentAt(self.offset_now(Some(via))), None);
        }
        self.status.phase = Some(Phase::Verifying);
        self.ready(
            false,
            ReadyReason::Verifying,
            format!("waiting {}s to verify the harness survived", settings.probe),
        );
        self.requeue(Duration::from_secs(settings.probe.into()));
    }

    /// What a spawn of `v` must hold on the node before it runs: the workdir while a fresh harness discovers its id,
    /// and a conversation it adopts.
    pub(super) fn claim_for(&mut self, profile: &Profile, v: &Verification) {
        let spec = self.input.object.spec;
        if !v.resume && profile.discovers() {
            self.claims.push(Claim::Workdir(spec.workdir.clone()));
        }
        let adopting =
            self.status.harness_session_id.is_none() && spec.harness_session_id.as_ref() == Some(&v.harness_session_id);
        if v.resume && adopting {
            self.claims.push(Claim::Conversation(v.harness_session_id.clone()));
        }
    }

    /// The spawn a verification stands for (also to run it again when it never ran).
    pub(super) fn spawn_op(&self, profile: &Profile, v: &Verification, boot: Option<&str>) -> Result<Op, ArgvError> {
        let input = self.input;
        let mode = if v.resume { Mode::Resume } else { Mode::Fresh };
        // Text, whatever it starts with: a webhook's `/clear` on the command line would switch conversations.
        let tag = boot_key(v).and_then(|key| self.prompt(key)).map(|p| p.tag).unwrap_or_default();
        let prompt = boot.map(|text| profile.as_sent(&crate::api::carried(&self.status, tag, text), false));
        let mut argv = profile.argv(&input.object.spec.harness, mode, &v.harness_session_id, prompt.as_deref())?;
        let mut binary = profile.binary.clone();
        match self.hook_args(profile, &v.spawn) {
            // In front: after the prompt's `--` they would be the prompt.
            Some(Launch::Before(mut words)) => {
                words.append(&mut argv);
                argv = words;
            }
            // The receiver writes the harness's settings, then becomes the harness.
            Some(Launch::Through(helper, mut words)) => {
                words.push(std::mem::replace(&mut binary, helper));
                words.append(&mut argv);
                argv = words;
            }
            None => {}
        }
        let mut env = profile.env.clone();
        if let Some((target, home, _)) = self.push() {
            env.extend(super::push::push_env(&target, &super::push::push_dir(&home, input.object.owner_name)));
        }
        let mut confine = self.confine();
        // Nor does it take the place of the profile's own variables.
        if let Some(keys) = confine.as_mut().and_then(|c| c.keys.as_mut()) {
            keys.variables.retain(|v| !env.iter().any(|(name, _)| name == v));
        }
        Ok(Op::Spawn(Spawn {
            session: self.configured.clone(),
            workdir: input.object.spec.workdir.clone().into(),
            binary,
            argv,
            env,
            tag: v.spawn.clone(),
            owner: input.object.owner.to_string(),
            owner_name: input.object.owner_name.to_string(),
            confine,
            // The observation looked at the current name only.
            clear: input.observed.liveness != Liveness::Absent
                || input.observed.view.is_some()
                || self.session != self.configured,
        }))
    }

    /// The arguments that give a hook-backed harness its hooks, reporting to the session's hook file in its `HOME`
    /// (`None`: the profile has none, no receiver is configured, or the harness has no known `HOME`).
    fn hook_args(&self, profile: &Profile, spawn: &str) -> Option<Launch> {
        let config = self.input.context.config;
        let home = match &self.input.evidence.room {
            Confinement::Room(room) => Some(room.home.as_path()),
            Confinement::Off => config.harness_home.as_deref(),
            Confinement::Due | Confinement::Unavailable(_) => None,
        };
        let identity = self.input.object.owner_name;
        let asks = super::approval::asks(config, home, identity, self.input.object.spec);
        super::hook_args(profile, config, home, identity, spawn, asks.as_ref())
    }

    /// A recorded intent whose spawn never ran (no session carries its tag, and a fresh one left no conversation in
    /// the harness's store): run the same spawn again, so a resume stays a resume.
    pub(super) fn spawn_never_ran(&self, v: &Verification) -> bool {
        let input = self.input;
        input.observed.liveness != Liveness::Alive
            && input.observed.view.is_none_or(|t| t.spawn != v.spawn)
            && !self.made_its_conversation(v)
    }

    /// A fresh spawn's conversation is in the harness's store: it ran, even when no tmux session carries its tag (the
    /// tmux server restarted meanwhile), and running it again would reuse an id the harness says is in use.
    pub(super) fn made_its_conversation(&self, v: &Verification) -> bool {
        !v.resume && self.input.evidence.conversation_found == Some(true)
    }

    /// The boot prompt's text of a verification.
    pub(super) fn boot_text(&self, v: &Verification) -> Option<&'i str> {
        boot_key(v).and_then(|key| self.prompt(key)).map(|p| p.text)
    }
}

/// The key of a verification's boot prompt.
pub(super) fn boot_key(v: &Verification) -> Option<PromptKey<'_>> {
    if v.initial_prompt { Some(PromptKey::Initial) } else { v.event.as_deref().map(PromptKey::Event) }
}
