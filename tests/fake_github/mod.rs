//! A fake GitHub REST API on loopback, as unkind as the real one can be: it records every call (method, path,
//! credentials, body, and the phase of a WorkEvent the test names at the moment of the call), can stall (holding
//! every request unanswered) or fail the next calls with 502, mints a GitHub App's installation tokens only for a
//! JWT signed by the App's key, and serves under any path prefix (GitHub Enterprise Server's `/api/v3`).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use worksession::api::WorkEvent;

/// One call as GitHub saw it.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    /// The path with its query, prefix and all.
    pub path: String,
    pub authorization: String,
    pub body: Value,
    /// The watched WorkEvent's phase when the call arrived (see [`FakeGithub::watch_event`]).
    pub phase: Option<String>,
}

#[derive(Default)]
struct Fake {
    calls: Mutex<Vec<Call>>,
    stall: AtomicBool,
    fail_next: AtomicU32,
    comments: Mutex<Vec<Value>>,
    minted: AtomicU32,
    /// How long the first token minted lasts (later ones an hour).
    first_token_lasts: Mutex<Option<Duration>>,
    /// The App's id and public key (PKCS#1 DER): a JWT is checked against it.
    app: Mutex<Option<(u64, Vec<u8>)>>,
    watched: Mutex<Option<(kube::Api<WorkEvent>, String)>>,
    /// The webhook: where it delivers (the bridge), its secret and id, and every attempt it made.
    hook: Mutex<Option<Hook>>,
    /// Actions jobs' logs, by job id: the API redirects to `/_logs/<job>` on the fake itself, served without
    /// credentials as GitHub's log storage is.
    logs: Mutex<std::collections::HashMap<u64, String>>,
    addr: Mutex<Option<SocketAddr>>,
}

/// A repository's webhook as GitHub keeps it.
#[derive(Clone)]
struct Hook {
    bridge: SocketAddr,
    secret: String,
    id: u64,
    attempts: Vec<HookAttempt>,
}

/// One attempt of a delivery, with what it carried.
#[derive(Clone, Debug)]
pub struct HookAttempt {
    pub id: u64,
    pub guid: String,
    pub event: String,
    pub payload: Value,
    pub status_code: u16,
    pub redelivery: bool,
    pub at: k8s_openapi::jiff::Timestamp,
}

/// The fake, serving until dropped with the test's runtime.
pub struct FakeGithub {
    pub addr: SocketAddr,
    fake: Arc<Fake>,
}

impl FakeGithub {
    pub async fn start() -> Self {
        let fake = Arc::new(Fake::default());
        let app = axum::Router::new().fallback(handle).with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        *fake.addr.lock().unwrap() = Some(addr);
        Self { addr, fake }
    }

    /// Job `job`'s log is `text`.
    pub fn job_log(&self, job: u64, text: &str) {
        self.fake.logs.lock().unwrap().insert(job, text.to_string());
    }

    /// Its base URL, with `prefix` (`""` for github.com's shape, `/api/v3` for an Enterprise Server's).
    pub fn url(&self, prefix: &str) -> String {
        format!("http://{}{prefix}", self.addr)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.fake.calls.lock().unwrap().clone()
    }

    /// The calls whose path contains `part`.
    pub fn calls_to(&self, part: &str) -> Vec<Call> {
        self.calls().into_iter().filter(|c| c.path.contains(part)).collect()
    }

    /// Every request is held unanswered (`true`) or answered again.
    pub fn stall(&self, stall: bool) {
        self.fake.stall.store(stall, Ordering::SeqCst);
    }

    /// The next `n` calls are answered 502.
    pub fn fail_next(&self, n: u32) {
        self.fake.fail_next.store(n, Ordering::SeqCst);
    }

    /// Tokens are minted for the App `id` whose public key (PKCS#1 DER) is `public`; the first lasts `first`.
    pub fn app(&self, id: u64, public: Vec<u8>, first: Duration) {
        *self.fake.app.lock().unwrap() = Some((id, public));
        *self.fake.first_token_lasts.lock().unwrap() = Some(first);
    }

    /// The comments made, as they read now.
    pub fn comments(&self) -> Vec<Value> {
        self.fake.comments.lock().unwrap().clone()
    }

    pub fn minted(&self) -> u32 {
        self.fake.minted.load(Ordering::SeqCst)
    }

    /// Its webhook `id` delivers to `bridge`, signed with `secret`.
    pub fn hook(&self, bridge: SocketAddr, secret: &str, id: u64) {
        *self.fake.hook.lock().unwrap() = Some(Hook { bridge, secret: secret.into(), id, attempts: Vec::new() });
    }

    /// The webhook delivers to `bridge` from now on (a bridge started again elsewhere), its attempts kept.
    pub fn repoint(&self, bridge: SocketAddr) {
        self.fake.hook.lock().unwrap().as_mut().expect("a webhook").bridge = bridge;
    }

