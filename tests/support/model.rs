//! A scripted model: a small local HTTP server that answers the model APIs the real CLIs speak, so they do real turns
//! offline (`../shared/guides/harnesses.md`, "A scripted model"). A test scripts it by the prompt's text (a reply, a
//! tool call, a slow or long stream, an error, a turn that never ends) and reads back what each CLI sent.
//!
//! It speaks Anthropic's Messages API (`POST /v1/messages`, streamed as server-sent events or not), which Claude Code
//! and opencode's `anthropic` provider use, and the Gemini API (`POST /v1beta/models/<model>:streamGenerateContent`,
//! `GOOGLE_GEMINI_BASE_URL`), which Gemini CLI uses, and OpenAI's Responses API (`POST /v1/responses`), which Codex
//! CLI uses through a custom model provider. Hand-written over tokio's TCP (one request per connection, the
//! reply closes it): a web framework would be the only heavy part of the test support.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the model answers to a prompt.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A text reply that ends the turn.
    Text(String),
    /// A tool call (`Bash` and its `command`, say); once the tool's result comes back, `then` ends the turn.
    Tool { name: String, input: Value, then: String },
    /// `text` streamed a word at a time, `every` apart.
    Slow { text: String, every: Duration },
    /// An HTTP error with the API's error body: 429 `rate_limit_error`, 500 `api_error`, 529 `overloaded_error`.
    Error { status: u16, kind: String, message: String, headers: Vec<(String, String)> },
    /// A stream that starts and never ends (until the client goes away).
    Hang,
}

impl Reply {
    /// A text reply.
    pub fn text(text: &str) -> Self {
        Reply::Text(text.into())
    }

    /// A `Bash` tool call running `command`, then `then`.
    pub fn bash(command: &str, then: &str) -> Self {
        Reply::Tool { name: "Bash".into(), input: json!({"command": command}), then: then.into() }
    }

    /// A 429 whose limit resets in `reset_in`, that the CLI must not retry by itself (`x-should-retry: false`).
    pub fn rate_limited(reset_in: Duration) -> Self {
        let reset = std::time::SystemTime::now() + reset_in;
        let epoch = reset.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        Reply::Error {
            status: 429,
            kind: "rate_limit_error".into(),
            message: "This request would exceed your account's rate limit.".into(),
            headers: vec![
                ("retry-after".into(), reset_in.as_secs().to_string()),
                ("anthropic-ratelimit-unified-status".into(), "rejected".into()),
                ("anthropic-ratelimit-unified-reset".into(), epoch.to_string()),
                ("x-should-retry".into(), "false".into()),
            ],
        }
    }
}

/// The token counts each reply reports (its `usage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_creation: u64,
    pub cache_read: u64,
}

/// One request the model received.
#[derive(Clone, Debug)]
pub struct Request {
    /// The path with its query (`/v1/messages?beta=true`).
    pub path: String,
    /// The body as JSON (`Null` when it was not JSON).
    pub body: Value,
    /// The prompt: the last text of the last user message that holds one.
    pub prompt: Option<String>,
    /// Whether the last user message carries a tool's result.
    pub tool_result: bool,
    /// When it arrived.
    pub at: std::time::SystemTime,
    /// The key it carried (`x-api-key`, `x-goog-api-key`, or `authorization`'s bearer token).
    pub key: Option<String>,
}

#[derive(Default)]
struct State {
    rules: Vec<(String, Reply)>,
    requests: Vec<Request>,
    usage: Option<Usage>,
}

/// A running scripted model; it stops with the test's runtime.
#[derive(Clone)]
pub struct Model {
    addr: std::net::SocketAddr,
    state: Arc<Mutex<State>>,
}

impl Model {
    /// Starts one on a free loopback port (within a tokio runtime).
    pub fn start() -> Self {
        Self::start_on("127.0.0.1")
    }

