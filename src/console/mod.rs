//! `worksession console`: a web page for people, beside the pipeline (it reads what status says, as `get` and `peek`
//! do, and writes one thing: a person's answer to a permission request, as `worksession approve` makes it). Every WorkSession with what it is doing, kept current by the watch ([`Source::changes`]
//! pushed as server-sent events: no polling of the API server); one session's page with its live screen (read by the same [`crate::cli::read`] as
//! `get` and `peek`, colours as [`ansi`] runs), its conditions, its WorkEvents and its Kubernetes Events. The page and
//! its script are in the binary; it is served on loopback with the user's own credentials, answers `GET` and one
//! `POST` (the answer: JSON, from its own origin only), only for its own `Host` (a page elsewhere cannot reach it by
//! DNS rebinding), and every text it shows is set as text.

pub mod ansi;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::Stream;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;
use serde_json::{Value, json};

use crate::api::{WorkEvent, WorkSession};
use crate::cli::read::Source;
use crate::core::ConditionType;

/// How many lines of the screen a session's page shows.
pub const SCREEN_LINES: usize = 60;

const INDEX: &str = include_str!("assets/index.html");
const SESSION: &str = include_str!("assets/session.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");

/// The page's security headers: its own script and style only, nothing framed, no referrer.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; \
                   base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One row of the list.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// Its phase.
    pub phase: String,
    /// What the harness does where its hooks say (`Working`, `WaitingForInput`, `Idle`).
    pub activity: String,
    /// `True`/`False` and the reason of `Resumed`.
    pub resumed: String,
    /// The conversation id.
    pub conversation: String,
    /// Its node.
    pub node: String,
    /// The harness profile.
    pub harness: String,
    /// Its age, like kubectl's.
    pub age: String,
    /// The words of what went wrong last, if anything is wrong now.
    pub failure: String,
    /// Its work item's pull request: `#57 Open, CI Failing`.
    pub pull_request: String,
    /// What its conversations spent: `4200 tokens in 4 turns, $0.0276`.
    pub spent: String,
}

/// `Ready=False` reasons that are a state, not a failure.
const NOT_FAILURES: &[&str] = &[
    "Idle",
    "Archived",
    "BudgetReached",
    "Suspended",
    "Moving",
    "Starting",
    "Verifying",
    "Preparing",
    "HarnessNotRunning",
    "WaitingForDiscovery",
];

/// `Resumed=False` reasons that are no failure: nothing to resume, or resuming not asked for.
const NOT_RESUME_FAILURES: &[&str] = &["NoRecordedSession", "ResumeDisabled", "HarnessCannotResume"];

/// The row of `ws` at `now`.
pub fn row(ws: &WorkSession, now: Timestamp) -> Row {
    let st = ws.status.clone().unwrap_or_default();
    let condition = |t: ConditionType| st.conditions.iter().find(|c| c.type_ == t.as_str());
    let ready = condition(ConditionType::Ready);
    let failure = ready
        .filter(|c| c.status == "False" && !NOT_FAILURES.contains(&c.reason.as_str()))
        .map(|c| format!("{}: {}", c.reason, c.message))
        .or_else(|| {
            condition(ConditionType::Resumed)
                .filter(|c| c.status == "False" && !NOT_RESUME_FAILURES.contains(&c.reason.as_str()))
                .map(|c| format!("{}: {}", c.reason, c.message))
        })
        .unwrap_or_default();
    Row {
        namespace: ws.namespace().unwrap_or_else(|| crate::store::DEFAULT_NAMESPACE.into()),
        name: ws.name_any(),
        phase: st.phase.map(|p| p.to_string()).unwrap_or_default(),
        activity: condition(ConditionType::Activity).map(|c| c.reason.clone()).unwrap_or_default(),
        resumed: condition(ConditionType::Resumed).map(|c| format!("{} {}", c.status, c.reason)).unwrap_or_default(),
        conversation: st.harness_session_id.clone().unwrap_or_default(),
        node: ws.spec.node_name.clone().unwrap_or_default(),
        harness: ws.spec.harness.clone(),
        age: crate::cli::get::age(ws.metadata.creation_timestamp.as_ref().map(|t| t.0), now),
        failure,
        pull_request: st.pull_request.as_ref().map(crate::cli::get::pull_request_words).unwrap_or_default(),
        spent: st.usage.as_ref().map(crate::cli::get::usage_words).unwrap_or_default(),
    }
}

/// The rows of every session, sorted by namespace and name.
fn rows(sessions: Vec<WorkSession>) -> Vec<Row> {
    let now = Timestamp::now();
    let mut rows: Vec<Row> = sessions.iter().map(|ws| row(ws, now)).collect();
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    rows
}

