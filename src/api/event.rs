//! The `WorkEvent` kind: one event to deliver to a WorkSession as its next prompt, and its delivery's status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{PromptPhase, Via, is_zero};

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
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": EVENT_CARRIES_ONE_RULE, "message": "a WorkEvent carries a prompt or an answer, one of the two"}
]))]
pub struct WorkEventSpec {
    /// The WorkSession (same namespace) to deliver to.
    #[schemars(length(min = 1, max = 253))]
    pub session: String,
    /// The prompt text (none on an answer).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1048576))]
    pub prompt: String,
    /// An answer to the session's pending permission request (`status.approval`) instead of a prompt: `worksession
    /// approve` and `deny` make one, the bridge one from a GitHub comment `/approve <id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<super::Answer>,
    /// Where the event came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<EventSource>,
    /// Send the prompt as it is, so that the harness may take it as one of its own commands (`/compact`, `!make
    /// test`): pasted into its input box once it is ready, never on its command line. Only for WorkEvents made by
    /// hand: the bridge never sets it, and without it a prompt that starts with a command prefix of its harness gets
    /// `Prompt: ` in front, which the harness reads as text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub command: bool,
    /// Not delivered before this time: until then the event waits and others go first. The bridge sets it on a CI
    /// failure's prompt, so that the other checks of the same commit that fail within a short quiet window join the
    /// same prompt (it appends them to `prompt` while the time is ahead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Time>,
}

/// A WorkEvent's spec holds a prompt or an answer, never both and never neither (the CRD's rule; [`problem`] in
/// local mode).
pub const EVENT_CARRIES_ONE_RULE: &str = "has(self.answer) != (has(self.prompt) && size(self.prompt) > 0)";

impl WorkEventSpec {
    /// What is wrong with it as the CRD's schema would say it, if anything: the API server's checks for local mode.
    pub fn problem(&self) -> Option<String> {
        if self.session.is_empty() {
            return Some("spec.session is required".into());
        }
        if self.answer.is_some() != self.prompt.is_empty() {
            return Some("spec: a WorkEvent carries a prompt or an answer, one of the two".into());
        }
        let answer = self.answer.as_ref()?;
        if !regex::Regex::new(super::REQUEST_ID_PATTERN).unwrap().is_match(&answer.request) {
            return Some(format!(
                "spec.answer.request: {:?} is not a request id (12 hexadecimal digits)",
                answer.request
            ));
        }
        let long = |s: &Option<String>, max: usize| s.as_ref().is_some_and(|s| s.chars().count() > max);
        if long(&answer.reason, 1024) || long(&answer.by, 256) {
            return Some("spec.answer: reason is at most 1024 characters, by at most 256".into());
        }
        None
    }
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
    /// The repository (`owner/name`) of a GitHub event: where the bridge gives its feedback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// The issue or pull-request number of a GitHub event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u64>,
    /// The GitHub comment it was made from (an issue comment, or a pull-request review comment): what the bridge
    /// reacts to once it is `Delivered` (without one, the issue or pull request itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment_id: Option<u64>,
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
    pub phase: Option<PromptPhase>,
    /// When delivery was known: the harness's hooks reported it, its transcript showed it, or its pane outlived the
    /// settle window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<Time>,
    /// When it was sent to the pane it is `Delivering` to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_time: Option<Time>,
    /// How long the harness's record (its hook file with hooks, else its transcript) was when it was sent: only what
    /// the harness writes after that point confirms it (kept while its confirm deadline sends it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_offset: Option<u64>,
    /// How it reached the harness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
    /// The conversation it reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness_session_id: Option<String>,
    /// Sends to the harness that has it (one that died returns it with the count at zero: the next one gets it, and
    /// a second send at its confirm deadline).
    #[serde(default)]
    pub attempts: u32,
    /// Harnesses it was sent to that died before it was known delivered (at five it fails).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub returns: u32,
    /// Why it is where it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
