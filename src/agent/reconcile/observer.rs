//! The observe step's tmux side: one `list-panes -a` call shared by the reconciles that wait for one, and what the
//! agent last did in each tmux session, so no observation stands for a session changed after it was taken.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::node::tmux::{Observation, Tmux, TmuxError};

/// tmux observations shared by concurrent reconciles: a reconcile gets one taken after it started, or after its
/// session's turn came if it waited for one ([`crate::agent::turns`]), and never one taken before the agent last
/// spawned or stopped in its sessions; for a session last seen dead or absent, the last one may stand
/// ([`Observer::since_unless_settled`]). Reconciles that wait together share one tmux call.
pub struct Observer<T> {
    tmux: T,
    last: Mutex<Option<(Instant, Arc<Observation>)>>,
    /// When this agent last started or stopped something in each tmux session: an observation taken before that does
    /// not stand for it.
    touched: std::sync::Mutex<std::collections::HashMap<String, Instant>>,
    server_changes: AtomicU64,
    calls: prometheus_client::metrics::counter::Counter,
}

impl<T: Tmux> Observer<T> {
    /// Observes through `tmux`.
    pub fn new(tmux: T) -> Self {
        let (last, touched) = (Mutex::new(None), Default::default());
        Self { tmux, last, touched, server_changes: AtomicU64::new(0), calls: Default::default() }
    }

    /// How many times the tmux server went away or came back between two observations, whoever made them. The poll
    /// compares this, not its own last look: a reconcile can see the server come back and write that in status, and
    /// the server can go again, all between two polls (a test of a restarted tmux container did it).
    pub fn server_changes(&self) -> u64 {
        self.server_changes.load(Ordering::Relaxed)
    }

    /// Counts each tmux call in `calls`.
    pub fn counting(self, calls: prometheus_client::metrics::counter::Counter) -> Self {
        Self { calls, ..self }
    }

    /// An observation that started no earlier than `since`.
    pub async fn since(&self, since: Instant) -> Result<Arc<Observation>, TmuxError> {
        let mut last = self.last.lock().await;
        if let Some((at, obs)) = &*last
            && *at >= since
        {
            return Ok(obs.clone());
        }
        let at = Instant::now();
        self.calls.inc();
        let obs = match self.tmux.observe().await {
            Ok(obs) => Arc::new(obs),
            Err(e) => {
                *last = None; // what it showed is no longer known to stand
                return Err(e);
            }
        };
        // A touch before this look is in it.
        self.touched.lock().unwrap().retain(|_, t| *t >= at);
        if last.as_ref().is_some_and(|(_, previous)| previous.server != obs.server) {
            self.server_changes.fetch_add(1, Ordering::Relaxed);
        }
        *last = Some((at, obs.clone()));
        Ok(obs)
    }

    /// An observation that started no earlier than `since` nor than this agent's last touch of `sessions`, or the last
    /// one when it shows each of `sessions` dead or
    /// absent, was taken after this agent last touched them, and is at most two polls old. Only a spawn of this
    /// agent makes a dead or absent session live (and the spawn then finds what is there: a session it clears, or
    /// none), while a live harness can die at any moment unseen: so a dead or absent session stays so until its own
    /// agent acts, and looking again would only cost the round trip. The age bound keeps a tmux that stopped
    /// answering from being taken for one that shows the same as before.
    pub async fn since_unless_settled(&self, since: Instant, sessions: &[&str]) -> Result<Arc<Observation>, TmuxError> {
        if let Some((at, obs)) = &*self.last.lock().await
            && obs.server
            && at.elapsed() < SETTLED_FOR
        {
            let touched = self.touched.lock().unwrap();
            let settled = |s: &&str| {
                obs.liveness(s) != crate::node::tmux::Liveness::Alive && touched.get(*s).is_none_or(|t| t < at)
            };
            if sessions.iter().all(settled) {
                return Ok(obs.clone());
            }
        }
        // Nor does an observation stand for a session touched after it began, whenever the reconcile started.
        let since = {
            let touched = self.touched.lock().unwrap();
            sessions.iter().filter_map(|s| touched.get(*s)).fold(since, |since, t| since.max(*t))
        };
        self.since(since).await
    }

    /// Notes that this agent just started or stopped something in `session` (after the tmux call returned).
    pub fn touched(&self, session: &str) {
        self.touched.lock().unwrap().insert(session.to_string(), Instant::now());
    }

    /// The tmux edge.
    pub fn tmux(&self) -> &T {
        &self.tmux
    }
}

/// How long the last tmux observation stands for a session it shows dead or absent: two of the poll's intervals.
pub const SETTLED_FOR: Duration = Duration::from_secs(2);
