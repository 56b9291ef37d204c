//! Delivery: every prompt (`initialPrompt`, then the WorkEvents, oldest first) is tracked until it is known
//! delivered. A sent prompt is `Delivering`, with where the harness's record stood when it was sent; it becomes
//! `Delivered` by the [`Proof`] its harness offers: its hooks report that very prompt taken after that point, or its
//! transcript shows it after that point, or (with neither) its pane outlived the window that proves it (the probe
//! since the send, and the settle window after a resume). A prompt the record does not confirm within
//! `delivery.confirmTimeoutSeconds` is sent once more, then `Failed`. A live pane gets pending prompts pasted once its
//! harness shows it is ready; a pane that dies returns every unconfirmed prompt to `Pending` (see [`super::exits`]).

use std::path::Path;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::{
    ActivityReason, Attempt, Decision, EventReason, HEALTHY_AFTER, INITIAL_PROMPT, Notice, Op, PendingWorkEvent,
    PromptKey, ReadyReason, Settings, later, until,
};
use crate::api::{Phase, PromptPhase, Via, WorkSessionSpec, WorkSessionStatus};
use crate::config::Config;
use crate::harness::Profile;

/// How often a prompt waiting for the ready pattern, or for its transcript, is looked at again.
pub const DELIVERY_RECHECK: Duration = Duration::from_millis(500);

/// How long a harness that takes prompts one at a time may show no turn after a paste before Enter is pressed again,
/// and how often it is pressed again after that.
pub const SUBMIT_AGAIN_AFTER: Duration = Duration::from_secs(3);

/// Within how many [`SUBMIT_AGAIN_AFTER`]s of its paste a prompt's Enter is pressed again: about twice.
const SUBMIT_AGAIN_TIMES: u32 = 3;

/// What a transcript must hold to confirm a prompt, said where one did not.
const TRANSCRIPT_HOLDS: &str = " (it confirms a prompt only as a JSON string in a line written after the send)";

/// How many times a prompt its harness's record never confirmed is sent before it fails.
pub const CONFIRM_ATTEMPTS: u32 = 2;

/// How many harnesses a prompt is sent to that die before it is known delivered, before it fails.
pub const RETURN_LIMIT: u32 = 5;

/// What tells that a sent prompt reached the conversation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Proof {
    /// The harness's hooks: its `UserPromptSubmit` of the live spawn reports the prompt (or, for a prompt Copilot CLI
    /// steers into a running turn, which runs no hook, its events file records it as steered).
    Hooks,
    /// The harness's transcript (`conversationPath`) shows it.
    Transcript,
    /// Neither: the pane outlived the probe since the send and the settle window after a respawn.
    #[default]
    Settle,
}

impl Proof {
    /// The proof a harness of `profile` offers when run for the WorkSession `identity` with its `HOME` at `home`:
    /// hooks where it is given them (a hook-backed profile, a receiver, a `HOME` for its hook file; every hook style
    /// reports each prompt taken, Codex's for a prompt pasted while it works too, as that prompt steers the running
    /// turn), else its transcript where the profile names one, else the settle window.
    pub fn of(profile: &Profile, config: &Config, home: Option<&Path>, identity: &str) -> Self {
        if hook_args(profile, config, home, identity, "spawn", None).is_some() {
            Proof::Hooks
        } else if profile.conversation_path.is_some() {
            Proof::Transcript
        } else {
            Proof::Settle
        }
    }

    /// Its words in a message.
    fn said(self) -> &'static str {
        match self {
            Proof::Hooks => "the harness's UserPromptSubmit hook",
            Proof::Transcript => "the harness's transcript",
            Proof::Settle => "its pane outliving the settle window",
        }
    }
}

/// How a harness of `profile` is given its hooks, reporting for the spawn tagged `spawn` to the hook file of
/// `identity` in its `home` (its permission requests waiting on `asks`); `None` where it is given none.
pub fn hook_args(
    profile: &Profile,
    config: &Config,
    home: Option<&Path>,
    identity: &str,
    spawn: &str,
    asks: Option<&crate::harness::hooks::Asks>,
) -> Option<crate::harness::hooks::Launch> {
    let out = crate::harness::hooks::file_of(home?, identity);
    crate::harness::hooks::args(profile.hooks?, config.hook_receiver()?, &out, spawn, asks)
}

