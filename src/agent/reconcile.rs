//! One reconcile of one WorkSession: read it and its events (as new as the agent's own writes), observe tmux
//! (shared), ask the core, execute the plan. Generic over the [`Store`] and [`Tmux`] edges, so local mode runs the same code.

mod observer;
mod rooms;

pub use observer::{Observer, SETTLED_FOR};

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use tokio::sync::watch;
use tracing::Instrument;

use super::error::ReconcileError;
use super::evidence::{self, Gathering};
use super::metrics::{AgentMetrics, CategoryLabel, IdleLabel, ReasonLabel, ResumedLabel, ViaLabel};
use super::registries::Registries;
use crate::api::{WorkEvent, WorkSession, WorkSessionStatus};
use crate::config::Config;
use crate::core::queue;
use crate::core::{self, Claim, EventReason, Op, Plan};
use crate::node::answers;
use crate::node::tmux::Tmux;
use crate::store::{Store, StoreError};

/// A point where a reconcile can be made to stop forever, as if the agent were killed there (crash tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failpoint {
    /// After the intent is written, before the spawn.
    AfterIntent,
    /// After a paste, before its status is written.
    AfterPaste,
}

/// Everything a reconcile needs.
pub struct Reconciler<S, T> {
    /// The object store.
    pub(super) store: S,
    /// Shared tmux observations (and the tmux edge).
    pub(super) observer: Observer<T>,
    /// This agent's node; `None` (local mode): every session in the store is this agent's.
    pub(super) node: Option<String>,
    /// The current config (hot-reloaded).
    pub(super) config: watch::Receiver<Arc<Config>>,
    /// Metrics.
    pub(super) metrics: AgentMetrics,
    /// Where to stop forever, for crash tests (`None` in production).
    pub(super) failpoint: Option<Failpoint>,
    /// What the agent holds in memory for its node's sessions between reconciles.
    pub(super) registries: Registries,
    /// Which sessions a reconcile runs for now: one at a time each.
    pub(super) turns: super::turns::Turns,
    /// The agent config's `rooms` at start, which a reload does not change.
    pub(super) rooms_at_start: Option<crate::node::room::RoomsConfig>,
    /// A reload's change of `rooms` was refused (and said so once).
    pub(super) rooms_reload_refused: std::sync::atomic::AtomicBool,
    /// The agent's Lease renewals (on a cluster; `None` in local mode, where nothing else can run its sessions):
    /// nothing is done while the fence does not hold.
    pub(super) fence: Option<super::lease::Fence>,
    /// Where a session read on another node goes, for the events still addressed here (on a cluster).
    pub(super) left_behind: Option<super::LeftBehind>,
    /// What ties the egress proxy to the sessions (with egress; taken by the cluster driver).
    pub(super) egress: Option<super::EgressLink>,
}

/// How far a plan ran.
enum Executed {
    /// Every op.
    All,
    /// Up to a spawn tmux refused.
    SpawnRefused,
    /// Up to a claim another session took first.
    ClaimLost,
    /// Up to an op the fence refused: the agent's Lease is too old.
    Fenced,
    /// Up to the intent, which the session refused: it changed since it was read (placed elsewhere, say).
    Stale,
}

/// How soon a reconcile the fence held back looks again.
pub const FENCED_RECHECK: Duration = Duration::from_secs(1);

impl<S: Store, T: Tmux> Reconciler<S, T> {
    /// Whether `ws` is this agent's: in local mode every session; on a cluster one placed on its node, of a
    /// namespace it serves (`placement.namespaces`).
    pub fn serves(&self, ws: &WorkSession) -> bool {
        let Some(node) = &self.node else { return true };
        let namespace = ws.metadata.namespace.as_deref().unwrap_or_default();
        ws.spec.node_name.as_ref() == Some(node) && self.config.borrow().placement.serves(namespace)
    }

