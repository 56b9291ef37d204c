//! The pure decision core: from what is desired (spec, config, pending events) and what is observed (tmux
//! liveness, the clock) to a [`Plan`]: operations to run and the status to record. No I/O happens here.
//!
//! It carries the resume table ([`try_resume`]) and the product brief's steps: delete and suspend, paste into a live
//! pane, respawn a dead one with the oldest pending event as boot prompt, verify without blocking (a deadline in
//! status, requeued), fall back to a fresh conversation, put the boot event back when a resumed pane dies within the
//! settle window, and back off like kubelet.
//!
//! The [`Plan`] is the whole decision: every effect of a reconcile is an [`Op`] (the finalizer, expiring events,
//! claims on the node, the intent recorded before a spawn, spawns, pastes, stops, event updates, notices, the
//! workspace and the room). The executor's contract: run [`Plan::ops`] in order, stopping at the first failure (a
//! lost [`Op::Claim`] stops it too, and the session is reconciled again); when an [`Op::Spawn`] fails, tell the next
//! decision ([`Evidence::spawn_failure`]), whose status is then the recorded intent; finally write [`Plan::status`]
//! and requeue after [`Plan::requeue_after`].

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{self, Phase, PromptPhase, PromptStatus, Via, WorkSessionSpec, WorkSessionStatus};
use crate::config::Config;
use crate::harness::{ArgvError, Profile};

pub(crate) mod approval;
mod budget;
mod conditions;
mod deliver;
pub mod discover;
mod evidence;
mod exits;
mod handoff;
mod hooks;
mod idle;
mod limit;
mod plan;
mod push;
pub mod queue;
pub mod resume;
mod room;
mod session;
mod spawn;
mod usage;
mod verify;
mod workspace;
pub use crate::api::is_tag;
pub use budget::reached as budget_reached;
pub use conditions::{
    ActivityReason, ConditionType, ConfinedReason, DiscoveryReason, NodeLostReason, PlacedReason, ReadyReason, Reason,
    WorkspaceReason, condition, find, has_reason, set_condition,
};
pub use deliver::{AFTER_OFFSET_LIMIT, CONFIRM_ATTEMPTS, Proof, RETURN_LIMIT, hook_args, initial_prompt_owed};
pub use discover::DISCOVERY_RECHECK;
pub use evidence::{Confinement, Evidence, Limited, NamespaceBudget, Record, Reset, Room, Workspace};
pub use handoff::handoff_text;
pub use limit::credential;
pub use plan::{
    Claim, Context, EventReason, FinishedWorkEvent, INITIAL_PROMPT, Input, Notice, Object, Observed, Op, PendingAnswer,
    PendingWorkEvent, Plan, PromptKey, Severity, WorkEventUpdate, goes_with_its_session,
};
pub use push::{
    GRANT_RETRY, GRANT_RETRY_MAX, PushGrant, PushTarget, RENEW_BEFORE, grant_key, push_dir, push_env, push_target,
};
pub use resume::{Fresh, ResumeReason, try_resume};
pub use session::{Confine, KeysFrom, Liveness, SessionView, Spawn, TmuxSession, given, tmux_session};
pub use usage::{UsageRead, count_stands};
pub use workspace::PREPARE_RECHECK;

#[cfg(test)]
mod tests;

/// Kubelet's back-off: the first quick failure respawns at once, then 10 s doubling to 5 min.
pub const BACKOFF_BASE: Duration = Duration::from_secs(10);
/// The longest back-off.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// Longer prompts are pasted once the harness is ready instead of riding on the command line (tmux refuses
/// commands over about 16 KiB).
pub const ARGV_PROMPT_LIMIT: usize = 8 * 1024;
/// How often a session that cannot run for now (a work item conflict, no tmux server) is looked at again.
pub const CONFLICT_RECHECK: Duration = Duration::from_secs(5);
/// A harness that ran this long is healthy: its death is not a failure, and the failure count resets.
pub const HEALTHY_AFTER: Duration = Duration::from_secs(600);

/// Whether an update of a prompt counts a delivery attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    /// It does not.
    No,
    /// It does: a send that was refused.
    Counted,
    /// It does: a send, made when the harness's record stood at this offset.
    SentAt(u64),
    /// It does not (no send now), and the offset of its last send stays for the next: a prompt its deadline sends
    /// again, which a harness that took the first send late (a slow start) says it took after that offset.
    Again,
    /// The harness it was sent to is gone: it waits again with no send counted, so the next harness gets it, and a
    /// second send at its confirm deadline, like any prompt.
    Returned,
}

