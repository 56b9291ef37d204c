//! One reconcile of one WorkSession: read it and its events fresh, observe tmux (shared), ask the core, execute
//! the plan. Generic over the [`Store`] and [`Tmux`] edges, so local mode runs the same code.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use tokio::sync::{Mutex, watch};
use tracing::Instrument;

use super::evidence;
use super::metrics::{AgentMetrics, CategoryLabel, IdleLabel, ReasonLabel, ResumedLabel, ViaLabel};
use crate::api::{WorkEvent, WorkSession};
use crate::config::Config;
use crate::core::queue;
use crate::core::{self, Input, NoticeKind, Op, Plan};
use crate::store::{FINALIZER, Store, StoreError};
use crate::tmux::{Observation, Tmux, TmuxError};

/// A point where a reconcile can be made to stop forever, as if the agent were killed there (crash tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failpoint {
    /// After the intent is written, before the spawn.
    AfterIntent,
    /// After a paste, before its status is written.
    AfterPaste,
}

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
    /// Spawning the harness (after the core's fallback, if any, failed too).
    #[error("spawning the harness: {0}")]
    Spawn(#[source] TmuxError),
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
    /// Freeing the session's room.
    #[error("freeing the room: {0}")]
    ReleaseRoom(String),
}

impl ReconcileError {
    /// A short stable category for metrics: the kind of source (never an object name).
    pub fn category(&self) -> crate::words::ErrorCategory {
        use ReconcileError::*;
        match self {
            Read(e) | AddFinalizer(e) | ReleaseFinalizer(e) | WriteIntent(e) | WriteStatus(e) => e.category(),
            ExpireEvent { source, .. } | WriteEventStatus { source, .. } => source.category(),
            Observe(e) | Spawn(e) | Stop(e) | Paste { source: e, .. } => e.category(),
            ReleaseRoom(_) => crate::words::ErrorCategory::Room,
        }
    }
}

/// tmux observations shared by concurrent reconciles: a reconcile gets an observation taken after it started,
/// and reconciles that wait together share one tmux call.
pub struct Observer<T> {
    tmux: T,
    last: Mutex<Option<(Instant, Arc<Observation>)>>,
    server_changes: AtomicU64,
    calls: prometheus_client::metrics::counter::Counter,
}

impl<T: Tmux> Observer<T> {
    /// Observes through `tmux`.
    pub fn new(tmux: T) -> Self {
        Self { tmux, last: Mutex::new(None), server_changes: AtomicU64::new(0), calls: Default::default() }
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
        let obs = Arc::new(self.tmux.observe().await?);
        if last.as_ref().is_some_and(|(_, previous)| previous.server != obs.server) {
            self.server_changes.fetch_add(1, Ordering::Relaxed);
        }
        *last = Some((at, obs.clone()));
        Ok(obs)
    }

    /// The tmux edge.
    pub fn tmux(&self) -> &T {
        &self.tmux
    }
}

/// Everything a reconcile needs.
pub struct Reconciler<S, T> {
    /// The object store.
    pub store: S,
    /// Shared tmux observations (and the tmux edge).
    pub observer: Observer<T>,
    /// This agent's node; `None` (local mode): every session in the store is this agent's.
    pub node: Option<String>,
    /// The current config (hot-reloaded).
    pub config: watch::Receiver<Arc<Config>>,
    /// Metrics.
    pub metrics: AgentMetrics,
    /// Where to stop forever, for crash tests (`None` in production).
    pub failpoint: Option<Failpoint>,
    /// The workspaces being prepared.
    pub workspaces: super::workspaces::Workspaces,
    /// Conversation ids being discovered, and those taken.
    pub discoveries: super::discovery::Discoveries,
    /// Which session has which room (agent config `rooms`).
    pub rooms: crate::room::Rooms,
    /// The agent config's `rooms` at start, which a reload does not change.
    pub rooms_at_start: Option<crate::room::RoomsConfig>,
    /// A reload's change of `rooms` was refused (and said so once).
    pub rooms_reload_refused: std::sync::atomic::AtomicBool,
}

/// The agent's own directories on the workspace, never a room's workdir: the node's clones and the shared `HOME`.
fn agent_dirs(config: &Config) -> Vec<&std::path::Path> {
    config.workspaces.mirrors.as_deref().into_iter().chain(config.harness_home.as_deref()).collect()
}

enum ExecError {
    Spawn(String),
    Other(ReconcileError),
}

