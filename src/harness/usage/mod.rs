//! Where a harness's own record states what its model calls spent, and how to read it: each reply's tokens by kind and
//! model, and each turn's end. Pure: the agent reads the bytes (`agent::usage`), this turns them into a [`Tally`], the
//! core adds the tally to `status.usage`.
//!
//! Measured with each CLI against a scripted model: Claude Code 2.1.332 writes each reply's final `message.usage` and
//! `stop_reason` on its line of the transcript (a reply of several content blocks may take a line each under one
//! `message.id`, as earlier versions wrote them: counted once); Codex 0.171.0 a `token_usage_record` per model call
//! after a `turn_context` naming the model; Copilot CLI 1.0.102 a `session.usage_record` event per call. Not read:
//! Gemini CLI 0.61.0 (a `tokens` object on each `gemini` message, restated under the same id, in a chat file named
//! by the id's first eight characters, which no path template can name yet) and opencode (SQLite only). A turn the
//! model's API refused with a 429 (a usage or rate limit) is each one's own line: Claude Code's `<synthetic>` reply,
//! Codex's `task_complete` with an `error`, Copilot's `session.error`.

use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

use crate::api::{CountedReply, Tokens};

/// How a harness's record states usage (a profile's `usage.format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsageFormat {
    /// Claude Code's transcript.
    Claude,
    /// Codex's rollout.
    Codex,
    /// Copilot CLI's events file.
    Copilot,
}

impl UsageFormat {
    /// Every format, by its name in a profile.
    pub const ALL: [(&'static str, UsageFormat); 3] =
        [("claude", UsageFormat::Claude), ("codex", UsageFormat::Codex), ("copilot", UsageFormat::Copilot)];

    /// Words of which every line that states usage or a turn's end holds one: a line with none is skipped unparsed.
    fn markers(self) -> &'static [&'static str] {
        match self {
            UsageFormat::Claude => &["\"assistant\""],
            UsageFormat::Codex => &["\"turn_context\"", "\"token_usage_record\"", "\"task_complete\""],
            UsageFormat::Copilot => &["\"session.usage_record\"", "\"assistant.message\"", "\"session.error\""],
        }
    }
}

/// Where a profile's harness records usage (`usage` in a profile).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageRecord {
    /// How.
    pub format: UsageFormat,
    /// The record's path template (`{home}`, `{cwdSlug}`, `{sessionId}`, and `*` for a folder or a name's part the
    /// harness chooses); `None`: the profile's `conversationPath`.
    pub path: Option<String>,
}

/// The most tokens of one kind a single reply is taken to have spent (a record stating more is cut to it).
pub const MAX_REPLY_TOKENS: u64 = 100_000_000;
/// The longest model name or reply id kept.
pub const MAX_NAME: usize = 128;

/// Whether `name` has a model's shape: 1 to [`MAX_NAME`] letters, digits and `.`, `_`, `:`, `@`, `/`, `+`, `-` (a
/// name reaches statuses, Events and the messages of every session of a namespace: no space, no invisible or
/// reordering character that would make it read as something else).
fn is_model_name(name: &str) -> bool {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._:@/+-".contains(c);
    !name.is_empty() && name.len() <= MAX_NAME && name.chars().all(allowed)
}

/// `id`, at most [`MAX_NAME`] bytes of it.
fn bounded(id: &str) -> String {
    let mut end = id.len().min(MAX_NAME);
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    id[..end].to_string()
}

/// The model a call is counted under when the record does not say.
pub const UNKNOWN_MODEL: &str = "unknown";

/// What a stretch of the record said, added up.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Tokens and replies by model, in the order first seen.
    pub models: Vec<(String, Tokens, u64)>,
    /// Turns that ended.
    pub turns: u64,
    /// When the last of them ended.
    pub last_turn_end: Option<Timestamp>,
    /// The last reply counted, which the record may state again with more tokens; the model later replies use
    /// (Codex names it once per turn).
    pub last_reply: Option<CountedReply>,
    /// Whether the model's API refused a turn for a usage or rate limit (HTTP 429) after the last reply read, or a
    /// reply came after such a refusal; `None`: neither was read.
    pub limit: Option<Limit>,
}

