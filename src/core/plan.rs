//! What the decision core takes and gives: [`Input`] (desired and observed state) and [`Plan`] (operations and
//! the status to record).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::ResumeReason;
use super::evidence::Evidence;
use super::session::{Liveness, SessionView, Spawn, TmuxSession};
use crate::api::{PromptPhase, Via, WorkSessionSpec, WorkSessionStatus};
use crate::config::Config;

/// How [`PromptKey::Initial`] is written where a prompt's key is a word (a paste's tag, a status's carried prompt,
/// a log line): a WorkEvent's name is never camelCase, so it never reads as one.
pub const INITIAL_PROMPT: &str = "initialPrompt";

/// Which prompt: the session's `spec.initialPrompt`, or a WorkEvent by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PromptKey<'a> {
    /// `spec.initialPrompt`.
    Initial,
    /// The WorkEvent of this name.
    Event(&'a str),
}

impl<'a> PromptKey<'a> {
    /// The key as a word: a WorkEvent's name, or [`INITIAL_PROMPT`].
    pub fn as_str(&self) -> &'a str {
        match self {
            Self::Initial => INITIAL_PROMPT,
            Self::Event(name) => name,
        }
    }
}

impl std::fmt::Display for PromptKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event of the session that is not delivered yet, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingWorkEvent {
    /// The WorkEvent's name.
    pub name: String,
    /// The tag its paste gives the tmux session: its UID (in local mode, one made from its name and creation), so a
    /// WorkEvent made again under a used name is a new delivery.
    pub tag: String,
    /// Its prompt.
    pub prompt: String,
    /// `Pending`, or `Delivering` (sent, not yet known delivered).
    pub phase: PromptPhase,
    /// When it was sent, if `Delivering`.
    pub sent: Option<Timestamp>,
    /// How it was sent, if `Delivering`.
    pub via: Option<Via>,
    /// When it was created.
    pub created: Timestamp,
    /// Sent as it is, for the harness to take as its command if it is one (`spec.command`): without the literal mark,
    /// and never on a command line.
    pub command: bool,
    /// Where the harness's record stood when it was sent, if `Delivering` (`status.sentOffset`).
    pub offset: Option<u64>,
    /// Delivery attempts so far.
    pub attempts: u32,
    /// Harnesses that died before it was known delivered.
    pub returns: u32,
    /// Not delivered before this time (`spec.notBefore`); until then others go first.
    pub not_before: Option<Timestamp>,
}

impl PendingWorkEvent {
    /// A `Pending` event created at `created`, tagged `uid-<name>` (set [`PendingWorkEvent::tag`] to its UID).
    pub fn pending(name: &str, prompt: &str, created: Timestamp) -> Self {
        let (phase, tag) = (PromptPhase::Pending, format!("uid-{name}"));
        let (sent, via, offset) = (None, None, None);
        Self {
            name: name.into(),
            tag,
            prompt: prompt.into(),
            phase,
            sent,
            via,
            created,
            command: false,
            offset,
            attempts: 0,
            returns: 0,
            not_before: None,
        }
    }
}

/// An answer to a permission request (a WorkEvent carrying `spec.answer`) not yet taken, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingAnswer {
    /// The WorkEvent's name.
    pub name: String,
    /// The answer.
    pub answer: crate::api::Answer,
    /// When it was made.
    pub created: Timestamp,
}

/// A delivered or failed WorkEvent of the session, which expires `delivery.retentionSeconds` after it finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishedWorkEvent {
    /// The WorkEvent's name.
    pub name: String,
    /// When it was delivered (a failed one: when it was created).
    pub at: Timestamp,
    /// Its prompt.
    pub prompt: String,
    /// The conversation it reached, if it was delivered and the conversation's id was known then.
    pub conversation: Option<String>,
    /// Its delivery tag (its UID, as [`PendingWorkEvent::tag`]).
    pub tag: String,
    /// `Delivered` (else `Failed`).
    pub delivered: bool,
    /// When it was last sent, if it was.
    pub sent: Option<Timestamp>,
}

