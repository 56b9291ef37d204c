//! What the decision core takes and gives: [`Input`] (desired and observed state) and [`Plan`] (operations and
//! the status to record).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::ResumeReason;
use crate::api::{EventPhase, Via, WorkSessionSpec, WorkSessionStatus};
use crate::config::Config;
use crate::tmux::{Liveness, SessionView, Spawn};

/// The key of `spec.initialPrompt` among the prompts (WorkEvents are keyed by name, which is never camelCase), and
/// the tag its paste gives the tmux session (a WorkEvent's is its UID).
pub const INITIAL_PROMPT: &str = "initialPrompt";

/// An event of the session that is not delivered yet, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingEvent {
    /// The WorkEvent's name.
    pub name: String,
    /// The tag its paste gives the tmux session: its UID (in local mode, one made from its name and creation), so a
    /// WorkEvent made again under a used name is a new delivery.
    pub tag: String,
    /// Its prompt.
    pub prompt: String,
    /// `Pending`, or `Delivering` (sent, not yet known delivered).
    pub phase: EventPhase,
    /// When it was sent, if `Delivering`.
    pub sent: Option<Timestamp>,
    /// How it was sent, if `Delivering`.
    pub via: Option<Via>,
    /// When it was created.
    pub created: Timestamp,
    /// Sent as it is, for the harness to take as its command if it is one (`spec.command`): without the literal mark,
    /// and never on a command line.
    pub command: bool,
}

impl PendingEvent {
    /// A `Pending` event created at `created`, tagged `uid-<name>` (set [`PendingEvent::tag`] to its UID).
    pub fn pending(name: &str, prompt: &str, created: Timestamp) -> Self {
        let (phase, tag) = (EventPhase::Pending, format!("uid-{name}"));
        Self { name: name.into(), tag, prompt: prompt.into(), phase, sent: None, via: None, created, command: false }
    }
}

/// The work item's checkout (`spec.workspace`), as the executor finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workspace<'a> {
    /// Nothing to prepare: no `spec.workspace`, or a checkout prepared before (its directory is there).
    Ready,
    /// A preparation finished just now.
    Prepared {
        /// The branch checked out.
        branch: &'a str,
        /// The commit checked out.
        commit: &'a str,
        /// An existing checkout was taken as it was.
        adopted: bool,
    },
    /// A preparation is running.
    Preparing,
    /// Not prepared, and nothing is preparing it.
    Missing,
    /// A preparation failed just now, with what git printed.
    Failed(&'a str),
}

/// Where the harness runs (agent config `rooms`), as the executor finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confinement<'a> {
    /// Rooms are off: the harness runs as the tmux server's user, with its `HOME`.
    Off,
    /// Its own room.
    Room(&'a crate::room::Room),
    /// Rooms are on, and this session has none: why.
    Unavailable(&'a str),
}

/// Everything one decision is made from.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    /// The desired state.
    pub spec: &'a WorkSessionSpec,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.creationTimestamp` (when `initialPrompt` started waiting).
    pub created: Timestamp,
    /// The object is being deleted.
    pub deleting: bool,
    /// The recorded status.
    pub status: &'a WorkSessionStatus,
    /// Undelivered events of this session (`Pending` or `Delivering`), oldest first.
    pub events: &'a [PendingEvent],
    /// The tmux session's liveness.
    pub liveness: Liveness,
    /// What a dead pane printed last (empty unless the pane is dead).
    pub last_output: &'a str,
    /// What the observation saw of the tmux session (its tags), if it exists.
    pub tmux: Option<&'a SessionView>,
    /// Whether a tmux server answered the observation.
    pub tmux_server: bool,
    /// The tmux session the harness runs in, when not the configured one (a prefix changed while it ran, or a session
    /// named by an older release).
    pub session: Option<&'a str>,
    /// This object's identity in tmux tags: its UID (or `namespace/name` where objects have no UID).
    pub owner: &'a str,
    /// Its `namespace/name`.
    pub owner_name: &'a str,
    /// The live pane's visible text, read when a prompt waits for the profile's `readyPattern`.
    pub screen: Option<&'a str>,
    /// Keys of the prompts the harness's transcript shows (where the profile names it).
    pub confirmed: &'a [String],
    /// Whether the conversation a resume would take exists in the harness's store (`None`: the profile names no
    /// store, or there is nothing to resume).
    pub conversation_found: Option<bool>,
    /// The workspace's state.
    pub workspace: Workspace<'a>,
    /// The id the harness shows for the conversation being discovered, once the executor found it.
    pub discovered: Option<&'a str>,
    /// Another session of this workdir whose conversation's id is being discovered (`namespace/name`).
    pub discovering_here: Option<&'a str>,
    /// Another WorkSession of this node (`namespace/name`) whose recorded conversation is the `spec.harnessSessionId`
    /// this one would adopt.
    pub id_taken_by: Option<&'a str>,
    /// Where its harness runs.
    pub room: Confinement<'a>,
    /// The spawn of the plan decided just before failed, with this message.
    pub spawn_failure: Option<&'a str>,
    /// The agent config.
    pub config: &'a Config,
    /// The clock.
    pub now: Timestamp,
    /// A fresh uuid, used if this decision starts a fresh conversation.
    pub new_session_id: &'a str,
}

