//! The API: `WorkSession`, `WorkEvent` and `WorkBudget` (`worksession.dev/v1alpha1`), the source of the generated
//! CRDs.
//!
//! Everything the CRD schema can express is expressed here (required fields, enums, the session id shape, ranges,
//! immutable fields); [`shapes`] holds the same rules as code, for local mode and for what reaches a command line
//! (see [`is_valid_session_id`]).

mod approval;
mod budget;
mod crd;
mod event;
mod handoff;
mod pull_request;
mod shapes;
mod usage;

use std::collections::BTreeMap;

pub use approval::{
    Answer, ApprovalRule, ApprovalSpec, ApprovalStatus, DEFAULT_WAIT_SECONDS, Decision, REQUEST_ID_PATTERN,
    RULE_PATTERN, answer_name, glob_matches,
};
pub use budget::{WorkBudget, WorkBudgetSpec, WorkBudgetStatus, spent, spent_in};
pub use crd::{KNOWN_FORMATS, crds, crds_yaml};
pub use event::{EventSource, SourceType, WorkEvent, WorkEventSpec, WorkEventStatus};
pub use handoff::{HANDOFF_DEFAULT_CHARACTERS, HandoffSpec, HandoffStatus, carried};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
pub use pull_request::{ChecksState, PullRequestState, PullRequestStatus};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
pub use shapes::*;
pub use usage::{
    ConversationUsage, CountedConversation, CountedReply, MAX_COUNT, MAX_MODELS, ModelUsage, OTHER_MODELS, Tokens,
    Usage, UsageLimit,
};

/// The API group.
pub const GROUP: &str = "worksession.dev";
/// Label on a WorkEvent naming its WorkSession.
pub const SESSION_LABEL: &str = "worksession.dev/session";
/// Label on a WorkEvent naming the node of its WorkSession.
pub const NODE_LABEL: &str = "worksession.dev/node";
/// Label on a WorkSession (and WorkEvent) the bridge created, naming the route that created it.
pub const ROUTE_LABEL: &str = "worksession.dev/route";

/// The annotation a person sets to ask for a move (`worksession move`): a node's name, or [`ANY_NODE`] for the
/// controller to choose one. The controller checks that the node fits (a live agent that serves the namespace and has
/// room), then writes [`MOVE_ANNOTATION`]; a request that fits nowhere stays, with `Placed=False NoNodeFits`.
pub const MOVE_REQUEST_ANNOTATION: &str = "worksession.dev/move-request";
/// The annotation by which the controller decides a move: the node. The session's agent stops its harness once no
/// prompt is being delivered, then records the node in `spec.nodeName` and takes the annotation away, in one patch.
pub const MOVE_ANNOTATION: &str = "worksession.dev/move-to";

/// When an archived WorkSession is deleted (RFC 3339): written by the bridge when its work item closes under a route
/// with `onClose: Delete`, removed when it reopens; the bridge deletes the session once the time has passed and it is
/// still archived.
pub const DELETE_AT_ANNOTATION: &str = "worksession.dev/delete-at";
/// The value of a WorkSession's label for each pull request its work item's branch carries (the label's key is
/// [`pull_request_label`]: `worksession.dev/pr-<hash of owner/name#number>`): the bridge writes it when it sees the
/// pull request, and finds the session by it for a comment in the pull request's conversation (whose payload does
/// not name the branch).
pub const LINKED: &str = "linked";
/// Label on a WorkSession the bridge made: whose repository's it is ([`repository_label`]), so that only that
/// repository's branch `worksession/<workItem>` is taken for its work item.
pub const REPOSITORY_LABEL: &str = "worksession.dev/repository";
/// Annotation on a WorkSession: its work item's pull request as GitHub last said ([`PullRequestStatus`] as JSON),
/// written by the bridge; the agent shows it as `status.pullRequest`.
pub const PULL_REQUEST_STATE_ANNOTATION: &str = "worksession.dev/pull-request-state";
/// Annotation on a WorkSession: the CI prompts the bridge sent since a person last prompted it (its bound is
/// `github.ci.maxPrompts`).
pub const CI_PROMPTS_ANNOTATION: &str = "worksession.dev/ci-prompts";
/// Annotation on a WorkSession: when GitHub says its work item last closed or reopened (RFC 3339), so that a late
/// delivery of an older change (a `closed` after a `reopened`) changes nothing.
pub const LIFECYCLE_AT_ANNOTATION: &str = "worksession.dev/lifecycle-at";
/// Label on a WorkSession whose status holds a usage limit (`status.usage.limit`), put and taken off by its agent:
/// the agents of the other nodes watch the sessions it marks, whose limits park their own sessions of the credential.
pub const USAGE_LIMITED_LABEL: &str = "worksession.dev/usage-limited";
/// The [`MOVE_REQUEST_ANNOTATION`] value that lets the controller choose the node.
pub const ANY_NODE: &str = "*";

