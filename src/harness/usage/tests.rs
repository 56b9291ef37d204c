//! The tests of [`super`].

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
        r#"{"type":"user","message":{"role":"user","content":"usage please"},"timestamp":"2026-12-05T03:31:26.818Z"}"#
            .to_string(),
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