    /// Whether the agent may act now: its Lease was renewed recently enough that no other node runs its sessions.
    pub fn fence_holds(&self) -> bool {
        let after = self.config.borrow().placement.fence_after();
        self.fence.as_ref().is_none_or(|f| f.holds(after))
    }

    /// Learns which conversation every session of this agent records, before the first reconcile, so that a session
    /// adopting `spec.harnessSessionId` never takes another's; the reconciles keep it current from then on.
    pub async fn seed_claims(&self) -> Result<(), StoreError> {
        let sessions = self.store.sessions().await?;
        let mine = sessions.iter().filter(|ws| self.serves(ws));
        let config = self.config.borrow().clone();
        for ws in mine.filter(|ws| ws.status.is_some()) {
            self.claims_follow(ws, &evidence::owner_tags(ws).1, ws.status.as_ref(), &config);
        }
        Ok(())
    }

    /// Keeps the node's claims in step with the status a session records (`None`: it is gone): the conversation it
    /// runs, and its workdir while a fresh harness discovers its id; and the usage limit it holds. Every status the agent reads at its start or
    /// records (an intent, a plan's status) goes through here, so the claims are what the statuses say.
    fn claims_follow(&self, ws: &WorkSession, owner_name: &str, status: Option<&WorkSessionStatus>, config: &Config) {
        let discovers = config.harnesses.get(&ws.spec.harness).is_some_and(|p| p.discovers());
        self.registries.discoveries.recorded(&ws.spec.workdir, owner_name, status, discovers);
        self.registries.limits.recorded(owner_name, &ws.spec.harness, status);
    }

    /// Reconciles the WorkSession `namespace/name`; returns when to look again (`None`: on the next change).
    pub async fn reconcile(&self, namespace: &str, name: &str) -> Result<Option<Duration>, ReconcileError> {
        self.reconcile_observed_after(namespace, name, Instant::now()).await
    }

    /// The same, from a tmux observation taken no earlier than `observed_after` (the moment of the cause that woke
    /// it; or an earlier one that still stands, [`Observer::since_unless_settled`]), so the reconciles one cause woke
    /// share one tmux call.
    pub async fn reconcile_observed_after(
        &self,
        namespace: &str,
        name: &str,
        observed_after: Instant,
    ) -> Result<Option<Duration>, ReconcileError> {
        if !self.fence_holds() {
            return Ok(Some(FENCED_RECHECK)); // cut off: its sessions may run elsewhere (lease.rs stops them)
        }
        let (turn, observed_after) = self.turns.take_observing(&format!("{namespace}/{name}"), observed_after).await;
        self.reconcile_in_turn(turn, namespace, name, observed_after).await
    }

