//! The agent's Prometheus metrics (prefix `worksession_agent`), counted by the reconcile as it executes plans.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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
