//! Permission requests, part of decide. A hook-backed harness asks before it uses a tool (Claude Code's
//! `PermissionRequest`); the hook's receiver records the request in the hook file and waits for an answer in a folder
//! only the agent writes ([`crate::harness::hooks::Asks`]). Here the request becomes `status.approval`, and is
//! answered by the session's rules (`spec.approval.rules`) or a person's answer (a WorkEvent whose `spec.answer`
//! names its id), or denied at its deadline by the receiver itself. An answer naming any other request (an older one,
//! one never asked) fails its WorkEvent: an answer never reaches a request it was not given for.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;

use super::{Confinement, Decision, EventReason, Notice, Op, PendingAnswer, WorkEventUpdate};
use crate::api::{ApprovalStatus, DEFAULT_WAIT_SECONDS, PromptPhase, WorkSessionSpec};
use crate::config::Config;
use crate::harness::hooks::{Asked, Asks, Written, answers_of};

/// The most of a request `status.approval.request` shows, in characters.
pub const REQUEST_SHOWN: usize = 2000;

/// Where the answers folders of a node's sessions are: a folder (below, [`answers_below`]) of a trusted one, the
/// rooms' root (out of every harness's `HOME`, written only by the agent) or, without rooms, the harness's `HOME`
/// (which the harness could write itself: no defence).
pub fn answers_trusted(config: &Config, home: Option<&Path>) -> Option<PathBuf> {
    match &config.rooms {
        Some(rooms) => Some(rooms.root.clone()),
        None => home.map(Path::to_path_buf),
    }
}

/// The session `identity`'s answers folder below [`answers_trusted`].
pub fn answers_below(config: &Config, identity: &str) -> PathBuf {
    let base = if config.rooms.is_some() { Path::new("answers") } else { Path::new(".worksession/answers") };
    answers_of(base, identity)
}

/// How the harness of the session `identity` waits for the answers to its permission requests.
pub fn asks(config: &Config, home: Option<&Path>, identity: &str, spec: &WorkSessionSpec) -> Option<Asks> {
    let dir = answers_trusted(config, home)?.join(answers_below(config, identity));
    Some(Asks { dir, wait: wait_of(spec) })
}

fn wait_of(spec: &WorkSessionSpec) -> u32 {
    spec.approval.as_ref().and_then(|a| a.wait_seconds).unwrap_or(DEFAULT_WAIT_SECONDS)
}

/// `text` as a person is shown it: each run of whitespace one space (a command's tail is never pushed out of sight),
/// control and formatting characters (bidirectional overrides, zero-width ones) replaced, the values shaped like
/// credentials `[redacted]`, and at most `max` characters, saying how many more there were.
pub fn shown(text: &str, max: usize) -> String {
    let formatting =
        |c: char| matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}');
    let cleaned: String = text.chars().map(|c| if c.is_control() || formatting(c) { ' ' } else { c }).collect();
    let text = crate::api::redact_secrets(&cleaned.split_whitespace().collect::<Vec<_>>().join(" "));
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}… [{} more characters not shown]", &text[..at], text[at..].chars().count()),
        None => text,
    }
}

/// What a request asks, for a person: the tool, what it is given, and more of it where there is more ([`shown`]:
/// redacted here, never before a rule matched the whole).
pub fn render(asked: &Asked) -> String {
    let mut text = asked.tool.clone().unwrap_or_else(|| "a tool of no plain name".into());
    if let Some(subject) = &asked.subject {
        text = format!("{text}: {subject}");
    }
    if let Some(detail) = &asked.detail {
        text = format!("{text} ({detail})");
    }
    shown(&text, REQUEST_SHOWN)
}