    /// Reconciles the WorkSession now unless another reconcile of it runs or waits (`None`: the driver's own wake of
    /// the same cause runs after that one), or the fence does not hold.
    pub async fn reconcile_if_free(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Result<Option<Duration>, ReconcileError>> {
        if !self.fence_holds() {
            return None;
        }
        let turn = self.turns.try_take(&format!("{namespace}/{name}"))?;
        Some(self.reconcile_in_turn(turn, namespace, name, Instant::now()).await)
    }

    async fn reconcile_in_turn(
        &self,
        _turn: tokio::sync::OwnedMutexGuard<()>,
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
        // Observe: the object and its events (as new as this agent's writes), then tmux (shared). Each step has a
        // debug span, whose lifetime is the step's: `cargo bench --bench agent respawn` times them.
        let (ws, events) = tokio::join!(
            self.store.session(namespace, name).instrument(tracing::debug_span!("read_session")),
            self.store.events(namespace, name).instrument(tracing::debug_span!("read_events")),
        );
        let Some(ws) = ws.map_err(ReconcileError::Read)? else {
            self.registries.limits.forget(&format!("{namespace}/{name}"));
            return Ok(None);
        };
        if !self.serves(&ws) {
            // No longer this node's to follow: its limit, if another node's agent labelled it, is that node's word.
            let labelled = ws.labels().contains_key(crate::api::USAGE_LIMITED_LABEL);
            let status = ws.status.as_ref().filter(|_| labelled);
            self.registries.limits.recorded(&format!("{namespace}/{name}"), &ws.spec.harness, status);
            // Another node's: never touched. Moved since this agent's cache saw it: its events addressed here go there.
            if let (Some(left), Some(node)) = (&self.left_behind, &self.node)
                && ws.spec.node_name.as_ref() != Some(node)
            {
                let _ = left.unbounded_send((namespace.to_string(), name.to_string()));
            }
            return Ok(None);
        }
        let events = events.map_err(ReconcileError::Read)?;
        let config = self.config_now();
        let configured = config.tmux_session(&crate::api::identity(&ws));
        let recorded = ws.status.as_ref().and_then(|s| s.tmux_session.as_deref());
        let names: Vec<&str> = std::iter::once(configured.as_str()).chain(recorded).collect();
        let observed = self.observer.since_unless_settled(observed_after, &names);
        let observation =
            observed.instrument(tracing::debug_span!("observe")).await.map_err(ReconcileError::Observe)?;
        let gathered = self
            .gathering()
            .gather(&ws, &events, &observation, &config)
            .instrument(tracing::debug_span!("gather"))
            .await;
        // Decide.
        let mut input = gathered.input(&ws, &observation, &config);
        if self.node.is_none() {
            input.object.move_to = None; // local mode is one machine: nowhere to move to
        }
        let plan = tracing::debug_span!("decide").in_scope(|| core::decide(&input));
        // Execute, then record.
        let owner = (gathered.owner.0.as_str(), gathered.owner.1.as_str());
        match self.execute(&ws, owner, &events, &plan, &config).await? {
            Executed::All => {}
            // The next decision is told (its status is the recorded intent): a resume falls back at once.
            Executed::SpawnRefused => return Ok(Some(Duration::ZERO)),
            // The holder's status lets it go when its harness shows its id; look again then, not at once.
            Executed::ClaimLost => return Ok(Some(core::DISCOVERY_RECHECK)),
            Executed::Fenced => return Ok(Some(FENCED_RECHECK)),
            // Read again at once: the change decides (a session that left the node is no longer served).
            Executed::Stale => return Ok(Some(Duration::ZERO)),
        }
        let gone = plan.releases();
        self.claims_follow(&ws, owner.1, (!gone).then_some(&plan.status), &config);
        // A refused spawn is told until a recorded status no longer waits on it.
        let verifying = plan.status.verification.as_ref().map(|v| v.spawn.as_str()).filter(|_| !gone);
        self.registries.spawn_failures.settle(owner.1, verifying);
        let recorded = ws.status.clone().unwrap_or_default();
        if plan.status != recorded && !gone && self.fence_holds() {
            let span = tracing::debug_span!("write_status");
            self.store.write_status(&ws, &plan.status).instrument(span).await.map_err(ReconcileError::WriteStatus)?;
        }
        Ok(plan.requeue_after)
    }

    /// The config now; `rooms` as at the agent's start.
    fn gathering(&self) -> Gathering<'_, T> {
        Gathering { registries: &self.registries, tmux: self.observer.tmux() }
    }

    fn config_now(&self) -> Arc<Config> {
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
        config
    }