impl FinishedWorkEvent {
    /// A failed event (no prompt, no conversation), tagged by its name.
    pub fn new(name: &str, at: Timestamp) -> Self {
        let (prompt, conversation, tag) = (String::new(), None, name.into());
        Self { name: name.into(), at, prompt, conversation, tag, delivered: false, sent: None }
    }
}

/// Everything one decision is made from, in four parts: the object, what tmux shows, what else the executor found,
/// and the surroundings.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    /// The WorkSession as stored, and its WorkEvents.
    pub object: Object<'a>,
    /// What the shared tmux observation saw of its session.
    pub observed: Observed<'a>,
    /// What the executor read beyond tmux: the harness's files, the workspace, the room and the node's claims.
    pub evidence: &'a Evidence,
    /// The agent config, the clock, and fresh values a decision may use.
    pub context: Context<'a>,
}

/// The WorkSession as stored, and its WorkEvents.
#[derive(Clone, Debug)]
pub struct Object<'a> {
    /// The desired state.
    pub spec: &'a WorkSessionSpec,
    /// The recorded status.
    pub status: &'a WorkSessionStatus,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.creationTimestamp` (when `initialPrompt` started waiting).
    pub created: Timestamp,
    /// Since when the object is being deleted (`metadata.deletionTimestamp`).
    pub deleting: Option<Timestamp>,
    /// The agent's finalizer is on it.
    pub finalized: bool,
    /// Its identity in tmux tags: its UID (or `namespace/name` where objects have no UID).
    pub owner: &'a str,
    /// Its `namespace/name`.
    pub owner_name: &'a str,
    /// Undelivered events of this session (`Pending` or `Delivering`), oldest first ([`super::queue::ordered`]).
    pub events: &'a [PendingWorkEvent],
    /// Its delivered and failed events.
    pub finished: &'a [FinishedWorkEvent],
    /// Its answers to permission requests not yet taken, oldest first.
    pub answers: &'a [PendingAnswer],
    /// The node a move asks for (its [`crate::api::MOVE_ANNOTATION`], resolved to a node other than its own).
    pub move_to: Option<&'a str>,
    /// What the bridge recorded of its work item's pull request ([`crate::api::PULL_REQUEST_STATE_ANNOTATION`]).
    pub pull_request: Option<&'a str>,
    /// It carries [`crate::api::USAGE_LIMITED_LABEL`].
    pub limited_label: bool,
}

/// What the shared tmux observation saw of the session.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    /// Which tmux session is the harness's ([`super::tmux_session`]).
    pub session: &'a TmuxSession,
    /// Its liveness.
    pub liveness: Liveness,
    /// What the observation saw of it (its tags), if it exists.
    pub view: Option<&'a SessionView>,
    /// Whether a tmux server answered the observation.
    pub server: bool,
    /// What a dead pane printed last (empty unless the pane is dead and its death is not yet explained).
    pub last_output: &'a str,
    /// The live pane's visible text, read when a prompt waits for the profile's `readyPattern`.
    pub screen: Option<&'a str>,
}

/// The agent config, the clock, and fresh values a decision may use.
#[derive(Clone, Debug)]
pub struct Context<'a> {
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
    /// Operations, in order; the executor stops at the first that fails.
    pub ops: Vec<Op>,
    /// Status to record once the ops ran.
    pub status: WorkSessionStatus,
    /// Reconcile again after this long.
    pub requeue_after: Option<Duration>,
}

impl Plan {
    /// The status recorded before a spawn ([`Op::RecordIntent`]), if the plan spawns.
    pub fn intent(&self) -> Option<&WorkSessionStatus> {
        self.ops.iter().find_map(|op| match op {
            Op::RecordIntent(status) => Some(status.as_ref()),
            _ => None,
        })
    }

    /// Whether the plan lets the object go (its finalizer released, or it is going without one): its status is not
    /// written and the node holds nothing for it.
    pub fn releases(&self) -> bool {
        self.ops.iter().any(|op| matches!(op, Op::ReleaseFinalizer { .. } | Op::Forget | Op::Move { .. }))
    }
}

