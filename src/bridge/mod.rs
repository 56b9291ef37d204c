//! The webhook bridge: GitHub and generic webhooks become WorkEvents (and WorkSessions when missing) on the API
//! server, and only then are they acknowledged. Handlers parse and answer; [`Bridge`] does the work; [`ApiError`]
//! is the one error type, mapped to HTTP statuses.

mod answers;
pub mod approval_comment;
mod ci;
pub mod config;
pub mod feedback;
pub mod github;
pub mod logs;
pub mod metrics;
pub mod redeliver;
mod route;
pub mod status_comment;
mod waiting_comment;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::api::{
    EventSource, NODE_LABEL, SESSION_LABEL, SourceType, WorkEvent, WorkEventSpec, WorkSession, node_label_value,
};
use crate::store::{Sink, SinkError};
use crate::telemetry::Admin;
pub use config::BridgeConfig;
use config::{ROUTE_LABEL, slug};
pub use metrics::BridgeMetrics;
use metrics::{IgnoredLabels, RequestLabels};

/// Seconds a sender is asked to wait before retrying after a 503.
pub const RETRY_AFTER_SECONDS: u64 = 5;

/// Everything a handler can answer besides success.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Missing or wrong signature or token.
    #[error("unauthorized: {0}")]
    Unauthorized(&'static str),
    /// The token is not trusted with what the request asks for.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The body is over `maxBodyBytes`.
    #[error("body over {0} bytes")]
    TooLarge(usize),
    /// Malformed request.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The endpoint is not configured, or the work item has no WorkSession and nothing creates it.
    #[error("not found: {0}")]
    NotFound(String),
    /// The API server refused the object.
    #[error("{0}")]
    Rejected(String),
    /// The API server is unavailable: the sender should retry.
    #[error("{0}")]
    Unavailable(String),
}

impl From<SinkError> for ApiError {
    fn from(e: SinkError) -> Self {
        match e {
            SinkError::Unavailable(m) => ApiError::Unavailable(m),
            SinkError::Rejected(m) => ApiError::Rejected(m),
        }
    }
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Rejected(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut response = (status, axum::Json(json!({"status": "error", "reason": self.to_string()}))).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        response
    }
}

/// A successful answer: what happened to the delivery.
fn answer(status: StatusCode, outcome: &str, detail: Value) -> Response {
    let mut body = json!({"status": outcome});
    if let (Some(b), Some(d)) = (body.as_object_mut(), detail.as_object()) {
        b.extend(d.clone());
    }
    (status, axum::Json(body)).into_response()
}

/// The cap of a route on the WorkSessions it creates.
#[derive(Clone, Copy)]
struct Cap<'r> {
    /// The route's id, the value of [`ROUTE_LABEL`] on its sessions.
    route: &'r str,
    /// The most sessions it keeps.
    max: usize,
}

/// How long a delivery may wait on the API server before it is answered 503 (GitHub gives up after 10 s).
pub const API_TIMEOUT: Duration = Duration::from_secs(8);

/// The bridge's state: config (hot-reloaded), sink and metrics.
pub struct Bridge<S> {
    config: watch::Receiver<Arc<BridgeConfig>>,
    sink: S,
    metrics: BridgeMetrics,
    /// Held while a capped route counts its sessions and creates one, so this bridge never goes past a cap.
    creating: tokio::sync::Mutex<()>,
    /// Held while a CI result (or a log's end) reads its commit's batches and the session's count, then writes.
    ci: Arc<tokio::sync::Mutex<()>>,
    /// Where a failing job's log's end is asked for (with `github.api` at start).
    tails: Option<tokio::sync::mpsc::Sender<logs::Tail>>,
}

impl<S: Sink> Bridge<S> {
    /// A bridge writing to `sink`.
    pub fn new(config: watch::Receiver<Arc<BridgeConfig>>, sink: S, metrics: BridgeMetrics) -> Arc<Self> {
        let (creating, ci) = (tokio::sync::Mutex::new(()), Arc::new(tokio::sync::Mutex::new(())));
        let api = config.borrow().github.as_ref().and_then(|g| g.api.clone());
        let github = api.and_then(|api| match feedback::github_of(&api) {
            Ok(github) => Some(Arc::new(github)),
            Err(e) => {
                tracing::warn!(event = "bridge.ci_logs_off", error = %e, "no CI log tails: no API client");
                None
            }
        });
        let tails = github.map(|github| logs::start(github, sink.clone(), config.clone(), ci.clone()));
        Arc::new(Self { config, sink, metrics, creating, ci, tails })
    }

