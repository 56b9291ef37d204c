//! `placement` in the agent config: what this node's agent offers the placement (how many sessions, which
//! namespaces) and the Lease it renews to say it is alive, which is also the fence it keeps: an agent that has not
//! renewed its Lease for [`PlacementConfig::fence_after`] stops its harnesses, before the controller may move them.

use std::time::Duration;

use serde::Deserialize;

/// The default `placement.leaseDurationSeconds`: as the kubelet's node Lease.
pub const DEFAULT_LEASE_SECONDS: u64 = 40;
/// The default `placement.nodeLostGraceSeconds`: as long as Kubernetes waits before it evicts a NotReady node's pods.
pub const DEFAULT_GRACE_SECONDS: u64 = 300;

/// What the agent offers the placement, and its Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementConfig {
    /// At most this many sessions are placed on this node (`placement.maxSessions`); `None`: no limit.
    pub max_sessions: Option<u32>,
    /// The namespaces this agent serves (`placement.namespaces`); empty: every namespace. A session of another
    /// namespace is never placed here and never run here, even when its `spec.nodeName` names this node.
    pub namespaces: Vec<String>,
    /// Where the agent's Lease (`worksession-agent-<node>`) lives (`placement.leaseNamespace`; default: the agent's
    /// own namespace, `POD_NAMESPACE`, else `default`).
    pub lease_namespace: String,
    /// How long one renewal of the Lease holds (`placement.leaseDurationSeconds`); renewed every quarter of it.
    pub lease_duration: Duration,
    /// How long after its Lease ran out a node counts as lost (`placement.nodeLostGraceSeconds`); the controller's
    /// `--node-lost-grace-seconds` must be the same (the chart sets both from one value).
    pub node_lost_grace: Duration,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        Self {
            max_sessions: None,
            namespaces: Vec::new(),
            lease_namespace: std::env::var("POD_NAMESPACE").ok().filter(|n| !n.is_empty()).unwrap_or("default".into()),
            lease_duration: Duration::from_secs(DEFAULT_LEASE_SECONDS),
            node_lost_grace: Duration::from_secs(DEFAULT_GRACE_SECONDS),
        }
    }
}

impl PlacementConfig {
    /// Whether this agent serves sessions of `namespace`.
    pub fn serves(&self, namespace: &str) -> bool {
        self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace)
    }

    /// How long without a renewal the agent may still act: the Lease's duration and half the grace. The controller
    /// moves a session no sooner than the Lease's duration and the whole grace after it last saw a renewal, which
    /// is after the agent made it; the other half is the agent's time to stop its harnesses.
    pub fn fence_after(&self) -> Duration {
        self.lease_duration + self.node_lost_grace / 2
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct PlacementFile {
    max_sessions: Option<u32>,
    #[serde(default)]
    namespaces: Vec<String>,
    lease_namespace: Option<String>,
    lease_duration_seconds: Option<u64>,
    node_lost_grace_seconds: Option<u64>,
}

impl PlacementFile {
    pub(super) fn into_config<E>(self, invalid: &impl Fn(String, String) -> E) -> Result<PlacementConfig, E> {
        let mut config = PlacementConfig { max_sessions: self.max_sessions, ..Default::default() };
        for ns in &self.namespaces {
            if !crate::api::is_dns_label(ns) {
                return Err(invalid("placement.namespaces".into(), format!("{ns:?} is not a namespace name")));
            }
        }
        config.namespaces = self.namespaces;
        if let Some(ns) = self.lease_namespace {
            if !crate::api::is_dns_label(&ns) {
                return Err(invalid("placement.leaseNamespace".into(), format!("{ns:?} is not a namespace name")));
            }
            config.lease_namespace = ns;
        }
        if let Some(secs) = self.lease_duration_seconds {
            if !(1..=3600).contains(&secs) {
                return Err(invalid("placement.leaseDurationSeconds".into(), "must be between 1 and 3600".into()));
            }
            config.lease_duration = Duration::from_secs(secs);
        }
        if let Some(secs) = self.node_lost_grace_seconds {
            if !(2..=86_400).contains(&secs) {
                return Err(invalid("placement.nodeLostGraceSeconds".into(), "must be between 2 and 86400".into()));
            }
            config.node_lost_grace = Duration::from_secs(secs);
        }
        Ok(config)
    }
}