/// What to do, and the status to record.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Status to persist before the ops run (a spawn is about to happen), so a restart can finish it.
    pub intent: Option<WorkSessionStatus>,
    /// Operations, in order.
    pub ops: Vec<Op>,
    /// Status to record once the ops ran.
    pub status: WorkSessionStatus,
    /// Reconcile again after this long.
    pub requeue_after: Option<Duration>,
}

/// One effect for the executor.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Stop the tmux session.
    Stop {
        /// The tmux session.
        session: String,
    },
    /// Clear a stale session and spawn the harness.
    Spawn(Spawn),
    /// Paste a prompt into the live pane (bracketed paste, then Enter), tagging the session with its tag.
    Paste {
        /// The tmux session.
        session: String,
        /// The prompt's key: a WorkEvent's name, or [`INITIAL_PROMPT`].
        key: String,
        /// The tag the paste gives the session (see [`PendingEvent::tag`]).
        tag: String,
        /// The prompt.
        text: String,
    },
    /// Update a WorkEvent's status.
    Event(EventUpdate),
    /// Report: a log line with the seed's event name, and a Kubernetes Event.
    Notice(Notice),
    /// Drop the agent's finalizer.
    ReleaseFinalizer,
    /// Start preparing the workspace beside the reconcile (its result is a later [`Input::workspace`]).
    PrepareWorkspace,
    /// Remove the workspace's checkout unless a removal would lose something (the session is going).
    RemoveWorkspace,
    /// Free the session's room (the session is going): its home goes, its uid can be given again.
    ReleaseRoom,
}

/// A WorkEvent status change.
#[derive(Clone, Debug, PartialEq)]
pub struct EventUpdate {
    /// The WorkEvent.
    pub event: String,
    /// Its new phase.
    pub phase: EventPhase,
    /// How it reached the harness (when delivered).
    pub via: Option<Via>,
    /// The conversation it reaches.
    pub harness_session_id: Option<String>,
    /// When it was sent (for `Delivering`).
    pub sent: Option<Timestamp>,
    /// Count one more delivery attempt.
    pub attempt: bool,
    /// Why.
    pub message: Option<String>,
}

/// Severity of a [`Notice`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Things going as they should.
    Normal,
    /// Something failed.
    Warning,
}

crate::words::words! {
    /// The reasons of the Kubernetes Events the agent records on a WorkSession.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum EventReason {
        /// The first harness of the session survived its probe.
        Started,
        /// A later harness survived its probe.
        Respawned,
        /// A resume failed (the log line names the decision table's row).
        ResumeFailed,
        /// A running (or freshly started) harness exited.
        HarnessExited,
        /// tmux could not start a fresh harness.
        SpawnFailed,
        /// Respawning waits out a back-off.
        BackOff,
        /// An event reached the harness.
        Delivered,
        /// An event cannot be delivered by this harness.
        DeliveryFailed,
        /// An idle harness was stopped.
        IdleStopped,
        /// A prompt wakes an idle session.
        Woken,
        /// The workspace was prepared (or an existing checkout adopted).
        WorkspacePrepared,
        /// Preparing the workspace failed.
        WorkspaceFailed,
        /// The workspace was kept (moved aside, or left with work not pushed) when its session went.
        WorkspaceKept,
    }
}

