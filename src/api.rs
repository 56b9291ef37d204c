//! The API: `WorkSession` and `WorkEvent` (`worksession.dev/v1alpha1`), the source of the generated CRDs.
//!
//! Everything the CRD schema can express is expressed here (required fields, enums, the session id shape, ranges);
//! the agent re-checks what reaches a command line (see [`is_valid_session_id`]).

use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group.
pub const GROUP: &str = "worksession.dev";
/// Label on a WorkEvent naming its WorkSession.
pub const SESSION_LABEL: &str = "worksession.dev/session";
/// Label on a WorkEvent naming the node of its WorkSession.
pub const NODE_LABEL: &str = "worksession.dev/node";

/// The value of [`NODE_LABEL`] for `node`: its [`slug`] (a node name may be longer than a label value). Two nodes
/// whose names differ only in punctuation share a value; each agent still reconciles only its own node's sessions.
pub fn node_label_value(node: &str) -> String {
    slug(node)
}

/// `raw` as a DNS label: lowercase letters, digits and `-`. A slug over 63 characters keeps its first 54 and a
/// hash of the whole, so two long names that share a beginning never become one session.
pub fn slug(raw: &str) -> String {
    let s: String = raw.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let s = s.trim_matches('-');
    if s.len() <= 63 {
        return s.to_string();
    }
    use sha2::Digest;
    let digest = hex::encode(sha2::Sha256::digest(raw.as_bytes()));
    format!("{}-{}", s[..54].trim_end_matches('-'), &digest[..8])
}

/// The shape of a harness session id: a leading alphanumeric, so an id can never be taken as a flag.
pub const SESSION_ID_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$";
/// The shape of a work item: a DNS label.
pub const WORK_ITEM_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

static SESSION_ID: LazyLock<Regex> = LazyLock::new(|| Regex::new(SESSION_ID_PATTERN).unwrap());

/// Whether `id` has the shape of a harness session id (the seed's check, applied before an id becomes argv).
pub fn is_valid_session_id(id: &str) -> bool {
    SESSION_ID.is_match(id)
}

static WORK_ITEM: LazyLock<Regex> = LazyLock::new(|| Regex::new(WORK_ITEM_PATTERN).unwrap());
static HARNESS_NAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(HARNESS_PATTERN).unwrap());

/// The shape of `spec.workspace.url` and `ref`: no leading `-` (never taken as a flag by git), no whitespace or
/// control characters.
pub const GIT_WORD_PATTERN: &str = r"^[^-\s][^\s]*$";
static GIT_WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(GIT_WORD_PATTERN).unwrap());
static PASSWORD_IN_URL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@]*:[^/@]*@").unwrap());

/// The shape of a harness profile name.
pub const HARNESS_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._-]*$";