impl Decision<'_, '_> {
    /// A live harness: its latest permission request recorded, then answered by a rule or a person, or said denied
    /// at its deadline; answers to other requests fail.
    pub(super) fn follow_the_approval(&mut self) {
        let input = self.input;
        let now = input.context.now;
        if let Some(asked) = input.evidence.asked.as_ref()
            && self.status.approval.as_ref().is_none_or(|a| a.id != asked.id)
        {
            if self.status.approval.as_ref().is_some_and(ApprovalStatus::waiting) {
                self.decided(None, "superseded", format!("the harness asked again (request {})", asked.id));
            }
            // The receiver's deadline, or the session's wait from now, whichever is sooner: the line is the harness's.
            let latest = now.checked_add(SignedDuration::from_secs(wait_of(input.object.spec).into())).unwrap_or(now);
            self.status.approval = Some(ApprovalStatus {
                id: asked.id.clone(),
                tool: asked.tool.clone().unwrap_or_default(),
                request: render(asked),
                asked_time: Time(asked.at.filter(|at| *at <= now).unwrap_or(now)),
                deadline: Time(asked.deadline.map_or(latest, |d| d.min(latest))),
                decision: None,
                by: None,
                reason: None,
                decided_time: None,
                digest: asked.digest.clone(),
            });
            if asked.answered.is_none() && !asked.passed {
                let message = self.asking();
                self.notice(Notice::new(EventReason::ApprovalRequested, message));
            }
        }
        let mut answers: Vec<&PendingAnswer> = input.object.answers.iter().collect();
        if let Some(approval) = self.status.approval.clone().filter(ApprovalStatus::waiting) {
            // The request as first read: a later line of the same id (the harness's own) answers nothing and matches
            // no rule.
            let asked = input.evidence.asked.as_ref().filter(|a| a.id == approval.id && a.digest == approval.digest);
            let taken = answers.iter().position(|a| a.answer.request == approval.id);
            let rule = self.rule_for(asked);
            if let Some(behavior) = asked.and_then(|a| a.answered.as_deref()) {
                // Its receiver answered and the status missed it: the person's answer it took, if one waits here;
                // else only the harness's word for it.
                match taken.map(|at| answers.remove(at)) {
                    Some(pending) => self.take(pending, false),
                    // A denial it says it was given is believed (it harms none but itself): at the deadline, the
                    // receiver's own. An allowance is only its word.
                    None if behavior == "deny" && now >= approval.deadline.0 => self.denied_at_the_deadline(&approval),
                    None => {
                        let reason = format!("the harness's hook record says it was answered: {}", shown(behavior, 8));
                        self.decided(None, "hook record", reason);
                    }
                }
            } else if asked.is_some_and(|a| a.passed) {
                self.decided(None, "terminal", "the harness went on (its hooks say): answered in its terminal".into());
            } else if let Some((rule, decision)) = rule {
                let reason = format!("the rule {rule:?} of spec.approval.rules");
                self.give(decision, "policy", &reason);
                self.decided(Some(decision), "policy", reason);
            } else if let Some(at) = taken {
                let pending = answers.remove(at);
                self.take(pending, true);
            } else if now >= approval.deadline.0 {
                self.denied_at_the_deadline(&approval);
            } else {
                let left = approval.deadline.0.duration_since(now);
                self.requeue(Duration::try_from(left).unwrap_or_default() + Duration::from_secs(1));
            }
        }
        let why = match self.status.approval.as_ref().filter(|a| a.waiting()) {
            Some(a) => format!("it names no request that waits (request {} waits)", a.id),
            None => "it names no request that waits (none waits)".to_string(),
        };
        self.fail_answers(&answers, &why);
    }

    /// A harness not running: a request it made waits no more, and answers fail.
    pub(super) fn forget_the_approval(&mut self) {
        if self.status.approval.as_ref().is_some_and(ApprovalStatus::waiting) {
            self.decided(None, "exit", "the harness stopped before an answer".into());
        }
        let answers: Vec<&PendingAnswer> = self.input.object.answers.iter().collect();
        self.fail_answers(&answers, "no request waits: the harness is not running");
    }

    /// What the harness asks and how to answer it, as the Event and the `Activity` condition say it.
    pub(super) fn asking(&self) -> String {
        let Some(a) = self.status.approval.as_ref() else { return String::new() };
        let name = self.input.object.owner_name.split_once('/').map_or(self.input.object.owner_name, |(_, n)| n);
        format!(
            "the harness asks to use {}; answer with `worksession approve {name} {}` or `worksession deny {name} {}` \
             before {} (then it is denied)",
            a.request, a.id, a.id, a.deadline.0
        )
    }