/// Drops from an object what no reader of a cache needs: its managedFields and a client-side apply's copy of it
/// (`kubectl.kubernetes.io/last-applied-configuration`), which together can outweigh the rest of it.
pub fn slim<K: kube::ResourceExt>(obj: &mut K) {
    obj.managed_fields_mut().clear();
    obj.annotations_mut().remove("kubectl.kubernetes.io/last-applied-configuration");
}

/// `namespace/name`: an object as people name it, in tmux tags, and (for a WorkSession) in its tmux session's name.
pub fn identity(obj: &impl kube::ResourceExt) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

/// Desired state of one long-lived harness conversation about one work item.
#[allow(clippy::duplicated_attributes)] // printcolumn(...) repeats `type_ = "string"` by design
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "worksession.dev",
    version = "v1alpha1",
    kind = "WorkSession",
    namespaced,
    shortname = "ws",
    status = "WorkSessionStatus",
    doc = "One long-lived AI coding-agent conversation about one work item, hosted in tmux on one node.",
    selectable = ".spec.nodeName",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeName"),
    printcolumn(name = "Harness", type_ = "string", json_path = ".spec.harness"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Activity",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Activity\")].reason",
        description = "What the harness does, by its hooks: Working, WaitingForInput (for a person), Idle, TurnFailed or UsageLimited."
    ),
    printcolumn(name = "Resumed", type_ = "string", json_path = ".status.conditions[?(@.type==\"Resumed\")].status"),
    printcolumn(name = "Session id", type_ = "string", json_path = ".status.harnessSessionId"),
    printcolumn(
        name = "PR",
        type_ = "integer",
        json_path = ".status.pullRequest.number",
        description = "The work item's pull request."
    ),
    printcolumn(
        name = "CI",
        type_ = "string",
        json_path = ".status.pullRequest.checks",
        description = "What CI said of its head commit: Pending, Passing or Failing."
    ),
    printcolumn(
        name = "Tokens",
        type_ = "integer",
        json_path = ".status.usage.tokens",
        description = "Tokens its conversations spent, every kind together."
    ),
    printcolumn(
        name = "Cost",
        type_ = "string",
        json_path = ".status.usage.estimatedCost",
        description = "The estimated cost in US dollars by the agent config's prices; empty while a model has no price."
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(oldSelf.nodeName) || has(self.nodeName)", "message": "nodeName cannot be unset once placed"}
]))]
pub struct WorkSessionSpec {
    /// The work item's slug (a DNS label): its git branch is `worksession/<workItem>`. Immutable (a changed work item
    /// would leave its harness running while another resumes the same conversation).
    #[schemars(regex(pattern = WORK_ITEM_PATTERN), length(min = 1, max = 63))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "workItem is immutable"}]))]
    pub work_item: String,
    /// The node whose agent runs this session. Unset: `worksession controller` places it on a node with a Ready
    /// agent that has room (and matches `nodeSelector`) and records the node here, once, like a Pod's binding. A
    /// change is a move: the old node's agent stops its harness, the new node's resumes the conversation where the
    /// state is shared (the controller changes it when the node is lost, `worksession move` on request). Once set it
    /// cannot be unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub node_name: Option<String>,
    /// Labels a node must carry to be chosen by the placement (as a Pod's `nodeSelector`); ignored once placed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// What the controller does when the session's node is lost: `Move` (default) places it again on another node;
    /// `Wait` keeps it on the lost node until it returns.
    #[serde(default)]
    pub on_node_lost: NodeLostPolicy,
    /// A harness profile name: a built-in one (`claude`, `codex`, `copilot`, `cursor`, `gemini`, `opencode`) or one
    /// defined in the agent config.
    #[schemars(regex(pattern = HARNESS_PATTERN), length(min = 1, max = 63))]
    pub harness: String,
    /// Absolute path on the node where the harness runs (resume lookup is scoped to it); no `#`, which tmux would
    /// expand, and no `.` or `..` segment; immutable (with rooms, the directory is handed to this session's user).
    #[schemars(regex(pattern = r"^/[^#]*$"), length(min = 1, max = 4096))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self == oldSelf", "message": "workdir is immutable"},
        {"rule": shapes::WORKDIR_DOT_SEGMENT_RULE, "message": "workdir must not hold a '.' or '..' segment"}
    ]))]
    pub workdir: String,
    /// A conversation to adopt, used when status has recorded none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SESSION_ID_PATTERN))]
    pub harness_session_id: Option<String>,
    /// When a dead harness is respawned.
    #[serde(default)]
    pub restart_policy: RestartPolicy,
    /// Resume-on-respawn settings; unset fields take the agent config's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<ResumeSpec>,
    /// The handoff to a fresh conversation after a failed resume: its first prompt carries what the lost one had
    /// taken (on by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffSpec>,
    /// Stop the tmux session and keep it stopped; events wait.
    #[serde(default)]
    pub suspend: bool,
    /// Stop an idle harness and wake it on the next event; unset: the agent config's default (off unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleSpec>,
    /// The work item is closed (the bridge sets it when its issue or pull request closes, and clears it when it
    /// reopens): the harness is stopped once it has been quiet for the idle period, at most 60 seconds (with hooks,
    /// once its turn ended), and the session reads `Archived`, its conversation kept. A prompt still wakes it (and it
    /// is stopped again once quiet); cleared, the conversation is resumed at once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archived: bool,
    /// Boot prompt for a first spawn when no event is pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1048576))]
    pub initial_prompt: Option<String>,
    /// A git repository the agent prepares `workdir` from before the first spawn: one clone per repository per node
    /// (the agent's), and a checkout of its own per work item on its own branch (`worksession/<workItem>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceSpec>,
    /// Where the session's harness may connect beside what its node allows (with rooms and egress on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressSpec>,
    /// What the work item's conversations may spend (`status.usage`): once reached, the harness is stopped after its
    /// turn (the conversation kept) and prompts wait; raising or removing it resumes the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetSpec>,
    /// How the harness's permission requests are answered where no person has (a hook-backed harness that asks: Claude
    /// Code): how long one waits before it is denied, and rules that answer at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalSpec>,
}

