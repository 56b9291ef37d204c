//! Telemetry: tracing set-up and the admin endpoints (`/metrics`, `/livez`,
//! `/readyz`) that the agent and the bridge serve on their admin address.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// Sets up `tracing`: `RUST_LOG`-style filter (default `info`), JSON lines when `json`, colours on a terminal only.
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    // Colours only on a terminal: `kubectl logs` of a pod showed escape codes (found on a real node).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
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