/// One prompt not yet known delivered.
#[derive(Clone, Debug)]
pub(super) struct Prompt<'i> {
    /// Which prompt.
    pub key: PromptKey<'i>,
    /// What its paste tags the tmux session with: a WorkEvent's UID, or [`INITIAL_PROMPT`].
    pub tag: &'i str,
    pub text: &'i str,
    pub phase: PromptPhase,
    pub sent: Option<Timestamp>,
    pub via: Option<Via>,
    pub created: Timestamp,
    /// Sent as it is, for the harness to take as its command (`spec.command`).
    pub command: bool,
    /// Delivery attempts so far.
    pub attempts: u32,
    /// Harnesses that died before it was known delivered.
    pub returns: u32,
    /// Where the harness's record stood when it was sent: only what it records from there on confirms it.
    pub offset: Option<u64>,
}

/// How much of a harness's record is read after an offset (where it stood when a prompt was sent): the harness writes
/// the prompt within its next few lines.
pub const AFTER_OFFSET_LIMIT: u64 = 4 << 20;

/// The tag a paste gives its tmux session: the prompt's, its attempt, and the offset it was sent at.
fn paste_tag(prompt: &Prompt<'_>, offset: u64) -> String {
    format!("{}/{}/{offset}", prompt.tag, prompt.attempts + 1)
}

/// The offset of a paste of `prompt` not yet recorded, when `pasted` (a tmux session's paste tag) is that paste's
/// ([`paste_tag`]): `Some(None)` for a tag an older release wrote (the prompt's tag alone). A tag of an attempt
/// already recorded (a prompt sent again after its deadline) is not.
fn unrecorded_paste(pasted: &str, prompt: &Prompt<'_>) -> Option<Option<u64>> {
    let mut parts = pasted.rsplitn(3, '/');
    let (offset, attempt, of) = (parts.next()?, parts.next(), parts.next());
    match (of, attempt.and_then(|a| a.parse::<u32>().ok())) {
        (Some(of), Some(attempt)) if of == prompt.tag => (attempt > prompt.attempts).then(|| offset.parse().ok()),
        _ => (pasted == prompt.tag && prompt.attempts == 0).then_some(None),
    }
}

/// The phase of `spec.initialPrompt` while it is owed (from the first start on, until delivered or failed), or
/// `None` when there is none to send. A session adopted mid-life (respawned before it was tracked) is not sent it.
pub fn initial_prompt_owed(spec: &WorkSessionSpec, status: &WorkSessionStatus) -> Option<PromptPhase> {
    spec.initial_prompt.as_ref()?;
    match status.initial_prompt.as_ref().and_then(|p| p.phase) {
        Some(PromptPhase::Delivered | PromptPhase::Failed) => None,
        Some(phase) => Some(phase),
        None => status.last_respawn.is_none().then_some(PromptPhase::Pending),
    }
}

