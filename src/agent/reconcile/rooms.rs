//! The plan's room ops and its spawn, executed for [`super::Reconciler`]: giving a session its room, leaving or
//! freeing it (every process of its uid killed first), and starting a harness in it with its namespace's keys, whose
//! values are read here, never part of a plan.

use kube::ResourceExt;

use super::{ReconcileError, Reconciler};
use crate::agent::evidence::agent_dirs;
use crate::api::WorkSession;
use crate::config::Config;
use crate::core::{self, EventReason, Op, Plan};
use crate::node::tmux::{Tmux, TmuxError};
use crate::store::Store;

impl<S: Store, T: Tmux> Reconciler<S, T> {
    /// Starts the harness: in a room, its home closed again, the workdir the room's first, and `keys` (its
    /// namespace's) in its environment, never part of a plan, which is logged. What tmux or the room said when it
    /// refused.
    pub(super) async fn spawn(
        &self,
        spawn: &core::Spawn,
        keys: &[(String, String)],
        config: &Config,
    ) -> Result<(), String> {
        if let (Some(room), Some(rooms)) = (&spawn.confine, &config.rooms) {
            crate::node::room::close_home(room.uid, &room.home)?;
            self.registries.rooms.hand_over(rooms, room.uid, &spawn.workdir, &agent_dirs(config))?;
            if !keys.is_empty() {
                let mut keyed = spawn.clone();
                keyed.confine.iter_mut().for_each(|room| room.env.extend_from_slice(keys));
                return self.observer.tmux().spawn(&keyed).await.map_err(|e| e.to_string());
            }
        }
        self.observer.tmux().spawn(spawn).await.map_err(|e| e.to_string())
    }

    /// The values of the variables the plan's spawn takes from its namespace's Secret ([`core::KeysFrom`], as the core
    /// decided them); none without such a spawn, or where the Secret is absent or the agent may not read it (said in
    /// the log, as is a variable left out for its value).
    pub(super) async fn namespace_keys(
        &self,
        ws: &WorkSession,
        plan: &Plan,
    ) -> Result<Vec<(String, String)>, ReconcileError> {
        let keys = plan.ops.iter().find_map(|op| match op {
            Op::Spawn(spawn) => spawn.confine.as_ref()?.keys.as_deref(),
            _ => None,
        });
        let Some(keys) = keys.filter(|k| !k.variables.is_empty()) else { return Ok(Vec::new()) };
        let namespace = ws.namespace().unwrap_or_default();
        let secret =
            self.store.namespace_keys(&namespace, &keys.secret).await.map_err(ReconcileError::NamespaceKeys)?;
        let Some(secret) = secret else {
            tracing::info!(event = "keys.none", namespace, secret = keys.secret, "no keys Secret the agent may read");
            return Ok(Vec::new());
        };
        let (given, left_out) = core::given(secret, keys);
        if !left_out.is_empty() {
            tracing::warn!(event = "keys.left_out", namespace, ?left_out, "a key's value holds a control character");
        }
        Ok(given)
    }

    /// Gives the session its room.
    pub(super) fn give_room(&self, ws: &WorkSession, owner_name: &str, config: &Config) -> Result<(), ReconcileError> {
        let Some(rooms) = &config.rooms else { return Ok(()) };
        let workdir = std::path::Path::new(&ws.spec.workdir);
        let given = self.registries.rooms.give(rooms, owner_name, workdir, &agent_dirs(config));
        let room = given.map_err(ReconcileError::GiveRoom)?;
        tracing::debug!(event = "rooms.given", uid = room.uid, "the session's room is ready");
        Ok(())
    }

    /// Frees the session's room once nothing of its uid runs (a harness's child that left its tmux session
    /// included); its workdir goes aside where it was its harness's. On failure the finalizer stays: the room is
    /// freed on the next try, never given out half-cleared.
    pub(super) async fn release_room(
        &self,
        ws: &WorkSession,
        owner_name: &str,
        config: &Config,
    ) -> Result<(), ReconcileError> {
        let Some(rooms) = &config.rooms else { return Ok(()) };
        let evicted =
            self.evict_room(rooms, owner_name).await.map_err(|e| ReconcileError::ReleaseRoom(e.to_string()))?;
        if evicted.is_none() {
            return Ok(());
        }
        let kept = self.registries.rooms.release(rooms, owner_name).map_err(ReconcileError::ReleaseRoom)?;
        if let Some(to) = kept {
            let why = format!(
                "{} was its harness's: moved aside to {} (the agent's alone; no room reaches it)",
                ws.spec.workdir,
                to.display()
            );
            self.report(ws, &core::Notice::new(EventReason::WorkspaceKept, why)).await;
        }
        Ok(())
    }

    /// Kills every process of the session's room on this node and forgets the room here, keeping it whole on the
    /// shared storage: the session's next node runs its harness in it.
    pub(super) async fn leave_room(&self, owner_name: &str, config: &Config) -> Result<(), ReconcileError> {
        let Some(rooms) = &config.rooms else { return Ok(()) };
        self.evict_room(rooms, owner_name).await.map_err(|e| ReconcileError::ReleaseRoom(e.to_string()))?;
        self.registries.rooms.forget(rooms, owner_name);
        Ok(())
    }

    /// Kills every process of `owner_name`'s room on this node (a child its harness left outside its tmux session
    /// too), through the tmux server as the room's uid; the room, or `None` when the session has none.
    pub(in crate::agent) async fn evict_room(
        &self,
        rooms: &crate::node::room::RoomsConfig,
        owner_name: &str,
    ) -> Result<Option<crate::node::room::Room>, TmuxError> {
        let Some(room) = self.registries.rooms.existing(rooms, owner_name) else { return Ok(None) };
        let (helper, home) = (rooms.helper.clone(), room.home.clone());
        let (uid, egress_port, env, keys) = (room.uid, None, Vec::new(), None);
        let confine = crate::node::tmux::Confine { helper, uid, home, egress_port, env, keys };
        self.observer.tmux().evict(&confine).await?;
        Ok(Some(room))
    }
}
