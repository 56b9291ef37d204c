//! What the executor read beyond tmux for a decision ([`Evidence`]): the harness's record, its hooks' word, the
//! workspace and the room, the node's registries' answers (claims, limits, budgets). Part of the core's input.

use k8s_openapi::jiff::Timestamp;

use super::deliver::Proof;

/// The work item's checkout (`spec.workspace`), as the executor finds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Workspace {
    /// Nothing to prepare: no `spec.workspace`, or a checkout prepared before (its directory is there).
    #[default]
    Ready,
    /// A preparation finished just now.
    Prepared {
        /// The branch checked out.
        branch: String,
        /// The commit checked out.
        commit: String,
        /// An existing checkout was taken as it was.
        adopted: bool,
    },
    /// A preparation is running.
    Preparing,
    /// Not prepared, and nothing is preparing it.
    Missing,
    /// A preparation failed just now, with what git printed.
    Failed(String),
    /// Nothing to prepare, and `spec.workdir` is not a directory on the node.
    NoWorkdir,
}

/// A session's room (agent config `rooms`): a Unix user of its own and its `HOME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Room {
    /// Its uid (and gid).
    pub uid: u32,
    /// Its `HOME`.
    pub home: std::path::PathBuf,
}

/// Where the harness runs (agent config `rooms`), as the executor finds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Confinement {
    /// Rooms are off: the harness runs as the tmux server's user, with its `HOME`.
    #[default]
    Off,
    /// Its own room.
    Room(Room),
    /// Rooms are on, and this session has no room yet: the plan gives it ([`Op::GiveRoom`]).
    Due,
    /// Rooms are on, and this session has none and can have none: why.
    Unavailable(String),
}

/// The harness's record of the prompts it took: which kind, and how long it is now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// What confirms a delivery ([`Proof::of`]).
    pub proof: Proof,
    /// How long it is now: the hook file with hooks; with a transcript, the transcript of the conversation the harness
    /// runs (or a resume would take). A prompt sent now is confirmed only by what comes after.
    pub len: u64,
    /// With hooks: a prompt they reported taken is not in the transcript yet (the harness writes it just after the
    /// hook), or one sent during a turn that just ended may yet be shown steered into it (Copilot CLI's events
    /// file), so it is looked at again soon rather than when the hook file next grows.
    pub awaits_transcript: bool,
}

/// What the executor read beyond tmux.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    /// Keys of the sent prompts the harness's record ([`Record`]) shows it took, after where it stood when each was sent.
    pub confirmed: Vec<String>,
    /// Keys of the sent prompts the harness's hooks report taken while it worked on a turn, which it sends to its
    /// model once that turn is over: that turn still runs.
    pub queued: Vec<String>,
    /// Keys of the sent prompts the harness's hooks report taken behind a turn that then failed for good: the harness
    /// never sent them to its model.
    pub dropped: Vec<String>,
    /// Keys among `confirmed` the harness's record shows steered into a turn that ran (Copilot's events file): taken
    /// without the hook that confirms the others.
    pub steered: Vec<String>,
    /// The harness's record of what it took.
    pub record: Record,
    /// The live spawn's latest turn event, as its hooks said it.
    pub turn: Option<crate::harness::hooks::Turn>,
    /// The live spawn's latest permission request, as its hooks said it: what it asks whole (a rule matches all of
    /// it; what a person is shown is redacted by the decision).
    pub asked: Option<crate::harness::hooks::Asked>,
    /// Whether the conversation a resume would take exists in the harness's store (`None`: the profile names no
    /// store, or there is nothing to resume).
    pub conversation_found: Option<bool>,
    /// The id the harness shows for the conversation being discovered, once the executor found it.
    pub discovered: Option<String>,
    /// The conversation the live harness says it runs (its hooks' latest `SessionStart` of this spawn), when no other
    /// session of the node holds that id.
    pub hooked: Option<String>,
    /// The workspace's state.
    pub workspace: Workspace,
    /// Where its harness runs.
    pub room: Confinement,
    /// Another session (`namespace/name`) that holds this workdir while it discovers its conversation's id.
    pub discovering_here: Option<String>,
    /// Another WorkSession of this node (`namespace/name`) that holds the conversation `spec.harnessSessionId` names.
    pub id_taken_by: Option<String>,
    /// The spawn of this session's last plan failed, with this message (told by the executor once).
    pub spawn_failure: Option<String>,
    /// The branch the agent's checkout (`spec.workspace`) is on and its last commit, read while no harness runs.
    pub checkout: Option<(String, String)>,
    /// The harness's push token, as the executor last handed it out (`workspaces.push`).
    pub push: super::push::PushGrant,
    /// What its record says its model calls spent since the last count, if its profile states usage.
    pub usage: Option<super::UsageRead>,
    /// The node's other sessions on its credential (its harness) whose model's API refused a turn for a usage limit.
    pub limited: Vec<Limited>,
    /// When its credential's limit resets, as a key gateway relaying a refusal was last told.
    pub limit_reset: Option<Reset>,
    /// The budgets of its namespace ([`crate::api::WorkBudget`]), with what the namespace's sessions spent.
    pub budgets: Vec<NamespaceBudget>,
}

/// A budget of a session's namespace, and what the namespace's sessions spent as last summed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceBudget {
    /// The WorkBudget's name.
    pub name: String,
    /// Its limits.
    pub limit: crate::api::BudgetSpec,
    /// What the namespace's sessions spent; `None`: not summed yet.
    pub spent: Option<crate::api::WorkBudgetStatus>,
    /// When the WorkBudget was made.
    pub created: Option<Timestamp>,
}

/// When a credential's limit resets, as a key gateway relaying a refusal was told, and when it was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reset {
    /// When it resets.
    pub at: Timestamp,
    /// When the gateway relayed the refusal that said so.
    pub told: Timestamp,
}

/// A session whose status holds a usage limit its harness's record showed ([`crate::api::UsageLimit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limited {
    /// Its `namespace/name`.
    pub session: String,
    /// When its turn was refused.
    pub at: Timestamp,
    /// When its wake came, if it did.
    pub woke: Option<Timestamp>,
}