impl<'a, 'i> Decision<'a, 'i> {
    /// The prompts not yet known delivered, in delivery order: `initialPrompt` first (owed from the first start on,
    /// until delivered), then the WorkEvents, oldest first.
    pub(super) fn prompts(&self) -> Vec<Prompt<'i>> {
        let input = self.input;
        let mut prompts = Vec::with_capacity(input.object.events.len() + 1);
        let owed = initial_prompt_owed(input.object.spec, input.object.status);
        let owed = owed.filter(|_| !self.refused.iter().any(|k| k == INITIAL_PROMPT));
        if let (Some(phase), Some(text)) = (owed, input.object.spec.initial_prompt.as_deref()) {
            let recorded = input.object.status.initial_prompt.as_ref();
            prompts.push(Prompt {
                key: PromptKey::Initial,
                tag: INITIAL_PROMPT,
                text,
                phase,
                sent: recorded.and_then(|p| p.sent_time.as_ref()).map(|t| t.0),
                via: recorded.and_then(|p| p.via),
                created: input.object.created,
                command: false,
                attempts: recorded.map_or(0, |p| p.attempts),
                returns: recorded.map_or(0, |p| p.returns),
                offset: recorded.and_then(|p| p.sent_offset),
            });
        }
        // An event not due yet (`spec.notBefore`) waits without holding up the others; `held` wakes the decision then.
        let now = input.context.now;
        let due = |e: &&PendingWorkEvent| e.phase != PromptPhase::Pending || e.not_before.is_none_or(|t| t <= now);
        let refused = |e: &&PendingWorkEvent| !self.refused.contains(&e.name);
        prompts.extend(input.object.events.iter().filter(due).filter(refused).map(|e| Prompt {
            key: PromptKey::Event(&e.name),
            tag: &e.tag,
            text: &e.prompt,
            phase: e.phase,
            sent: e.sent,
            via: e.via,
            created: e.created,
            command: e.command,
            attempts: e.attempts,
            returns: e.returns,
            offset: e.offset,
        }));
        prompts
    }

    /// How long until the first event not due yet ([`PendingWorkEvent::not_before`]) is, if one waits.
    pub(super) fn held(&self) -> Option<std::time::Duration> {
        let now = self.input.context.now;
        let waiting = self.input.object.events.iter().filter(|e| e.phase == PromptPhase::Pending);
        waiting.filter_map(|e| e.not_before).filter(|t| *t > now).min().map(|t| until(now, t))
    }

    /// Alive and not verifying: confirm what was sent, then paste what waits, in order, once the harness is ready.
    pub(super) fn deliver_to_live_pane(&mut self, profile: &Profile, settings: Settings) {
        let input = self.input;
        let now = input.context.now;
        self.status.phase = Some(Phase::Running);
        // Parked, it runs on: said before any other word on it, so the condition does not flip within a decision.
        match self.parked {
            Some(wake) => self.parked(wake),
            None => self.ready(true, ReadyReason::Running, "the harness is running"),
        }
        let started = self.status.last_respawn.as_ref().map(|r| r.time.0);
        if self.status.failure_count > 0 && started.is_some_and(|t| later(t, HEALTHY_AFTER) <= now) {
            self.status.failure_count = 0;
            self.status.next_retry_time = None;
        }
        // Without the transcript's word, only a pane that outlived the settle window after its respawn proves its
        // prompts reached a conversation that lives on (a late "No conversation found" kills it within the window).
        let settled_at =
            self.status.last_respawn.as_ref().map(|r| later(r.time.0, Duration::from_secs(settings.settle.into())));
        let ready = profile.ready(input.observed.screen);
        let proof = input.evidence.record.proof;
        // A harness that takes no prompt while it works (Gemini CLI) is given one only between turns, where its hooks
        // say when a turn ends: a paste meanwhile would stay unsent in its input box, and the next would join it. A
        // turn waiting for a person is still a turn (a paste would answer the question).
        let one_at_a_time = !profile.queues_prompts && proof == Proof::Hooks;
        // Where the harness's own record confirms a paste, the next paste waits for that word: a harness that reads
        // two pastes and their Enters together (a busy machine) may join them in its input box and submit neither
        // (measured with Claude Code 2.1.332). Without such a record there is no word to wait for.
        let one_unconfirmed = proof != Proof::Settle;
        let busy = input.evidence.turn.as_ref().is_some_and(|t| {
            matches!(
                super::hooks::activity(t).0,
                ActivityReason::Working | ActivityReason::WaitingForInput | ActivityReason::WaitingForApproval
            )
        });
        // Over its budget, nothing new is sent; what was sent is still confirmed (a paste not yet recorded too). Nor
        // while a budget is set and the count has yet to catch up with the record (read again within a second).
        let catching_up = input.object.spec.budget.is_some() && input.evidence.usage.as_ref().is_some_and(|r| r.more);
        let held = self.paused.is_some() || self.parked.is_some() || catching_up;
        let asking = self.status.approval.as_ref().is_some_and(|a| a.waiting());
        let mut blocked = false;
        for prompt in self.prompts() {
            match prompt.phase {
                PromptPhase::Delivering if proof == Proof::Settle => {
                    // Without a record of the harness's own, a pane that outlived the window that proves it.
                    let sent = prompt.sent.unwrap_or(now);
                    let proven_at =
                        later(sent, Duration::from_secs(settings.probe.into())).max(settled_at.unwrap_or(sent));
                    if now >= proven_at {
                        self.delivered(&prompt, proof);
                    } else {
                        self.requeue(until(now, proven_at));
                    }
                }
                PromptPhase::Delivering => {
                    // Only the harness's own record says it took it, and only what it wrote after the send.
                    if input.evidence.confirmed.iter().any(|k| k == prompt.key.as_str()) {
                        self.delivered(&prompt, proof);
                        continue;
                    }
                    let deadline = later(prompt.sent.unwrap_or(now), input.context.config.confirm_timeout);
                    if input.evidence.dropped.iter().any(|k| k == prompt.key.as_str()) {
                        // Taken behind a turn that failed for good, and never sent to the model (opencode): sent
                        // again, now the harness is idle, as a prompt that went nowhere is, with an offset of its own
                        // (the report of the first send speaks of a take that came to nothing).
                        let failed = input.evidence.turn.as_ref().filter(|t| t.hook == "StopFailure");
                        let why = failed.and_then(|t| t.message.clone()).unwrap_or_else(|| "an error".into());
                        let said = format!(
                            "the harness took it behind a turn that failed ({why}), and its model never got it"
                        );
                        blocked |= prompt.attempts < CONFIRM_ATTEMPTS;
                        self.resend_or_fail(&prompt, said, Attempt::No);
                        continue;
                    }
                    if input.evidence.queued.iter().any(|k| k == prompt.key.as_str()) {
                        // Taken behind a running turn: known delivered once that turn ends well (its hooks wake the
                        // session; a death returns it). While the harness says it works, however long its retries
                        // take, it waits; past the deadline with the harness no longer working, its hook's word is
                        // taken.
                        let working = input.evidence.turn.as_ref().is_some_and(|t| t.hook == "UserPromptSubmit");
                        if now >= deadline && !working {
                            self.delivered(&prompt, proof);
                        } else {
                            self.requeue(if now < deadline { until(now, deadline) } else { DELIVERY_RECHECK });
                        }
                        continue;
                    }
                    if now < deadline {
                        blocked |= one_unconfirmed; // the next waits until the harness took this one
                        // A hook file that grows wakes the session; a transcript (also one that is about to show
                        // what a hook reported) is looked at again.
                        let woken = proof == Proof::Hooks && !input.evidence.record.awaits_transcript;
                        let recheck = if woken { until(now, deadline) } else { DELIVERY_RECHECK };
                        self.requeue(recheck.min(until(now, deadline)));
                        if one_at_a_time {
                            self.submit_again(&prompt, ready);
                        }
                        continue;
                    }
                    let waited = input.context.config.confirm_timeout.as_secs();
                    // The paste may have gone nowhere (a TUI that dropped it): sent again, in its place. Its send's
                    // offset stays: a harness that took that send late (a slow start) says so after it.
                    blocked |= prompt.attempts < CONFIRM_ATTEMPTS;
                    // A transcript that is not JSON lines confirms nothing: the message says what it must hold.
                    let must = if proof == Proof::Transcript { TRANSCRIPT_HOLDS } else { "" };
                    let said = format!("{} did not show it within {waited}s{must}", proof.said());
                    self.resend_or_fail(&prompt, said, Attempt::Again);
                }
                _ if blocked => {}
                _ if let Some(offset) = input.observed.view.and_then(|t| unrecorded_paste(&t.pasted, &prompt)) => {
                    // Pasted by an agent that stopped before recording it (or recorded where this decision's view of
                    // the events does not show it yet): never pasted twice, and confirmed from the paste's offset on.
                    let attempt = offset.map_or(Attempt::Counted, Attempt::SentAt);
                    self.set_prompt(prompt.key, PromptPhase::Delivering, Some(Via::Pasted), attempt, None);
                    self.requeue(DELIVERY_RECHECK);
                    blocked |= one_unconfirmed;
                }
                _ if held => {}
                // A permission dialog is on its screen: a paste's Enter would answer it. Its answer, its deadline or
                // its hooks bring the session back.
                _ if asking => blocked = true,
                _ if one_at_a_time && busy => {
                    // Its turn's end (a hook) wakes the session; no deadline: a turn takes as long as it takes (the
                    // Activity condition says it works, or waits for a person).
                    blocked = true;
                }
                _ if ready => {
                    // A prompt its deadline sends again keeps the offset of its send (only such a `Pending` one has one),
                    // while what the harness recorded since is within what is read past an offset.
                    let record = input.evidence.record.len;
                    let (offset, attempt) = match prompt.offset {
                        Some(sent_at) if record.saturating_sub(sent_at) < AFTER_OFFSET_LIMIT => {
                            (sent_at, Attempt::Counted)
                        }
                        _ => {
                            let offset = self.offset_now(Some(Via::Pasted));
                            (offset, Attempt::SentAt(offset))
                        }
                    };
                    // Text, unless a person made it a command: even a bracketed paste of `!touch x` runs in Claude
                    // Code's shell mode.
                    // A prompt that claims the handoff now records the claim before its paste (an intent): an
                    // agent that stops after the paste knows what was sent, and looks for it.
                    if !prompt.command && self.claim_handoff(prompt.key) {
                        self.intent = Some(self.status.clone());
                    }
                    let text = crate::api::carried(&self.status, prompt.tag, prompt.text);
                    let mut text = profile.as_sent(&text, prompt.command);
                    // A pasted prompt whose last word is an @-mention leaves opencode's file picker open, and the
                    // picker takes the Enter: the prompt is never submitted (measured with 1.18.33). A space after
                    // it closes the picker; a prompt's words are the same.
                    if !prompt.command && text.split_whitespace().last().is_some_and(|w| w.starts_with('@')) {
                        text.push(' ');
                    }
                    // The paste's tag carries its offset, for a decision that does not see the send recorded.
                    let (session, key, tag) =
                        (self.session.clone(), prompt.key.to_string(), paste_tag(&prompt, offset));
                    self.ops.push(Op::Paste { session, key, tag, text });
                    self.set_prompt(prompt.key, PromptPhase::Delivering, Some(Via::Pasted), attempt, None);
                    self.requeue(DELIVERY_RECHECK.min(Duration::from_secs(settings.probe.into())));
                    blocked |= one_unconfirmed;
                }
                _ => {
                    blocked = true; // later prompts keep their place behind this one
                    // Counted from the harness's start, the prompt's creation or its latest turn event, whichever
                    // is last: a prompt that waited behind a long turn gets the whole wait once it is over.
                    let turn_at = input.evidence.turn.as_ref().and_then(|t| t.at);
                    let since = [started, turn_at].into_iter().flatten().fold(prompt.created, Timestamp::max);
                    let deadline = later(since, input.context.config.ready_timeout);
                    if now < deadline {
                        self.requeue(DELIVERY_RECHECK);
                        continue;
                    }
                    let shown = if profile.busy(input.observed.screen) {
                        "kept showing its busy pattern"
                    } else {
                        "never showed its ready pattern"
                    };
                    let message = format!(
                        "the harness {shown} within {}s; the prompt was not pasted",
                        input.context.config.ready_timeout.as_secs()
                    );
                    self.set_prompt(prompt.key, PromptPhase::Failed, None, Attempt::No, Some(message.clone()));
                    self.notice(Notice::new(EventReason::DeliveryFailed, format!("{}: {message}", prompt.key)));
                    blocked = false;
                    self.requeue(Duration::ZERO);
                }
            }
        }
        // An archived session's quiet stop with nothing owed is the archive's, over budget or not.
        match (self.paused.clone(), self.parked) {
            (Some(why), _) if !settings.archived || !self.prompts().is_empty() => self.pause_when_quiet(&why),
            // Its harness is left as it is: the refused prompt is sent to it again at the wake.
            (None, Some(_)) => {}
            _ => self.idle_check(settings),
        }
    }

    /// A paste that a harness taking prompts one at a time has written nothing about since: Enter is pressed again,
    /// a few times shortly after the paste. Such a harness may read a paste and its Enter together under load and keep
    /// the prompt unsent in its input box (Gemini CLI 0.61.0, measured: the box held it until the deadline pasted it
    /// a second time beside it). Only where the Enter can do nothing but submit that box: the prompt was pasted (a
    /// command-line prompt may meet a dialog of the CLI's own first), after the harness's hooks said it was idle at
    /// its input (its latest turn event a `Stop` or a `SessionStart`, which comes once its start-up questions are
    /// answered), and its hook file has not grown since the paste (a turn's first hook comes before any dialog of
    /// that turn). A screen showing the busy pattern is let be, and looked at again.
    fn submit_again(&mut self, prompt: &Prompt<'i>, ready: bool) {
        let evidence = &self.input.evidence;
        let idle = evidence.turn.as_ref().is_some_and(|t| matches!(t.hook.as_str(), "Stop" | "SessionStart"));
        let Some((sent, offset)) = prompt.sent.zip(prompt.offset) else { return };
        let silent = evidence.record.len <= offset;
        if prompt.via != Some(Via::Pasted) || !idle || !silent {
            return;
        }
        let now = self.input.context.now;
        let (due, last) = (later(sent, SUBMIT_AGAIN_AFTER), later(sent, SUBMIT_AGAIN_AFTER * SUBMIT_AGAIN_TIMES));
        if now < due {
            self.requeue(until(now, due));
        } else if now < last {
            if ready && !self.ops.iter().any(|op| matches!(op, Op::Submit { .. })) {
                self.ops.push(Op::Submit { session: self.session.clone(), key: prompt.key.to_string() });
            }
            self.requeue(SUBMIT_AGAIN_AFTER);
        }
    }

    /// A sent prompt the harness did not take (`said`, why): sent again in its place, up to [`CONFIRM_ATTEMPTS`]
    /// sends, then `Failed`; `again` says whether its send's offset stays ([`Attempt::Again`]) or goes ([`Attempt::No`]).
    fn resend_or_fail(&mut self, prompt: &Prompt<'i>, said: String, again: Attempt) {
        if prompt.attempts < CONFIRM_ATTEMPTS {
            let message = format!("{said}; it is sent again");
            self.set_prompt(prompt.key, PromptPhase::Pending, None, again, Some(message));
            self.requeue(Duration::ZERO);
            return;
        }
        let message = format!("{said}, {} attempts; it is not sent again", prompt.attempts);
        self.set_prompt(prompt.key, PromptPhase::Failed, None, Attempt::No, Some(message.clone()));
        self.notice(Notice::new(EventReason::DeliveryFailed, format!("{}: {message}", prompt.key)));
    }

    /// The prompt `key`, if it is not yet known delivered.
    pub(super) fn prompt(&self, key: PromptKey<'_>) -> Option<Prompt<'i>> {
        self.prompts().into_iter().find(|p| p.key == key)
    }

    /// A sent prompt is known delivered, by `proof`.
    fn delivered(&mut self, prompt: &Prompt<'_>, proof: Proof) {
        self.set_prompt(prompt.key, PromptPhase::Delivered, prompt.via, Attempt::No, None);
        let via = prompt.via.map(|v| format!(" ({v:?})")).unwrap_or_default();
        let steered = self.input.evidence.steered.iter().any(|k| k == prompt.key.as_str());
        let shown = if steered { "the harness's events file, steered into its running turn" } else { proof.said() };
        let message = format!("{} reached the conversation{via}, shown by {shown}", prompt.key);
        self.notice(Notice::new(EventReason::Delivered, message));
    }

    /// The pane is gone: a prompt its transcript already shows was delivered all the same; every other prompt sent to
    /// it goes back to `Pending`, in its place.
    pub(super) fn return_unconfirmed(&mut self, why: &str) -> Vec<PromptKey<'i>> {
        let mut failed = Vec::new();
        for prompt in self.prompts() {
            if prompt.phase == PromptPhase::Pending && prompt.offset.is_some() {
                // An offset kept for its deadline's second send was the dead harness's: the next one starts afresh.
                if !self.return_prompt(&prompt, why) {
                    failed.push(prompt.key);
                }
                continue;
            }
            if prompt.phase != PromptPhase::Delivering {
                continue;
            }
            if self.input.evidence.confirmed.iter().any(|k| k == prompt.key.as_str()) {
                self.delivered(&prompt, self.input.evidence.record.proof);
            } else if !self.return_prompt(&prompt, why) {
                failed.push(prompt.key);
            }
        }
        failed
    }

    /// Its harness is gone before it was known delivered: it waits again for the next one, with no send counted,
    /// unless [`RETURN_LIMIT`] harnesses died so (a prompt is never sent to dying harnesses for ever).
    /// Whether it waits again (else it failed).
    pub(super) fn return_prompt(&mut self, prompt: &Prompt<'_>, why: &str) -> bool {
        if prompt.returns + 1 >= RETURN_LIMIT {
            let message = format!("sent to {RETURN_LIMIT} harnesses that each died before it was known delivered");
            self.set_prompt(prompt.key, PromptPhase::Failed, None, Attempt::Returned, Some(message.clone()));
            self.notice(Notice::new(EventReason::DeliveryFailed, format!("{}: {message}", prompt.key)));
            return false;
        }
        self.set_prompt(prompt.key, PromptPhase::Pending, None, Attempt::Returned, Some(why.to_string()));
        true
    }
}