    /// The webhook routes.
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/webhooks/github", post(route::github_handler::<S>))
            .route("/webhooks/generic", post(generic_handler::<S>))
            .layer(axum::extract::DefaultBodyLimit::disable()) // the handlers enforce maxBodyBytes (reloadable)
            .with_state(self)
    }

    fn count(&self, endpoint: &'static str, response: &Response) {
        let status = response.status().as_u16();
        self.metrics.requests.get_or_create(&RequestLabels { endpoint, status }).inc();
    }

    /// Asks for the end of a failing `github-actions` job's log for the batch `event` that holds `check`'s line.
    fn ask_tail(&self, namespace: &str, event: &str, subject: &github::Subject, check: &github::Check) {
        let (Some(tails), Some(job), true) = (&self.tails, check.job, check.failed) else { return };
        let tail = logs::Tail {
            namespace: namespace.to_string(),
            event: event.to_string(),
            repository: subject.repository.clone(),
            job,
            name: check.name.clone(),
        };
        if tails.try_send(tail).is_err() {
            tracing::info!(event = "bridge.ci_log_left_out", work_event = event, job, why = "too many waiting");
        }
    }

    /// A 202 `ignored` answer saying why, counted under `reason` (one of [`metrics::IGNORED_REASONS`]).
    fn ignored(&self, reason: &'static str, why: String) -> Response {
        debug_assert!(metrics::IGNORED_REASONS.contains(&reason), "{reason} is listed");
        self.metrics.ignored.get_or_create(&IgnoredLabels { reason }).inc();
        tracing::info!(event = "bridge.ignored", reason, "{why}");
        answer(StatusCode::ACCEPTED, "ignored", json!({"reason": why}))
    }

    /// Writes the delivery: the session (created from `create` when missing, within the route's `cap`), then the
    /// event.
    async fn deliver(
        &self,
        namespace: &str,
        session: &str,
        create: Option<(WorkSession, Option<Cap<'_>>)>,
        event: WorkEvent,
    ) -> Result<Response, ApiError> {
        let started = Instant::now();
        let result = tokio::time::timeout(API_TIMEOUT, self.deliver_inner(namespace, session, create, event))
            .await
            .unwrap_or_else(|_| {
                Err(ApiError::Unavailable(format!("the API server did not answer within {}s", API_TIMEOUT.as_secs())))
            });
        self.metrics.api_latency.observe(started.elapsed().as_secs_f64());
        result
    }

    async fn deliver_inner(
        &self,
        namespace: &str,
        session: &str,
        create: Option<(WorkSession, Option<Cap<'_>>)>,
        mut event: WorkEvent,
    ) -> Result<Response, ApiError> {
        let ws = match create {
            Some((create, Some(cap))) => match self.session_within(namespace, session, create, cap).await? {
                Ok(ws) => ws,
                Err(why) => return Ok(self.ignored("max_sessions", why)),
            },
            create => self.session(namespace, session, create.map(|(ws, _)| ws)).await?,
        };
        if ws.metadata.deletion_timestamp.is_some() {
            // Its events go with it (the agent's finalizer deletes them): one written now would be lost once
            // acknowledged. After it is gone, a route makes a new session for the retry.
            return Err(ApiError::Unavailable(format!("WorkSession {namespace}/{session} is being deleted; retry")));
        }
        let labels = event.metadata.labels.get_or_insert_with(Default::default);
        labels.insert(SESSION_LABEL.into(), session.into());
        // An unplaced session's events stay unlabelled: the controller labels them when it places the session.
        if let Some(node) = &ws.spec.node_name {
            labels.insert(NODE_LABEL.into(), node_label_value(node));
        }
        let name = event.metadata.name.clone().unwrap_or_default();
        if self.sink.create_event(namespace, &event).await? {
            self.metrics.events_created.inc();
            tracing::info!(event = "bridge.accepted", namespace, session, work_event = name, "delivery written");
            Ok(answer(StatusCode::CREATED, "created", json!({"workEvent": name, "namespace": namespace})))
        } else {
            self.metrics.duplicates.inc();
            tracing::info!(event = "bridge.duplicate", namespace, session, work_event = name, "redelivery ignored");
            Ok(answer(StatusCode::OK, "duplicate", json!({"workEvent": name, "namespace": namespace})))
        }
    }
}

impl<S: Sink> Bridge<S> {
    /// The WorkSession, created from `create` only while the route keeps fewer than `cap.max` sessions (counted on the
    /// store, not from memory); `Ok(Err(why))` when it is missing and the cap is reached: events to existing sessions
    /// still flow.
    async fn session_within(
        &self,
        namespace: &str,
        name: &str,
        create: WorkSession,
        cap: Cap<'_>,
    ) -> Result<Result<WorkSession, String>, ApiError> {
        if let Some(ws) = self.sink.session(namespace, name, None).await? {
            return Ok(Ok(ws));
        }
        let _creating = self.creating.lock().await;
        // Made meanwhile by a delivery that held the lock (an issue's `opened` and its first comment): it exists now,
        // and its events flow.
        if let Some(ws) = self.sink.session(namespace, name, None).await? {
            return Ok(Ok(ws));
        }
        let held = self.sink.count_sessions(namespace, (ROUTE_LABEL, cap.route)).await?;
        if held >= cap.max {
            return Ok(Err(format!(
                "route {} keeps {held} WorkSessions in {namespace}, its maxSessions is {}: no new session for {name}",
                cap.route, cap.max
            )));
        }
        self.session(namespace, name, Some(create)).await.map(Ok)
    }

    /// The WorkSession (from the store's cache where it keeps one; creating it from `create` when missing).
    async fn session(&self, namespace: &str, name: &str, create: Option<WorkSession>) -> Result<WorkSession, ApiError> {
        match self.sink.session(namespace, name, create).await? {
            Some(ws) => Ok(ws),
            None => Err(ApiError::NotFound(format!("no WorkSession {namespace}/{name}, and no rule creates it"))),
        }
    }
}

/// The WorkEvent name for a delivery id: the id itself when it is a DNS label, else a hash of it.
///
/// Case is kept: an id with capitals is hashed (`A1` and `a1` are two deliveries), never lowercased.
pub fn event_name(prefix: &str, delivery_id: &str) -> String {
    let id = delivery_id;
    let label = id.len() <= 200
        && !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if label && !id.starts_with('-') && !id.ends_with('-') {
        format!("{prefix}-{id}")
    } else {
        let digest = Sha256::digest(delivery_id.as_bytes());
        format!("{prefix}-h{}", &hex::encode(digest)[..40])
    }
}

async fn read_body(request: Request, limit: usize) -> Result<(HeaderMap, axum::body::Bytes), ApiError> {
    let (parts, body) = request.into_parts();
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(ApiError::TooLarge(limit));
    }
    let bytes = axum::body::to_bytes(Body::new(body), limit).await.map_err(|_| ApiError::TooLarge(limit))?;
    Ok((parts.headers, bytes))
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether `ws` is a session of `repository`'s: the bridge made it for that repository (its label), or its
/// checkout is that repository's. A branch `worksession/<workItem>` of another repository routed to the same
/// namespace names it in vain: pushing there takes write access to that repository, not to this one.
pub(crate) fn belongs(ws: &WorkSession, repository: &str) -> bool {
    if let Some(label) = kube::ResourceExt::labels(ws).get(crate::api::REPOSITORY_LABEL) {
        return *label == crate::api::repository_label(repository);
    }
    let Some(url) = ws.spec.workspace.as_ref().map(|w| w.url.to_ascii_lowercase()) else { return false };
    let url = url.trim_end_matches('/').trim_end_matches(".git");
    let repository = repository.to_ascii_lowercase();
    url.strip_suffix(&repository).is_some_and(|head| head.ends_with('/') || head.ends_with(':'))
}

fn work_event(name: String, session: &str, prompt: String, source: EventSource) -> WorkEvent {
    // Never a harness command: what a webhook says is text (`command` stays false).
    WorkEvent::new(&name, WorkEventSpec { session: session.into(), prompt, source: Some(source), ..Default::default() })
}

async fn generic_handler<S: Sink>(State(bridge): State<Arc<Bridge<S>>>, request: Request) -> Response {
    let response = generic(&bridge, request).await.unwrap_or_else(IntoResponse::into_response);
    bridge.count("generic", &response);
    response
}

async fn generic<S: Sink>(bridge: &Bridge<S>, request: Request) -> Result<Response, ApiError> {
    let config = bridge.config.borrow().clone();
    let Some(gen_cfg) = &config.generic else {
        return Err(ApiError::NotFound("the generic webhook is not configured".into()));
    };
    let (headers, body) = read_body(request, config.max_body_bytes).await?;
    let token = header(&headers, "authorization").and_then(|a| a.strip_prefix("Bearer "));
    let token_ok = token.is_some_and(|t| github::same_secret(t.as_bytes(), gen_cfg.token.as_bytes()));
    if !token_ok {
        bridge.metrics.signature_failures.inc();
        return Err(ApiError::Unauthorized("missing or wrong bearer token"));
    }
    let payload: Value =
        serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("malformed JSON: {e}")))?;
    let field = |k: &str| payload.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let missing = |k: &str| ApiError::BadRequest(format!("missing field {k}"));
    let work_item = field("workItem").ok_or_else(|| missing("workItem"))?;
    let prompt = field("prompt").ok_or_else(|| missing("prompt"))?;
    let delivery = field("deliveryId").ok_or_else(|| missing("deliveryId"))?;
    let namespace = field("namespace").unwrap_or(&gen_cfg.namespace);
    if !gen_cfg.allows(namespace) {
        return Err(ApiError::Forbidden(format!("namespace {namespace:?} is not allowed for this token")));
    }
    if slug(work_item) != work_item {
        return Err(ApiError::BadRequest(format!("workItem {work_item:?} is not a DNS label")));
    }
    let source = EventSource { type_: SourceType::Generic, delivery_id: Some(delivery.into()), ..Default::default() };
    let event = work_event(event_name("gen", delivery), work_item, prompt.into(), source);
    bridge.deliver(namespace, work_item, None, event).await
}