/// What the record last said of a usage or rate limit.
#[derive(Clone, Debug, PartialEq)]
pub enum Limit {
    /// The API refused a turn (429), at this time, with these words.
    Reached { at: Option<Timestamp>, message: String },
    /// A reply came after: the limit is behind.
    Behind,
}

impl Tally {
    /// A tally that goes on from the last reply counted before.
    pub fn after(last_reply: Option<CountedReply>) -> Self {
        Tally { last_reply, ..Tally::default() }
    }

    /// Adds what one line of the record says.
    pub fn line(&mut self, format: UsageFormat, line: &str) {
        if !format.markers().iter().any(|m| line.contains(m)) {
            return;
        }
        match format {
            UsageFormat::Claude => self.claude(line),
            UsageFormat::Codex => self.codex(line),
            UsageFormat::Copilot => self.copilot(line),
        }
    }

    fn add(&mut self, model: &str, tokens: Tokens, reply: bool) {
        // What a harness wrote is bounded before it reaches a status: a name of a model's shape, the models kept
        // apart as many as the status keeps, each reply's count within what a model can take.
        let model = if is_model_name(model) { model } else { UNKNOWN_MODEL };
        let known = self.models.iter().position(|(m, ..)| m == model);
        let model = if known.is_none() && self.models.len() >= crate::api::MAX_MODELS {
            crate::api::OTHER_MODELS
        } else {
            model
        };
        let tokens = tokens.at_most(MAX_REPLY_TOKENS);
        let at = match self.models.iter().position(|(m, ..)| m == model) {
            Some(at) => at,
            None => {
                self.models.push((model.to_string(), Tokens::default(), 0));
                self.models.len() - 1
            }
        };
        let entry = &mut self.models[at];
        entry.1 = entry.1.plus(tokens);
        entry.2 += u64::from(reply);
    }

    fn turn_ended(&mut self, at: Option<Timestamp>) {
        self.turns += 1;
        self.last_turn_end = at.or(self.last_turn_end);
    }

    /// A reply `id` stating `tokens`: counted once, and what a later line of the same reply states beyond that.
    fn reply(&mut self, id: &str, model: &str, tokens: Tokens) {
        let model = if is_model_name(model) { model } else { UNKNOWN_MODEL };
        match &mut self.last_reply {
            Some(last) if last.id == bounded(id) && last.model == model => {
                let grown = tokens.minus(last.tokens);
                last.tokens = Tokens {
                    input: last.tokens.input.max(tokens.input),
                    output: last.tokens.output.max(tokens.output),
                    cache_write: last.tokens.cache_write.max(tokens.cache_write),
                    cache_read: last.tokens.cache_read.max(tokens.cache_read),
                };
                self.add(model, grown, false);
            }
            _ => {
                let id = bounded(id);
                self.last_reply = Some(CountedReply { id, model: model.into(), tokens, ended_turn: false });
                self.add(model, tokens, true);
            }
        }
    }

    /// Claude Code: `{"type":"assistant","message":{"id","model","usage":{...},"stop_reason"},"timestamp"}`; a
    /// reply that stops for any reason but a tool call ends the turn. Its own error lines (model `<synthetic>`)
    /// spent nothing.
    fn claude(&mut self, line: &str) {
        let Ok(v) = serde_json::from_str::<ClaudeLine>(line) else { return };
        let Some(message) = v.message.filter(|_| v.kind.as_deref() == Some("assistant")) else { return };
        let (Some(id), Some(model)) = (message.id, message.model) else { return };
        if model == "<synthetic>" {
            // Its own line for an API error: a 429 is a usage or rate limit (Claude Code 2.1.332 writes no reset time).
            if v.is_api_error_message == Some(true) && v.api_error_status == Some(429) {
                let kind = v.api_error_type.filter(|k| is_model_name(k)).unwrap_or_else(|| "rate_limit_error".into());
                let message = format!("the model's API refused the turn: HTTP 429 {kind}");
                self.limit = Some(Limit::Reached { at: timestamp(v.timestamp.as_deref()), message });
            }
            return;
        }
        self.limit = Some(Limit::Behind);
        let u = message.usage.unwrap_or_default();
        let n = |count: Option<u64>| count.unwrap_or(0);
        let tokens = Tokens {
            input: n(u.input_tokens),
            output: n(u.output_tokens),
            cache_write: n(u.cache_creation_input_tokens),
            cache_read: n(u.cache_read_input_tokens),
        };
        self.reply(&id, &model, tokens);
        let ends = message.stop_reason.is_some_and(|r| r != "tool_use");
        if let Some(last) = self.last_reply.as_mut().filter(|last| ends && !last.ended_turn) {
            last.ended_turn = true;
            self.turn_ended(timestamp(v.timestamp.as_deref()));
        }
    }