    /// Starts one on a free port of `ip`, an address of this machine (the node's bridge, for pods to reach).
    pub fn start_on(ip: &str) -> Self {
        let std = std::net::TcpListener::bind((ip, 0)).unwrap();
        std.set_nonblocking(true).unwrap();
        let addr = std.local_addr().unwrap();
        let listener = TcpListener::from_std(std).unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let model = Model { addr, state };
        let serving = model.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let model = serving.clone();
                tokio::spawn(async move {
                    let _ = model.serve(stream).await;
                });
            }
        });
        model
    }

    /// The base URL a CLI is pointed at (`ANTHROPIC_BASE_URL`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on a prompt containing `text` gets `reply` (the rule added last wins). Anything else gets a short
    /// text reply.
    pub fn on(&self, text: &str, reply: Reply) {
        self.state.lock().unwrap().rules.insert(0, (text.into(), reply));
    }

    /// The usage every reply reports from now on.
    pub fn set_usage(&self, usage: Usage) {
        self.state.lock().unwrap().usage = Some(usage);
    }

    /// The usage every reply reports.
    pub fn usage(&self) -> Usage {
        self.state.lock().unwrap().usage.unwrap_or(Usage {
            input: 120,
            output: 30,
            cache_creation: 40,
            cache_read: 900,
        })
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The prompts of the turns' requests received so far (tool results left out), oldest first.
    pub fn prompts(&self) -> Vec<String> {
        self.requests().into_iter().filter(|r| !r.tool_result).filter_map(|r| r.prompt).collect()
    }

    fn reply_to(&self, request: &Request) -> Reply {
        let state = self.state.lock().unwrap();
        let rule = request
            .prompt
            .as_deref()
            .and_then(|prompt| state.rules.iter().find(|(text, _)| prompt.contains(text.as_str())));
        match (rule.map(|(_, reply)| reply), request.tool_result) {
            (Some(Reply::Tool { then, .. }), true) => Reply::Text(then.clone()),
            (_, true) => Reply::text("The tool ran."),
            (Some(reply), false) => reply.clone(),
            (None, false) => Reply::text("Done."),
        }
    }

    async fn serve(&self, mut stream: TcpStream) -> std::io::Result<()> {
        let Some((path, key, body)) = read_request(&mut stream).await? else { return Ok(()) };
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let request = Request { key, ..parse(path, body) };
        if request.path.ends_with("/responses") {
            let reply = self.reply_to(&request);
            self.state.lock().unwrap().requests.push(request);
            return self.responses(&mut stream, reply).await;
        }
        if request.path.contains("enerateContent") {
            let reply = self.reply_to(&request);
            let streamed = request.path.contains(":streamGenerateContent");
            self.state.lock().unwrap().requests.push(request);
            return self.gemini(&mut stream, streamed, reply).await;
        }
        let messages = request.path.starts_with("/v1/messages") || request.path.starts_with("/messages");
        if !messages || request.path.contains("/count_tokens") {
            // Token counts and whatever else a CLI asks on the side: a plausible answer.
            let answer = json!({"input_tokens": self.usage().input});
            return respond(&mut stream, 200, &[], "application/json", answer.to_string().as_bytes()).await;
        }
        let streamed = request.body["stream"].as_bool().unwrap_or(false);
        let model = request.body["model"].as_str().unwrap_or("claude").to_string();
        let reply = self.reply_to(&request);
        self.state.lock().unwrap().requests.push(request);
        let usage = self.usage();
        match reply {
            Reply::Error { status, kind, message, headers } => {
                let body = json!({"type": "error", "error": {"type": kind, "message": message}});
                let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                respond(&mut stream, status, &headers, "application/json", body.to_string().as_bytes()).await
            }
            reply if !streamed => {
                let (content, stop) = match &reply {
                    Reply::Tool { name, input, .. } => {
                        (json!([{"type": "tool_use", "id": tool_id(), "name": name, "input": input}]), "tool_use")
                    }
                    Reply::Text(text) | Reply::Slow { text, .. } => {
                        (json!([{"type": "text", "text": text}]), "end_turn")
                    }
                    _ => (json!([{"type": "text", "text": "..."}]), "end_turn"),
                };
                let mut message = message(&model, &usage);
                message["content"] = content;
                message["stop_reason"] = json!(stop);
                message["usage"]["output_tokens"] = json!(usage.output);
                respond(&mut stream, 200, &[], "application/json", message.to_string().as_bytes()).await
            }
            reply => self.stream(&mut stream, &model, usage, reply).await,
        }
    }

    /// A Gemini API answer: chunks of `candidates` as server-sent events (or one JSON object), the last with its
    /// `finishReason` and `usageMetadata`.
    async fn gemini(&self, stream: &mut TcpStream, streamed: bool, reply: Reply) -> std::io::Result<()> {
        let usage = self.usage();
        let metadata = json!({"promptTokenCount": usage.input + usage.cache_read, "candidatesTokenCount": usage.output,
            "cachedContentTokenCount": usage.cache_read, "totalTokenCount": usage.input + usage.cache_read + usage.output});
        let chunk = |parts: Value, last: bool| {
            let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
            let mut chunk = json!({"candidates": [candidate.take()]});
            if last {
                chunk["candidates"][0]["finishReason"] = json!("STOP");
                chunk["usageMetadata"] = metadata.clone();
            }
            chunk
        };
        let (pieces, every): (Vec<Value>, Duration) = match reply {
            Reply::Error { status, message, headers, .. } => {
                let kind = match status {
                    429 => "RESOURCE_EXHAUSTED",
                    503 | 529 => "UNAVAILABLE",
                    _ => "INTERNAL",
                };
                let body = json!({"error": {"code": status, "message": message, "status": kind}});
                let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                return respond(stream, status, &headers, "application/json", body.to_string().as_bytes()).await;
            }
            Reply::Text(text) => (vec![json!([{"text": text}])], Duration::ZERO),
            Reply::Slow { text, every } => (text.split_inclusive(' ').map(|w| json!([{"text": w}])).collect(), every),
            Reply::Tool { name, input, .. } => {
                let name = if name == "Bash" { "run_shell_command".to_string() } else { name };
                (vec![json!([{"functionCall": {"name": name, "args": input}}])], Duration::ZERO)
            }
            Reply::Hang => (Vec::new(), Duration::ZERO),
        };
        if !streamed {
            let parts: Vec<Value> = pieces.iter().flat_map(|p| p.as_array().cloned().unwrap_or_default()).collect();
            let body = chunk(Value::Array(parts), true).to_string();
            return respond(stream, 200, &[], "application/json", body.as_bytes()).await;
        }
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        stream.write_all(head.as_bytes()).await?;
        if pieces.is_empty() {
            let mut buf = [0u8; 1024];
            while stream.read(&mut buf).await? > 0 {}
            return Ok(());
        }
        let last = pieces.len() - 1;
        for (i, parts) in pieces.into_iter().enumerate() {
            if i > 0 && !every.is_zero() {
                tokio::time::sleep(every).await;
            }
            stream.write_all(format!("data: {}\r\n\r\n", chunk(parts, i == last)).as_bytes()).await?;
            stream.flush().await?;
        }
        stream.shutdown().await
    }

    /// A Responses API answer, streamed: `response.created`, the output item (added, its text deltas, done), and
    /// `response.completed` with the usage.
    async fn responses(&self, stream: &mut TcpStream, reply: Reply) -> std::io::Result<()> {
        let usage = self.usage();
        let (item, deltas, every) = match reply {
            Reply::Error { status, message, headers, kind } => {
                let body = json!({"error": {"type": kind, "message": message}});
                let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                return respond(stream, status, &headers, "application/json", body.to_string().as_bytes()).await;
            }
            Reply::Tool { name, input, .. } => {
                let name = if name == "Bash" { "shell".to_string() } else { name };
                let command = input["command"].as_str().map(|c| json!({"command": ["bash", "-lc", c]}));
                let arguments = command.unwrap_or(input).to_string();
                let call = json!({"type": "function_call", "id": "fc_1", "call_id": tool_id(), "name": name,
                    "arguments": arguments, "status": "completed"});
                (call, Vec::new(), Duration::ZERO)
            }
            Reply::Text(text) => (output_message(&text), vec![text], Duration::ZERO),
            Reply::Slow { text, every } => {
                (output_message(&text), text.split_inclusive(' ').map(String::from).collect(), every)
            }
            Reply::Hang => (Value::Null, Vec::new(), Duration::ZERO),
        };
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        stream.write_all(head.as_bytes()).await?;
        let id = format!("resp_{}", uuid::Uuid::new_v4().simple());
        sse(stream, "response.created", json!({"type": "response.created", "response": {"id": id}})).await?;
        if item.is_null() {
            let mut buf = [0u8; 1024];
            while stream.read(&mut buf).await? > 0 {}
            return Ok(());
        }
        let mut added = item.clone();
        if added["type"] == "message" {
            added["content"] = json!([]);
        }
        sse(
            stream,
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
        )
        .await?;
        for delta in deltas {
            if !every.is_zero() {
                tokio::time::sleep(every).await;
            }
            let event = json!({"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
                "content_index": 0, "delta": delta});
            sse(stream, "response.output_text.delta", event).await?;
        }
        sse(
            stream,
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        )
        .await?;
        let usage = json!({"input_tokens": usage.input + usage.cache_read,
            "input_tokens_details": {"cached_tokens": usage.cache_read}, "output_tokens": usage.output,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": usage.input + usage.cache_read + usage.output});
        let done = json!({"type": "response.completed", "response": {"id": id, "usage": usage}});
        sse(stream, "response.completed", done).await?;
        stream.shutdown().await
    }

    async fn stream(&self, stream: &mut TcpStream, model: &str, usage: Usage, reply: Reply) -> std::io::Result<()> {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
        stream.write_all(head.as_bytes()).await?;
        let mut started = message(model, &usage);
        started["usage"]["output_tokens"] = json!(1);
        sse(stream, "message_start", json!({"type": "message_start", "message": started})).await?;
        let (block, deltas, every, stop) = match reply {
            Reply::Hang => {
                // Never ends: wait for the client to give up.
                let mut buf = [0u8; 1024];
                while stream.read(&mut buf).await? > 0 {}
                return Ok(());
            }
            Reply::Tool { name, input, .. } => (
                json!({"type": "tool_use", "id": tool_id(), "name": name, "input": {}}),
                vec![json!({"type": "input_json_delta", "partial_json": input.to_string()})],
                Duration::ZERO,
                "tool_use",
            ),
            Reply::Slow { text, every } => {
                let words = text.split_inclusive(' ').map(|w| json!({"type": "text_delta", "text": w})).collect();
                (json!({"type": "text", "text": ""}), words, every, "end_turn")
            }
            Reply::Text(text) => (
                json!({"type": "text", "text": ""}),
                vec![json!({"type": "text_delta", "text": text})],
                Duration::ZERO,
                "end_turn",
            ),
            Reply::Error { .. } => unreachable!("answered before the stream"),
        };
        sse(stream, "content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": block}))
            .await?;
        for delta in deltas {
            if !every.is_zero() {
                tokio::time::sleep(every).await;
            }
            sse(stream, "content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": delta}))
                .await?;
        }
        sse(stream, "content_block_stop", json!({"type": "content_block_stop", "index": 0})).await?;
        let delta = json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": usage.output}});
        sse(stream, "message_delta", delta).await?;
        sse(stream, "message_stop", json!({"type": "message_stop"})).await?;
        stream.shutdown().await
    }
}

