//! The handoff: when a recorded conversation cannot be resumed and a fresh one takes over (`Resumed=False`), the new
//! conversation's first prompt carries what the agent already holds of the lost one (its id and why it was lost, the
//! prompts it had taken, the work item's branch and commit), ahead of that prompt, which follows unchanged. The spec
//! can turn it off or bound it; the status records what was handed over.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The handoff's default budget, in characters.
pub const HANDOFF_DEFAULT_CHARACTERS: u32 = 4000;

/// Settings of the handoff to a fresh conversation after a failed resume.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HandoffSpec {
    /// Hand over to a fresh conversation (default: on, unless the harness profile turns it off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The handoff's budget in characters: the lost conversation's oldest prompts are left out first (default 4000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 200, max = 8000))]
    pub max_characters: Option<u32>,
}

/// What was handed over to the conversation that took over from a lost one.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HandoffStatus {
    /// The conversation that could not be resumed.
    #[schemars(length(max = 256))]
    pub from: String,
    /// When the handoff was made.
    pub time: Time,
    /// The prompt that carries it (a WorkEvent's name, or `initialPrompt`); unset until one is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub prompt: Option<String>,
    /// That prompt's delivery tag (a WorkEvent's UID): a later event under the same name never carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub prompt_uid: Option<String>,
    /// The prompt that carried it was delivered: done.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delivered: bool,
    /// The text sent ahead of that prompt.
    #[schemars(length(max = 9000))]
    pub text: String,
}

/// The text of the prompt whose delivery tag is `tag` as sent: the handoff ahead of it when it is the prompt that
/// carries one not yet delivered.
pub fn carried<'t>(status: &super::WorkSessionStatus, tag: &str, text: &'t str) -> std::borrow::Cow<'t, str> {
    match &status.handoff {
        Some(h) if !h.delivered && h.prompt_uid.as_deref() == Some(tag) => format!("{}\n\n{text}", h.text).into(),
        _ => text.into(),
    }
}