/// Whether a WorkEvent made at `made` goes with its session, deleted since `deleting_since`: one made before. One made
/// after the deletion began is kept: a bridge that had not seen the deletion yet acknowledged it, and a session of
/// that name made again (the route's next delivery) delivers it. One whose making time is unknown is kept too.
pub fn goes_with_its_session(made: Option<Timestamp>, deleting_since: Timestamp) -> bool {
    made.is_some_and(|made| made < deleting_since)
}

/// Something of the node that one session holds at a time, taken before its spawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The workdir, while a harness that shows its conversation's id after the start discovers it (two started at
    /// once in one workdir could take each other's).
    Workdir(String),
    /// A conversation this session adopts (`spec.harnessSessionId`): two processes on one conversation would write
    /// one transcript.
    Conversation(String),
    /// A wake of a session parked for its credential's usage limit (the credential, as [`super::credential`] names
    /// it): no two of a credential's sessions wake within `delivery.usageLimitSpreadSeconds` of each other, even two
    /// decided at once.
    Wake(String),
}

/// One effect for the executor.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Put the agent's finalizer on the object (a plan of its own: the next reconcile decides the rest).
    AddFinalizer,
    /// Put [`crate::api::USAGE_LIMITED_LABEL`] on the object (`true`) or take it off: other nodes' agents learn of its
    /// usage limit by it.
    LabelLimited(bool),
    /// Delete a WorkEvent whose retention ran out.
    ExpireEvent {
        /// The WorkEvent.
        event: String,
    },
    /// Take `claim` for this session; if another session took it since the evidence was read, stop here (nothing
    /// after it runs) and reconcile again.
    Claim(Claim),
    /// Record this status before the ops that follow (a spawn is about to happen), so a restart can finish it.
    RecordIntent(Box<WorkSessionStatus>),
    /// Stop the tmux session.
    Stop {
        /// The tmux session.
        session: String,
    },
    /// Clear a stale session and spawn the harness (first handing the workdir to its room, if it has one).
    Spawn(Spawn),
    /// Paste a prompt into the live pane (bracketed paste, then Enter), tagging the session with its tag.
    Paste {
        /// The tmux session.
        session: String,
        /// The prompt's key as a word ([`PromptKey::as_str`]).
        key: String,
        /// The tag the paste gives the session (see [`PendingWorkEvent::tag`]).
        tag: String,
        /// The prompt.
        text: String,
    },
    /// Press Enter in the live pane again, for the prompt `key` a harness holds unsent in its input box.
    Submit {
        /// The tmux session.
        session: String,
        /// The prompt's key.
        key: String,
    },
    /// Update a WorkEvent's status.
    WorkEventStatus(WorkEventUpdate),
    /// Report: a log line named by its event (`session.started`, ...), and a Kubernetes Event.
    Notice(Notice),
    /// Give the session its room (record its uid, make its home and close it to others), before anything is done for
    /// it there: the next decision starts its harness in it.
    GiveRoom,
    /// Delete the session's WorkEvents that go with it ([`goes_with_its_session`], read fresh: one written since this
    /// reconcile read them too), then drop the agent's finalizer: the finalizer is what removes a deleted session's
    /// events (the bridge writes them from its cache, with no owner reference a stale UID could make the garbage
    /// collector act on).
    ReleaseFinalizer {
        /// When the deletion began.
        deleting_since: Timestamp,
    },
    /// The object is going without the agent's finalizer: it is no longer this agent's, and nothing of the node is
    /// held for it any more (its claims, a spawn failure kept for it).
    Forget,
    /// Start preparing the workspace beside the reconcile (its result is a later [`Evidence::workspace`]).
    PrepareWorkspace,
    /// Note in the room's record that the agent prepared this checkout, so the room may be given it (a checkout the
    /// agent did not make is never handed over).
    MarkPrepared,
    /// Remove the workspace's checkout unless a removal would lose something (the session is going).
    RemoveWorkspace,
    /// Free the session's room (the session is going): its processes killed, its workdir moved aside, its home
    /// gone, its uid free again.
    ReleaseRoom,
    /// Leave the session's room here (the session moves, and with shared rooms its room goes with it): its
    /// processes on this node killed, nothing on the shared storage changed.
    LeaveRoom,
    /// Mint a token for `repository` alone with what pushing a branch and opening a pull request need, and write it
    /// into `dir` (the token file and `gh`'s `hosts.yml` for `host`), owned by the session's room if it has one. A
    /// failure is reported and the ops go on: the harness works without it, and the next decision tries again.
    GrantPush {
        /// `owner/name`.
        repository: String,
        /// The host (`host` or `host:port`) `gh` is told the token is for.
        host: String,
        /// The harness's `HOME`, which `dir` is in.
        home: std::path::PathBuf,
        /// The session's push credentials folder ([`super::push::push_dir`]).
        dir: std::path::PathBuf,
        /// The room's uid, which is given the files (`None`: rooms off).
        owner: Option<u32>,
    },
    /// Answer the harness's permission request: write `written` into the session's answers folder `below` the
    /// trusted folder `trusted` (the rooms' root, or the harness's `HOME`), where its hook's receiver waits for it
    /// (the folder and the file readable by the group `group`, the room's, if it has one); a request answered
    /// already keeps its first answer.
    Answer {
        /// A folder the agent trusts: nothing below it is followed through a link.
        trusted: std::path::PathBuf,
        /// The session's answers folder, below `trusted`.
        below: std::path::PathBuf,
        /// What the receiver tells the harness.
        written: crate::harness::hooks::Written,
        /// The room's gid (`None`: rooms off).
        group: Option<u32>,
    },
    /// Hand the session to `node` (after its harness was stopped): `spec.nodeName` becomes `node` and the move's
    /// annotation goes, in one patch that holds only while the annotation still asks for `node`. The session is no
    /// longer this agent's.
    Move {
        /// The node.
        node: String,
    },
}