    /// Codex: `turn_context` lines name the model; a `token_usage_record` line states one model call's `usage`
    /// (its input counting the cached and the cache written), and a `task_complete` event ends a turn.
    fn codex(&mut self, line: &str) {
        let Ok(v) = serde_json::from_str::<CodexLine>(line) else { return };
        let payload = v.payload.unwrap_or_default();
        match (v.kind.as_deref(), payload.kind.as_deref()) {
            (Some("turn_context"), _) => {
                if let Some(model) = payload.model {
                    // Where the model is kept between reads: a reply of no id, which nothing restates.
                    let model = if is_model_name(&model) { model } else { UNKNOWN_MODEL.into() };
                    let tokens = Tokens::default();
                    self.last_reply = Some(CountedReply { id: String::new(), model, tokens, ended_turn: false });
                }
            }
            (Some("token_usage_record"), _) => {
                let Some(u) = payload.usage else { return };
                self.limit = Some(Limit::Behind);
                let tokens = lumped(u.input_tokens, u.output_tokens, u.cache_write_input_tokens, u.cached_input_tokens);
                let model = self.last_reply.as_ref().map(|r| r.model.clone()).filter(|m| !m.is_empty());
                self.add(model.as_deref().unwrap_or(UNKNOWN_MODEL), tokens, true);
            }
            // A turn that failed ends with its error and no answer: no turn ended. Codex 0.171.0 says a 429 in
            // `codex_error_info`: `"usage_limit_exceeded"` (the account's limit, never retried), or
            // `{"response_too_many_failed_attempts":{"http_status_code":429}}` (a rate limit it retried).
            (Some("event_msg"), Some("task_complete")) => match payload.error {
                Some(error) => {
                    let kind = match error.codex_error_info {
                        Some(CodexErrorInfo::UsageLimit) => "usage_limit_exceeded",
                        Some(CodexErrorInfo::FailedAttempts(Some(429))) => "rate_limit",
                        _ => return,
                    };
                    let message = format!("the model's API refused the turn: HTTP 429 {kind}");
                    self.limit = Some(Limit::Reached { at: timestamp(v.timestamp.as_deref()), message });
                }
                None => {
                    self.limit = Some(Limit::Behind);
                    self.turn_ended(timestamp(v.timestamp.as_deref()));
                }
            },
            _ => {}
        }
    }

    /// Copilot CLI: a `session.usage_record` event states one model call's `data.usage` (`model`, `inputTokens`
    /// counting both cache kinds, `outputTokens`, `cacheReadTokens`, `cacheWriteTokens`); an `assistant.message`
    /// that asks for no tool ends the turn (its `assistant.turn_end` closes each model call, tool calls included).
    fn copilot(&mut self, line: &str) {
        let Ok(v) = serde_json::from_str::<CopilotLine>(line) else { return };
        let data = v.data.unwrap_or_default();
        match v.kind.as_deref() {
            Some("session.usage_record") => {
                let Some(u) = data.usage else { return };
                let Some(model) = u.model else { return };
                self.limit = Some(Limit::Behind);
                let tokens = lumped(u.input_tokens, u.output_tokens, u.cache_write_tokens, u.cache_read_tokens);
                self.add(&model, tokens, true);
            }
            Some("assistant.message") if data.tool_requests.is_none_or(|r| r.is_empty()) => {
                self.turn_ended(timestamp(v.timestamp.as_deref()));
            }
            // Copilot CLI 1.0.102 ends a turn its provider refused with a `session.error` (after its own retries).
            Some("session.error")
                if data.status_code == Some(429) || data.error_type.as_deref() == Some("rate_limit") =>
            {
                let message = "the model's API refused the turn: HTTP 429 rate_limit".to_string();
                self.limit = Some(Limit::Reached { at: timestamp(v.timestamp.as_deref()), message });
            }
            _ => {}
        }
    }
}