    /// Runs the plan's ops in order, stopping at the first that fails; a lost claim or a spawn tmux refused stops
    /// the plan too (the next reconcile decides what that means).
    async fn execute(
        &self,
        ws: &WorkSession,
        (owner, owner_name): (&str, &str),
        events: &[WorkEvent],
        plan: &Plan,
        config: &Config,
    ) -> Result<Executed, ReconcileError> {
        let tmux = self.observer.tmux();
        // What this plan wrote of each event so far: a second update of one event (returned by a death, then sent
        // again by the respawn, in one decision) applies to the first's result, not to the status read before.
        let mut written: std::collections::HashMap<&str, crate::api::WorkEventStatus> = Default::default();
        // Read before any op runs: a failure to read them is a reconcile tried again, nothing of the plan done (a
        // spawn refused would end a resume in a fresh conversation), and no wait falls between the spawn's fence
        // check and the spawn.
        let keys = self.namespace_keys(ws, plan).await?;
        for op in &plan.ops {
            // Each op asks the fence again: the reads before it may have waited past it (a frozen agent, a slow
            // API server), and a spawn or a paste must never reach a harness whose session runs elsewhere.
            if !self.fence_holds() {
                return Ok(Executed::Fenced);
            }
            // Lives as long as the op: closed by the next op or by a return.
            let _timed = tracing::debug_span!("op", op = op.name());
            match op {
                Op::AddFinalizer => {
                    self.store.set_finalizer(ws, true).await.map_err(ReconcileError::AddFinalizer)?;
                }
                Op::ExpireEvent { event } => {
                    let Some(ev) = events.iter().find(|e| e.name_any() == *event) else { continue };
                    let expire = |source| ReconcileError::ExpireEvent { event: event.clone(), source };
                    self.store.delete_event(ev).await.map_err(expire)?;
                }
                Op::Claim(claim) => {
                    let taken = match claim {
                        Claim::Wake(credential) => {
                            let (now, spread) = (Timestamp::now(), config.usage_limit_spread);
                            self.registries.limits.take_wake(owner_name, credential, now, spread)
                        }
                        _ => self.registries.discoveries.take(claim, owner_name),
                    };
                    if let Err(other) = taken {
                        tracing::info!(event = "claim.lost", ?claim, holder = other, "another session took it first");
                        return Ok(Executed::ClaimLost);
                    }
                }
                Op::RecordIntent(intent) => {
                    // Claimed before it is written: a spawn of another session never starts on what this one takes.
                    self.claims_follow(ws, owner_name, Some(intent), config);
                    if !self.store.write_intent(ws, intent).await.map_err(ReconcileError::WriteIntent)? {
                        tracing::info!(event = "intent.stale", "the session changed since it was read: decided again");
                        return Ok(Executed::Stale);
                    }
                    self.failpoint(Failpoint::AfterIntent).await;
                }
                Op::Stop { session } => {
                    let stopped = tmux.stop(session, owner).await;
                    self.observer.touched(session);
                    stopped.map_err(ReconcileError::Stop)?;
                }
                Op::LabelLimited(on) => {
                    // A word for the other nodes, not this decision's: the status is still recorded, and the next
                    // decision asks again.
                    if let Err(e) = self.store.label_limited(ws, *on).await {
                        tracing::warn!(event = "session.label_failed", error = %e, "cannot label the session's usage limit");
                    }
                }
                Op::Move { node } => {
                    self.store.move_to(ws, node).await.map_err(ReconcileError::Move)?;
                    tracing::info!(event = "session.moved", node, "handed to another node");
                    // Its events labelled for this node go to that one's agent, which watches only its own.
                    if let Some(left) = &self.left_behind {
                        let _ = left.unbounded_send((ws.namespace().unwrap_or_default(), ws.name_any()));
                    }
                }
                Op::Spawn(spawn) => {
                    let spawned = self.spawn(spawn, &keys, config).await;
                    self.observer.touched(&spawn.session);
                    if let Err(message) = spawned {
                        // The recorded intent is the status the next decision starts from; it is told why.
                        self.registries.spawn_failures.put(owner_name, &spawn.tag, message);
                        return Ok(Executed::SpawnRefused);
                    }
                }
                Op::Paste { session, key, tag, text } => {
                    tmux.paste(session, text, tag)
                        .await
                        .map_err(|source| ReconcileError::Paste { event: key.clone(), source })?;
                    self.failpoint(Failpoint::AfterPaste).await;
                }
                Op::Submit { session, key } => {
                    tmux.submit(session)
                        .await
                        .map_err(|source| ReconcileError::Paste { event: key.clone(), source })?;
                }
                Op::WorkEventStatus(update) => {
                    let Some(ev) = events.iter().find(|e| e.name_any() == update.event) else { continue };
                    let old = written.get(update.event.as_str()).or(ev.status.as_ref());
                    written.insert(update.event.as_str(), self.write_event_status(ev, old, update).await?);
                }
                Op::GrantPush { .. } => self.grant_push(ws, owner_name, op, config).await,
                Op::Answer { trusted, below, written, group } => match answers::answer(trusted, below, written, *group)
                {
                    Ok(true) => tracing::info!(event = "approval.answer", request = written.request, "answered"),
                    // The file the receiver reads is the first answer's: the hook file's record of it says which.
                    Ok(false) => tracing::warn!(event = "approval.answered_before", request = written.request, "kept"),
                    Err(source) => return Err(ReconcileError::Answer { request: written.request.clone(), source }),
                },
                Op::Notice(notice) => self.report(ws, notice).await,
                Op::PrepareWorkspace => self.registries.workspaces.start(owner_name, ws, config),
                Op::MarkPrepared => {
                    let Some(rooms) = &config.rooms else { continue };
                    if let Err(e) = self.registries.rooms.prepared(rooms, owner_name) {
                        // Not fatal: the hand-over refuses a checkout the record does not name, and says so.
                        tracing::error!(event = "rooms.record_failed", error = %e, "the checkout will not be handed over");
                    }
                }
                Op::RemoveWorkspace => self.remove_workspace(ws, owner_name, config).await,
                Op::GiveRoom => self.give_room(ws, owner_name, config)?,
                Op::ReleaseRoom => self.release_room(ws, owner_name, config).await?,
                Op::LeaveRoom => self.leave_room(owner_name, config).await?,
                Op::Forget => {
                    self.registries.spawn_failures.settle(owner_name, None);
                    self.registries.push.forget(owner_name);
                }
                Op::ReleaseFinalizer { deleting_since } => {
                    self.release_finalizer(ws, owner_name, *deleting_since, config).await?;
                }
            }
        }
        Ok(Executed::All)
    }

