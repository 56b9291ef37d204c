//! The agent's Lease and its fence, beside the pipeline. The agent renews a Lease named for its node
//! (`worksession-agent-<node>`, in `placement.leaseNamespace`), which tells the controller three things: this node
//! runs a live agent, how many sessions it takes, and which namespaces it serves. The same Lease is the fence: a
//! reconcile acts only while the last renewal is younger than [`crate::config::PlacementConfig::fence_after`], and
//! once it is older the agent stops every harness it runs before anything else, because from then on the controller
//! may have moved their sessions to another node (the rule and what it relies on: docs/agent.md, "Placement and node
//! loss").

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use tokio::sync::watch;

use crate::config::{Config, PlacementConfig};
use crate::node::tmux::Tmux;

/// The label every agent's Lease carries, which the controller's watch selects.
pub const LEASE_LABEL: &str = "worksession.dev/agent-lease";
/// The Lease annotation holding `placement.maxSessions` (absent: no limit).
pub const MAX_SESSIONS_ANNOTATION: &str = "worksession.dev/max-sessions";
/// The Lease annotation holding `placement.namespaces`, comma-separated (absent: every namespace).
pub const NAMESPACES_ANNOTATION: &str = "worksession.dev/namespaces";
/// The field manager of the Lease.
pub const FIELD_MANAGER: &str = "worksession-agent";

/// The name of `node`'s agent Lease.
pub fn lease_name(node: &str) -> String {
    format!("worksession-agent-{node}")
}

/// When the agent last renewed its Lease: whether it may act.
#[derive(Debug)]
pub struct Fence {
    started: Instant,
    renewed: Mutex<Option<Instant>>,
}

impl Default for Fence {
    fn default() -> Self {
        Self { started: Instant::now(), renewed: Mutex::new(None) }
    }
}

impl Fence {
    /// Whether the last renewal is younger than `after`; never before the first one (the controller may have moved
    /// this node's sessions while the agent was down).
    pub fn holds(&self, after: Duration) -> bool {
        self.renewed.lock().unwrap_or_else(|e| e.into_inner()).is_some_and(|at| at.elapsed() < after)
    }

    /// When the fence runs out: `after` past the last renewal, or past the agent's start before its first one (a
    /// restarted agent that cannot renew must stop the harnesses the tmux server kept for it too).
    fn runs_out(&self, after: Duration) -> Instant {
        self.renewed.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or(self.started) + after
    }

    fn renewed_at(&self, at: Instant) {
        *self.renewed.lock().unwrap_or_else(|e| e.into_inner()) = Some(at);
    }
}

/// The Lease as the agent applies it.
pub fn lease(node: &str, placement: &PlacementConfig, now: k8s_openapi::jiff::Timestamp) -> serde_json::Value {
    let mut annotations = serde_json::Map::new();
    if let Some(max) = placement.max_sessions {
        annotations.insert(MAX_SESSIONS_ANNOTATION.into(), max.to_string().into());
    }
    if !placement.namespaces.is_empty() {
        annotations.insert(NAMESPACES_ANNOTATION.into(), placement.namespaces.join(",").into());
    }
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": lease_name(node), "labels": {LEASE_LABEL: "true"}, "annotations": annotations},
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": placement.lease_duration.as_secs(),
            "renewTime": MicroTime(now),
        }
    })
}

/// Renews the Lease every quarter of its duration for as long as it is polled; fences the agent whenever the last
/// renewal grew older than the fence allows, and then stops every harness of its `tmux`.
pub async fn run<T: Tmux>(
    client: Client,
    node: String,
    fence: &Fence,
    config: &watch::Receiver<Arc<Config>>,
    tmux: &T,
) {
    let mut stopped_for: Option<Instant> = None;
    loop {
        let placement = config.borrow().placement.clone();
        let runs_out = fence.runs_out(placement.fence_after());
        if Instant::now() >= runs_out && stopped_for != Some(runs_out) {
            // Cut off for longer than the controller waits before it may move a session: first stop them all; until
            // every one is, tried again each turn (below: within a second).
            if stop_every_harness(tmux).await {
                stopped_for = Some(runs_out);
            }
        }
        let api: Api<Lease> = Api::namespaced(client.clone(), &placement.lease_namespace);
        let asked = Instant::now();
        let body = lease(&node, &placement, k8s_openapi::jiff::Timestamp::now());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let every = (placement.lease_duration / 4).max(Duration::from_millis(250));
        // A renewal that hangs must not hold up the fence: it is given until the fence runs out (a slow API server
        // is no reason to stop harnesses before then), and the next turn of the loop stops them if it did.
        let patience = runs_out.saturating_duration_since(Instant::now()).max(every);
        match tokio::time::timeout(patience, api.patch(&lease_name(&node), &params, &Patch::Apply(&body))).await {
            // The renewal holds from when it was asked for, not from when it was answered.
            Ok(Ok(_)) => fence.renewed_at(asked),
            Ok(Err(e)) => tracing::warn!(event = "lease.renew_failed", error = %e, "cannot renew the agent's Lease"),
            Err(_) => tracing::warn!(event = "lease.renew_failed", "renewing the agent's Lease did not answer in time"),
        }
        // Awake again for the next renewal, or the moment the fence will run out if that comes first (one that ran out
        // already was acted on: the next renewal is then the next thing to do).
        let runs_out = fence.runs_out(placement.fence_after());
        let next = if runs_out > Instant::now() {
            (asked + every).min(runs_out)
        } else if stopped_for != Some(runs_out) {
            (asked + every).min(Instant::now() + STOP_RETRY)
        } else {
            asked + every
        };
        tokio::time::sleep_until(next.into()).await;
    }
}

/// How soon a fence that could not stop every harness tries again.
const STOP_RETRY: Duration = Duration::from_secs(1);

/// Stops every harness of this agent's tmux server (each session tagged with an owner), as an idle stop does: the
/// conversations stay, and a session still placed here is resumed by its next reconcile. Whether every one is stopped
/// (a tmux server that could not be seen, or refused a stop, leaves some running: the fence tries again).
async fn stop_every_harness<T: Tmux>(tmux: &T) -> bool {
    let observation = match tmux.observe().await {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(event = "fence.observe_failed", error = %e, "cannot see the harnesses to stop");
            return false;
        }
    };
    let mut all = true;
    for (session, view) in observation.sessions().filter(|(_, v)| !v.owner.is_empty()) {
        match tmux.stop(session, &view.owner).await {
            Ok(()) => tracing::warn!(
                event = "fence.stopped",
                session,
                owner = view.owner_name,
                "stopped: the agent's Lease ran out, so its session may run elsewhere now"
            ),
            Err(e) => {
                all = false;
                tracing::error!(event = "fence.stop_failed", session, error = %e, "cannot stop the harness")
            }
        }
    }
    all
}
