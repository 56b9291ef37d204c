//! The tmux poll: one observation per [`POLL_INTERVAL`] for all sessions (through the shared [`super::Observer`]),
//! waking the sessions whose liveness changed ([`Wakes`]), so a dead pane is noticed within a second without a watch
//! on tmux. [`run`] feeds the Kubernetes driver; the local driver asks [`Wakes`] itself on its own ticks.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;

use super::Reconciler;
use crate::api::{Phase, WorkSession};
use crate::config::Config;
use crate::node::tmux::{Liveness, Observation, Tmux};
use crate::store::Store;

/// How often tmux is polled for panes that died.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
// A reconcile's reused observation is at most two polls old.
const _: () = assert!(super::reconcile::SETTLED_FOR.as_millis() == 2 * POLL_INTERVAL.as_millis());

/// What the last observation showed of each session, to tell which ones a new observation concerns.
#[derive(Default)]
pub struct Wakes {
    seen: HashMap<ObjectRef<WorkSession>, Liveness>,
    /// How long each live hook-backed harness's hook file was.
    hooks: HashMap<ObjectRef<WorkSession>, u64>,
    server_changes_seen: Option<u64>,
}

impl Wakes {
    /// The sessions `obs` concerns: their liveness changed since the last call (every one at the first call), or
    /// their pane is not alive while status says Running (a respawn and a death can both fall between two polls),
    /// or the tmux server went away or came back since the last call (`server_changes` is
    /// [`super::Observer::server_changes`], which counts what every observation saw, not only this poll's).
    pub fn after<'a>(
        &mut self,
        obs: &Observation,
        server_changes: u64,
        sessions: impl IntoIterator<Item = &'a WorkSession>,
        config: &Config,
        records_len: impl Fn(&WorkSession) -> Option<u64>,
    ) -> Vec<ObjectRef<WorkSession>> {
        // The server going away (or coming back) changes every session's Ready, whether or not its liveness changed
        // (an absent harness stays absent when the server goes: found on a node, where status kept saying
        // HarnessNotRunning while the tmux container was down).
        let server_changed = self.server_changes_seen.replace(server_changes).is_some_and(|was| was != server_changes);
        let mut now_seen = HashMap::with_capacity(self.seen.len());
        let mut hooks = HashMap::with_capacity(self.hooks.len());
        let mut wake = Vec::new();
        for ws in sessions {
            let key = ObjectRef::from_obj(ws);
            let liveness = obs.liveness(&crate::core::tmux_session(ws, config, |s| obs.session(s).is_some()).current);
            let running = ws.status.as_ref().and_then(|s| s.phase) == Some(Phase::Running);
            // A live harness's hooks or its usage record said something (it took a prompt, finished its turn, moved
            // to another conversation, its API refused a turn): a stat or two a second. A file not seen before grew
            // from nothing.
            let hooked = records_len(ws).filter(|_| liveness == Liveness::Alive);
            let said = hooked.is_some_and(|len| self.hooks.get(&key).copied().unwrap_or(0) != len);
            if let Some(len) = hooked {
                hooks.insert(key.clone(), len);
            }
            if server_changed || self.seen.get(&key) != Some(&liveness) || (running && liveness != Liveness::Alive) {
                tracing::debug!(event = "tmux.liveness_changed", session = %key, ?liveness, "waking the session");
                wake.push(key.clone());
            } else if said {
                tracing::debug!(event = "hooks.appended", session = %key, "waking the session");
                wake.push(key.clone());
            }
            now_seen.insert(key, liveness);
        }
        self.seen = now_seen;
        self.hooks = hooks;
        wake
    }
}

/// Polls until the receiver of `poke` is gone; sets `ready` after the first observation.
pub async fn run<S: Store, T: Tmux>(
    ctx: &Reconciler<S, T>,
    ready: &AtomicBool,
    sessions: impl Fn() -> Vec<Arc<WorkSession>>,
    poke: UnboundedSender<ObjectRef<WorkSession>>,
) {
    let mut wakes = Wakes::default();
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
        let config = ctx.config.borrow().clone();
        let sessions = sessions();
        tracing::trace!(event = "tmux.polled", server = obs.server, panes = obs.len(), sessions = sessions.len());
        ctx.metrics.count_sessions(sessions.iter().map(|ws| ws.status.as_ref().and_then(|s| s.phase)));
        ctx.metrics.count_usage(sessions.iter().map(|ws| &**ws));
        let server_changes = ctx.observer.server_changes();
        let records_len = |ws: &WorkSession| super::evidence::records_len(&ctx.registries, ws, &config);
        for key in wakes.after(&obs, server_changes, sessions.iter().map(|ws| &**ws), &config, records_len) {
            if poke.unbounded_send(key).is_err() {
                return;
            }
        }
        stop_the_departed(ctx, &obs, &sessions).await;
    }
}

