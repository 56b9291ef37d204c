//! The agent's Prometheus metrics (prefix `worksession_agent`), counted by the reconcile as it executes plans.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::api::{Phase, Via};
use crate::words::ErrorCategory;

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

/// `gateway="anthropic",namespace="team-a"`: a key gateway's requests by the namespace of the room that sent them
/// (bounded by the namespaces with sessions on the node, never by session).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GatewayLabel {
    /// The gateway's name.
    pub gateway: String,
    /// The namespace of the WorkSession the room is given to (empty when its owner file is gone).
    pub namespace: String,
}

/// `via="Pasted|Resumed|Fresh"`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ViaLabel {
    /// How the event reached the harness.
    pub via: &'static str,
}

/// `phase="Running"`, ...
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// A WorkSession phase.
    pub phase: &'static str,
}

/// `namespace="team-a",harness="claude",kind="cacheRead"`: what this agent's sessions spent, by namespace and harness
/// (bounded by the namespaces with sessions on the node and the profiles, never by session).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpentLabel {
    /// The sessions' namespace.
    pub namespace: String,
    /// Their harness.
    pub harness: String,
    /// The token kind: `input`, `output`, `cacheWrite`, `cacheRead`; empty for a cost.
    pub kind: &'static str,
}

/// The `sessions` gauge's label for a session with no status yet.
pub const NO_PHASE: &str = "None";

/// `transition="stop|wake"`: an idle harness stopped, or an idle session woken by a prompt.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IdleLabel {
    /// `stop` or `wake`.
    pub transition: &'static str,
}

/// `addressed="true|false"`: whether a WorkEvent seen on the agent's watch names a session of this node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AddressedLabel {
    /// `true`: its session is this node's.
    pub addressed: &'static str,
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
    /// This agent's WorkSessions, by phase.
    pub sessions: Family<PhaseLabel, Gauge>,
    /// Idle stops and wakes.
    pub idle: Family<IdleLabel, Counter>,
    /// WorkEvent changes received on the agent's watch, by whether their session is this node's (the label
    /// selector keeps `false` at zero).
    pub event_notices: Family<AddressedLabel, Counter>,
    /// tmux observations made (one `list-panes` call each), shared by every session.
    pub tmux_observations: Counter,
    /// Connections of rooms' harnesses the egress proxy refused, by why (`not_allowed`, `internal_address`, ...).
    pub egress_refused: Family<ReasonLabel, Counter>,
    /// Model API requests the key gateways forwarded with their key, by gateway and namespace.
    pub gateway_requests: Family<GatewayLabel, Counter>,
    /// Tokens this agent's sessions spent (their `status.usage`), by namespace, harness and kind.
    pub usage_tokens: Family<SpentLabel, Gauge>,
    /// Their estimated cost in US dollars, by namespace and harness, of the sessions whose cost is known.
    pub usage_cost: Family<SpentLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Sessions with tokens of a model the price table does not know, by namespace and harness.
    pub usage_unpriced: Family<SpentLabel, Gauge>,
}