// The lines as read: only the fields counted, everything else passed over unbuilt (`IgnoredAny`), so a hostile line
// of any shape costs its parse, never memory in proportion to what it nests.

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaudeLine {
    #[serde(rename = "type")]
    kind: Option<String>,
    message: Option<ClaudeMessage>,
    timestamp: Option<String>,
    is_api_error_message: Option<bool>,
    api_error_status: Option<u16>,
    api_error_type: Option<String>,
}

#[derive(Deserialize)]
struct ClaudeMessage {
    id: Option<String>,
    model: Option<String>,
    usage: Option<ClaudeUsage>,
    stop_reason: Option<String>,
}

#[derive(Default, Deserialize)]
struct ClaudeUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CodexLine {
    #[serde(rename = "type")]
    kind: Option<String>,
    payload: Option<CodexPayload>,
    timestamp: Option<String>,
}

#[derive(Default, Deserialize)]
struct CodexPayload {
    #[serde(rename = "type")]
    kind: Option<String>,
    model: Option<String>,
    usage: Option<CodexUsage>,
    error: Option<CodexError>,
}

#[derive(Deserialize)]
struct CodexError {
    codex_error_info: Option<CodexErrorInfo>,
}

/// What Codex says of a failed turn: a word (`"usage_limit_exceeded"`) or an object of one key
/// (`{"response_too_many_failed_attempts":{"http_status_code":429}}`); anything else passed over unbuilt.
enum CodexErrorInfo {
    UsageLimit,
    FailedAttempts(Option<u16>),
    Other,
}

impl<'de> Deserialize<'de> for CodexErrorInfo {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        #[derive(Deserialize)]
        struct Attempts {
            http_status_code: Option<u16>,
        }
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = CodexErrorInfo;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a word or an object")
            }
            fn visit_str<E: serde::de::Error>(self, word: &str) -> Result<Self::Value, E> {
                Ok(if word == "usage_limit_exceeded" { CodexErrorInfo::UsageLimit } else { CodexErrorInfo::Other })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut info = CodexErrorInfo::Other;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == "response_too_many_failed_attempts" {
                        info = CodexErrorInfo::FailedAttempts(map.next_value::<Attempts>()?.http_status_code);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(info)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(CodexErrorInfo::Other)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(CodexErrorInfo::Other)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[derive(Deserialize)]
struct CodexUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_write_input_tokens: Option<u64>,
    cached_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CopilotLine {
    #[serde(rename = "type")]
    kind: Option<String>,
    data: Option<CopilotData>,
    timestamp: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CopilotData {
    usage: Option<CopilotUsage>,
    /// Counted, never built: what each request holds is passed over.
    tool_requests: Option<Vec<serde::de::IgnoredAny>>,
    error_type: Option<String>,
    status_code: Option<u16>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CopilotUsage {
    model: Option<String>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_write_tokens: Option<u64>,
    cache_read_tokens: Option<u64>,
}

/// Tokens from a usage whose input counts both cache kinds.
fn lumped(input: Option<u64>, output: Option<u64>, cache_write: Option<u64>, cache_read: Option<u64>) -> Tokens {
    let (cache_write, cache_read) = (cache_write.unwrap_or(0), cache_read.unwrap_or(0));
    let input = input.unwrap_or(0).saturating_sub(cache_read).saturating_sub(cache_write);
    Tokens { input, output: output.unwrap_or(0), cache_write, cache_read }
}

fn timestamp(at: Option<&str>) -> Option<Timestamp> {
    at?.parse().ok()
}

#[cfg(test)]
mod tests;