/// A session's own way out, beside its node's and its namespace's lists (the agent config's `rooms.egress.hosts` and
/// `rooms.egress.namespaces`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EgressSpec {
    /// Hosts this session's harness may reach through its node's egress proxy: `host` (port 443), `host:port`,
    /// `*.domain[:port]` (any name below it); lowercase. Public addresses only: an address in the loopback, private,
    /// link-local or another non-public range, or a name that resolves only to such, is refused all the same (only
    /// the platform's lists open those); a public address is reached whoever it belongs to. Read at each
    /// connection: a change applies to the next. Read only where the agent takes sessions' hosts
    /// (`rooms.egress.sessionHosts`, off by default) and runs its egress proxy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = EGRESS_HOSTS_MAX), inner(regex(pattern = EGRESS_HOST_PATTERN), length(max = EGRESS_HOST_MAX)))]
    pub hosts: Vec<String>,
}

/// What a work item's conversations may spend: tokens, an estimated cost, or both (whichever is reached first).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BudgetSpec {
    /// Tokens of every kind together (`status.usage.tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub tokens: Option<u64>,
    /// US dollars (`status.usage.estimatedCost`), a decimal such as `"5"` or `"12.50"`. While the cost is unknown (a
    /// model without a price), a cost budget counts as reached: spending on is never a guess.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = BUDGET_COST_PATTERN))]
    pub cost: Option<String>,
}

/// Where a work item's checkout comes from.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceSpec {
    /// The repository (`https://`, `ssh://`, `git@host:path` or `file://`); credentials come from the agent's
    /// mounted files, never from the URL: no user info but an `ssh://` user name.
    #[schemars(regex(pattern = GIT_WORD_PATTERN), length(min = 1, max = 2048))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": URL_USER_INFO_RULE, "message": "url must not carry user info (a token or password): the agent reads credentials from files"},
        {"rule": URL_DOT_SEGMENT_RULE, "message": "url must not hold a '.' or '..' path segment"}
    ]))]
    pub url: String,
    /// The branch, tag or commit the work item's branch starts from; default: the repository's default branch.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = GIT_WORD_PATTERN), length(min = 1, max = 255))]
    pub r#ref: Option<String>,
}

/// What happens to a session whose node is lost.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum NodeLostPolicy {
    /// Placed again on another node: its conversation resumed where the state is shared, else a fresh one.
    #[default]
    Move,
    /// Left on its node until the node's agent returns.
    Wait,
}

/// When a dead harness is respawned.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Respawn only when an event is pending (or on first start).
    #[default]
    OnEvent,
    /// Respawn whenever dead, with back-off.
    Always,
    /// Start once; never respawn.
    Never,
}