impl Op {
    /// The op's name in logs and timing spans.
    pub fn name(&self) -> &'static str {
        match self {
            Op::AddFinalizer => "add_finalizer",
            Op::LabelLimited(_) => "label_limited",
            Op::ExpireEvent { .. } => "expire_event",
            Op::Claim(_) => "claim",
            Op::RecordIntent(_) => "record_intent",
            Op::Stop { .. } => "stop",
            Op::Spawn(_) => "spawn",
            Op::Paste { .. } => "paste",
            Op::Submit { .. } => "submit",
            Op::WorkEventStatus(_) => "event_status",
            Op::Notice(_) => "notice",
            Op::GiveRoom => "give_room",
            Op::ReleaseFinalizer { .. } => "release_finalizer",
            Op::Forget => "forget",
            Op::PrepareWorkspace => "prepare_workspace",
            Op::MarkPrepared => "mark_prepared",
            Op::RemoveWorkspace => "remove_workspace",
            Op::ReleaseRoom => "release_room",
            Op::LeaveRoom => "leave_room",
            Op::GrantPush { .. } => "grant_push",
            Op::Answer { .. } => "answer",
            Op::Move { .. } => "move",
        }
    }
}

/// A WorkEvent status change.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkEventUpdate {
    /// The WorkEvent.
    pub event: String,
    /// Its new phase.
    pub phase: PromptPhase,
    /// How it reached the harness (when delivered).
    pub via: Option<Via>,
    /// The conversation it reaches.
    pub harness_session_id: Option<String>,
    /// When it was sent (for `Delivering`).
    pub sent: Option<Timestamp>,
    /// Where the harness's record stood when it was sent (for `Delivering`).
    pub offset: Option<u64>,
    /// Keep the offset of its last send though it goes back to `Pending` (its deadline sends it again).
    pub keep_offset: bool,
    /// Count one more delivery attempt.
    pub attempt: bool,
    /// Its harness is gone: its count of sends starts again (the next harness gets a second send at its deadline).
    pub returned: bool,
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
        /// A push token could not be handed to the harness (`workspaces.push`): its pushes fail until one is.
        PushTokenFailed,
        /// The harness moved to another conversation of its own (its hooks said so): the new id is recorded.
        ConversationChanged,
        /// The harness waits for a person (its hooks said so), with its words.
        WaitingForInput,
        /// The harness asks for permission to use a tool (its hooks said so): the request, its id and its deadline.
        ApprovalRequested,
        /// A permission request was answered: by whom, how, and why.
        ApprovalAnswered,
        /// The harness's turn failed for good (its hooks said so), with its words.
        TurnFailed,
        /// The session was handed to another node (a move asked for it).
        Moved,
        /// The harness of a session whose work item is closed was stopped (`spec.archived`).
        Archived,
        /// The egress proxy refused a connection of the session's harness (the host and why; once per host a while).
        EgressRefused,
        /// The session reached its budget: its harness stopped after its turn.
        BudgetReached,
        /// The model's API refused the harness's turn for a usage or rate limit (429).
        UsageLimited,
        /// A parked session's usage limit was waited out: the refused prompt is sent again (its credential's next
        /// wake keeps `delivery.usageLimitSpreadSeconds` from this one).
        UsageLimitWaitedOut,
    }
}