/// The request's parts the script reads.
fn parse(path: String, body: Value) -> Request {
    if path.contains("GenerateContent") || path.contains("generateContent") {
        return parse_gemini(path, body);
    }
    if path.ends_with("/responses") {
        return parse_responses(path, body);
    }
    let user = body["messages"].as_array().and_then(|m| m.iter().rev().find(|m| m["role"] == "user"));
    let parts = |m: &Value| match &m["content"] {
        Value::String(text) => vec![json!({"type": "text", "text": text})],
        Value::Array(parts) => parts.clone(),
        _ => vec![],
    };
    let tool_result = user.is_some_and(|m| parts(m).iter().any(|p| p["type"] == "tool_result"));
    let prompt = body["messages"].as_array().and_then(|messages| {
        messages.iter().rev().filter(|m| m["role"] == "user").find_map(|m| {
            parts(m).iter().rev().find(|p| p["type"] == "text").and_then(|p| p["text"].as_str()).map(String::from)
        })
    });
    Request { path, body, prompt, tool_result, at: std::time::SystemTime::now(), key: None }
}

/// A Gemini API request: `contents` of role `user` (a prompt's text) or carrying a `functionResponse`.
fn parse_gemini(path: String, body: Value) -> Request {
    let contents = body["contents"].as_array().cloned().unwrap_or_default();
    let user = contents.iter().rev().find(|c| c["role"] == "user");
    let parts = |c: &Value| c["parts"].as_array().cloned().unwrap_or_default();
    let tool_result = user.is_some_and(|c| parts(c).iter().any(|p| p.get("functionResponse").is_some()));
    let prompt = contents
        .iter()
        .rev()
        .filter(|c| c["role"] == "user")
        .find_map(|c| parts(c).iter().rev().find_map(|p| p["text"].as_str()).map(String::from));
    Request { path, body, prompt, tool_result, at: std::time::SystemTime::now(), key: None }
}