/// Resume-on-respawn settings (`resumeOnRespawn`, `resumeProbeSeconds`, and the settle window).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ResumeSpec {
    /// Resume the recorded conversation on respawn (`resumeOnRespawn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Seconds to wait before checking that a respawned pane survived (`resumeProbeSeconds`, 0 = do not wait).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 300))]
    pub probe_seconds: Option<u32>,
    /// Seconds after a resume during which a pane death counts as a failed resume (`PaneDiedAfterProbe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub settle_seconds: Option<u32>,
}

/// Idle suspension: a harness that has printed nothing, with no prompt waiting or being delivered, for
/// `suspendAfterSeconds` is stopped (phase `Idle`); the next prompt resumes its conversation.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct IdleSpec {
    /// Seconds of quiet before the harness is stopped; 0 turns idle suspension off for this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 31536000))]
    pub suspend_after_seconds: Option<u32>,
}

/// Observed state of a WorkSession.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkSessionStatus {
    /// Where the session is in its life cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The tmux session hosting the harness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmux_session: Option<String>,
    /// The recorded conversation: kept on a resumed respawn, replaced by a new uuid on a fresh one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness_session_id: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions: `Ready` (whether the harness runs and takes prompts), `Resumed` (whether the last spawn resumed
    /// the recorded conversation), `ConversationId` (whether a harness that shows its id after the start has shown
    /// it), `Confined` (whether it runs in a room of its own), `WorkspaceReady` (whether the checkout is prepared),
    /// `Activity` (what a hook-backed harness says it does: working, waiting for a person, idle), `Placed` (whether
    /// the controller placed it on a node, or why not) and `NodeLost` (whether its node is lost); their reasons are
    /// in the status reference (docs/api.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The last completed respawn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_respawn: Option<Respawn>,
    /// Respawns so far.
    #[serde(default)]
    pub respawn_count: u32,
    /// Consecutive failures (spawns that died quickly); reset after 10 minutes healthy.
    #[serde(default)]
    pub failure_count: u32,
    /// When the last failure happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_time: Option<Time>,
    /// Not before this time is the session respawned again (back-off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry_time: Option<Time>,
    /// A spawn whose survival is being verified; kept in status so an agent restart finishes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<Verification>,
    /// When the fresh conversation whose id the harness has yet to show (it shows it after the start, as Codex CLI
    /// does) was spawned: only what its store holds from then on may be its. Unset once the id is found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovering_since: Option<Time>,
    /// A recorded conversation that the harness said it cannot find: the next spawn is fresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unresumable_session_id: Option<String>,
    /// Why `unresumableSessionId` cannot be resumed, quoting what the harness printed: the fresh conversation that
    /// takes over says it in its `Resumed` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unresumable_message: Option<String>,
    /// The lost node the controller placed this session away from, last (written by `worksession controller`): a
    /// first spawn here whose resume finds no conversation says the node was lost, since the conversation stayed
    /// there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_from: Option<MovedFrom>,
    /// The conversations this session ran before the recorded one, newest first (at most ten): the way back after the
    /// harness moved to a new conversation (its `/clear`, its compaction) or a fallback started one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub previous_session_ids: Vec<String>,
    /// The delivery of `spec.initialPrompt`, tracked like a WorkEvent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_prompt: Option<PromptStatus>,
    /// When the harness was stopped for being idle (phase `Idle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<Time>,
    /// When a prompt (a WorkEvent or `spec.initialPrompt`) last became `Delivered`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_prompt_time: Option<Time>,
    /// The work item's pull request (its branch `worksession/<workItem>`), as the bridge last heard from GitHub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<PullRequestStatus>,
    /// What the latest fresh conversation after a failed resume was told of the lost one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffStatus>,
    /// What the work item's conversations spent, read from the harness's own record (where its profile says how).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The harness's latest permission request (its `PermissionRequest` hook), and its answer once given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalStatus>,
}

/// The delivery of a prompt that is not a WorkEvent (`spec.initialPrompt`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PromptStatus {
    /// `Pending`, `Delivering` (sent, not yet known delivered), `Delivered`, or `Failed`.
    pub phase: Option<PromptPhase>,
    /// When it was sent to the pane it is `Delivering` to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_time: Option<Time>,
    /// How long the harness's record (its hook file with hooks, else its transcript) was when it was sent: only what
    /// the harness writes after that point confirms it (kept while its confirm deadline sends it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_offset: Option<u64>,
    /// When it was known delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<Time>,
    /// Sends to the harness that has it (one that died returns it with the count at zero: the next one gets it, and
    /// a second send at its confirm deadline).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
    /// Harnesses it was sent to that died before it was known delivered (at five it fails).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub returns: u32,
    /// How it was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
    /// The conversation it reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness_session_id: Option<String>,
    /// Why it is where it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