/// A WorkEvent as a session's page lists it.
fn event_json(ev: &WorkEvent) -> Value {
    let st = ev.status.clone().unwrap_or_default();
    let source = ev.spec.source.clone().unwrap_or_default();
    // Only a web link is a link: a `javascript:` URL from a hand-made event never becomes one.
    let url = source.url.filter(|u| u.starts_with("https://") || u.starts_with("http://"));
    json!({
        "name": ev.name_any(),
        "phase": st.phase.map(|p| p.to_string()).unwrap_or_else(|| "Pending".into()),
        "via": st.via.map(|v| v.to_string()).unwrap_or_default(),
        "source": format!("{:?}", source.type_).to_lowercase(),
        "url": url,
        "created": ev.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()).unwrap_or_default(),
        "deliveredAt": st.delivered_at.map(|t| t.0.to_string()).unwrap_or_default(),
        "message": st.message.unwrap_or_default(),
    })
}

struct Console<S> {
    source: S,
    /// The `Host` values this console answers (its own address, as a browser names it).
    hosts: Vec<String>,
    /// The secret of the address it printed: a request carries it (`?token=`, once) or its cookie.
    token: String,
}

/// The cookie that carries the console's token after the first page.
pub const COOKIE: &str = "worksession-console";

/// The console's routes over `source`, answering requests for `hosts` that carry `token` only.
pub fn router<S: Source>(source: S, hosts: Vec<String>, token: String) -> Router {
    let console = Arc::new(Console { source, hosts, token });
    Router::new()
        .route("/", get(|| async { html(INDEX) }))
        .route("/sessions/{namespace}/{name}", get(|| async { html(SESSION) }))
        .route("/assets/console.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/assets/console.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
        .route("/api/sessions", get(list::<S>))
        .route("/api/watch", get(watch::<S>))
        .route("/api/sessions/{namespace}/{name}", get(detail::<S>))
        .route("/api/sessions/{namespace}/{name}/screen", get(screen::<S>))
        .route("/api/sessions/{namespace}/{name}/answer", post(answer_request::<S>))
        .layer(axum::middleware::from_fn_with_state(console.clone(), guard::<S>))
        .with_state(console)
}

/// Only its own `Host`, only with its token (another user of the machine reaches the port, not the token), never for
/// another site's page, and the headers every answer carries.
async fn guard<S: Source>(State(console): State<Arc<Console<S>>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    if !console.hosts.iter().any(|h| h == host) {
        return (StatusCode::MISDIRECTED_REQUEST, "not this console's address").into_response();
    }
    // A request a page of another site makes (an <img> pointed here): the browser says so.
    let site = headers.get("sec-fetch-site").and_then(|h| h.to_str().ok());
    if site.is_some_and(|s| s != "same-origin" && s != "none") {
        return (StatusCode::FORBIDDEN, "not from this console's own page").into_response();
    }
    // The one write: only from this console's own page (its origin, its script's JSON; a form of another site can
    // send neither, and a browser says where a request comes from where it says it at all: not to a plain-http
    // address other than loopback), never a navigation.
    if request.method() != axum::http::Method::GET {
        let origin = headers.get(header::ORIGIN).and_then(|h| h.to_str().ok());
        let json = headers.get(header::CONTENT_TYPE).and_then(|h| h.to_str().ok()) == Some("application/json");
        if site.is_some_and(|s| s != "same-origin") || origin != Some(&format!("http://{host}")) || !json {
            let why = json!({"error": "an answer comes only from this console's own page"});
            return (StatusCode::FORBIDDEN, axum::Json(why)).into_response();
        }
    }
    let query = request.uri().query().unwrap_or_default();
    let given = query.split('&').find_map(|kv| kv.strip_prefix("token=")).map(str::to_string);
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .find_map(|c| c.trim().strip_prefix(COOKIE).and_then(|c| c.strip_prefix('=')).map(str::to_string));
    let ours = |t: &Option<String>| {
        t.as_deref().is_some_and(|t| crate::bridge::github::same_secret(t.as_bytes(), console.token.as_bytes()))
    };
    let given_ours = ours(&given);
    if !given_ours && !ours(&cookie) {
        let why = "open the address the console printed (it carries its token)";
        return (StatusCode::UNAUTHORIZED, why).into_response();
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if given_ours {
        let cookie = format!("{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/", console.token);
        headers.insert(header::SET_COOKIE, HeaderValue::from_str(&cookie).expect("a token is a header value"));
    }
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn html(body: &'static str) -> Response {
    asset("text/html; charset=utf-8", body)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

fn failed(status: StatusCode, why: String) -> Response {
    (status, axum::Json(json!({"error": why}))).into_response()
}

async fn list<S: Source>(State(console): State<Arc<Console<S>>>) -> Response {
    match console.source.sessions().await {
        Ok(sessions) => axum::Json(json!({"sessions": rows(sessions)})).into_response(),
        Err(why) => failed(StatusCode::BAD_GATEWAY, why),
    }
}

/// The rows now, then again at every change the source reports (a change during an answer is seen after it).
async fn watch<S: Source>(
    State(console): State<Arc<Console<S>>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut changes = console.source.changes();
    changes.mark_changed();
    let stream = futures::stream::unfold((console, changes), |(console, mut changes)| async move {
        changes.changed().await.ok()?;
        let data = match console.source.sessions().await {
            Ok(sessions) => json!({"sessions": rows(sessions)}),
            Err(why) => json!({"error": why}),
        };
        Some((Ok(Event::default().event("sessions").data(data.to_string())), (console, changes)))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

async fn find<S: Source>(console: &Console<S>, namespace: &str, name: &str) -> Result<WorkSession, Response> {
    let sessions = console.source.sessions().await.map_err(|why| failed(StatusCode::BAD_GATEWAY, why))?;
    let found = sessions.into_iter().find(|ws| {
        ws.name_any() == name && ws.namespace().as_deref().unwrap_or(crate::store::DEFAULT_NAMESPACE) == namespace
    });
    found.ok_or_else(|| failed(StatusCode::NOT_FOUND, format!("no WorkSession {namespace}/{name}")))
}

async fn detail<S: Source>(
    State(console): State<Arc<Console<S>>>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, Response> {
    let ws = find(&console, &namespace, &name).await?;
    let (events, kube_events) =
        tokio::join!(console.source.events(&namespace, &name), console.source.kube_events(&namespace, &name));
    let (mut events, events_error) = match events {
        Ok(list) => (list, None),
        Err(why) => (Vec::new(), Some(why)),
    };
    events.sort_by_key(|e| (e.metadata.creation_timestamp.as_ref().map(|t| t.0), e.name_any()));
    let mut conditions = ws.status.clone().unwrap_or_default().conditions;
    conditions.sort_by_key(|c| c.last_transition_time.0);
    let conditions: Vec<Value> = conditions
        .iter()
        .map(|c| {
            json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": c.message,
                        "since": c.last_transition_time.0.to_string()})
        })
        .collect();
    let kube_events = match kube_events {
        Ok(list) => json!(list),
        Err(why) => json!({"error": why}),
    };
    Ok(axum::Json(json!({
        "row": row(&ws, Timestamp::now()),
        "workItem": ws.spec.work_item,
        "workdir": ws.spec.workdir,
        "tmuxSession": ws.status.as_ref().and_then(|s| s.tmux_session.clone()).unwrap_or_default(),
        "conditions": conditions,
        "events": events.iter().map(event_json).collect::<Vec<_>>(),
        "eventsError": events_error,
        "kubeEvents": kube_events,
        "approval": ws.status.as_ref().and_then(|s| s.approval.as_ref()),
    }))
    .into_response())
}

/// A person's answer to a permission request, as the session's page sends it.
#[derive(serde::Deserialize)]
struct Answering {
    request: String,
    decision: crate::api::Decision,
    reason: Option<String>,
}

/// Answers the request the page showed, as the console's user (their credentials, their RBAC).
async fn answer_request<S: Source>(
    State(console): State<Arc<Console<S>>>,
    Path((namespace, name)): Path<(String, String)>,
    axum::Json(a): axum::Json<Answering>,
) -> Response {
    // Only the request the page showed, while it waits: a page left open never answers a later one.
    let ws = match find(&console, &namespace, &name).await {
        Ok(ws) => ws,
        Err(response) => return response,
    };
    let waiting = ws.status.as_ref().and_then(|s| s.approval.as_ref()).filter(|w| w.waiting() && w.id == a.request);
    if waiting.is_none() {
        return failed(StatusCode::CONFLICT, format!("request {} no longer waits", a.request));
    }
    match console.source.answer(&namespace, &name, a.request, a.decision, a.reason).await {
        Ok(said) => axum::Json(json!({"said": said})).into_response(),
        Err(why) => failed(StatusCode::CONFLICT, why),
    }
}

async fn screen<S: Source>(
    State(console): State<Arc<Console<S>>>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Response, Response> {
    let ws = find(&console, &namespace, &name).await?;
    Ok(match console.source.screen(&ws, SCREEN_LINES, true).await {
        Ok(text) => axum::Json(json!({"runs": ansi::runs(text.trim_end())})).into_response(),
        Err(why) => axum::Json(json!({"error": why})).into_response(),
    })
}

/// The `Host` values a browser sends for `addr` (loopback also as `localhost`).
pub fn hosts_for(addr: SocketAddr) -> Vec<String> {
    let mut hosts = vec![addr.to_string()];
    if addr.ip().is_loopback() {
        hosts.push(format!("localhost:{}", addr.port()));
    }
    hosts
}

/// Serves `source` on `listen` until the process is interrupted; prints the address to open (with its token).
pub async fn serve<S: Source>(source: S, listen: SocketAddr) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        eprintln!("worksession console: listening on {addr}, not loopback: whoever has the address sees what you see");
    }
    let token = uuid::Uuid::new_v4().simple().to_string();
    println!("worksession console: http://{addr}/?token={token}");
    // No graceful shutdown: the live pages' streams never end, and an interrupt ends the process.
    axum::serve(listener, router(source, hosts_for(addr), token)).await
}

#[cfg(test)]
mod tests;