/// A spec field that breaks what the CRD schema says (for objects that did not pass a schema: local mode).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("spec.{field}: {problem}")]
pub struct SpecError {
    /// The field, for example `workItem`.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

/// Checks a WorkSession spec the way its CRD schema does, except `harnessSessionId`: a malformed id is not an
/// invalid session but a row of the resume decision table (a fresh conversation, reported as `InvalidSessionId`).
pub fn validate_spec(spec: &WorkSessionSpec) -> Result<(), SpecError> {
    let err = |field, problem: String| Err(SpecError { field, problem });
    if spec.work_item.len() > 63 || !WORK_ITEM.is_match(&spec.work_item) {
        return err(
            "workItem",
            format!("{:?} must be a DNS label (lowercase letters, digits, '-'; at most 63)", spec.work_item),
        );
    }
    if spec.node_name.is_empty() || spec.node_name.len() > 253 {
        return err("nodeName", "must be 1 to 253 characters".into());
    }
    if spec.harness.len() > 63 || !HARNESS_NAME.is_match(&spec.harness) {
        return err("harness", format!("{:?} must match {HARNESS_PATTERN} (at most 63)", spec.harness));
    }
    if !spec.workdir.starts_with('/') || spec.workdir.len() > 4096 || spec.workdir.contains('\0') {
        return err("workdir", format!("{:?} must be an absolute path", spec.workdir));
    }
    if spec.workdir.contains('#') {
        // tmux expands formats, `#(command)` included, in a new session's start directory.
        return err("workdir", format!("{:?} must not contain '#' (tmux would expand it)", spec.workdir));
    }
    if let Some(w) = &spec.workspace {
        if w.url.len() > 2048 || !GIT_WORD.is_match(&w.url) {
            return err("workspace.url", "must not start with '-' or contain whitespace (at most 2048)".into());
        }
        if PASSWORD_IN_URL.is_match(&w.url) {
            return err("workspace.url", "must not carry a password: the agent reads credentials from files".into());
        }
        if w.r#ref.as_ref().is_some_and(|r| r.len() > 255 || !GIT_WORD.is_match(r)) {
            return err("workspace.ref", "must not start with '-' or contain whitespace (at most 255)".into());
        }
    }
    if let Some(r) = &spec.resume {
        if r.probe_seconds.is_some_and(|s| s > 300) {
            return err("resume.probeSeconds", "must be between 0 and 300".into());
        }
        if r.settle_seconds.is_some_and(|s| s > 3600) {
            return err("resume.settleSeconds", "must be between 0 and 3600".into());
        }
    }
    Ok(())
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
    printcolumn(name = "Resumed", type_ = "string", json_path = ".status.conditions[?(@.type==\"Resumed\")].status"),
    printcolumn(name = "Session id", type_ = "string", json_path = ".status.harnessSessionId"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct WorkSessionSpec {
    /// The work item's slug (a DNS label); the tmux session is `<prefix><workItem>`.
    #[schemars(regex(pattern = WORK_ITEM_PATTERN), length(min = 1, max = 63))]
    pub work_item: String,
    /// The node whose agent owns this session; immutable (moving a session would leave its harness running on the
    /// old node while the new one resumes the same conversation).
    #[schemars(length(min = 1, max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "nodeName is immutable"}]))]
    pub node_name: String,
    /// A harness profile name: `claude`, `cursor`, or one defined in the agent config.
    #[schemars(regex(pattern = HARNESS_PATTERN), length(min = 1, max = 63))]
    pub harness: String,
    /// Absolute path on the node where the harness runs (resume lookup is scoped to it); no `#`, which tmux would
    /// expand.
    #[schemars(regex(pattern = r"^/[^#]*$"), length(min = 1, max = 4096))]
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
    /// Stop the tmux session and keep it stopped; events wait.
    #[serde(default)]
    pub suspend: bool,
    /// Stop an idle harness and wake it on the next event; unset: the agent config's default (off unless set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleSpec>,
    /// Boot prompt for a first spawn when no event is pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1048576))]
    pub initial_prompt: Option<String>,
    /// A git repository the agent prepares `workdir` from before the first spawn: one clone per repository per node,
    /// and one worktree per work item on its own branch (`worksession/<workItem>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceSpec>,
}

/// Where a work item's checkout comes from.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceSpec {
    /// The repository (`https://`, `ssh://`, `git@host:path` or `file://`); credentials come from the agent's
    /// mounted files, never from the URL.
    #[schemars(regex(pattern = GIT_WORD_PATTERN), length(min = 1, max = 2048))]
    pub url: String,
    /// The branch, tag or commit the work item's branch starts from; default: the repository's default branch.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = GIT_WORD_PATTERN), length(min = 1, max = 255))]
    pub r#ref: Option<String>,
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

/// Resume-on-respawn settings (the seed's `resumeOnRespawn`, `resumeProbeSeconds`, and the settle window).
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
    /// `Ready` and `Resumed` conditions.
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
    /// A recorded conversation that the harness said it cannot find: the next spawn is fresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unresumable_session_id: Option<String>,
    /// The delivery of `spec.initialPrompt`, tracked like a WorkEvent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_prompt: Option<PromptStatus>,
    /// When the harness was stopped for being idle (phase `Idle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<Time>,
}

/// The delivery of a prompt that is not a WorkEvent (`spec.initialPrompt`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PromptStatus {
    /// `Pending`, `Delivering` (sent, not yet known delivered), `Delivered`, or `Failed`.
    pub phase: Option<EventPhase>,
    /// When it was sent to the pane it is `Delivering` to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_time: Option<Time>,
    /// When it was known delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<Time>,
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
    /// Failing repeatedly; waiting until `nextRetryTime`.
    BackOff,
    /// Cannot run as specified; see the `Ready` condition.
    Failed,
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

/// One event to deliver to a WorkSession as its next prompt.
#[allow(clippy::duplicated_attributes)] // printcolumn(...) repeats `type_ = "string"` by design
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "worksession.dev",
    version = "v1alpha1",
    kind = "WorkEvent",
    namespaced,
    shortname = "wev",
    status = "WorkEventStatus",
    doc = "One event to deliver to a WorkSession as its next prompt.",
    selectable = ".spec.session",
    printcolumn(name = "Session", type_ = "string", json_path = ".spec.session"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Via", type_ = "string", json_path = ".status.via"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct WorkEventSpec {
    /// The WorkSession (same namespace) to deliver to.
    #[schemars(length(min = 1, max = 253))]
    pub session: String,
    /// The prompt text.
    #[schemars(length(min = 1, max = 1048576))]
    pub prompt: String,
    /// Where the event came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<EventSource>,
}

/// Where an event came from.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EventSource {
    /// The kind of sender.
    #[serde(rename = "type")]
    pub type_: SourceType,
    /// The sender's delivery id (`X-GitHub-Delivery`, or the generic `deliveryId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
    /// The sender's event type (for GitHub, `X-GitHub-Event`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// The event's action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// A link to what the event is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// The kind of sender of an event.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SourceType {
    /// A GitHub webhook.
    Github,
    /// The generic webhook.
    Generic,
    /// Created by hand.
    #[default]
    Manual,
}