    /// Writes `update` over a WorkEvent's status (`old`: as this plan last wrote it, or as read); the status written.
    async fn write_event_status(
        &self,
        ev: &WorkEvent,
        old: Option<&crate::api::WorkEventStatus>,
        update: &core::WorkEventUpdate,
    ) -> Result<crate::api::WorkEventStatus, ReconcileError> {
        let status = queue::apply(old, update, Time(Timestamp::now()));
        self.store
            .write_event_status(ev, &status)
            .await
            .map_err(|source| ReconcileError::WriteEventStatus { event: update.event.clone(), source })?;
        if let Some(via) = update.via.filter(|_| update.phase == crate::api::PromptPhase::Delivered) {
            self.metrics.events_delivered.get_or_create(&ViaLabel { via: via.as_str() }).inc();
        }
        Ok(status)
    }

    /// Hands the harness its push token ([`Op::GrantPush`]); a failure is said once per run of failures, and the
    /// next decision tries again.
    async fn grant_push(&self, ws: &WorkSession, owner_name: &str, op: &Op, config: &Config) {
        let (Op::GrantPush { repository, host, home, dir, owner }, Some(push)) = (op, &config.workspaces.push) else {
            return;
        };
        match self.registries.push.grant(push, owner_name, (repository, host), (home, dir), *owner).await {
            Ok(expires) => {
                tracing::info!(event = "workspace.push_token", repository, %expires, "push token handed out")
            }
            Err((why, false)) => self.report(ws, &core::Notice::new(EventReason::PushTokenFailed, why)).await,
            Err((why, true)) => tracing::debug!(event = "workspace.push_token_failed", why, "again"),
        }
    }