    /// The webhook delivers `payload` as event `kind` with delivery id `guid`, as GitHub does; returns what the bridge
    /// answered (0: no answer).
    pub async fn send(&self, kind: &str, guid: &str, payload: &Value) -> u16 {
        attempt(&self.fake, kind, guid, payload, false).await
    }

    /// Every attempt the webhook made, oldest first.
    pub fn attempts(&self) -> Vec<HookAttempt> {
        self.fake.hook.lock().unwrap().as_ref().map(|h| h.attempts.clone()).unwrap_or_default()
    }

    /// Each call records the phase of the WorkEvent `name` as the API server has it then.
    pub fn watch_event(&self, events: kube::Api<WorkEvent>, name: &str) {
        *self.fake.watched.lock().unwrap() = Some((events, name.to_string()));
    }
}

async fn handle(State(fake): State<Arc<Fake>>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let path = uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let watched = fake.watched.lock().unwrap().clone();
    let phase = match watched {
        Some((events, name)) => {
            events.get_opt(&name).await.ok().flatten().and_then(|ev| ev.status?.phase).map(|p| p.to_string())
        }
        None => None,
    };
    fake.calls.lock().unwrap().push(Call {
        method: method.to_string(),
        path: path.clone(),
        authorization: authorization.clone(),
        body: body.clone(),
        phase,
    });
    if fake.stall.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    if fake.fail_next.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
        return (StatusCode::BAD_GATEWAY, axum::Json(json!({"message": "Server Error"}))).into_response();
    }
    let route = path.split('?').next().unwrap_or_default();
    if let Some(job) = route.strip_prefix("/_logs/").and_then(|j| j.parse::<u64>().ok()) {
        let log = fake.logs.lock().unwrap().get(&job).cloned();
        return log.map_or_else(|| StatusCode::NOT_FOUND.into_response(), |text| text.into_response());
    }
    let job_logs = regex::Regex::new(r"/repos/[^/]+/[^/]+/actions/jobs/(\d+)/logs$").unwrap();
    if let Some(job) = job_logs.captures(route).and_then(|c| c[1].parse::<u64>().ok()) {
        if !authorization.starts_with("token ") {
            return refused(StatusCode::UNAUTHORIZED, "Requires authentication");
        }
        if !fake.logs.lock().unwrap().contains_key(&job) {
            return refused(StatusCode::NOT_FOUND, "Not Found");
        }
        let addr = fake.addr.lock().unwrap().expect("serving");
        let to = format!("http://{addr}/_logs/{job}");
        return (StatusCode::FOUND, [(axum::http::header::LOCATION, to)]).into_response();
    }
    if route.ends_with("/installation") && method == Method::GET {
        if let Err(why) = check_jwt(&fake, &authorization) {
            return refused(StatusCode::UNAUTHORIZED, &why);
        }
        return axum::Json(json!({"id": 77})).into_response();
    }
    if route.ends_with("/app/installations/77/access_tokens") && method == Method::POST {
        if let Err(why) = check_jwt(&fake, &authorization) {
            return refused(StatusCode::UNAUTHORIZED, &why);
        }
        let n = fake.minted.fetch_add(1, Ordering::SeqCst) + 1;
        let lasts = if n == 1 {
            fake.first_token_lasts.lock().unwrap().unwrap_or(Duration::from_secs(3600))
        } else {
            Duration::from_secs(3600)
        };
        let expires = k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::try_from(lasts).unwrap();
        return (
            StatusCode::CREATED,
            axum::Json(json!({"token": format!("ghs_{n}"), "expires_at": expires.to_string()})),
        )
            .into_response();
    }
    if let Some(answer) = hook_call(&fake, &method, route) {
        if !authorization.starts_with("token ") {
            return refused(StatusCode::UNAUTHORIZED, "Requires authentication");
        }
        return answer;
    }
    if !authorization.starts_with("token ") {
        return refused(StatusCode::UNAUTHORIZED, "Requires authentication");
    }
    if route.ends_with("/reactions") && method == Method::POST {
        return (StatusCode::CREATED, axum::Json(json!({"id": 1, "content": body["content"]}))).into_response();
    }
    if route.ends_with("/comments") && method == Method::POST {
        let mut comments = fake.comments.lock().unwrap();
        let comment = json!({"id": 900 + comments.len() as u64, "body": body["body"], "path": route});
        comments.push(comment.clone());
        return (StatusCode::CREATED, axum::Json(comment)).into_response();
    }
    if let Some(id) = route.rsplit_once("/issues/comments/").and_then(|(_, id)| id.parse::<u64>().ok())
        && method == Method::PATCH
    {
        let mut comments = fake.comments.lock().unwrap();
        let Some(comment) = comments.iter_mut().find(|c| c["id"] == json!(id)) else {
            return refused(StatusCode::NOT_FOUND, "Not Found");
        };
        comment["body"] = body["body"].clone();
        return axum::Json(comment.clone()).into_response();
    }
    if route.ends_with("/comments") && method == Method::GET {
        return axum::Json(Value::Array(fake.comments.lock().unwrap().clone())).into_response();
    }
    refused(StatusCode::NOT_FOUND, "Not Found")
}