crate::words::words! {
    /// Where a WorkSession is in its life cycle.
    #[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
    pub enum Phase {
        /// Not running; waiting for an event (or nothing spawned yet).
        Pending,
        /// The workspace (`spec.workspace`) is being prepared; see the `WorkspaceReady` condition.
        Preparing,
        /// A spawn is about to run.
        Starting,
        /// Spawned; waiting out the probe to verify it survived.
        Verifying,
        /// The harness is alive.
        Running,
        /// Stopped on request (`spec.suspend`).
        Suspended,
        /// Stopped after `spec.idle.suspendAfterSeconds` of quiet; the next prompt resumes it.
        Idle,
        /// Stopped because its work item is closed (`spec.archived`), its conversation kept; the next prompt, or the
        /// work item reopening, resumes it.
        Archived,
        /// Stopped after its turn because it reached its budget (`spec.budget`) or its namespace's sessions together
        /// reached a `WorkBudget`, its conversation kept; prompts wait until the budget is raised or removed.
        Paused,
        /// Not running while a usage limit parks it (`Ready=False UsageLimited`; a live harness stays `Running`):
        /// nothing starts until `status.usage.limit.wakeTime`, then the refused prompt is sent again once.
        Parked,
        /// Failing repeatedly; waiting until `nextRetryTime`.
        BackOff,
        /// Cannot run as specified; see the `Ready` condition.
        Failed,
    }
}

/// One completed respawn.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Respawn {
    /// When the respawned pane was verified.
    pub time: Time,
    /// Whether the recorded conversation was resumed.
    pub resumed: bool,
    /// The `Resumed` condition's reason.
    pub reason: String,
    /// The conversation it runs.
    pub harness_session_id: String,
    /// The WorkEvent that was its boot prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
}

/// A move away from a lost node.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MovedFrom {
    /// The lost node.
    pub node: String,
    /// When the controller placed the session again.
    pub time: Time,
    /// Why the node was lost and where the session went, in words.
    pub message: String,
}

/// A spawn in flight.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    /// When the spawn ran.
    pub started: Time,
    /// When to check that the pane survived.
    pub deadline: Time,
    /// Whether this spawn resumes the recorded conversation.
    pub resume: bool,
    /// The conversation it runs.
    pub harness_session_id: String,
    /// The WorkEvent that is its boot prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Why a fresh spawn is fresh (the `Resumed` reason), and what the failed resume printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_reason: Option<String>,
    /// The message for the `Resumed` condition of a fresh spawn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_message: Option<String>,
    /// `spec.initialPrompt` is its boot prompt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub initial_prompt: bool,
    /// The tag this spawn gives its tmux session: an observation that does not show it means the spawn never ran
    /// (the agent stopped between recording this intent and spawning), so it is run again as it was.
    #[serde(default)]
    pub spawn: String,
}

crate::words::words! {
    /// Where a WorkEvent's delivery is.
    #[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
    pub enum PromptPhase {
        /// Waiting to be delivered.
        Pending,
        /// Sent to a harness, not yet known to have reached a conversation that lives on.
        Delivering,
        /// Known to have reached the conversation (the harness's hooks reported it, its transcript shows it, or its
        /// pane outlived the settle window); never taken back.
        Delivered,
        /// Cannot be delivered; see `message`.
        Failed,
    }
}

crate::words::words! {
    /// How an event reached the harness.
    #[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
    pub enum Via {
        /// Pasted into a live pane.
        Pasted,
        /// Boot prompt of a respawn that resumed the conversation.
        Resumed,
        /// Boot prompt of a fresh conversation.
        Fresh,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache keeps an object's spec, status, labels and other annotations, not its bookkeeping.
    #[test]
    fn a_slim_object_keeps_all_but_its_managed_fields_and_last_applied_copy() {
        use kube::ResourceExt;
        let mut ws: WorkSession = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "labels": {"l": "1"}, "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{}", MOVE_ANNOTATION: "node-b"},
                "managedFields": [{"manager": "worksession-agent", "operation": "Apply"}]},
            "spec": {"workItem": "a", "harness": "claude", "workdir": "/w"},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        let before = ws.clone();
        slim(&mut ws);
        assert!(ws.metadata.managed_fields.as_ref().is_none_or(Vec::is_empty));
        assert_eq!(ws.annotations().keys().collect::<Vec<_>>(), [MOVE_ANNOTATION]);
        assert_eq!((&ws.spec, &ws.status, ws.labels()), (&before.spec, &before.status, before.labels()));
    }
}