    /// Removes the session's checkout, or says why it is kept.
    async fn remove_workspace(&self, ws: &WorkSession, owner_name: &str, config: &Config) {
        match self.registries.workspaces.remove(owner_name, ws, config).await {
            crate::node::workspace::Removal::Removed => {
                tracing::info!(event = "workspace.removed", workdir = ws.spec.workdir, "removed the checkout");
            }
            crate::node::workspace::Removal::Kept(why) => {
                self.report(ws, &core::Notice::new(EventReason::WorkspaceKept, why)).await;
            }
        }
    }

    /// Deletes the WorkEvents that go with the deleted session, read fresh (one written since this reconcile read
    /// them too), then drops the finalizer: it stays until they are gone.
    async fn release_finalizer(
        &self,
        ws: &WorkSession,
        owner_name: &str,
        deleting_since: Timestamp,
        config: &Config,
    ) -> Result<(), ReconcileError> {
        let namespace = ws.namespace().unwrap_or_default();
        let events = self.store.events_fresh(&namespace, &ws.name_any()).await.map_err(ReconcileError::Read)?;
        let goes = |ev: &&WorkEvent| {
            core::goes_with_its_session(ev.metadata.creation_timestamp.as_ref().map(|t| t.0), deleting_since)
        };
        for ev in events.iter().filter(goes) {
            self.store.delete_event(ev).await.map_err(ReconcileError::ReleaseFinalizer)?;
        }
        self.store.set_finalizer(ws, false).await.map_err(ReconcileError::ReleaseFinalizer)?;
        self.registries.push.forget(owner_name);
        if let (None, Some(home)) = (&config.rooms, &config.harness_home) {
            // A room's home goes with its room; the shared HOME keeps no token of a session gone.
            let _ = std::fs::remove_dir_all(crate::core::push_dir(home, owner_name));
        }
        Ok(())
    }

    /// Logs `notice` (counting it where a metric counts it) and records it as a Kubernetes Event.
    async fn report(&self, ws: &WorkSession, notice: &core::Notice) {
        self.log(ws, notice);
        self.store.record(ws, notice).await;
    }

    async fn failpoint(&self, here: Failpoint) {
        if self.failpoint == Some(here) {
            tracing::warn!(event = "agent.failpoint", failpoint = ?here, "stopping here for good, as a killed agent would");
            std::future::pending::<()>().await;
        }
    }

    fn log(&self, ws: &WorkSession, notice: &core::Notice) {
        let (namespace, name) = (ws.namespace().unwrap_or_default(), ws.name_any());
        let reason = notice.reason;
        match (reason, notice.resumed, notice.row) {
            (EventReason::Respawned, Some(resumed), _) => {
                let resumed = if resumed { "true" } else { "false" };
                self.metrics.respawns.get_or_create(&ResumedLabel { resumed }).inc();
            }
            (EventReason::ResumeFailed, _, Some(why)) => {
                self.metrics.resume_failures.get_or_create(&ReasonLabel { reason: why.as_str() }).inc();
            }
            (EventReason::IdleStopped | EventReason::Woken, ..) => {
                let transition = if reason == EventReason::IdleStopped { "stop" } else { "wake" };
                self.metrics.idle.get_or_create(&IdleLabel { transition }).inc();
            }
            _ => {}
        }
        let (event, resumed, severity) = (reason.log_event(), notice.resumed, reason.severity());
        let reason = notice.detail();
        match severity {
            core::Severity::Normal => tracing::info!(event, namespace, name, resumed, reason, "{}", notice.message),
            core::Severity::Warning => tracing::warn!(event, namespace, name, reason, "{}", notice.message),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;
    use crate::node::tmux::TmuxError;

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
                ReconcileError::Stop(TmuxError::Failed { command: "kill-session", stderr: "no server".into() }),
                "stopping the tmux session: ",
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