/// A Responses API request: `input` items, a user `message` (a prompt's `input_text`) or a `function_call_output`.
fn parse_responses(path: String, body: Value) -> Request {
    let input = body["input"].as_array().cloned().unwrap_or_default();
    let tool_result = input.last().is_some_and(|i| i["type"] == "function_call_output");
    let prompt = input.iter().rev().filter(|i| i["role"] == "user").find_map(|i| {
        let content = i["content"].as_array()?;
        content.iter().rev().find_map(|c| c["text"].as_str()).map(String::from)
    });
    Request { path, body, prompt, tool_result, at: std::time::SystemTime::now(), key: None }
}

fn message(model: &str, usage: &Usage) -> Value {
    json!({
        "id": format!("msg_{}", uuid::Uuid::new_v4().simple()),
        "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": usage.input, "output_tokens": 0,
            "cache_creation_input_tokens": usage.cache_creation, "cache_read_input_tokens": usage.cache_read},
    })
}

/// A Responses API assistant message holding `text`.
fn output_message(text: &str) -> Value {
    json!({"type": "message", "id": format!("msg_{}", uuid::Uuid::new_v4().simple()), "role": "assistant",
        "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn tool_id() -> String {
    format!("toolu_{}", uuid::Uuid::new_v4().simple())
}

async fn sse(stream: &mut TcpStream, event: &str, data: Value) -> std::io::Result<()> {
    stream.write_all(format!("event: {event}\ndata: {data}\n\n").as_bytes()).await?;
    stream.flush().await
}

async fn respond(
    stream: &mut TcpStream,
    status: u16,
    headers: &[(&str, &str)],
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n",
        if status == 200 { "OK" } else { "Error" },
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.shutdown().await
}

/// Reads one request: its path, the key it carried, and its body (by `content-length`, or chunked).
async fn read_request(stream: &mut TcpStream) -> std::io::Result<Option<(String, Option<String>, Vec<u8>)>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let raw_header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    let header = |name: &str| raw_header(name).map(|v| v.to_ascii_lowercase());
    let bearer = raw_header("authorization").and_then(|v| v.strip_prefix("Bearer ").map(String::from));
    let key = raw_header("x-api-key").or_else(|| raw_header("x-goog-api-key")).or(bearer);
    let mut body = buf[head_end..].to_vec();
    if let Some(length) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        while body.len() < length {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(length);
    } else if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        while !body.windows(5).any(|w| w == b"0\r\n\r\n") {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body = dechunk(&body);
    }
    Ok(Some((path, key, body)))
}

/// A chunked body's data.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&raw[..line_end]).ok().and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let Some(size) = size.filter(|s| *s > 0) else { break };
        let start = line_end + 2;
        out.extend_from_slice(&raw[start..(start + size).min(raw.len())]);
        raw = &raw[(start + size + 2).min(raw.len())..];
    }
    out
}