    /// The first rule of `spec.approval.rules` that matches the request, and its decision.
    fn rule_for(&self, asked: Option<&Asked>) -> Option<(String, crate::api::Decision)> {
        let asked = asked?;
        let tool = asked.tool.as_deref()?;
        let rules = &self.input.object.spec.approval.as_ref()?.rules;
        let rule = rules.iter().find(|r| r.matches(tool, asked.subject.as_deref()))?;
        Some((rule.r#match.clone(), rule.decision))
    }

    /// A person's answer to the waiting request: given to the receiver first (unless it has it already: one that
    /// could not be written is taken again by the next decision), then its WorkEvent taken.
    fn take(&mut self, pending: &PendingAnswer, give: bool) {
        let answer = &pending.answer;
        let by = answer.by.as_deref().map_or_else(|| "an unnamed person".into(), |by| shown(by, 256));
        let reason = answer.reason.as_deref().map_or_else(|| format!("WorkEvent {}", pending.name), |r| shown(r, 1024));
        let id = self.status.approval.as_ref().map(|a| a.id.clone()).unwrap_or_default();
        if give {
            self.give(answer.decision, &by, &reason);
        }
        let message = Some(format!("answered request {id}: {:?}", answer.decision));
        self.ops.push(Op::WorkEventStatus(answered(&pending.name, PromptPhase::Delivered, message)));
        self.decided(Some(answer.decision), &by, reason);
    }

    /// Tells the receiver the answer to the waiting request (the decision records it).
    fn give(&mut self, decision: crate::api::Decision, by: &str, reason: &str) {
        let Some(approval) = self.status.approval.as_ref() else { return };
        let (request, digest) = (approval.id.clone(), approval.digest.clone());
        let input = self.input;
        let config = input.context.config;
        let (home, group) = match &input.evidence.room {
            Confinement::Room(room) => (Some(room.home.as_path()), Some(room.uid)),
            _ => (config.harness_home.as_deref(), None),
        };
        let Some(trusted) = answers_trusted(config, home) else { return };
        let below = answers_below(config, input.object.owner_name);
        let allow = decision == crate::api::Decision::Allow;
        let behavior = if allow { "allow" } else { "deny" }.to_string();
        let message = (!allow).then(|| format!("Denied by {by}: {reason}"));
        let written = Written { request, behavior, message, digest };
        self.ops.push(Op::Answer { trusted, below, written, group });
    }

    /// Records the waiting request denied at its deadline, as its receiver denied it.
    fn denied_at_the_deadline(&mut self, approval: &ApprovalStatus) {
        let waited = approval.deadline.0.duration_since(approval.asked_time.0).as_secs();
        self.decided(Some(crate::api::Decision::Deny), "deadline", format!("no answer within {waited} s"));
    }

    /// Records the waiting request's end, and says it.
    fn decided(&mut self, decision: Option<crate::api::Decision>, by: &str, reason: String) {
        let now = self.input.context.now;
        let Some(approval) = self.status.approval.as_mut() else { return };
        (approval.decision, approval.by, approval.reason) = (decision, Some(by.into()), Some(reason.clone()));
        approval.decided_time = Some(Time(now));
        let how = match decision {
            Some(crate::api::Decision::Allow) => "allowed",
            Some(crate::api::Decision::Deny) => "denied",
            None => "ended",
        };
        let message = format!("request {} ({}) {how} by {by}: {reason}", approval.id, approval.tool);
        self.notice(Notice::new(EventReason::ApprovalAnswered, message));
    }

    /// Fails each answer of `answers`: it reached no request.
    fn fail_answers(&mut self, answers: &[&PendingAnswer], why: &str) {
        for a in answers {
            let message = format!("answer to request {}: {why}; nothing was answered", shown(&a.answer.request, 16));
            self.ops.push(Op::WorkEventStatus(answered(&a.name, PromptPhase::Failed, Some(message))));
        }
    }
}

/// The status change of an answer's WorkEvent.
fn answered(event: &str, phase: PromptPhase, message: Option<String>) -> WorkEventUpdate {
    WorkEventUpdate {
        event: event.to_string(),
        phase,
        via: None,
        harness_session_id: None,
        sent: None,
        offset: None,
        keep_offset: false,
        attempt: false,
        returned: false,
        message,
    }
}