/// What a [`Notice`] reports; it knows its Kubernetes Event reason, its log event name and its severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeKind {
    /// The first harness of the session survived its probe.
    Started {
        /// Whether it resumed a recorded conversation.
        resumed: bool,
    },
    /// A later harness survived its probe.
    Respawned {
        /// Whether it resumed the recorded conversation.
        resumed: bool,
    },
    /// A resume failed: a row of the decision table.
    ResumeFailed(ResumeReason),
    /// A running (or freshly started) harness exited.
    HarnessExited,
    /// tmux could not start a fresh harness.
    SpawnFailed,
    /// Respawning waits out a back-off.
    BackOff,
    /// An event reached the harness.
    Delivered,
    /// An event cannot be delivered by this harness.
    DeliveryFailed,
    /// An idle harness was stopped.
    IdleStopped,
    /// A prompt wakes an idle session (its respawn follows).
    Woken,
    /// The workspace was prepared (or an existing checkout adopted).
    WorkspacePrepared,
    /// Preparing the workspace failed.
    WorkspaceFailed,
    /// The workspace was kept when its session went (uncommitted work).
    WorkspaceKept,
}

impl NoticeKind {
    /// The Kubernetes Event reason.
    pub fn reason(self) -> EventReason {
        match self {
            NoticeKind::Started { .. } => EventReason::Started,
            NoticeKind::Respawned { .. } => EventReason::Respawned,
            NoticeKind::ResumeFailed(_) => EventReason::ResumeFailed,
            NoticeKind::HarnessExited => EventReason::HarnessExited,
            NoticeKind::SpawnFailed => EventReason::SpawnFailed,
            NoticeKind::BackOff => EventReason::BackOff,
            NoticeKind::Delivered => EventReason::Delivered,
            NoticeKind::DeliveryFailed => EventReason::DeliveryFailed,
            NoticeKind::IdleStopped => EventReason::IdleStopped,
            NoticeKind::Woken => EventReason::Woken,
            NoticeKind::WorkspacePrepared => EventReason::WorkspacePrepared,
            NoticeKind::WorkspaceFailed => EventReason::WorkspaceFailed,
            NoticeKind::WorkspaceKept => EventReason::WorkspaceKept,
        }
    }

    /// The log event name, in the seed's words.
    pub fn log_event(self) -> &'static str {
        match self {
            NoticeKind::Started { .. } => "session.started",
            NoticeKind::Respawned { .. } => "session.respawned",
            NoticeKind::ResumeFailed(_) => "session.resume_failed",
            NoticeKind::HarnessExited => "session.exited",
            NoticeKind::SpawnFailed => "session.spawn_failed",
            NoticeKind::BackOff => "session.backoff",
            NoticeKind::Delivered => "event.delivered",
            NoticeKind::DeliveryFailed => "event.failed",
            NoticeKind::IdleStopped => "session.idle",
            NoticeKind::Woken => "session.woken",
            NoticeKind::WorkspacePrepared => "workspace.prepared",
            NoticeKind::WorkspaceFailed => "workspace.failed",
            NoticeKind::WorkspaceKept => "workspace.kept",
        }
    }

    /// For a start or respawn: whether it resumed the conversation.
    pub fn resumed(self) -> Option<bool> {
        match self {
            NoticeKind::Started { resumed } | NoticeKind::Respawned { resumed } => Some(resumed),
            _ => None,
        }
    }

    /// The reason to log: the decision table's row for a resume failure, else the Event reason.
    pub fn detail(self) -> &'static str {
        match self {
            NoticeKind::ResumeFailed(why) => why.as_str(),
            other => other.reason().as_str(),
        }
    }

    /// Normal or Warning.
    pub fn severity(self) -> Severity {
        match self {
            NoticeKind::Started { .. }
            | NoticeKind::Respawned { .. }
            | NoticeKind::Delivered
            | NoticeKind::IdleStopped
            | NoticeKind::Woken
            | NoticeKind::WorkspacePrepared => Severity::Normal,
            _ => Severity::Warning,
        }
    }
}

/// Something to report in logs and as a Kubernetes Event on the WorkSession.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// What happened.
    pub kind: NoticeKind,
    /// Human-readable.
    pub message: String,
}

impl Notice {
    pub(crate) fn new(kind: NoticeKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    pub(crate) fn resume_failed(why: ResumeReason, message: impl Into<String>) -> Self {
        Self::new(NoticeKind::ResumeFailed(why), message)
    }
}