/// One delivery attempt of the webhook to the bridge, recorded with what the bridge answered.
async fn attempt(fake: &Fake, kind: &str, guid: &str, payload: &Value, redelivery: bool) -> u16 {
    let Some((bridge, secret, hook)) = fake.hook.lock().unwrap().as_ref().map(|h| (h.bridge, h.secret.clone(), h.id))
    else {
        panic!("no webhook: call FakeGithub::hook first");
    };
    let body = serde_json::to_vec(payload).unwrap();
    let signature = worksession::bridge::github::sign(secret.as_bytes(), &body);
    let hook = hook.to_string();
    let headers = [
        ("Content-Type", "application/json"),
        ("X-GitHub-Event", kind),
        ("X-GitHub-Delivery", guid),
        ("X-GitHub-Hook-ID", hook.as_str()),
        ("X-Hub-Signature-256", signature.as_str()),
    ];
    let answer = crate::support::http(bridge, "POST", "/webhooks/github", &headers, &body).await;
    let status_code = answer.map(|(status, _)| status).unwrap_or(0);
    let mut kept = fake.hook.lock().unwrap();
    let hook = kept.as_mut().unwrap();
    let id = 1000 + hook.attempts.len() as u64;
    let at = k8s_openapi::jiff::Timestamp::now();
    let (guid, event, payload) = (guid.to_string(), kind.to_string(), payload.clone());
    hook.attempts.push(HookAttempt { id, guid, event, payload, status_code, redelivery, at });
    status_code
}

/// The webhook's deliveries (`GET .../hooks/{id}/deliveries`, newest first) and a redelivery
/// (`POST .../deliveries/{attempt}/attempts`, made after the answer, as GitHub queues it); `None` for other calls.
fn hook_call(fake: &Arc<Fake>, method: &Method, route: &str) -> Option<Response> {
    let hook = fake.hook.lock().unwrap().clone()?;
    let deliveries = format!("/hooks/{}/deliveries", hook.id);
    let (_, rest) = route.split_once(&deliveries)?;
    if rest.is_empty() && method == Method::GET {
        let listed: Vec<Value> = hook
            .attempts
            .iter()
            .rev()
            .map(|a| {
                json!({"id": a.id, "guid": a.guid, "delivered_at": a.at.to_string(), "redelivery": a.redelivery,
                    "status_code": a.status_code, "event": a.event})
            })
            .collect();
        return Some(axum::Json(Value::Array(listed)).into_response());
    }
    let id: u64 = rest.strip_prefix('/')?.strip_suffix("/attempts")?.parse().ok()?;
    if method != Method::POST {
        return None;
    }
    let Some(original) = hook.attempts.iter().find(|a| a.id == id).cloned() else {
        return Some(refused(StatusCode::NOT_FOUND, "Not Found"));
    };
    let fake = fake.clone();
    tokio::spawn(async move {
        attempt(&fake, &original.event, &original.guid, &original.payload, true).await;
    });
    Some((StatusCode::ACCEPTED, axum::Json(json!({}))).into_response())
}

fn refused(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"message": message}))).into_response()
}

/// A JWT (`Bearer ...`) for the App: RS256 over its header and claims by the App's key, `iss` its id, not expired.
fn check_jwt(fake: &Fake, authorization: &str) -> Result<(), String> {
    let Some((id, public)) = fake.app.lock().unwrap().clone() else { return Err("no App here".into()) };
    let jwt = authorization.strip_prefix("Bearer ").ok_or("not a Bearer JWT")?;
    let mut parts = jwt.rsplitn(2, '.');
    let (signature, signed) = (parts.next().ok_or("no signature")?, parts.next().ok_or("no claims")?);
    let signature = URL_SAFE_NO_PAD.decode(signature).map_err(|e| e.to_string())?;
    ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, public)
        .verify(signed.as_bytes(), &signature)
        .map_err(|_| "the JWT is not signed by the App's key".to_string())?;
    let claims = signed.split('.').nth(1).ok_or("no claims")?;
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    if claims["iss"] != json!(id.to_string()) {
        return Err(format!("iss {} is not the App", claims["iss"]));
    }
    if claims["exp"].as_i64().unwrap_or(0) <= k8s_openapi::jiff::Timestamp::now().as_second() {
        return Err("expired".into());
    }
    Ok(())
}
