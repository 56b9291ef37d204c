//! Telemetry: tracing set-up, the agent's Prometheus metrics, and the admin endpoints (`/metrics`, `/livez`,
//! `/readyz`) that the agent and the bridge serve on their admin address.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Sets up `tracing`: `RUST_LOG`-style filter (default `info`), JSON lines when `json`.
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}

/// `category="..."`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CategoryLabel {
    /// Stable error category (never an object name).
    pub category: &'static str,
}

/// `resumed="true|false"`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResumedLabel {
    /// Whether the respawn resumed the conversation.
    pub resumed: &'static str,
}

/// `reason="PaneDied"`, ...
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// The decision table's reason.
    pub reason: &'static str,
}

/// `via="Pasted|Resumed|Fresh"`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ViaLabel {
    /// How the event reached the harness.
    pub via: &'static str,
}

/// The agent's metrics, under the prefix `worksession_agent`.
#[derive(Clone)]
pub struct AgentMetrics {
    /// Reconciles run.
    pub reconciles: Counter,
    /// Reconciles that failed, by category.
    pub reconcile_errors: Family<CategoryLabel, Counter>,
    /// Reconcile duration in seconds.
    pub reconcile_duration: Histogram,
    /// Respawns, by whether they resumed.
    pub respawns: Family<ResumedLabel, Counter>,
    /// Resume failures, by reason.
    pub resume_failures: Family<ReasonLabel, Counter>,
    /// Events delivered, by how.
    pub events_delivered: Family<ViaLabel, Counter>,
}

impl AgentMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            reconciles: Counter::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            respawns: Family::default(),
            resume_failures: Family::default(),
            events_delivered: Family::default(),
        };
        registry.register("reconciles", "Reconciles run", m.reconciles.clone());
        registry.register("reconcile_errors", "Reconciles that failed, by category", m.reconcile_errors.clone());
        registry.register("reconcile_duration_seconds", "Reconcile duration", m.reconcile_duration.clone());
        registry.register("respawns", "Harness respawns, by whether they resumed", m.respawns.clone());
        registry.register("resume_failures", "Failed resumes, by reason", m.resume_failures.clone());
        registry.register("events_delivered", "WorkEvents delivered, by how", m.events_delivered.clone());
        m
    }
}

/// Health and metrics served on the admin address.
#[derive(Clone)]
pub struct Admin {
    registry: Arc<Registry>,
    ready: Arc<AtomicBool>,
}

impl Admin {
    /// Serves `registry`; `/readyz` answers 200 once `ready` is set.
    pub fn new(registry: Registry, ready: Arc<AtomicBool>) -> Self {
        Self { registry: Arc::new(registry), ready }
    }

    /// The admin routes.
    pub fn router(self) -> Router {
        Router::new()
            .route("/metrics", get(metrics))
            .route("/livez", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .with_state(self)
    }

    /// Binds `addr` (port 0 picks a free port, logged) and serves in the background; returns the bound address.
    pub async fn serve(self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        tracing::info!(event = "admin.listening", addr = %bound, "admin endpoints: /metrics /livez /readyz");
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, self.router()).await {
                tracing::error!(error = %e, "admin server stopped");
            }
        });
        Ok(bound)
    }
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &admin.registry) {
        Ok(()) => ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body)
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn readyz(State(admin): State<Admin>) -> impl IntoResponse {
    if admin.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}