impl<S: Store, T: Tmux> Reconciler<S, T> {
    /// Learns which conversation every session of this agent records, before the first reconcile, so that a session
    /// adopting `spec.harnessSessionId` never takes another's; the reconciles keep it current from then on.
    pub async fn seed_claims(&self) -> Result<(), StoreError> {
        let sessions = self.store.sessions().await?;
        let mine = sessions.iter().filter(|ws| self.node.as_ref().is_none_or(|node| &ws.spec.node_name == node));
        let recorded = mine
            .filter_map(|ws| Some((evidence::owner_tags(ws).1, ws.status.as_ref()?.harness_session_id.as_deref()?)));
        self.discoveries.seed(recorded);
        Ok(())
    }

    /// Reconciles the WorkSession `namespace/name`; returns when to look again (`None`: on the next change).
    pub async fn reconcile(&self, namespace: &str, name: &str) -> Result<Option<Duration>, ReconcileError> {
        self.reconcile_observed_after(namespace, name, Instant::now()).await
    }

    /// The same, from a tmux observation taken no earlier than `observed_after` (the moment of the cause that woke
    /// it), so the reconciles one cause woke share one tmux call.
    pub async fn reconcile_observed_after(
        &self,
        namespace: &str,
        name: &str,
        observed_after: Instant,
    ) -> Result<Option<Duration>, ReconcileError> {
        let started = Instant::now();
        self.metrics.reconciles.inc();
        // Every log line of this reconcile names the object.
        let span = tracing::info_span!("reconcile", namespace, name);
        let result = self.reconcile_inner(namespace, name, observed_after).instrument(span).await;
        self.metrics.reconcile_duration.observe(started.elapsed().as_secs_f64());
        if let Err(e) = &result {
            let category = e.category().as_str();
            self.metrics.reconcile_errors.get_or_create(&CategoryLabel { category }).inc();
        }
        result
    }

