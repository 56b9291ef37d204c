//! The bridge's Prometheus metrics (prefix `worksession_bridge`): requests by endpoint and status, events created,
//! duplicates, signature failures, deliveries ignored by reason, and the time spent writing to the store.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct IgnoredLabels {
    pub(crate) reason: &'static str,
}

/// Why a delivery is answered 202 `ignored`: the `reason` label of `worksession_bridge_ignored_total`.
pub const IGNORED_REASONS: &[&str] = &[
    "event",
    "subject",
    "sender",
    "unrouted",
    "author_association",
    "approver",
    "answer",
    "max_sessions",
    "empty_work_item",
    "lifecycle",
    "no_session",
    "ci_app",
    "ci_passed",
    "ci_bound",
    "ci_late",
    "archived",
    "not_its_branch",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub(crate) endpoint: &'static str,
    pub(crate) status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct GithubLabels {
    pub(crate) call: &'static str,
    pub(crate) outcome: &'static str,
}

/// The calls to GitHub's API (`call` of `worksession_bridge_github_calls_total`).
pub const GITHUB_CALLS: &[&str] = &["reaction", "comment", "search", "deliveries", "redeliver"];
/// How each ended (`outcome`): done, failed and tried again later, refused for good.
pub const GITHUB_OUTCOMES: &[&str] = &["ok", "retried", "refused"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct LifecycleLabels {
    pub(crate) action: &'static str,
}

/// What closing and reopening did (`action` of `worksession_bridge_lifecycle_total`).
pub const LIFECYCLE_ACTIONS: &[&str] = &["archived", "reopened", "deleted"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RedeliveryLabels {
    pub(crate) outcome: &'static str,
}

/// What became of a delivery the bridge did not take (`outcome` of `worksession_bridge_redeliveries_total`): asked of
/// GitHub again, or given up after [`super::redeliver::MAX_ATTEMPTS`] attempts.
pub const REDELIVERY_OUTCOMES: &[&str] = &["asked", "given_up"];

/// The bridge's metrics, under the prefix `worksession_bridge`.
#[derive(Clone)]
pub struct BridgeMetrics {
    pub(crate) requests: Family<RequestLabels, Counter>,
    pub(crate) events_created: Counter,
    pub(crate) duplicates: Counter,
    pub(crate) signature_failures: Counter,
    pub(crate) api_latency: Histogram,
    pub(crate) ignored: Family<IgnoredLabels, Counter>,
    pub(crate) github_calls: Family<GithubLabels, Counter>,
    pub(crate) lifecycle: Family<LifecycleLabels, Counter>,
    pub(crate) redeliveries: Family<RedeliveryLabels, Counter>,
}

impl BridgeMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            requests: Family::default(),
            events_created: Counter::default(),
            duplicates: Counter::default(),
            signature_failures: Counter::default(),
            api_latency: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            ignored: Family::default(),
            github_calls: Family::default(),
            lifecycle: Family::default(),
            redeliveries: Family::default(),
        };
        registry.register(
            "redeliveries",
            "Deliveries the bridge did not take, asked of GitHub again or given up",
            m.redeliveries.clone(),
        );
        for outcome in REDELIVERY_OUTCOMES {
            let _ = m.redeliveries.get_or_create(&RedeliveryLabels { outcome });
        }
        registry.register(
            "github_calls",
            "Calls to GitHub's API for feedback, by call and outcome",
            m.github_calls.clone(),
        );
        for call in GITHUB_CALLS {
            for outcome in GITHUB_OUTCOMES {
                let _ = m.github_calls.get_or_create(&GithubLabels { call, outcome });
            }
        }
        registry.register(
            "lifecycle",
            "Sessions archived, reopened and deleted as their work items closed",
            m.lifecycle.clone(),
        );
        for action in LIFECYCLE_ACTIONS {
            let _ = m.lifecycle.get_or_create(&LifecycleLabels { action });
        }
        registry.register("ignored", "Deliveries answered 202 ignored, by reason", m.ignored.clone());
        for reason in IGNORED_REASONS {
            let _ = m.ignored.get_or_create(&IgnoredLabels { reason });
        }
        registry.register("requests", "Webhook requests, by endpoint and status", m.requests.clone());
        registry.register("events_created", "WorkEvents created", m.events_created.clone());
        registry.register("duplicates", "Redeliveries answered as duplicates", m.duplicates.clone());
        registry.register(
            "signature_failures",
            "Requests with a missing or wrong signature or token",
            m.signature_failures.clone(),
        );
        registry.register(
            "api_latency_seconds",
            "Time spent writing to the API server per request",
            m.api_latency.clone(),
        );
        // Every answer the handlers give starts at zero, so a rate or a panel has a series before the first request.
        for endpoint in ["github", "generic"] {
            for status in [200, 201, 202, 400, 401, 403, 404, 413, 422, 503] {
                let _ = m.requests.get_or_create(&RequestLabels { endpoint, status });
            }
        }
        m
    }
}
