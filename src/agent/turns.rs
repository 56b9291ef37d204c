//! One reconcile of a session at a time, whoever woke it. The cluster driver's controller never runs two of one
//! session at once, but a new WorkEvent also reconciles its session at once beside it (`controller::at_once`: the
//! controller's own wake waits for the next tick of its timer wheel, a millisecond or two on the path a prompt
//! takes), so each reconcile takes its session's turn first: it never runs beside another, and one that waited for
//! its turn observes tmux again (what the other did there is not in an observation taken before).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use tokio::sync::OwnedMutexGuard;

/// The sessions whose reconcile runs or waits, each with its lock; a session nobody holds or waits for has none.
#[derive(Default)]
pub struct Turns {
    held: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl Turns {
    /// Waits until no other reconcile of `session` (namespace/name) runs; its turn lasts as long as the guard.
    pub async fn take(&self, session: &str) -> OwnedMutexGuard<()> {
        self.lock_of(session).lock_owned().await
    }

    /// The session's turn for a reconcile that would observe tmux no earlier than `observed_after`, and how early
    /// its observation may be now: as asked if the turn was free, or no earlier than the moment it came if another
    /// reconcile of the session ran meanwhile (what that one did in tmux, a spawn or a stop, is only in an
    /// observation taken after it).
    pub async fn take_observing(&self, session: &str, observed_after: Instant) -> (OwnedMutexGuard<()>, Instant) {
        match self.try_take(session) {
            Some(turn) => (turn, observed_after),
            None => {
                let turn = self.take(session).await;
                (turn, observed_after.max(Instant::now()))
            }
        }
    }

    /// The session's turn if no other reconcile of it runs or waits now.
    pub fn try_take(&self, session: &str) -> Option<OwnedMutexGuard<()>> {
        self.lock_of(session).try_lock_owned().ok()
    }

    fn lock_of(&self, session: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Only the locks someone holds or waits for stay: the map is as long as the reconciles running.
        held.retain(|_, lock| lock.strong_count() > 0);
        if let Some(lock) = held.get(session).and_then(Weak::upgrade) {
            return lock;
        }
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        held.insert(session.to_string(), Arc::downgrade(&lock));
        lock
    }

    /// How many sessions have a lock now (held or waited for).
    #[cfg(test)]
    fn len(&self) -> usize {
        let mut held = self.held.lock().unwrap();
        held.retain(|_, lock| lock.strong_count() > 0);
        held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn a_session_has_one_turn_at_a_time_and_others_do_not_wait_for_it() {
        let turns = Turns::default();
        let first = turns.take("ns/a").await;
        let mut second = Box::pin(turns.take("ns/a"));
        assert!((&mut second).now_or_never().is_none(), "a second reconcile of a session waits for the first");
        assert!(turns.try_take("ns/a").is_none(), "a session's turn is not free while one runs and one waits");
        let other = turns.try_take("ns/b");
        assert!(other.is_some(), "another session's reconcile does not wait");
        drop(other);
        drop(first);
        let second = second.await;
        assert_eq!(turns.len(), 1, "only the held turn keeps a lock");
        drop(second);
        assert_eq!(turns.len(), 0, "a session nobody reconciles keeps nothing");
    }

    #[tokio::test]
    async fn a_reconcile_that_waited_for_its_turn_observes_after_the_other_ended() {
        let turns = Turns::default();
        let woke = Instant::now();
        let (free, since) = turns.take_observing("ns/a", woke).await;
        assert_eq!(since, woke, "a free turn keeps the observation its wake asked for");
        let mut waiting = Box::pin(turns.take_observing("ns/a", woke));
        assert!((&mut waiting).now_or_never().is_none());
        let ended = Instant::now();
        drop(free);
        let (_turn, since) = waiting.await;
        assert!(since >= ended, "what the other reconcile did is only in a later observation");
    }
}