/// Stops each harness whose session is no longer this agent's: moved to another node (the controller placed it
/// again after this node was lost, or `worksession move`), or gone without the finalizer's stop. Its watch no longer
/// shows such a session, so no reconcile does this; a fresh read decides, so a watch that lags never stops a
/// session still placed here.
async fn stop_the_departed<S: Store, T: Tmux>(
    ctx: &Reconciler<S, T>,
    obs: &Observation,
    sessions: &[Arc<WorkSession>],
) {
    if !ctx.fence_holds() {
        return; // the fence stops them all (lease.rs)
    }
    let known: std::collections::HashSet<String> = sessions.iter().map(|ws| crate::api::identity(&**ws)).collect();
    for (session, view) in obs.sessions() {
        if view.owner.is_empty() || known.contains(&view.owner_name) {
            continue;
        }
        let Some((namespace, name)) = view.owner_name.split_once('/') else { continue };
        let ws = match ctx.store.session(namespace, name).await {
            Ok(ws) => ws,
            Err(e) => {
                tracing::debug!(event = "departed.read_failed", session, error = %e, "cannot read its session");
                continue;
            }
        };
        let why = match &ws {
            Some(ws) if ctx.serves(ws) => continue, // placed here; the watch has not shown it yet
            Some(ws) if ws.metadata.uid.as_deref().is_some_and(|uid| uid != view.owner) => "its session was remade",
            Some(_) => "its session was moved to another node",
            None => "its session is gone",
        };
        match ctx.observer.tmux().stop(session, &view.owner).await {
            Ok(()) => {
                tracing::info!(event = "departed.stopped", session, owner = view.owner_name, why, "stopped");
                leave_the_departed_room(ctx, &view.owner_name).await;
            }
            Err(e) => tracing::warn!(event = "departed.stop_failed", session, error = %e, "cannot stop it"),
        }
    }
}

/// Kills every process of a departed session's room on this node (a child its harness left outside the tmux
/// session too), then forgets the room here (shared rooms: it went with the session) or frees it (the node's own
/// rooms: its workdir moved aside, its uid free). Its uid could otherwise be given to another tenant while such a
/// process still runs as it.
async fn leave_the_departed_room<S: Store, T: Tmux>(ctx: &Reconciler<S, T>, owner_name: &str) {
    let config = ctx.config.borrow().clone();
    let Some(rooms) = &config.rooms else { return };
    let room = match ctx.evict_room(rooms, owner_name).await {
        Ok(Some(room)) => room,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(event = "departed.evict_failed", owner = owner_name, error = %e, "cannot stop its room's processes");
            return;
        }
    };
    if rooms.shared {
        ctx.registries.rooms.forget(rooms, owner_name);
        return;
    }
    match ctx.registries.rooms.release(rooms, owner_name) {
        Ok(kept) => {
            let kept = kept.map(|p| p.display().to_string()).unwrap_or_default();
            tracing::info!(
                event = "departed.room_released",
                owner = owner_name,
                uid = room.uid,
                kept,
                "its room freed"
            );
        }
        Err(e) => {
            tracing::warn!(event = "departed.release_failed", owner = owner_name, error = %e, "cannot free its room")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{WorkSessionSpec, WorkSessionStatus};

    fn session(phase: Phase) -> WorkSession {
        let spec = WorkSessionSpec { node_name: Some("node-a".into()), harness: "claude".into(), ..Default::default() };
        let mut ws = WorkSession::new("tu", spec);
        ws.metadata.namespace = Some("team".into());
        ws.status = Some(WorkSessionStatus { phase: Some(phase), ..Default::default() });
        ws
    }

    fn server(up: bool) -> Observation {
        let mut obs = Observation::default();
        obs.server = up;
        obs
    }

    #[test]
    fn a_server_that_came_back_and_went_again_between_two_polls_wakes_its_sessions() {
        let (config, ws) = (Config::default(), session(Phase::Pending));
        let mut wakes = Wakes::default();
        assert_eq!(
            wakes.after(&server(false), 1, [&ws], &config, |_| None).len(),
            1,
            "the first poll wakes every session"
        );
        assert!(wakes.after(&server(false), 1, [&ws], &config, |_| None).is_empty(), "nothing changed");
        // A reconcile saw the server back (and wrote so in status); it went again before this poll: the poll's own
        // looks both say "no server", the count says twice changed.
        assert_eq!(wakes.after(&server(false), 3, [&ws], &config, |_| None).len(), 1);
        assert!(wakes.after(&server(false), 3, [&ws], &config, |_| None).is_empty());
    }

    #[test]
    fn a_running_session_whose_pane_is_not_alive_is_woken_at_every_poll() {
        let (config, ws) = (Config::default(), session(Phase::Running));
        let mut wakes = Wakes::default();
        for _ in 0..3 {
            assert_eq!(wakes.after(&server(true), 0, [&ws], &config, |_| None).len(), 1);
        }
    }
}
