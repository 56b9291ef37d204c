//! The egress proxy's refusals told where a person looks, beside the log line and the counter: a Kubernetes Event
//! `EgressRefused` on the WorkSession whose room asked, naming the host, so its owner can see what the harness
//! tried. What a room asks for is its own choice: each host is told once every [`QUIET`], and a session at most
//! [`PER_SESSION`] times in that while (then once that more were refused), so no harness can make the agent flood the
//! API server with Events.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kube::runtime::reflector::{self, ObjectRef};

use crate::api::WorkSession;
use crate::core::{EventReason, Notice};
use crate::store::Store;

/// How long one session's refusals of one host stay one Event, and how long its budget of Events lasts.
pub const QUIET: Duration = Duration::from_secs(600);
/// The most Events on one session every [`QUIET`], beside the one that says more were refused.
pub const PER_SESSION: u32 = 5;
/// The most refusals waiting to be told: beyond, the newest are dropped (the log and the counter keep them).
pub const QUEUE: usize = 256;
/// The most (session, host) pairs remembered: beyond, the oldest are forgotten first.
const REMEMBERED: usize = 4096;

/// A refusal of a room's connection, for the session the room is given to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The WorkSession, `namespace/name`.
    pub owner: String,
    /// What was asked for: `host:port`, or a gateway (the room's words).
    pub host: String,
    /// Why (the proxy's word: `not_allowed`, `internal_address`, ...).
    pub reason: &'static str,
}

/// What was told, and when.
#[derive(Default)]
struct Told {
    /// By (session, what was asked for).
    asked: HashMap<(String, String), Instant>,
    /// By session: when its budget's while began, and how many Events it has had in it.
    sessions: HashMap<String, (Instant, u32)>,
}

/// The message to record for `refused` now, if any (and it is remembered as told).
fn due(told: &mut Told, refused: &Refused, now: Instant) -> Option<String> {
    told.asked.retain(|_, at| now.duration_since(*at) < QUIET);
    told.sessions.retain(|_, (since, _)| now.duration_since(*since) < QUIET);
    // The room's words, bounded and plain; a refusal that names nothing is told by its reason.
    let host: String = refused.host.chars().take(253).filter(|c| c.is_ascii_graphic()).collect();
    let what = if host.is_empty() { refused.reason.to_string() } else { host.clone() };
    let key = (refused.owner.clone(), what);
    if told.asked.contains_key(&key) {
        return None;
    }
    let (_, count) = told.sessions.entry(refused.owner.clone()).or_insert((now, 0));
    *count += 1;
    if *count > PER_SESSION + 1 {
        return None;
    }
    let message = if *count == PER_SESSION + 1 {
        "more of the harness's connections were refused; each is in the agent's log (event=egress.refused)".to_string()
    } else {
        match refused.reason {
            "not_allowed" => format!(
                "the egress proxy refused the harness's connection to {host}: on none of the lists its room may \
                 reach (the node's rooms.egress.hosts, its namespace's in rooms.egress.namespaces, and where the \
                 agent's rooms.egress.sessionHosts is on, the session's spec.egress.hosts)"
            ),
            "internal_address" => format!(
                "the egress proxy refused the harness's connection to {host}: it is one of the node's or the \
                 cluster's own addresses, which no room may reach unless the platform lists the address itself"
            ),
            reason if host.is_empty() => format!("the egress proxy refused a connection of the harness ({reason})"),
            reason => format!("the egress proxy refused the harness's connection to {host} ({reason})"),
        }
    };
    if told.asked.len() >= REMEMBERED
        && let Some(oldest) = told.asked.iter().min_by_key(|(_, at)| **at).map(|(k, _)| k.clone())
    {
        told.asked.remove(&oldest);
    }
    told.asked.insert(key, now);
    Some(message)
}

/// Records an Event for each refusal `refusals` brings whose session this agent holds (`sessions`), until the
/// proxy stops.
pub async fn tell<S: Store>(
    store: &S,
    sessions: reflector::Store<WorkSession>,
    mut refusals: tokio::sync::mpsc::Receiver<Refused>,
) {
    let mut told = Told::default();
    while let Some(refused) = refusals.recv().await {
        let Some((namespace, name)) = refused.owner.split_once('/') else { continue };
        let Some(ws) = sessions.get(&ObjectRef::new(name).within(namespace)) else { continue };
        if let Some(message) = due(&mut told, &refused, Instant::now()) {
            store.record(&ws, &Notice::new(EventReason::EgressRefused, message)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(owner: &str, host: &str) -> Refused {
        Refused { owner: owner.into(), host: host.into(), reason: "not_allowed" }
    }

    /// A harness that retries a refused host makes one Event per host every quiet period, however often it tries.
    #[test]
    fn a_session_hears_of_a_host_once_per_quiet_period() {
        let (mut told, t0) = (Told::default(), Instant::now());
        let later = t0 + Duration::from_secs(1);
        let said = due(&mut told, &refused("ns/a", "evil.example:443"), t0).unwrap();
        assert!(said.contains("evil.example:443") && said.contains("rooms.egress.hosts"), "{said}");
        assert_eq!(due(&mut told, &refused("ns/a", "evil.example:443"), later), None);
        assert!(due(&mut told, &refused("ns/a", "other.example:443"), later).is_some());
        assert!(due(&mut told, &refused("ns/b", "evil.example:443"), later).is_some());
        assert!(due(&mut told, &refused("ns/a", "evil.example:443"), t0 + QUIET).is_some());
    }

    /// A harness that asks for a new host each time gets its session a few Events, then one that says more were
    /// refused, then none until the quiet period is over: the agent's Events stay bounded whatever a room asks for.
    #[test]
    fn a_session_gets_a_few_events_however_many_hosts_its_harness_tries() {
        let (mut told, t0) = (Told::default(), Instant::now());
        let said: Vec<String> =
            (0..1000).filter_map(|i| due(&mut told, &refused("ns/a", &format!("h{i}.example:443")), t0)).collect();
        assert_eq!(said.len() as u32, PER_SESSION + 1, "{said:?}");
        assert!(said.last().unwrap().contains("more of the harness's connections were refused"));
        assert!(due(&mut told, &refused("ns/b", "h1.example:443"), t0).is_some(), "another session's own budget");
        assert!(due(&mut told, &refused("ns/a", "h2000.example:443"), t0 + QUIET).is_some(), "a new while");
        let long = format!("{}\n{}", "x".repeat(10_000), "y");
        let said = due(&mut told, &refused("ns/c", &long), t0).unwrap();
        assert!(said.len() < 600 && !said.contains('\n'), "bounded and plain: {} bytes", said.len());
    }
}