impl EventReason {
    /// The log event name (`session.started`, `event.delivered`, ...).
    pub fn log_event(self) -> &'static str {
        match self {
            EventReason::Started => "session.started",
            EventReason::Respawned => "session.respawned",
            EventReason::ResumeFailed => "session.resume_failed",
            EventReason::HarnessExited => "session.exited",
            EventReason::SpawnFailed => "session.spawn_failed",
            EventReason::BackOff => "session.backoff",
            EventReason::Delivered => "event.delivered",
            EventReason::DeliveryFailed => "event.failed",
            EventReason::IdleStopped => "session.idle",
            EventReason::Woken => "session.woken",
            EventReason::WorkspacePrepared => "workspace.prepared",
            EventReason::WorkspaceFailed => "workspace.failed",
            EventReason::WorkspaceKept => "workspace.kept",
            EventReason::PushTokenFailed => "workspace.push_token_failed",
            EventReason::ConversationChanged => "session.conversation_changed",
            EventReason::WaitingForInput => "session.waiting_for_input",
            EventReason::ApprovalRequested => "approval.requested",
            EventReason::ApprovalAnswered => "approval.answered",
            EventReason::TurnFailed => "session.turn_failed",
            EventReason::Moved => "session.moved",
            EventReason::Archived => "session.archived",
            EventReason::EgressRefused => "egress.refused",
            EventReason::BudgetReached => "session.budget_reached",
            EventReason::UsageLimited => "session.usage_limited",
            EventReason::UsageLimitWaitedOut => "session.usage_limit_waited_out",
        }
    }

    /// Normal or Warning.
    pub fn severity(self) -> Severity {
        match self {
            EventReason::Started
            | EventReason::Respawned
            | EventReason::Delivered
            | EventReason::IdleStopped
            | EventReason::Woken
            | EventReason::WorkspacePrepared
            | EventReason::ConversationChanged
            | EventReason::Moved
            | EventReason::Archived
            | EventReason::ApprovalAnswered
            | EventReason::UsageLimitWaitedOut => Severity::Normal,
            _ => Severity::Warning,
        }
    }
}

/// Something to report in logs and as a Kubernetes Event on the WorkSession.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// What happened: the Event's reason.
    pub reason: EventReason,
    /// For [`EventReason::Started`] and [`EventReason::Respawned`]: whether it resumed the conversation.
    pub resumed: Option<bool>,
    /// For [`EventReason::ResumeFailed`]: the decision table's row.
    pub row: Option<ResumeReason>,
    /// Human-readable.
    pub message: String,
}

impl Notice {
    pub fn new(reason: EventReason, message: impl Into<String>) -> Self {
        Self { reason, resumed: None, row: None, message: message.into() }
    }

    /// A harness survived its probe: the session's first (`Started`) or a later one (`Respawned`).
    pub(crate) fn survived(first: bool, resumed: bool, message: impl Into<String>) -> Self {
        let reason = if first { EventReason::Started } else { EventReason::Respawned };
        Self { resumed: Some(resumed), ..Self::new(reason, message) }
    }

    pub(crate) fn resume_failed(why: ResumeReason, message: impl Into<String>) -> Self {
        Self { row: Some(why), ..Self::new(EventReason::ResumeFailed, message) }
    }

    /// The reason to log: the decision table's row for a resume failure, else the Event reason.
    pub fn detail(&self) -> &'static str {
        self.row.map_or(self.reason.as_str(), ResumeReason::as_str)
    }
}
