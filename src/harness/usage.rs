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
mod tests {
    use super::*;

    fn tally(format: UsageFormat, after: Option<CountedReply>, lines: &[&str]) -> Tally {
        let mut tally = Tally::after(after);
        for line in lines {
            tally.line(format, line);
        }
        tally
    }

    fn tokens(input: u64, output: u64, cache_write: u64, cache_read: u64) -> Tokens {
        Tokens { input, output, cache_write, cache_read }
    }

    /// A Claude Code transcript line of a reply, as 2.1.332 writes one (fields it writes beside these left out).
    fn claude(id: &str, output: u64, stop: &str, at: &str) -> String {
        format!(
            r#"{{"parentUuid":"p","type":"assistant","message":{{"id":"{id}","type":"message","role":"assistant","model":"claude-opus-5-5","content":[{{"type":"text","text":"All done."}}],"stop_reason":{stop},"usage":{{"input_tokens":100,"cache_creation_input_tokens":30,"cache_read_input_tokens":900,"output_tokens":{output},"cache_creation":{{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0}}}}}},"timestamp":"{at}"}}"#
        )
    }

    #[test]
    fn claude_codes_replies_count_once_each_and_a_reply_that_calls_no_tool_ends_the_turn() {
        let lines = [
            r#"{"type":"user","message":{"role":"user","content":"usage please"},"timestamp":"2026-12-05T03:31:26.818Z"}"#.to_string(),
            claude("msg_1", 20, r#""tool_use""#, "2026-12-05T03:31:26.880Z"),
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"hi"}]}}"#.into(),
            // A reply of two content blocks, written a line each: the first as its stream began.
            claude("msg_2", 1, "null", "2026-12-05T03:31:26.950Z"),
            claude("msg_2", 20, r#""end_turn""#, "2026-12-05T03:31:26.952Z"),
            r#"{"type":"cost-state","modelUsage":{"claude-opus-5-5":{"inputTokens":200}}}"#.into(),
        ];
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let t = tally(UsageFormat::Claude, None, &lines);
        assert_eq!(t.models, [("claude-opus-5-5".to_string(), tokens(200, 40, 60, 1800), 2)]);
        assert_eq!(t.turns, 1);
        assert_eq!(t.last_turn_end, Some("2026-12-05T03:31:26.952Z".parse().unwrap()));

        // The same reply's lines split between two reads: the second adds only what grew.
        let first = tally(UsageFormat::Claude, None, &lines[..4]);
        let second = tally(UsageFormat::Claude, first.last_reply.clone(), &lines[4..]);
        assert_eq!(first.models[0].1.plus(second.models[0].1), tokens(200, 40, 60, 1800));
        assert_eq!((first.turns, second.turns), (0, 1));
    }

    #[test]
    fn claude_codes_own_error_lines_spent_nothing_and_a_429_is_a_limit_until_a_reply() {
        // As Claude Code 2.1.332 writes a 429 its API answered (fields it writes beside these left out).
        let error = r#"{"type":"assistant","timestamp":"2026-12-05T04:39:55.910Z","message":{"id":"e1","model":"<synthetic>","role":"assistant","stop_reason":"stop_sequence","usage":{"input_tokens":0,"output_tokens":0},"content":[{"type":"text","text":"API Error: Request rejected (429) · This request would exceed your account's rate limit."}]},"error":"rate_limit","isApiErrorMessage":true,"apiErrorStatus":429,"apiErrorType":"rate_limit_error"}"#;
        let t = tally(UsageFormat::Claude, None, &[error]);
        assert_eq!((t.models.len(), t.turns), (0, 0), "spent nothing, ended no turn");
        let at = Some("2026-12-05T04:39:55.910Z".parse().unwrap());
        let message = "the model's API refused the turn: HTTP 429 rate_limit_error".to_string();
        assert_eq!(t.limit, Some(Limit::Reached { at, message }));
        let reply = claude("msg_3", 20, r#""end_turn""#, "2026-12-05T05:39:00.000Z");
        assert_eq!(tally(UsageFormat::Claude, None, &[error, &reply]).limit, Some(Limit::Behind), "a reply after it");
        let other = error.replace("429", "500");
        assert_eq!(tally(UsageFormat::Claude, None, &[&other]).limit, None, "another error is no limit");
    }

    #[test]
    fn codex_counts_each_calls_usage_under_the_turns_model() {
        let lines = [
            r#"{"timestamp":"2026-12-05T03:31:29.579Z","type":"turn_context","payload":{"turn_id":"t1","cwd":"/w","model":"mock-model"}}"#,
            r#"{"timestamp":"2026-12-05T03:31:29.607Z","type":"token_usage_record","payload":{"thread_id":"x","response_id":"r1","usage":{"input_tokens":1000,"cached_input_tokens":900,"cache_write_input_tokens":0,"output_tokens":20,"reasoning_output_tokens":0,"total_tokens":1020},"thread_token_usage":{"input_tokens":1000}}}"#,
            r#"{"timestamp":"2026-12-05T03:31:29.608Z","type":"event_msg","payload":{"type":"token_count","info":{"last_token_usage":{"input_tokens":1000,"cached_input_tokens":900,"output_tokens":20}}}}"#,
            r#"{"timestamp":"2026-12-05T03:31:29.643Z","type":"token_usage_record","payload":{"thread_id":"x","response_id":"r2","usage":{"input_tokens":1000,"cached_input_tokens":900,"cache_write_input_tokens":0,"output_tokens":20,"reasoning_output_tokens":0,"total_tokens":1020}}}"#,
            r#"{"timestamp":"2026-12-05T03:31:29.645Z","type":"event_msg","payload":{"type":"task_complete","turn_id":"t1","last_agent_message":"All done."}}"#,
        ];
        let t = tally(UsageFormat::Codex, None, &lines);
        assert_eq!(t.models, [("mock-model".to_string(), tokens(200, 40, 0, 1800), 2)]);
        assert_eq!((t.turns, t.last_turn_end), (1, Some("2026-12-05T03:31:29.645Z".parse().unwrap())));
        // A read that starts after the turn's context still knows its model.
        let first = tally(UsageFormat::Codex, None, &lines[..2]);
        let second = tally(UsageFormat::Codex, first.last_reply.clone(), &lines[2..]);
        assert_eq!(second.models, [("mock-model".to_string(), tokens(100, 20, 0, 900), 1)]);
        // And with none at all, its calls still count.
        assert_eq!(tally(UsageFormat::Codex, None, &lines[1..2]).models[0].0, UNKNOWN_MODEL);
    }

    #[test]
    fn copilot_counts_each_usage_record_and_a_message_that_asks_for_no_tool_ends_the_turn() {
        let usage = r#"{"type":"session.usage_record","data":{"usage":{"model":"claude-haiku-4-5","inputTokens":1030,"outputTokens":20,"cacheReadTokens":900,"cacheWriteTokens":30,"cost":0.0}},"timestamp":"2026-12-05T03:31:31.700Z"}"#;
        let lines = [
            r#"{"type":"assistant.turn_start","data":{"turnId":"0"},"timestamp":"2026-12-05T03:31:31.632Z"}"#,
            usage,
            r#"{"type":"assistant.message","data":{"model":"claude-haiku-4-5","content":"","toolRequests":[{"toolCallId":"t","name":"Bash"}]},"timestamp":"2026-12-05T03:31:31.710Z"}"#,
            r#"{"type":"assistant.turn_end","data":{"turnId":"0"},"timestamp":"2026-12-05T03:31:31.721Z"}"#,
            usage,
            r#"{"type":"assistant.message","data":{"model":"claude-haiku-4-5","content":"All done.","toolRequests":[]},"timestamp":"2026-12-05T03:31:31.753Z"}"#,
            r#"{"type":"assistant.turn_end","data":{"turnId":"1"},"timestamp":"2026-12-05T03:31:31.754Z"}"#,
        ];
        let t = tally(UsageFormat::Copilot, None, &lines);
        assert_eq!(t.models, [("claude-haiku-4-5".to_string(), tokens(200, 40, 60, 1800), 2)]);
        assert_eq!((t.turns, t.last_turn_end), (1, Some("2026-12-05T03:31:31.753Z".parse().unwrap())));
    }

    /// As Codex 0.171.0 ends a turn its provider refused with a 429 (measured against a scripted model; fields it
    /// writes beside these left out): no turn ended, a limit until a call is answered.
    #[test]
    fn codexs_failed_turn_for_a_429_is_a_limit_and_no_turn() {
        let usage_limit = r#"{"timestamp":"2026-12-05T10:12:09.212Z","type":"event_msg","payload":{"type":"task_complete","turn_id":"t1","last_agent_message":null,"error":{"message":"You've hit your usage limit. Try again later.","codex_error_info":"usage_limit_exceeded"},"duration_ms":85}}"#;
        let rate_limit = r#"{"timestamp":"2026-12-05T10:12:09.212Z","type":"event_msg","payload":{"type":"task_complete","turn_id":"t1","last_agent_message":null,"error":{"message":"exceeded retry limit, last status: 429 Too Many Requests","codex_error_info":{"response_too_many_failed_attempts":{"http_status_code":429}}},"duration_ms":93}}"#;
        let at = Some("2026-12-05T10:12:09.212Z".parse().unwrap());
        for (line, kind) in [(usage_limit, "usage_limit_exceeded"), (rate_limit, "rate_limit")] {
            let t = tally(UsageFormat::Codex, None, &[line]);
            let message = format!("the model's API refused the turn: HTTP 429 {kind}");
            assert_eq!((t.turns, t.limit), (0, Some(Limit::Reached { at, message })), "{kind}");
        }
        let other = rate_limit.replace("429}", "500}");
        assert_eq!(tally(UsageFormat::Codex, None, &[&other]).limit, None, "another failure is no limit");
        let answered = r#"{"timestamp":"2026-12-05T10:20:00.000Z","type":"event_msg","payload":{"type":"task_complete","turn_id":"t2","last_agent_message":"All done."}}"#;
        let t = tally(UsageFormat::Codex, None, &[usage_limit, answered]);
        assert_eq!((t.turns, t.limit), (1, Some(Limit::Behind)), "answered after it");
    }

    /// As Copilot CLI 1.0.102 ends a turn its provider refused with a 429 (measured against a scripted model).
    #[test]
    fn copilots_session_error_for_a_429_is_a_limit() {
        let error = r#"{"type":"session.error","data":{"errorType":"rate_limit","message":"429 This request would exceed your account's rate limit.","statusCode":429,"originatingMessageId":"331c90c4"},"id":"5437814a","timestamp":"2026-12-05T10:14:47.839Z","parentId":"p"}"#;
        let t = tally(UsageFormat::Copilot, None, &[error]);
        let (at, message) = (
            Some("2026-12-05T10:14:47.839Z".parse().unwrap()),
            "the model's API refused the turn: HTTP 429 rate_limit".to_string(),
        );
        assert_eq!((t.turns, t.limit), (0, Some(Limit::Reached { at, message })));
        let other = error.replace("rate_limit", "query").replace("429,", "500,");
        assert_eq!(tally(UsageFormat::Copilot, None, &[&other]).limit, None, "another error is no limit");
        let usage = r#"{"type":"session.usage_record","data":{"usage":{"model":"claude-haiku-4-5","inputTokens":10,"outputTokens":2}},"timestamp":"2026-12-05T10:20:00.000Z"}"#;
        assert_eq!(tally(UsageFormat::Copilot, None, &[error, usage]).limit, Some(Limit::Behind), "a reply after it");
    }

    #[test]
    fn what_a_record_says_is_bounded_before_it_reaches_a_status() {
        let line = |id: &str, model: &str, n: u64| {
            let usage = serde_json::json!({"input_tokens": n, "output_tokens": n, "cache_read_input_tokens": u64::MAX});
            let message = serde_json::json!({"id": id, "model": model, "usage": usage, "stop_reason": "end_turn"});
            serde_json::json!({"type": "assistant", "message": message}).to_string()
        };
        let huge = u64::MAX;
        let long_name = "m".repeat(MAX_NAME + 1);
        let lines = [
            line("a", "ok-model", huge),
            line(&"i".repeat(10_000), &long_name, 5),
            line("c", "bad\u{7}model", 5),
            line("d", "claude\u{202e}5-supo", 5),
        ];
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let t = tally(UsageFormat::Claude, None, &lines);
        let names: Vec<&str> = t.models.iter().map(|(m, ..)| m.as_str()).collect();
        assert_eq!(names, ["ok-model", UNKNOWN_MODEL], "a name too long, unprintable or reordering is no model's");
        assert_eq!(t.models[0].1, tokens(MAX_REPLY_TOKENS, MAX_REPLY_TOKENS, 0, MAX_REPLY_TOKENS));
        assert!(t.last_reply.as_ref().is_some_and(|r| r.id.len() <= MAX_NAME));
        // Sums stay exact integers for every JSON reader.
        let big = tokens(crate::api::MAX_COUNT, 1, 0, 0).plus(tokens(5, 0, 0, 0));
        assert_eq!((big.input, big.total()), (crate::api::MAX_COUNT, crate::api::MAX_COUNT));
        // Codex names its model apart from its calls: bounded the same way.
        let context = format!(r#"{{"type":"turn_context","payload":{{"model":"{long_name}"}}}}"#);
        let call = r#"{"type":"token_usage_record","payload":{"usage":{"input_tokens":5}}}"#;
        let t = tally(UsageFormat::Codex, None, &[&context, call]);
        assert_eq!(t.last_reply.map(|r| r.model), Some(UNKNOWN_MODEL.to_string()));
        assert_eq!(t.models[0].0, UNKNOWN_MODEL);
        // A line that nests what it likes beside the fields read is passed over field by field, never built: it
        // counts what its fields say.
        let wide = format!(
            r#"{{"type":"assistant","x":[{}],"message":{{"id":"w","model":"m","usage":{{"input_tokens":1}}}}}}"#,
            vec![r#"{"":0}"#; 100_000].join(",")
        );
        assert_eq!(tally(UsageFormat::Claude, None, &[&wide]).models, [("m".to_string(), tokens(1, 0, 0, 0), 1)]);
        // Models beyond what a status keeps apart count as one.
        let many: Vec<String> = (0..100).map(|i| line(&format!("r{i}"), &format!("model-{i}"), 1)).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let t = tally(UsageFormat::Claude, None, &many);
        assert_eq!(t.models.len(), crate::api::MAX_MODELS + 1);
        assert_eq!(t.models.last().map(|(m, _, replies)| (m.as_str(), *replies)), Some((crate::api::OTHER_MODELS, 68)));
    }

    #[test]
    fn a_line_that_is_no_json_or_of_another_shape_counts_nothing() {
        for format in UsageFormat::ALL.map(|(_, f)| f) {
            let lines = [
                "",
                "not json \"assistant\" \"token_usage_record\"",
                r#"{"type":"assistant"}"#,
                "{\"type\":\"session.usage_record\",\"data\":7}",
            ];
            assert_eq!(tally(format, None, &lines), Tally::default(), "{format:?}");
        }
    }
}