/// The resume settings of a session: its spec over the config's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Settings {
    enabled: bool,
    probe: u32,
    settle: u32,
    /// Seconds of quiet before an idle stop (or, archived, the archive stop); `None`: never.
    idle: Option<u32>,
    /// `spec.archived`: the quiet stop is an archive, and nothing but a prompt starts the harness.
    archived: bool,
}

impl Settings {
    fn of(spec: &WorkSessionSpec, config: &Config) -> Self {
        let r = spec.resume.clone().unwrap_or_default();
        let d = config.defaults;
        let idle = spec
            .idle
            .as_ref()
            .and_then(|i| i.suspend_after_seconds)
            .or(d.idle_suspend_after_seconds)
            .filter(|s| *s > 0);
        let quiet = d.archive_quiet_seconds;
        let idle = if spec.archived { Some(idle.map_or(quiet, |s| s.min(quiet))) } else { idle };
        Self {
            enabled: r.enabled.unwrap_or(d.resume_on_respawn),
            probe: r.probe_seconds.unwrap_or(d.resume_probe_seconds),
            settle: r.settle_seconds.unwrap_or(d.resume_settle_seconds),
            idle,
            archived: spec.archived,
        }
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

/// `t` plus `d`, saturating at the end of time (a timestamp from data never panics the agent).
fn later(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(secs(d)).unwrap_or(Timestamp::MAX)
}

fn until(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(then.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// Decides what to do for one WorkSession.
pub fn decide(input: &Input) -> Plan {
    let object = &input.object;
    if !object.finalized {
        // The finalizer comes before anything it guards (a harness, a room, a checkout), in a plan of its own: the
        // change wakes the next reconcile, which decides the rest. Without it a deleted object is no longer ours.
        let (ops, requeue_after) = if object.deleting.is_some() {
            (vec![Op::Forget], None)
        } else {
            (vec![Op::AddFinalizer], Some(Duration::ZERO))
        };
        return Plan { ops, status: object.status.clone(), requeue_after };
    }
    Decision::new(input).run()
}

/// One decision being built.
struct Decision<'a, 'i> {
    input: &'i Input<'a>,
    /// The tmux session the harness runs in now: the recorded one when a prefix change left it running.
    session: String,
    /// The tmux session a spawn uses: `<prefix><namespace>_<name>` under the current config.
    configured: String,
    status: WorkSessionStatus,
    /// What the spawn needs of the node before it runs.
    claims: Vec<Claim>,
    /// The status to record before the ops (a spawn is about to happen).
    intent: Option<WorkSessionStatus>,
    ops: Vec<Op>,
    requeue_after: Option<Duration>,
    /// Why the session may spend no more (`spec.budget`), if it may not: no new prompt is sent.
    paused: Option<budget::Over>,
    /// Until when a usage limit parks the session, if it does: nothing is sent or started before then.
    parked: Option<Timestamp>,
    /// The prompts a refusal read now sent back to `Pending` (their keys): none is confirmed or sent by this decision.
    refused: Vec<String>,
}

impl<'a, 'i> Decision<'a, 'i> {
    fn new(input: &'i Input<'a>) -> Self {
        let mut status = input.object.status.clone();
        status.observed_generation = input.object.generation;
        // What GitHub said of the work item's pull request, as the bridge recorded it: shown, never decided on.
        status.pull_request = input.object.pull_request.and_then(api::PullRequestStatus::from_annotation);
        discover::carried_over(&mut status);
        let limit_before = status.usage.as_ref().and_then(|u| u.limit.clone());
        if let Some(read) = &input.evidence.usage {
            usage::count(&mut status, read, &input.context.config.prices);
        } else if let Some(usage) = status.usage.as_mut() {
            // The prices may have changed.
            usage::price(usage, &input.context.config.prices);
        }
        let TmuxSession { current: session, configured } = input.observed.session.clone();
        status.tmux_session = Some(session.clone());
        let (claims, intent, ops) = (Vec::new(), None, Vec::new());
        // A record longer than one read is read on soon.
        let requeue_after = input.evidence.usage.as_ref().filter(|r| r.more).map(|_| usage::READ_AGAIN);
        let (paused, parked, refused) = (None, None, Vec::new());
        let mut decision =
            Self { input, session, configured, status, claims, intent, ops, requeue_after, paused, parked, refused };
        decision.paused = decision.over_budget();
        decision.take_refusal(limit_before.as_ref());
        decision.parked = decision.parked_until();
        decision
    }

    /// The plan in the executor's order: the room's record of a checkout prepared just now, expired events, claims,
    /// the intent, then the rest.
    fn plan(mut self) -> Plan {
        if let Some(held) = self.held() {
            self.requeue(held);
        }
        let mut rest = std::mem::take(&mut self.ops);
        self.grant_push(&mut rest);
        let mut ops = Vec::new();
        let evidence = &self.input.evidence;
        if let (Workspace::Prepared { adopted: false, .. }, Confinement::Room(_)) =
            (&evidence.workspace, &evidence.room)
        {
            // Whatever this decision does, and before anything that can fail: the preparation's result is read once,
            // and only a checkout the agent made for this very session is ever handed to its room.
            ops.push(Op::MarkPrepared);
        }
        // The prompt a parked session's wake sends again is kept until then, however long the wait.
        let retention = self.input.context.config.event_retention.filter(|_| !limit::limit_unwoken(&self.status));
        if let Some(retention) = retention {
            let (due, next) = queue::expired(self.input.object.finished, self.input.context.now, retention);
            let due = due.into_iter().filter(|event| !self.refused.iter().any(|r| r == event));
            ops.extend(due.map(|event| Op::ExpireEvent { event: event.to_string() }));
            if let Some(next) = next {
                self.requeue(next);
            }
        }
        ops.extend(self.claims.into_iter().map(Op::Claim));
        ops.extend(self.intent.map(|intent| Op::RecordIntent(Box::new(intent))));
        ops.extend(rest);
        // The label says what the status will: other nodes' sessions of its credential are parked by it.
        let limited = self.status.usage.as_ref().is_some_and(|u| u.limit.is_some());
        if limited != self.input.object.limited_label && self.input.object.deleting.is_none() {
            ops.push(Op::LabelLimited(limited));
        }
        Plan { ops, status: self.status, requeue_after: self.requeue_after }
    }

    /// Sets a condition; whether it says something else than it did.
    fn condition<R: Reason>(&mut self, reason: R, ok: bool, message: impl Into<String>) -> bool {
        let (generation, now) = (self.input.object.generation, self.input.context.now);
        set_condition(&mut self.status.conditions, reason, ok, &message.into(), generation, now)
    }

    fn ready(&mut self, ok: bool, reason: ReadyReason, message: impl Into<String>) {
        self.condition(reason, ok, message);
    }

    fn requeue(&mut self, after: Duration) {
        self.requeue_after = Some(self.requeue_after.map_or(after, |d| d.min(after)));
    }

    /// Moves the prompt `key` to `phase`: a WorkEvent by an op, `initialPrompt` in status.
    fn set_prompt(
        &mut self,
        key: PromptKey<'_>,
        phase: PromptPhase,
        via: Option<Via>,
        attempt: Attempt,
        message: Option<String>,
    ) {
        let now = self.input.context.now;
        let delivered = phase == PromptPhase::Delivered;
        if delivered {
            self.status.last_prompt_time = Some(Time(now));
        }
        let harness_session_id = delivered.then(|| self.status.harness_session_id.clone()).flatten();
        let sent = (phase == PromptPhase::Delivering).then_some(now);
        // A send: only what the harness records from its offset on confirms it.
        let offset = match attempt {
            Attempt::SentAt(offset) => Some(offset),
            Attempt::No | Attempt::Counted | Attempt::Again | Attempt::Returned => None,
        };
        let keep_offset = attempt == Attempt::Again;
        let returned = attempt == Attempt::Returned;
        let attempt = !matches!(attempt, Attempt::No | Attempt::Again | Attempt::Returned);
        if let PromptKey::Event(event) = key {
            let event = event.to_string();
            let update = WorkEventUpdate {
                event,
                phase,
                via,
                harness_session_id,
                sent,
                offset,
                keep_offset,
                attempt,
                returned,
                message,
            };
            self.ops.push(Op::WorkEventStatus(update));
            return;
        }
        let old = self.status.initial_prompt.take().unwrap_or_default();
        let pending = phase == PromptPhase::Pending;
        self.status.initial_prompt = Some(PromptStatus {
            phase: Some(phase),
            sent_time: if pending { None } else { sent.map(Time).or(old.sent_time) },
            sent_offset: if pending && !keep_offset { None } else { offset.or(old.sent_offset) },
            attempts: if returned { 0 } else { old.attempts + u32::from(attempt) },
            returns: old.returns + u32::from(returned),
            delivered_at: delivered.then_some(Time(now)),
            via: if pending { None } else { via.or(old.via) },
            harness_session_id: harness_session_id.or(old.harness_session_id),
            message,
        });
    }

    /// Where the harness's record stands for a prompt sent now `via`: a fresh conversation's transcript starts empty.
    fn offset_now(&self, via: Option<Via>) -> u64 {
        let record = self.input.evidence.record;
        if via == Some(Via::Fresh) && record.proof == Proof::Transcript { 0 } else { record.len }
    }

    fn notice(&mut self, notice: Notice) {
        self.ops.push(Op::Notice(notice));
    }

    fn run(mut self) -> Plan {
        let input = self.input;
        // A tmux session tagged for another object is never adopted, pasted into, stopped or replaced.
        let conflict = input.observed.view.filter(|t| !t.belongs_to(input.object.owner));
        if let Some(deleting_since) = input.object.deleting {
            if conflict.is_none() {
                self.ops.push(Op::Stop { session: self.session.clone() });
                // A room's checkout was its harness's: it goes aside with the room, never read by the agent's git.
                if input.object.spec.workspace.is_some() && !matches!(input.evidence.room, Confinement::Room(_)) {
                    self.ops.push(Op::RemoveWorkspace);
                }
            }
            if matches!(input.evidence.room, Confinement::Room(_)) {
                self.ops.push(Op::ReleaseRoom);
            }
            self.ops.push(Op::ReleaseFinalizer { deleting_since });
            return self.plan();
        }
        self.settle_handoff();
        if let Some(other) = conflict {
            self.status.phase = Some(Phase::Pending);
            self.status.verification = None;
            let (reason, whose) = match other.owner.as_str() {
                // Not made by a spawn of this agent (a harness can make sessions on its server): anyone's.
                "" => (ReadyReason::TmuxSessionUntagged, "carries no owner tag".to_string()),
                _ => (ReadyReason::TmuxSessionConflict, format!("belongs to WorkSession {}", other.owner_name)),
            };
            let message = format!(
                "tmux session {} {whose}; it is never adopted, pasted into or stopped by this one",
                self.session
            );
            self.ready(false, reason, message);
            self.requeue(CONFLICT_RECHECK);
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
        if let Some(to) = input.object.move_to
            && self.move_when_quiet(to)
        {
            return self.plan();
        }
        if input.object.spec.suspend {
            if input.observed.liveness != Liveness::Absent {
                self.ops.push(Op::Stop { session: self.session.clone() });
            }
            self.status.phase = Some(Phase::Suspended);
            self.status.verification = None;
            let waiting = self.prompts().len();
            let prompts = if waiting == 1 { "prompt waits" } else { "prompts wait" };
            self.ready(false, ReadyReason::Suspended, format!("spec.suspend is set; {waiting} {prompts}"));
            return self.plan();
        }
        if !self.room_ready() {
            return self.plan();
        }
        if !input.observed.server && !input.context.config.tmux.start_server {
            // tmux runs in a container of its own: never start a server here; wait for it to come back.
            self.return_unconfirmed("the tmux server is gone; it will be sent again");
            // An idle (or paused) session stays so: it was stopped on purpose, and only a prompt (a raise) wakes it.
            if !matches!(self.status.phase, Some(Phase::Idle | Phase::Archived | Phase::Paused)) {
                self.status.phase = Some(Phase::Pending);
            }
            self.ready(
                false,
                ReadyReason::TmuxUnavailable,
                "no tmux server answers on the socket, and the agent never starts one",
            );
            self.requeue(CONFLICT_RECHECK);
            return self.plan();
        }
        let settings = Settings::of(input.object.spec, input.context.config);
        if let Some(failure) = input.evidence.spawn_failure.as_deref()
            && let Some(v) = self.status.verification.take()
        {
            self.tmux_refused_spawn(profile, settings, v, failure);
            return self.plan();
        }
        if let Some(v) = self.status.verification.clone() {
            self.verify(profile, settings, v);
            return self.plan();
        }
        if input.observed.liveness != Liveness::Alive && !self.workspace_ready() {
            return self.plan();
        }
        if input.observed.liveness == Liveness::Alive {
            self.discover();
            self.follow_the_conversation();
            self.follow_the_approval();
            self.follow_the_activity();
        } else {
            self.forget_the_activity();
            self.forget_the_approval();
        }
        match input.observed.liveness {
            Liveness::Alive => self.deliver_to_live_pane(profile, settings),
            Liveness::Dead | Liveness::Absent => self.not_running(profile, settings),
        }
        self.plan()
    }

    /// A move asked for: once no prompt is being delivered and no spawn verified, the harness is stopped and the
    /// session handed to `to` (returns true); a busy one goes on until its current prompt is known delivered.
    fn move_when_quiet(&mut self, to: &str) -> bool {
        let busy =
            self.status.verification.is_some() || self.prompts().iter().any(|p| p.phase == PromptPhase::Delivering);
        if busy && self.input.observed.liveness == Liveness::Alive {
            self.requeue(Duration::from_secs(1));
            return false;
        }
        // Whatever was being delivered to a dead pane waits for the new node.
        self.return_unconfirmed("the session moved to another node; it will be sent there");
        self.status.phase = Some(Phase::Pending);
        self.status.verification = None;
        let waiting = self.prompts().len();
        self.ready(false, ReadyReason::Moving, format!("moving to node {to}; {waiting} waiting"));
        // The status goes first (the next node starts from it), then the harness stops, then the hand-over.
        self.intent = Some(self.status.clone());
        if self.input.observed.liveness != Liveness::Absent {
            self.ops.push(Op::Stop { session: self.session.clone() });
        }
        // The room here is freed before the hand-over: every process of its uid killed (a child that left the tmux
        // session too); its workdir moved aside and the uid free for another session of this node, unless the rooms
        // are on storage every node shares, where the room goes with the session. Asked for whatever the room gate
        // said this time (a room it refuses now may still hold processes): the executor finds the room, if any.
        if let Some(rooms) = &self.input.context.config.rooms {
            self.ops.push(if rooms.shared { Op::LeaveRoom } else { Op::ReleaseRoom });
        }
        self.notice(Notice::new(EventReason::Moved, format!("moving to node {to}")));
        self.ops.push(Op::Move { node: to.to_string() });
        true
    }

    /// What the CRD schema cannot check (or local mode has no schema for).
    fn validate(&self) -> Result<&'a Profile, (ReadyReason, String)> {
        let spec = self.input.object.spec;
        if let Err(e) = api::validate_spec(spec) {
            return Err((ReadyReason::InvalidSpec, e.to_string()));
        }
        let Some(profile) = self.input.context.config.harnesses.get(&spec.harness) else {
            let known: Vec<&str> = self.input.context.config.harnesses.keys().map(String::as_str).collect();
            return Err((
                ReadyReason::UnknownHarness,
                format!("no harness profile {:?} (known: {})", spec.harness, known.join(", ")),
            ));
        };
        if profile.interactive.is_none() {
            return Err((ReadyReason::HarnessCannotBeHosted, ArgvError::NotHostable(spec.harness.clone()).to_string()));
        }
        let namespace = self.input.object.owner_name.split_once('/').map_or("", |(ns, _)| ns);
        if let Some(w) =
            spec.workspace.as_ref().filter(|w| !self.input.context.config.workspaces.allows(namespace, &w.url))
        {
            // A tenant boundary: which repositories a namespace may have the agent clone (with the node's token).
            return Err((
                ReadyReason::WorkspaceNotAllowed,
                format!("namespace {namespace} may not check out {} (workspaces.repositories)", w.url),
            ));
        }
        if let (Some(other), Some(id)) = (self.input.evidence.id_taken_by.as_deref(), &spec.harness_session_id) {
            // Two processes on one conversation write one transcript; and a tenant must not adopt another's.
            return Err((
                ReadyReason::SessionIdTaken,
                format!("spec.harnessSessionId {id} is the conversation of WorkSession {other} on this node"),
            ));
        }
        Ok(profile)
    }
}
