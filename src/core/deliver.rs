//! Delivery: every prompt (`initialPrompt`, then the WorkEvents, oldest first) is tracked until it is known
//! delivered. A sent prompt is `Delivering`; it becomes `Delivered` when the harness's transcript shows it, or when
//! its pane outlived the window that proves it (the probe since the send, and the settle window after a resume).
//! A live pane gets pending prompts pasted once its harness shows it is ready; a pane that dies returns every
//! unconfirmed prompt to `Pending` (see [`super::exits`]).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::{Decision, EventReason, HEALTHY_AFTER, INITIAL_PROMPT, Notice, Op, ReadyReason, Settings, later, until};
use crate::api::{EventPhase, Phase, Via, WorkSessionSpec, WorkSessionStatus};
use crate::harness::Profile;

/// How often a prompt waiting for the ready pattern, or for its transcript, is looked at again.
pub const DELIVERY_RECHECK: Duration = Duration::from_millis(500);

/// One prompt not yet known delivered.
#[derive(Clone, Debug)]
pub(super) struct Prompt<'i> {
    /// A WorkEvent's name, or [`INITIAL_PROMPT`].
    pub key: &'i str,
    /// What its paste tags the tmux session with: a WorkEvent's UID, or [`INITIAL_PROMPT`].
    pub tag: &'i str,
    pub text: &'i str,
    pub phase: EventPhase,
    pub sent: Option<Timestamp>,
    pub via: Option<Via>,
    pub created: Timestamp,
    /// Sent as it is, for the harness to take as its command (`spec.command`).
    pub command: bool,
}

/// The phase of `spec.initialPrompt` while it is owed (from the first start on, until delivered or failed), or
/// `None` when there is none to send. A session adopted mid-life (respawned before it was tracked) is not sent it.
pub fn initial_prompt_owed(spec: &WorkSessionSpec, status: &WorkSessionStatus) -> Option<EventPhase> {
    spec.initial_prompt.as_ref()?;
    match status.initial_prompt.as_ref().and_then(|p| p.phase) {
        Some(EventPhase::Delivered | EventPhase::Failed) => None,
        Some(phase) => Some(phase),
        None => status.last_respawn.is_none().then_some(EventPhase::Pending),
    }
}

impl<'a, 'i> Decision<'a, 'i> {
    /// The prompts not yet known delivered, in delivery order: `initialPrompt` first (owed from the first start on,
    /// until delivered), then the WorkEvents, oldest first.
    pub(super) fn prompts(&self) -> Vec<Prompt<'i>> {
        let input = self.input;
        let mut prompts = Vec::with_capacity(input.object.events.len() + 1);
        if let (Some(phase), Some(text)) =
            (initial_prompt_owed(input.object.spec, input.object.status), input.object.spec.initial_prompt.as_deref())
        {
            let recorded = input.object.status.initial_prompt.as_ref();
            prompts.push(Prompt {
                key: INITIAL_PROMPT,
                tag: INITIAL_PROMPT,
                text,
                phase,
                sent: recorded.and_then(|p| p.sent_time.as_ref()).map(|t| t.0),
                via: recorded.and_then(|p| p.via),
                created: input.object.created,
                command: false,
            });
        }
        prompts.extend(input.object.events.iter().map(|e| Prompt {
            key: &e.name,
            tag: &e.tag,
            text: &e.prompt,
            phase: e.phase,
            sent: e.sent,
            via: e.via,
            created: e.created,
            command: e.command,
        }));
        prompts
    }

    /// Alive and not verifying: confirm what was sent, then paste what waits, in order, once the harness is ready.
    pub(super) fn deliver_to_live_pane(&mut self, profile: &Profile, settings: Settings) {
        let input = self.input;
        let now = input.context.now;
        self.status.phase = Some(Phase::Running);
        self.ready(true, ReadyReason::Running, "the harness is running");
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
        let mut blocked = false;
        for prompt in self.prompts() {
            match prompt.phase {
                EventPhase::Delivering => {
                    // Where the harness keeps a transcript, only the transcript says it arrived; elsewhere a pane
                    // that outlived the window that proves it.
                    let sent = prompt.sent.unwrap_or(now);
                    let proven_at =
                        later(sent, Duration::from_secs(settings.probe.into())).max(settled_at.unwrap_or(sent));
                    let known = match profile.conversation_path {
                        Some(_) => input.evidence.confirmed.iter().any(|k| k == prompt.key),
                        None => now >= proven_at,
                    };
                    if known {
                        self.delivered(&prompt);
                    } else if profile.conversation_path.is_some() {
                        self.requeue(DELIVERY_RECHECK);
                    } else {
                        self.requeue(until(now, proven_at));
                    }
                }
                _ if blocked => {}
                _ if input.observed.view.is_some_and(|t| t.pasted == prompt.tag) => {
                    // Pasted by an agent that stopped before recording it: never pasted twice.
                    self.set_prompt(prompt.key, EventPhase::Delivering, Some(Via::Pasted), false, None);
                    self.requeue(DELIVERY_RECHECK);
                }
                _ if ready => {
                    // Text, unless a person made it a command: even a bracketed paste of `!touch x` runs in Claude Code's
                    // shell mode.
                    let text = profile.as_sent(prompt.text, prompt.command);
                    let (session, key, tag) = (self.session.clone(), prompt.key.into(), prompt.tag.into());
                    self.ops.push(Op::Paste { session, key, tag, text });
                    self.set_prompt(prompt.key, EventPhase::Delivering, Some(Via::Pasted), true, None);
                    self.requeue(DELIVERY_RECHECK.min(Duration::from_secs(settings.probe.into())));
                }
                _ => {
                    blocked = true; // later prompts keep their place behind this one
                    let since = started.unwrap_or(prompt.created).max(prompt.created);
                    let deadline = later(since, input.context.config.ready_timeout);
                    if now < deadline {
                        self.requeue(DELIVERY_RECHECK);
                        continue;
                    }
                    let message = format!(
                        "the harness never showed its ready pattern within {}s; the prompt was not pasted",
                        input.context.config.ready_timeout.as_secs()
                    );
                    self.set_prompt(prompt.key, EventPhase::Failed, None, false, Some(message.clone()));
                    self.notice(Notice::new(EventReason::DeliveryFailed, format!("{}: {message}", prompt.key)));
                    blocked = false;
                    self.requeue(Duration::ZERO);
                }
            }
        }
        self.idle_check(settings);
    }

    /// The prompt `key`, if it is not yet known delivered.
    pub(super) fn prompt(&self, key: &str) -> Option<Prompt<'i>> {
        self.prompts().into_iter().find(|p| p.key == key)
    }

    /// A sent prompt is known delivered.
    fn delivered(&mut self, prompt: &Prompt<'_>) {
        self.set_prompt(prompt.key, EventPhase::Delivered, prompt.via, false, None);
        let via = prompt.via.map(|v| format!(" ({v:?})")).unwrap_or_default();
        self.notice(Notice::new(EventReason::Delivered, format!("{} reached the conversation{via}", prompt.key)));
    }

    /// The pane is gone: a prompt its transcript already shows was delivered all the same; every other prompt sent to
    /// it goes back to `Pending`, in its place.
    pub(super) fn return_unconfirmed(&mut self, why: &str) {
        for prompt in self.prompts() {
            if prompt.phase != EventPhase::Delivering {
                continue;
            }
            if self.input.evidence.confirmed.iter().any(|k| k == prompt.key) {
                self.delivered(&prompt);
            } else {
                self.set_prompt(prompt.key, EventPhase::Pending, None, false, Some(why.to_string()));
            }
        }
    }
}