/// Delivery state of a WorkEvent.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkEventStatus {
    /// Where the delivery is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<EventPhase>,
    /// When delivery was known: the harness's transcript showed the prompt, or its pane outlived the settle window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<Time>,
    /// When it was sent to the pane it is `Delivering` to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_time: Option<Time>,
    /// How it reached the harness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
    /// The conversation it reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness_session_id: Option<String>,
    /// Delivery attempts so far.
    #[serde(default)]
    pub attempts: u32,
    /// Why it is where it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where a WorkEvent's delivery is.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum EventPhase {
    /// Waiting to be delivered.
    Pending,
    /// Sent to a harness, not yet known to have reached a conversation that lives on.
    Delivering,
    /// Known to have reached the conversation (the transcript shows it, or its pane outlived the settle window);
    /// never taken back.
    Delivered,
    /// Cannot be delivered; see `message`.
    Failed,
}

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

/// The `format`s the API server knows in a CRD schema; any other is dropped from the generated CRDs (the API server
/// would warn `unrecognized format` on every apply). The bounds beside them (`minimum: 0` for unsigned integers)
/// keep their meaning.
pub const KNOWN_FORMATS: &[&str] = &[
    "int32",
    "int64",
    "float",
    "double",
    "byte",
    "binary",
    "date",
    "date-time",
    "duration",
    "password",
    "uuid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
];

/// The CRDs of this API, in the order `worksession crd` prints them.
pub fn crds() -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> {
    use kube::CustomResourceExt;
    fn drop_unknown_formats(node: &mut serde_json::Value) {
        match node {
            serde_json::Value::Object(map) => {
                if map.get("format").and_then(|f| f.as_str()).is_some_and(|f| !KNOWN_FORMATS.contains(&f)) {
                    map.remove("format");
                }
                map.values_mut().for_each(drop_unknown_formats);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(drop_unknown_formats),
            _ => {}
        }
    }
    [WorkSession::crd(), WorkEvent::crd()]
        .into_iter()
        .map(|crd| {
            let mut value = serde_json::to_value(crd).expect("a CRD serializes");
            drop_unknown_formats(&mut value);
            serde_json::from_value(value).expect("a CRD without some formats is still a CRD")
        })
        .collect()
}

/// The CRDs as multi-document YAML: what `worksession crd` prints and `crds/` holds.
pub fn crds_yaml() -> String {
    crds().iter().map(|crd| serde_yaml_ng::to_string(crd).expect("a CRD serializes")).collect::<Vec<_>>().join("---\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_id_shape_is_the_seeds() {
        for ok in ["a", "0b3c", "550e8400-e29b-41d4-a716-446655440000", "A.b_c-d", &"x".repeat(128)] {
            assert!(is_valid_session_id(ok), "{ok}");
        }
        for bad in ["", "-x", "--dangerously-skip-permissions", ".x", "_x", "a b", "a;b", "a\n", &"x".repeat(129)] {
            assert!(!is_valid_session_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_workdir_holding_a_tmux_format_is_refused() {
        let spec = |workdir: &str| WorkSessionSpec {
            work_item: "w".into(),
            node_name: "n".into(),
            harness: "claude".into(),
            workdir: workdir.into(),
            ..Default::default()
        };
        let e = validate_spec(&spec("/tmp/x/#(touch /tmp/pwned)")).unwrap_err();
        assert_eq!(e.field, "workdir");
        assert!(validate_spec(&spec("/srv/work/repo-1.x")).is_ok());
    }

    #[test]
    fn crds_carry_only_formats_the_api_server_knows() {
        let yaml = crds_yaml();
        let formats: Vec<&str> = yaml.lines().filter_map(|l| l.trim().strip_prefix("format: ")).collect();
        assert!(!formats.is_empty(), "some formats stay (date-time, int64)");
        for format in formats {
            assert!(KNOWN_FORMATS.contains(&format), "format {format} would warn on every apply");
        }
        assert!(yaml.contains("minimum: 0"), "the bounds of unsigned fields stay");
    }

    #[test]
    fn crd_yaml_has_both_kinds_and_the_selectable_fields() {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let yaml = crds_yaml();
        let docs: Vec<CustomResourceDefinition> =
            yaml.split("\n---\n").map(|doc| serde_yaml_ng::from_str(doc).expect("each document is a CRD")).collect();
        let selectable = |name: &str| -> Vec<String> {
            let crd = docs.iter().find(|c| c.metadata.name.as_deref() == Some(name)).expect(name);
            let fields = crd.spec.versions[0].selectable_fields.clone().unwrap_or_default();
            fields.into_iter().map(|f| f.json_path).collect()
        };
        assert_eq!(docs.len(), 2);
        // The agent's field selectors need these; a printer column with the same path must not satisfy this test.
        assert_eq!(selectable("worksessions.worksession.dev"), [".spec.nodeName"]);
        assert_eq!(selectable("workevents.worksession.dev"), [".spec.session"]);
    }
}