    async fn reconcile_inner(
        &self,
        namespace: &str,
        name: &str,
        observed_after: Instant,
    ) -> Result<Option<Duration>, ReconcileError> {
        // The three reads are independent: one round trip's wait instead of three.
        let (ws, events, observation) = tokio::join!(
            self.store.session(namespace, name),
            self.store.events(namespace, name),
            self.observer.since(observed_after)
        );
        let Some(mut ws) = ws.map_err(ReconcileError::Read)? else { return Ok(None) };
        if self.node.as_ref().is_some_and(|node| &ws.spec.node_name != node) {
            return Ok(None); // another node's: never touched
        }
        let deleting = ws.metadata.deletion_timestamp.is_some();
        let has_finalizer = ws.finalizers().iter().any(|f| f == FINALIZER);
        if deleting && !has_finalizer {
            return Ok(None);
        }
        if !deleting && !has_finalizer {
            ws = self.store.set_finalizer(&ws, true).await.map_err(ReconcileError::AddFinalizer)?;
        }
        let mut config = self.config.borrow().clone();
        if config.rooms != self.rooms_at_start {
            // Rooms are what the pod was started for (a tmux server as root, holding SETUID): turned off by a reload
            // while it runs, a harness would start as root; so they change only with a restart.
            Arc::make_mut(&mut config).rooms = self.rooms_at_start.clone();
            if !self.rooms_reload_refused.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    event = "config.rooms_fixed",
                    "a change of `rooms` takes effect when the agent restarts"
                );
            }
        }
        // All of them: a delivered boot event can go back to Pending (the settle window).
        let events = events.map_err(ReconcileError::Read)?;
        let mut next_expiry = None;
        if let Some(retention) = config.event_retention {
            let (due, next) = queue::expired(&events, Timestamp::now(), retention);
            for ev in due {
                let expire = |source| ReconcileError::ExpireEvent { event: ev.name_any(), source };
                self.store.delete_event(ev).await.map_err(expire)?;
            }
            next_expiry = next;
        }
        let pending = evidence::pending_events(&queue::undelivered(events.clone()));
        let observation = observation.map_err(ReconcileError::Observe)?;
        let recorded = ws.status.clone().unwrap_or_default();
        let (owner, owner_name) = evidence::owner_tags(&ws);
        let session = current_session(&ws, &observation, &config);
        let liveness = observation.liveness(&session);
        // Its room (given out now if it has none): where its harness runs and where its HOME is.
        let keep = agent_dirs(&config);
        let room = match &config.rooms {
            Some(rooms) if deleting => self.rooms.existing(rooms, &owner_name).map(Ok),
            Some(rooms) => Some(self.rooms.room_of(rooms, &owner_name, std::path::Path::new(&ws.spec.workdir), &keep)),
            None => None,
        };
        let home = match &room {
            Some(Ok(room)) => Some(room.home.as_path()),
            Some(Err(_)) => None,
            None => config.harness_home.as_deref(),
        };
        let evidence = self.gather(&ws, &recorded, &pending, (&session, liveness), home, &config).await;
        let mut status = recorded.clone();
        let mut spawn_failure: Option<String> = None;
        let new_session_id = uuid::Uuid::new_v4().to_string();
        let workspace = self.workspaces.state(&owner_name, &ws);
        if let (super::workspaces::Found::Prepared(p), Some(rooms)) = (&workspace, &config.rooms)
            && !p.adopted
            && let Err(e) = self.rooms.prepared(rooms, &owner_name)
        {
            tracing::error!(event = "rooms.record_failed", error = %e, "the checkout will not be handed over");
        }
        let workdir = ws.spec.workdir.as_str();
        let discover = config.harnesses.get(&ws.spec.harness).and_then(|p| p.discover.as_ref());
        // A harness that may be spawned fresh here reserves its workdir until its plan is recorded.
        let may_spawn = discover.is_some() && liveness != crate::tmux::Liveness::Alive;
        let discovering_here = self.discoveries.busy_elsewhere(workdir, &owner_name, may_spawn);
        // A conversation to adopt that another session of this node records is never taken over.
        let adopting = ws.spec.harness_session_id.as_deref().filter(|_| recorded.harness_session_id.is_none());
        let id_taken_by = adopting.and_then(|id| self.discoveries.claim(id, &owner_name));
        for attempt in 0.. {
            let input = Input {
                spec: &ws.spec,
                generation: ws.metadata.generation,
                created: ws.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or_default(),
                deleting,
                status: &status,
                events: &pending,
                liveness,
                last_output: &evidence.last_output,
                tmux: observation.session(&session),
                tmux_server: observation.server,
                session: Some(session.as_str()),
                owner: &owner,
                owner_name: &owner_name,
                screen: evidence.screen.as_deref(),
                confirmed: &evidence.confirmed,
                conversation_found: evidence.conversation_found,
                workspace: workspace.as_input(),
                discovered: evidence.discovered.as_deref(),
                discovering_here: discovering_here.as_deref(),
                id_taken_by: id_taken_by.as_deref(),
                room: match &room {
                    None => core::Confinement::Off,
                    Some(Ok(room)) => core::Confinement::Room(room),
                    Some(Err(why)) => core::Confinement::Unavailable(why),
                },
                spawn_failure: spawn_failure.as_deref(),
                config: &config,
                now: Timestamp::now(),
                new_session_id: &new_session_id,
            };
            let plan = core::decide(&input);
            if let Some(intent) = &plan.intent {
                self.discoveries.recorded(workdir, &owner_name, Some(intent), discover.is_some());
                self.store.write_status(&ws, intent).await.map_err(ReconcileError::WriteIntent)?;
                self.failpoint(Failpoint::AfterIntent).await;
            }
            match self.execute(&ws, (&owner, &owner_name), &events, &plan, &config).await {
                Ok(()) => {
                    let gone = plan.ops.contains(&Op::ReleaseFinalizer);
                    self.discoveries.recorded(
                        workdir,
                        &owner_name,
                        (!gone).then_some(&plan.status),
                        discover.is_some(),
                    );
                    if plan.status != recorded && !gone {
                        self.store.write_status(&ws, &plan.status).await.map_err(ReconcileError::WriteStatus)?;
                    }
                    return Ok(match (plan.requeue_after, next_expiry) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    });
                }
                // The core decides what a failed spawn means: a failed resume falls back to one fresh spawn, a
                // failed fresh spawn backs off (its plan spawns nothing), so this loops at most twice.
                Err(ExecError::Spawn(message)) if attempt < 2 => {
                    status = plan.intent.clone().unwrap_or(status);
                    spawn_failure = Some(message);
                }
                Err(ExecError::Spawn(stderr)) => {
                    return Err(ReconcileError::Spawn(TmuxError::Failed { command: "new-session", stderr }));
                }
                Err(ExecError::Other(e)) => return Err(e),
            }
        }
        unreachable!("the loop returns")
    }

    async fn execute(
        &self,
        ws: &WorkSession,
        (owner, owner_name): (&str, &str),
        events: &[WorkEvent],
        plan: &Plan,
        config: &Config,
    ) -> Result<(), ExecError> {
        let tmux = self.observer.tmux();
        let other = |e: ReconcileError| ExecError::Other(e);
        for op in &plan.ops {
            match op {
                Op::Stop { session } => tmux.stop(session, owner).await.map_err(|e| other(ReconcileError::Stop(e)))?,
                Op::Spawn(spawn) => {
                    if let (Some(room), Some(rooms)) = (&spawn.confine, &config.rooms) {
                        // The workdir becomes the room's before its harness starts there.
                        let keep = agent_dirs(config);
                        self.rooms.hand_over(rooms, room.uid, &spawn.workdir, &keep).map_err(ExecError::Spawn)?;
                    }
                    tmux.spawn(spawn).await.map_err(|e| ExecError::Spawn(e.to_string()))?
                }
                Op::Paste { session, key, tag, text } => {
                    tmux.paste(session, text, tag)
                        .await
                        .map_err(|source| other(ReconcileError::Paste { event: key.clone(), source }))?;
                    self.failpoint(Failpoint::AfterPaste).await;
                }
                Op::Event(update) => {
                    let Some(ev) = events.iter().find(|e| e.name_any() == update.event) else { continue };
                    let status = queue::apply(ev, update, Time(Timestamp::now()));
                    self.store.write_event_status(ev, &status).await.map_err(|source| {
                        other(ReconcileError::WriteEventStatus { event: update.event.clone(), source })
                    })?;
                    if let Some(via) = update.via.filter(|_| update.phase == crate::api::EventPhase::Delivered) {
                        self.metrics.events_delivered.get_or_create(&ViaLabel { via: via.as_str() }).inc();
                    }
                }
                Op::Notice(notice) => {
                    self.log(ws, notice);
                    self.store.record(ws, notice).await;
                }
                Op::PrepareWorkspace => self.workspaces.start(owner_name, ws, config),
                Op::RemoveWorkspace => match self.workspaces.remove(owner_name, ws, config).await {
                    crate::workspace::Removal::Removed => {
                        tracing::info!(event = "workspace.removed", workdir = ws.spec.workdir, "removed the checkout");
                    }
                    crate::workspace::Removal::Kept(why) => {
                        let notice = core::Notice::new(NoticeKind::WorkspaceKept, why);
                        self.log(ws, &notice);
                        self.store.record(ws, &notice).await;
                    }
                },
                Op::ReleaseRoom => {
                    let Some(rooms) = &config.rooms else { continue };
                    let Some(room) = self.rooms.existing(rooms, owner_name) else { continue };
                    let confine = crate::tmux::Confine { helper: rooms.helper.clone(), uid: room.uid, home: room.home };
                    // Nothing of the uid may outlive the session (a harness's child that left its tmux session).
                    tmux.evict(&confine).await.map_err(|e| other(ReconcileError::ReleaseRoom(e.to_string())))?;
                    // The finalizer stays on failure: the room is freed on the next try, never given out half-cleared.
                    let kept =
                        self.rooms.release(rooms, owner_name).map_err(|e| other(ReconcileError::ReleaseRoom(e)))?;
                    if let Some(to) = kept {
                        let why = format!(
                            "{} was its harness's: moved aside to {} (the agent's alone; no room reaches it)",
                            ws.spec.workdir,
                            to.display()
                        );
                        let notice = core::Notice::new(NoticeKind::WorkspaceKept, why);
                        self.log(ws, &notice);
                        self.store.record(ws, &notice).await;
                    }
                }
                Op::ReleaseFinalizer => {
                    self.store
                        .set_finalizer(ws, false)
                        .await
                        .map_err(|e| other(ReconcileError::ReleaseFinalizer(e)))?;
                }
            }
        }
        Ok(())
    }

    async fn failpoint(&self, here: Failpoint) {
        if self.failpoint == Some(here) {
            tracing::warn!(event = "agent.failpoint", failpoint = ?here, "stopping here for good, as a killed agent would");
            std::future::pending::<()>().await;
        }
    }

    fn log(&self, ws: &WorkSession, notice: &core::Notice) {
        let (namespace, name) = (ws.namespace().unwrap_or_default(), ws.name_any());
        let kind = notice.kind;
        match kind {
            NoticeKind::Respawned { resumed } => {
                let resumed = if resumed { "true" } else { "false" };
                self.metrics.respawns.get_or_create(&ResumedLabel { resumed }).inc();
            }
            NoticeKind::ResumeFailed(why) => {
                self.metrics.resume_failures.get_or_create(&ReasonLabel { reason: why.as_str() }).inc();
            }
            NoticeKind::IdleStopped | NoticeKind::Woken => {
                let transition = if kind == NoticeKind::IdleStopped { "stop" } else { "wake" };
                self.metrics.idle.get_or_create(&IdleLabel { transition }).inc();
            }
            _ => {}
        }
        let (event, reason, resumed) = (kind.log_event(), kind.detail(), kind.resumed());
        match kind.severity() {
            core::Severity::Normal => tracing::info!(event, namespace, name, resumed, reason, "{}", notice.message),
            core::Severity::Warning => tracing::warn!(event, namespace, name, reason, "{}", notice.message),
        }
    }
}

