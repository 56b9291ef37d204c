//! The room gate, part of decide: with rooms on (agent config `rooms`), a harness starts only in its own room (a
//! Unix user of its own); the `Confined` condition says where it runs, and why not in a room where it cannot.

use std::time::Duration;

use super::Confinement;
use super::{CONFLICT_RECHECK, ConfinedReason, Decision, Op, ReadyReason};
use super::{Confine, KeysFrom, Liveness};
use crate::api::Phase;

impl Decision<'_, '_> {
    /// Records where the harness runs; false when it cannot start (rooms are on and it has none).
    pub(super) fn room_ready(&mut self) -> bool {
        match &self.input.evidence.room {
            Confinement::Off => {
                let message = "rooms are off in the agent config: the harness runs as the tmux server's user, with \
                               its HOME, beside every other session of the node";
                self.condition(ConfinedReason::RoomsOff, false, message);
                true
            }
            Confinement::Room(room) => {
                let message = format!("runs as uid {} with HOME {}", room.uid, room.home.display());
                self.condition(ConfinedReason::OwnRoom, true, message);
                true
            }
            Confinement::Due => {
                // Given before anything is done for the session there; the next decision goes on in it.
                self.ops.push(Op::GiveRoom);
                self.requeue(Duration::ZERO);
                false
            }
            Confinement::Unavailable(why) => {
                self.condition(ConfinedReason::RoomUnavailable, false, why);
                // A harness started before rooms were turned on keeps its prompts coming; none starts outside one.
                if self.input.observed.liveness == Liveness::Alive {
                    return true;
                }
                self.status.phase = Some(Phase::Pending);
                self.ready(false, ReadyReason::RoomUnavailable, format!("no harness starts outside a room: {why}"));
                self.requeue(CONFLICT_RECHECK);
                false
            }
        }
    }

    /// How a spawn enters the session's room, if it has one.
    pub(super) fn confine(&self) -> Option<Confine> {
        let (Confinement::Room(room), Some(rooms)) = (&self.input.evidence.room, &self.input.context.config.rooms)
        else {
            return None;
        };
        let egress_port = rooms.egress.as_ref().map(|e| e.port);
        let env: Vec<(String, String)> =
            rooms.egress.iter().flat_map(|e| e.gateways.iter().flat_map(|g| g.env(e.port))).collect();
        // A namespace's key never takes the place of a gateway's placeholder.
        let keys = rooms.namespace_keys.as_ref().map(|k| {
            Box::new(KeysFrom {
                secret: k.secret_name.clone(),
                variables: k.variables.iter().filter(|v| !env.iter().any(|(name, _)| name == *v)).cloned().collect(),
            })
        });
        let (helper, uid, home) = (rooms.helper.clone(), room.uid, room.home.clone());
        Some(Confine { helper, uid, home, egress_port, env, keys })
    }
}