impl AgentMetrics {
    /// Sets the `sessions` gauge from the phases of every session of this agent.
    pub fn count_sessions(&self, phases: impl IntoIterator<Item = Option<Phase>>) {
        // Every phase is set, zero included, so a phase no session is in any more drops to zero.
        let mut counts: Vec<(&'static str, i64)> = Phase::ALL.iter().map(|p| (p.as_str(), 0)).collect();
        counts.push((NO_PHASE, 0));
        for phase in phases {
            let name = phase.map_or(NO_PHASE, Phase::as_str);
            if let Some((_, n)) = counts.iter_mut().find(|(p, _)| *p == name) {
                *n += 1;
            }
        }
        for (phase, count) in counts {
            self.sessions.get_or_create(&PhaseLabel { phase }).set(count);
        }
    }
}

impl AgentMetrics {
    /// Sets the usage gauges from the `status.usage` of every session of this agent.
    pub fn count_usage<'a>(&self, sessions: impl IntoIterator<Item = &'a crate::api::WorkSession>) {
        type Sums = (crate::api::Tokens, f64, i64);
        let mut sums: std::collections::BTreeMap<(String, String), Sums> = Default::default();
        for ws in sessions {
            let Some(usage) = ws.status.as_ref().and_then(|s| s.usage.as_ref()) else { continue };
            let key = (ws.metadata.namespace.clone().unwrap_or_default(), ws.spec.harness.clone());
            let sum = sums.entry(key).or_default();
            for m in &usage.models {
                sum.0 = sum.0.plus(m.tokens);
            }
            match usage.estimated_cost.as_deref().and_then(|c| c.parse::<f64>().ok()) {
                Some(cost) => sum.1 += cost,
                None => sum.2 += i64::from(!usage.unpriced_models.is_empty()),
            }
        }
        // Rebuilt whole: a namespace whose sessions left this node has no series left.
        self.usage_tokens.clear();
        self.usage_cost.clear();
        self.usage_unpriced.clear();
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        for ((namespace, harness), (tokens, cost, unpriced)) in sums {
            let label = |kind| SpentLabel { namespace: namespace.clone(), harness: harness.clone(), kind };
            for (kind, n) in [
                ("input", tokens.input),
                ("output", tokens.output),
                ("cacheWrite", tokens.cache_write),
                ("cacheRead", tokens.cache_read),
            ] {
                self.usage_tokens.get_or_create(&label(kind)).set(gauge(n));
            }
            self.usage_cost.get_or_create(&label("")).set(cost);
            self.usage_unpriced.get_or_create(&label("")).set(unpriced);
        }
    }
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
            sessions: Family::default(),
            idle: Family::default(),
            event_notices: Family::default(),
            tmux_observations: Counter::default(),
            egress_refused: Family::default(),
            gateway_requests: Family::default(),
            usage_tokens: Family::default(),
            usage_cost: Family::default(),
            usage_unpriced: Family::default(),
        };
        registry.register(
            "usage_tokens",
            "Tokens this agent's sessions spent, by namespace, harness and kind (per session: their status.usage)",
            m.usage_tokens.clone(),
        );
        registry.register(
            "usage_estimated_cost_dollars",
            "Estimated cost of this agent's sessions whose models all have a price, by namespace and harness",
            m.usage_cost.clone(),
        );
        registry.register(
            "usage_unpriced_sessions",
            "This agent's sessions that spent tokens of a model without a price, by namespace and harness",
            m.usage_unpriced.clone(),
        );
        registry.register(
            "egress_refused",
            "Rooms' connections the egress proxy refused, by why (the host is in the agent's log)",
            m.egress_refused.clone(),
        );
        registry.register(
            "gateway_requests",
            "Rooms' model API requests a key gateway forwarded with its key, by gateway and namespace",
            m.gateway_requests.clone(),
        );
        registry.register("reconciles", "Reconciles run", m.reconciles.clone());
        registry.register("reconcile_errors", "Reconciles that failed, by category", m.reconcile_errors.clone());
        registry.register("reconcile_duration_seconds", "Reconcile duration", m.reconcile_duration.clone());
        registry.register("respawns", "Harness respawns, by whether they resumed", m.respawns.clone());
        registry.register("resume_failures", "Failed resumes, by reason", m.resume_failures.clone());
        registry.register("events_delivered", "WorkEvents delivered, by how", m.events_delivered.clone());
        registry.register("sessions", "This agent's WorkSessions, by phase", m.sessions.clone());
        registry.register("idle_transitions", "Idle harnesses stopped and idle sessions woken", m.idle.clone());
        registry.register(
            "workevent_notices",
            "WorkEvent changes received on the watch, by whether their session is this node's",
            m.event_notices.clone(),
        );
        registry.register(
            "tmux_observations",
            "tmux observations (one call each, for all sessions)",
            m.tmux_observations.clone(),
        );
        // Every known label value starts at zero, so a rate or a panel has a series before the first event.
        for resumed in ["true", "false"] {
            let _ = m.respawns.get_or_create(&ResumedLabel { resumed });
        }
        for reason in crate::core::ResumeReason::ALL.iter().filter(|r| **r != crate::core::ResumeReason::Resumed) {
            let _ = m.resume_failures.get_or_create(&ReasonLabel { reason: reason.as_str() });
        }
        for addressed in ["true", "false"] {
            let _ = m.event_notices.get_or_create(&AddressedLabel { addressed });
        }
        for transition in ["stop", "wake"] {
            let _ = m.idle.get_or_create(&IdleLabel { transition });
        }
        for via in Via::ALL {
            let _ = m.events_delivered.get_or_create(&ViaLabel { via: via.as_str() });
        }
        for category in ErrorCategory::ALL {
            let _ = m.reconcile_errors.get_or_create(&CategoryLabel { category: category.as_str() });
        }
        m.count_sessions([]);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ModelUsage, Tokens, Usage, WorkSession, WorkSessionSpec, WorkSessionStatus};

    fn spent(ns: &str, usage: Usage) -> WorkSession {
        let mut ws = WorkSession::new("s", WorkSessionSpec { harness: "claude".into(), ..Default::default() });
        ws.metadata.namespace = Some(ns.into());
        ws.status = Some(WorkSessionStatus { usage: Some(usage), ..Default::default() });
        ws
    }

    #[test]
    fn usage_is_summed_by_namespace_and_harness_and_an_unknown_cost_is_counted_apart() {
        let mut registry = Registry::default();
        let m = AgentMetrics::register(&mut registry);
        let tokens = Tokens { input: 100, output: 20, cache_write: 30, cache_read: 900 };
        let model = ModelUsage { model: "m".into(), tokens, replies: 1 };
        let priced = Usage { models: vec![model.clone()], estimated_cost: Some("0.0069".into()), ..Default::default() };
        let unpriced = Usage { models: vec![model], unpriced_models: vec!["m".into()], ..Default::default() };
        let sessions = [spent("team-a", priced.clone()), spent("team-a", priced), spent("team-a", unpriced)];
        m.count_usage(&sessions);
        let text = || {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            text
        };
        let label = |kind: &'static str| SpentLabel { namespace: "team-a".into(), harness: "claude".into(), kind };
        assert_eq!(m.usage_tokens.get_or_create(&label("cacheRead")).get(), 2700);
        assert_eq!(m.usage_tokens.get_or_create(&label("input")).get(), 300);
        assert!((m.usage_cost.get_or_create(&label("")).get() - 0.0138).abs() < 1e-9);
        assert_eq!(m.usage_unpriced.get_or_create(&label("")).get(), 1);
        m.count_usage([]);
        assert!(!text().contains("team-a"), "gone with the sessions: {}", text());
    }
}