/// The tmux session the harness runs in: the recorded one while it still exists and is this object's (a changed
/// `sessionPrefix`, or a release that named sessions `<prefix><workItem>`, never orphans a running harness: it is
/// adopted until it dies), else the configured one ([`Config::tmux_session`]).
pub fn current_session(ws: &WorkSession, observation: &Observation, config: &Config) -> String {
    let configured = config.tmux_session(&crate::api::identity(ws));
    let recorded = ws.status.as_ref().and_then(|s| s.tmux_session.clone());
    // Only a name of a shape the agent makes for this object is used (it goes to tmux as a target): the configured
    // shape under another prefix, or the older `<prefix><workItem>` (the work item is immutable).
    let suffix = configured.strip_prefix(config.tmux.session_prefix.as_str()).unwrap_or(&configured);
    let ours = |s: &String| s.ends_with(suffix) || s.ends_with(&ws.spec.work_item);
    let valid = |s: &String| s != &configured && ours(s) && crate::tmux::is_tag(s);
    match recorded.filter(valid) {
        // Still there: ours, it is adopted; another's or untagged (an older build's), the core reports it rather
        // than start a second harness of the conversation under the new name.
        Some(old) if observation.session(&old).is_some() => old,
        _ => configured,
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    /// Issue 23: a WorkSession's tmux session is `<prefix><namespace>_<name>`; one recorded under the older
    /// `<prefix><workItem>` is used while it lives and is this object's, never a session of another shape or owner.
    #[test]
    fn the_tmux_session_is_the_recorded_one_while_it_is_ours_else_the_configured_one() {
        let config = Config::default();
        let mut ws = WorkSession::new(
            "repo-12",
            crate::api::WorkSessionSpec { work_item: "item-12".into(), ..Default::default() },
        );
        ws.metadata.namespace = Some("agents".into());
        ws.metadata.uid = Some("uid-1".into());
        let observed = |line: &str| Observation::from_lines(line);
        let with_recorded = |name: &str| {
            let mut ws = ws.clone();
            ws.status = Some(crate::api::WorkSessionStatus { tmux_session: Some(name.into()), ..Default::default() });
            ws
        };
        let none = observed("");
        assert_eq!(current_session(&ws, &none, &config), "loop-agents_repo-12");
        let old = with_recorded("loop-item-12");
        let alive = observed("loop-item-12\t0\t1\t\t\tuid-1\tagents/repo-12\n");
        assert_eq!(current_session(&old, &alive, &config), "loop-item-12", "adopted while it lives");
        assert_eq!(current_session(&old, &none, &config), "loop-agents_repo-12", "gone: the new name");
        let theirs = observed("loop-item-12\t0\t1\t\t\tuid-2\tother/x\n");
        assert_eq!(current_session(&old, &theirs, &config), "loop-item-12", "another's: the core reports it");
        let elsewhere = with_recorded("loop-other-item");
        let alive = observed("loop-other-item\t0\t1\t\t\tuid-1\tagents/repo-12\n");
        assert_eq!(current_session(&elsewhere, &alive, &config), "loop-agents_repo-12", "not our shape");
    }

    #[test]
    fn errors_name_their_step_and_keep_their_source() {
        let disk = || StoreError::Local("disk full".into());
        let cases = [
            (ReconcileError::AddFinalizer(disk()), "adding the finalizer: disk full", "local_store"),
            (ReconcileError::WriteIntent(disk()), "writing the intent: disk full", "local_store"),
            (ReconcileError::WriteStatus(disk()), "writing status: disk full", "local_store"),
            (
                ReconcileError::ExpireEvent { event: "e1".into(), source: disk() },
                "expiring event e1: disk full",
                "local_store",
            ),
            (
                ReconcileError::Spawn(TmuxError::Failed { command: "new-session", stderr: "no space".into() }),
                "spawning the harness: ",
                "tmux_failed",
            ),
        ];
        for (error, says, category) in cases {
            assert!(error.to_string().starts_with(says), "{error} does not start with {says:?}");
            assert_eq!(error.category().as_str(), category);
            let source = error.source().expect("a source");
            assert!(error.to_string().ends_with(&source.to_string()), "{error} hides its source {source}");
        }
    }
}
