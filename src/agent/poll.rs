//! The tmux poll of the Kubernetes driver: one observation per [`POLL_INTERVAL`] for all sessions (through the
//! shared [`super::Observer`]), waking the sessions whose liveness changed, so a dead pane is noticed within a
//! second without a watch on tmux.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;

use super::Reconciler;
use crate::api::{Phase, WorkSession};
use crate::store::Store;
use crate::tmux::{Liveness, Tmux};

/// How often tmux is polled for panes that died.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Polls until the receiver of `poke` is gone; sets `ready` after the first observation.
pub async fn run<S: Store, T: Tmux>(
    ctx: &Reconciler<S, T>,
    ready: &AtomicBool,
    sessions: impl Fn() -> Vec<Arc<WorkSession>>,
    poke: UnboundedSender<ObjectRef<WorkSession>>,
) {
    let mut seen: HashMap<ObjectRef<WorkSession>, Liveness> = HashMap::new();
    let mut server_seen = None;
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    loop {
        tick.tick().await;
        let obs = match ctx.observer.since(Instant::now()).await {
            Ok(obs) => obs,
            Err(e) => {
                tracing::warn!(event = "tmux.observe_failed", error = %e, "cannot observe tmux");
                continue;
            }
        };
        if !ready.swap(true, Ordering::Relaxed) {
            tracing::info!(event = "agent.ready", sessions = obs.len(), "API and tmux answer");
        }
        // The server going away (or coming back) changes every session's Ready, whether or not its liveness changed
        // (an absent harness stays absent when the server goes: found on a node, where status kept saying
        // HarnessNotRunning while the tmux container was down).
        let server_changed = server_seen.replace(obs.server).is_some_and(|was| was != obs.server);
        let config = ctx.config.borrow().clone();
        let mut now_seen = HashMap::with_capacity(seen.len());
        let sessions = sessions();
        ctx.metrics.count_sessions(sessions.iter().map(|ws| ws.status.as_ref().and_then(|s| s.phase)));
        for ws in sessions {
            let key = ObjectRef::from_obj(&*ws);
            let (owner, _) = super::reconcile::owner_of(&ws);
            let liveness = obs.liveness(&super::reconcile::current_session(&ws, &obs, &config, &owner));
            // A change since the last poll, or a pane that is not alive while status says Running (a respawn and a
            // death can both fall between two polls).
            let running = ws.status.as_ref().and_then(|s| s.phase) == Some(Phase::Running);
            if server_changed || seen.get(&key) != Some(&liveness) || (running && liveness != Liveness::Alive) {
                tracing::debug!(event = "tmux.liveness_changed", session = %key, ?liveness, "waking the session");
                if poke.unbounded_send(key.clone()).is_err() {
                    return;
                }
            }
            now_seen.insert(key, liveness);
        }
        seen = now_seen;
    }
}