/// How to run the bridge.
pub struct BridgeOptions {
    /// The config, kept current by a reloader.
    pub config: watch::Receiver<Arc<BridgeConfig>>,
    /// Where webhooks are received.
    pub listen: SocketAddr,
    /// Where `/metrics`, `/livez`, `/readyz` are served.
    pub admin_addr: Option<SocketAddr>,
    /// The API server to watch the bridge's WorkEvents on for GitHub feedback (with `github.api` set); `None` in local
    /// mode, which gives none.
    pub feedback: Option<kube::Client>,
}

/// How often archived sessions whose deletion time passed are looked for (`onClose: Delete`).
pub const DELETE_SWEEP: Duration = Duration::from_secs(60);

/// Runs the bridge, writing to `sink`, until the process is asked to stop.
pub async fn run<S: Sink + Clone>(sink: S, options: BridgeOptions) -> std::io::Result<()> {
    let mut registry = Registry::with_prefix("worksession_bridge");
    let metrics = BridgeMetrics::register(&mut registry);
    let ready = Arc::new(AtomicBool::new(false));
    if let Some(addr) = options.admin_addr {
        Admin::new(registry, ready.clone()).serve(addr).await?;
    }
    tokio::spawn({
        let sink = sink.clone();
        async move {
            loop {
                ready.store(sink.ready().await, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    });
    let api = options.config.borrow().github.as_ref().and_then(|g| g.api.clone());
    if let Some(api) = &api {
        // Beside the webhooks, in both modes: deliveries the bridge did not take are asked of GitHub again.
        let github = Arc::new(feedback::github_of(api)?);
        tokio::spawn(redeliver::run(github, options.config.clone(), metrics.clone()));
    }
    if let (Some(client), Some(api)) = (options.feedback, api) {
        let github = Arc::new(feedback::github_of(&api)?);
        let events = kube::Api::all(client.clone());
        let interval = status_comment::MIN_INTERVAL;
        tokio::spawn(status_comment::run(client.clone(), github.clone(), options.config.clone(), interval));
        tokio::spawn(approval_comment::run(client.clone(), github.clone(), options.config.clone()));
        tokio::spawn(feedback::run(client, events, github, options.config.clone(), metrics.clone()));
    }
    tokio::spawn({
        let (sink, metrics) = (sink.clone(), metrics.clone());
        async move {
            loop {
                tokio::time::sleep(DELETE_SWEEP).await;
                match sink.delete_due(k8s_openapi::jiff::Timestamp::now()).await {
                    Ok(deleted) => {
                        for session in deleted {
                            metrics.lifecycle.get_or_create(&metrics::LifecycleLabels { action: "deleted" }).inc();
                            tracing::info!(
                                event = "bridge.deleted",
                                session,
                                "archived past its deleteAfterSeconds: deleted"
                            );
                        }
                    }
                    Err(e) => {
                        tracing::warn!(event = "bridge.delete_failed", error = %e, "deleting archived sessions failed; trying again")
                    }
                }
            }
        }
    });
    let listener = tokio::net::TcpListener::bind(options.listen).await?;
    tracing::info!(event = "bridge.listening", addr = %listener.local_addr()?, "webhooks: POST /webhooks/github, /webhooks/generic");
    let app = Bridge::new(options.config, sink, metrics).router();
    axum::serve(listener, app).with_graceful_shutdown(crate::signal::shutdown()).await
}

#[cfg(test)]
mod tests;
