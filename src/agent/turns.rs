//! One reconcile of a session at a time, whoever woke it. The cluster driver's controller never runs two of one
//! session at once, but a new WorkEvent also reconciles its session at once beside it (`controller::run`: the
//! controller's own wake waits for the next tick of its timer wheel, a millisecond or two on the path a prompt
//! takes), so each reconcile takes its session's turn first: the decision sees the last one's writes, never runs
//! beside it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::OwnedMutexGuard;

/// The sessions whose reconcile runs or waits, each with its lock; a session nobody holds or waits for has none.
#[derive(Default)]
pub struct Turns {
    held: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl Turns {
    /// Waits until no other reconcile of `session` (namespace/name) runs; its turn lasts as long as the guard.
    pub async fn take(&self, session: &str) -> OwnedMutexGuard<()> {
        let lock = {
            let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            // Only the locks someone holds or waits for stay: the map is as long as the reconciles running.
            held.retain(|_, lock| lock.strong_count() > 0);
            match held.get(session).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    let lock = Arc::new(tokio::sync::Mutex::new(()));
                    held.insert(session.to_string(), Arc::downgrade(&lock));
                    lock
                }
            }
        };
        lock.lock_owned().await
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
        let other = turns.take("ns/b").now_or_never();
        assert!(other.is_some(), "another session's reconcile does not wait");
        drop(other);
        drop(first);
        let second = second.await;
        assert_eq!(turns.len(), 1, "only the held turn keeps a lock");
        drop(second);
        assert_eq!(turns.len(), 0, "a session nobody reconciles keeps nothing");
    }
}
