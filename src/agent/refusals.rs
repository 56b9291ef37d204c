//! The egress proxy's refusals told where a person looks, beside the log line and the counter: a Kubernetes Event
//! `EgressRefused` on the WorkSession whose room asked, naming the host, so its owner can see what the harness
//! tried and widen `rooms.egress.hosts`. Once per session and host every [`QUIET`]: a harness retrying in a loop
//! makes one Event, not thousands.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kube::runtime::reflector::{self, ObjectRef};

use crate::api::WorkSession;
use crate::core::{EventReason, Notice};
use crate::store::Store;

/// How long one session's refusals of one host stay one Event.
pub const QUIET: Duration = Duration::from_secs(600);
/// The most refusals waiting to be told: beyond, the newest are dropped (the log and the counter keep them).
pub const QUEUE: usize = 256;
/// The most (session, host) pairs remembered: beyond, the oldest are forgotten first.
const REMEMBERED: usize = 4096;

/// A refusal of a room's connection, for the session the room is given to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The WorkSession, `namespace/name`.
    pub owner: String,
    /// What was asked for: `host:port`, or a gateway.
    pub host: String,
    /// Why (the proxy's word: `not_allowed`, `internal_address`, ...).
    pub reason: &'static str,
}

/// Whether `refused` is told now (and remembered as told), given what was told and when.
fn due(told: &mut HashMap<(String, String), Instant>, refused: &Refused, now: Instant) -> bool {
    told.retain(|_, at| now.duration_since(*at) < QUIET);
    let key = (refused.owner.clone(), refused.host.clone());
    if told.contains_key(&key) {
        return false;
    }
    if told.len() >= REMEMBERED
        && let Some(oldest) = told.iter().min_by_key(|(_, at)| **at).map(|(k, _)| k.clone())
    {
        told.remove(&oldest);
    }
    told.insert(key, now);
    true
}

/// Records an Event for each refusal `refusals` brings whose session this agent holds (`sessions`), until the
/// proxy stops.
pub async fn tell<S: Store>(
    store: &S,
    sessions: reflector::Store<WorkSession>,
    mut refusals: tokio::sync::mpsc::Receiver<Refused>,
) {
    let mut told = HashMap::new();
    while let Some(refused) = refusals.recv().await {
        let Some((namespace, name)) = refused.owner.split_once('/') else { continue };
        let Some(ws) = sessions.get(&ObjectRef::new(name).within(namespace)) else { continue };
        if !due(&mut told, &refused, Instant::now()) {
            continue;
        }
        let message = format!(
            "the egress proxy refused the harness's connection to {} ({}); if the session needs it, add it to \
             rooms.egress.hosts (chart: agent.rooms.egress.hosts)",
            refused.host, refused.reason
        );
        store.record(&ws, &Notice::new(EventReason::EgressRefused, message)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A harness that retries a refused host makes one Event per host every quiet period, however often it tries.
    #[test]
    fn a_session_hears_of_a_host_once_per_quiet_period() {
        let (mut told, t0) = (HashMap::new(), Instant::now());
        let refused = |owner: &str, host: &str| Refused { owner: owner.into(), host: host.into(), reason: "x" };
        assert!(due(&mut told, &refused("ns/a", "evil.example:443"), t0));
        assert!(!due(&mut told, &refused("ns/a", "evil.example:443"), t0 + Duration::from_secs(1)));
        assert!(due(&mut told, &refused("ns/a", "other.example:443"), t0 + Duration::from_secs(1)));
        assert!(due(&mut told, &refused("ns/b", "evil.example:443"), t0 + Duration::from_secs(1)));
        assert!(due(&mut told, &refused("ns/a", "evil.example:443"), t0 + QUIET));
        for i in 0..REMEMBERED + 10 {
            due(&mut told, &refused("ns/a", &format!("h{i}")), t0 + QUIET);
        }
        assert!(told.len() <= REMEMBERED, "bounded: {}", told.len());
    }
}
