//! What a session's conversations have spent, as `status.usage`: the tokens of each kind per model and the turns, read
//! by the agent from the harness's own record, summed over every conversation the work item had, with the estimated
//! cost the agent config's prices give.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Models kept apart in `status.usage.models`; the rest count as [`OTHER_MODELS`].
pub const MAX_MODELS: usize = 32;
/// The model the rest count as.
pub const OTHER_MODELS: &str = "other";

/// The largest count kept (2^53 - 1): what every JSON reader takes as an exact integer, and far beyond any spend.
pub const MAX_COUNT: u64 = (1 << 53) - 1;

/// Tokens by kind, as the model's API bills them. `input` is the input read at the full price: the cached input read
/// back and the input written to the cache are counted apart, whichever way the harness's record lumps them.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Tokens {
    /// Input tokens at the full price (neither read from nor written to the cache).
    #[serde(default)]
    pub input: u64,
    /// Output tokens (with reasoning, where the model reports it apart).
    #[serde(default)]
    pub output: u64,
    /// Input tokens written to the cache.
    #[serde(default)]
    pub cache_write: u64,
    /// Input tokens read from the cache.
    #[serde(default)]
    pub cache_read: u64,
}

impl Tokens {
    /// Every kind together, at most [`MAX_COUNT`].
    pub fn total(&self) -> u64 {
        let sum =
            self.input.saturating_add(self.output).saturating_add(self.cache_write).saturating_add(self.cache_read);
        sum.min(MAX_COUNT)
    }

    /// These and `other`, kind by kind, each at most [`MAX_COUNT`].
    pub fn plus(self, other: Tokens) -> Tokens {
        let add = |a: u64, b: u64| a.saturating_add(b).min(MAX_COUNT);
        Tokens {
            input: add(self.input, other.input),
            output: add(self.output, other.output),
            cache_write: add(self.cache_write, other.cache_write),
            cache_read: add(self.cache_read, other.cache_read),
        }
    }

    /// These, each kind at most `limit`.
    pub fn at_most(self, limit: u64) -> Tokens {
        Tokens {
            input: self.input.min(limit),
            output: self.output.min(limit),
            cache_write: self.cache_write.min(limit),
            cache_read: self.cache_read.min(limit),
        }
    }

    /// What these have over `earlier`, kind by kind (a record that restates a reply's usage, grown).
    pub fn minus(self, earlier: Tokens) -> Tokens {
        Tokens {
            input: self.input.saturating_sub(earlier.input),
            output: self.output.saturating_sub(earlier.output),
            cache_write: self.cache_write.saturating_sub(earlier.cache_write),
            cache_read: self.cache_read.saturating_sub(earlier.cache_read),
        }
    }
}

/// One model's share.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ModelUsage {
    /// The model, as the harness's record names it.
    #[schemars(length(max = 128))]
    pub model: String,
    /// Its tokens.
    #[serde(flatten)]
    pub tokens: Tokens,
    /// The replies it gave (model calls that reported usage).
    #[serde(default)]
    pub replies: u64,
}

/// What the work item's conversations spent (`status.usage`): every conversation it had, kept across respawns,
/// resumes, fresh fallbacks and moves; the current conversation's share in `conversation`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Every kind of token of every model together (what `kubectl get` shows).
    #[serde(default)]
    pub tokens: u64,
    /// Turns ended (a prompt answered to its end).
    #[serde(default)]
    pub turns: u64,
    /// When the last turn ended, as the harness's record says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_turn_time: Option<Time>,
    /// By model, in the order first seen (at most 32; beyond that the rest counts as model `other`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 33))]
    pub models: Vec<ModelUsage>,
    /// The estimated cost in US dollars by the agent config's prices (`prices`), as a decimal; absent while a model
    /// that spent tokens has no price (`unpricedModels`): an unknown cost is never shown as zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_cost: Option<String>,
    /// The models that spent tokens and have no price.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 33), inner(length(max = 128)))]
    pub unpriced_models: Vec<String>,
    /// The current conversation's share, and how far its record was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationUsage>,
    /// The model's API refused the current conversation's last turn for a usage or rate limit (HTTP 429), as its
    /// record says, and no reply came since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<UsageLimit>,
    /// How far the records of the conversations it ran before were read, newest first (at most ten): a return to one
    /// reads on from there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub earlier: Vec<CountedConversation>,
}

/// A usage or rate limit the record shows.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UsageLimit {
    /// When, as the record says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// What it said.
    #[schemars(length(max = 300))]
    pub message: String,
    /// Until when the session is parked: its refused prompts, back in `Pending`, are sent again then, once (the
    /// refusal's time and `delivery.usageLimitWaitSeconds`, spread among its namespace's sessions of its harness).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_time: Option<Time>,
    /// The wake came: the refused prompt went back to `Pending`, to be sent again once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub woken: bool,
}

/// How far a conversation's record was read.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CountedConversation {
    /// The conversation.
    pub harness_session_id: String,
    /// How many bytes of its record were counted.
    #[serde(default)]
    pub read_offset: u64,
}

/// The current conversation's share of [`Usage`], and where the agent stands in its record.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ConversationUsage {
    /// The conversation (the harness's session id).
    pub harness_session_id: String,
    /// Its tokens, every model together.
    #[serde(flatten)]
    pub tokens: Tokens,
    /// Its turns ended.
    #[serde(default)]
    pub turns: u64,
    /// How many bytes of its record were counted: the next read starts there.
    #[serde(default)]
    pub read_offset: u64,
    /// The last reply counted, when the record may restate it with more tokens (Claude Code writes a reply's usage on
    /// each of its lines): its id and what was counted of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reply: Option<CountedReply>,
}

/// A reply counted, whose record may restate it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CountedReply {
    /// Its id in the record.
    #[schemars(length(max = 128))]
    pub id: String,
    /// Its model.
    #[schemars(length(max = 128))]
    pub model: String,
    /// What was counted of it.
    #[serde(flatten)]
    pub tokens: Tokens,
    /// Whether its turn's end was counted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ended_turn: bool,
}
