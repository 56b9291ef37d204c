//! What a reconcile that failed says: the step that failed, with its source, and a short category for the metrics.

use crate::node::tmux::TmuxError;
use crate::store::StoreError;

/// A reconcile that failed, naming the step that failed, with its source.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Reading the WorkSession or its WorkEvents.
    #[error("reading the session and its events: {0}")]
    Read(#[source] StoreError),
    /// Observing tmux.
    #[error("observing tmux: {0}")]
    Observe(#[source] TmuxError),
    /// Adding the agent's finalizer.
    #[error("adding the finalizer: {0}")]
    AddFinalizer(#[source] StoreError),
    /// Releasing the agent's finalizer.
    #[error("releasing the finalizer: {0}")]
    ReleaseFinalizer(#[source] StoreError),
    /// Deleting a WorkEvent whose retention ran out.
    #[error("expiring event {event}: {source}")]
    ExpireEvent {
        /// The WorkEvent.
        event: String,
        /// Why.
        source: StoreError,
    },
    /// Recording the intent before a spawn.
    #[error("writing the intent: {0}")]
    WriteIntent(#[source] StoreError),
    /// Stopping the tmux session.
    #[error("stopping the tmux session: {0}")]
    Stop(#[source] TmuxError),
    /// Pasting a prompt into the live pane.
    #[error("pasting event {event}: {source}")]
    Paste {
        /// The WorkEvent.
        event: String,
        /// Why.
        source: TmuxError,
    },
    /// Recording a WorkEvent's status.
    #[error("writing the status of event {event}: {source}")]
    WriteEventStatus {
        /// The WorkEvent.
        event: String,
        /// Why.
        source: StoreError,
    },
    /// Recording the session's status.
    #[error("writing status: {0}")]
    WriteStatus(#[source] StoreError),
    /// Giving the session its room (its record, its home).
    #[error("giving the room: {0}")]
    GiveRoom(String),
    /// Freeing the session's room.
    #[error("freeing the room: {0}")]
    ReleaseRoom(String),
    /// Handing the session to another node.
    #[error("handing the session to another node: {0}")]
    Move(#[source] StoreError),
    /// Writing the answer to a permission request where the harness's hook waits for it.
    #[error("answering request {request}: {source}")]
    Answer {
        /// The request.
        request: String,
        /// Why.
        source: std::io::Error,
    },
    /// Reading the keys the session's namespace gives its harness (`rooms.namespaceKeys`), before a spawn.
    #[error("reading the namespace's keys: {0}")]
    NamespaceKeys(#[source] StoreError),
}

impl ReconcileError {
    /// A short stable category for metrics: the kind of source (never an object name).
    pub fn category(&self) -> crate::words::ErrorCategory {
        use ReconcileError::*;
        match self {
            Read(e) | AddFinalizer(e) | ReleaseFinalizer(e) | WriteIntent(e) | WriteStatus(e) | Move(e)
            | NamespaceKeys(e) => e.category(),
            ExpireEvent { source, .. } | WriteEventStatus { source, .. } => source.category(),
            Observe(e) | Stop(e) | Paste { source: e, .. } => e.category(),
            GiveRoom(_) | ReleaseRoom(_) => crate::words::ErrorCategory::Room,
            Answer { .. } => crate::words::ErrorCategory::Answer,
        }
    }
}
