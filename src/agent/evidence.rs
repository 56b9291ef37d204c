//! What a decision needs to know beyond the store's objects and the observation, gathered into the core's
//! [`Input`]: which tmux session is the harness's, the room, the workspace, what the node's claims say, a spawn that
//! failed, and, read only when it matters, a dead pane's last lines (for a death not yet explained), a live pane's
//! visible text (while a prompt waits for the profile's `readyPattern`), the harness's transcript (whether a
//! conversation to resume exists, and which sent prompts it shows), and the id a harness shows after its start.

use std::path::Path;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::registries::Registries;
use crate::api::{Phase, PromptPhase, WorkEvent, WorkSession, WorkSessionStatus};
use crate::config::Config;
use crate::core::discover::{discovering, discovering_since};
use crate::core::{
    Confinement, Context, Evidence, FinishedWorkEvent, Input, Object, Observed, PendingAnswer, PendingWorkEvent, Proof,
    Record, TmuxSession, initial_prompt_owed, queue, resume,
};
use crate::node::tmux::{Liveness, Observation, Tmux};
use crate::node::transcript;
use crate::store::FINALIZER;

/// Lines of a dead pane's output kept for conditions and messages.
const LAST_LINES: usize = 20;

/// Everything gathered for one decision, owned; lent to the core by [`Gathered::input`].
#[derive(Debug)]
pub struct Gathered {
    /// The object's identity in tmux tags, and its `namespace/name` ([`owner_tags`]).
    pub owner: (String, String),
    /// Its events still to deliver, in order.
    pub pending: Vec<PendingWorkEvent>,
    /// Its delivered and failed events.
    pub finished: Vec<FinishedWorkEvent>,
    /// Its answers to permission requests not yet taken.
    pub answers: Vec<PendingAnswer>,
    /// Which tmux session is its harness's.
    pub session: TmuxSession,
    /// That session's liveness.
    pub liveness: Liveness,
    /// What a dead pane printed last.
    pub last_output: String,
    /// A live pane's visible text.
    pub screen: Option<String>,
    /// What was read beyond tmux, as the core takes it.
    pub evidence: Evidence,
    /// The clock, read once.
    pub now: Timestamp,
    /// A fresh uuid, for a fresh conversation.
    pub new_session_id: String,
}

impl Gathered {
    /// The core's input: `ws` as stored, `observation` and `config`, with what was gathered.
    pub fn input<'a>(&'a self, ws: &'a WorkSession, observation: &'a Observation, config: &'a Config) -> Input<'a> {
        static NO_STATUS: std::sync::LazyLock<WorkSessionStatus> = std::sync::LazyLock::new(Default::default);
        Input {
            object: Object {
                spec: &ws.spec,
                status: ws.status.as_ref().unwrap_or(&NO_STATUS),
                generation: ws.metadata.generation,
                created: ws.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or_default(),
                deleting: ws.metadata.deletion_timestamp.as_ref().map(|t| t.0),
                finalized: ws.finalizers().iter().any(|f| f == FINALIZER),
                owner: &self.owner.0,
                owner_name: &self.owner.1,
                events: &self.pending,
                finished: &self.finished,
                answers: &self.answers,
                move_to: ws
                    .annotations()
                    .get(crate::api::MOVE_ANNOTATION)
                    .map(String::as_str)
                    .filter(|to| *to != crate::api::ANY_NODE && !to.is_empty())
                    .filter(|to| ws.spec.node_name.as_deref() != Some(to)),
                pull_request: ws.annotations().get(crate::api::PULL_REQUEST_STATE_ANNOTATION).map(String::as_str),
                limited_label: ws.labels().contains_key(crate::api::USAGE_LIMITED_LABEL),
            },
            observed: Observed {
                session: &self.session,
                liveness: self.liveness,
                view: observation.session(&self.session.current),
                server: observation.server,
                last_output: &self.last_output,
                screen: self.screen.as_deref(),
            },
            evidence: &self.evidence,
            context: Context { config, now: self.now, new_session_id: &self.new_session_id },
        }
    }
}

/// The agent's own directories on the workspace, never a room's workdir: the node's clones and the shared `HOME`.
pub fn agent_dirs(config: &Config) -> Vec<&Path> {
    config.workspaces.mirrors.as_deref().into_iter().chain(config.harness_home.as_deref()).collect()
}

/// The WorkEvents still to deliver as the core takes them, in the core's order (an answer is no prompt).
pub fn pending_events(events: &[WorkEvent]) -> Vec<PendingWorkEvent> {
    let all = events
        .iter()
        .filter(|e| e.spec.answer.is_none())
        .map(|e| {
            let status = e.status.clone().unwrap_or_default();
            let created = e.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or_default();
            PendingWorkEvent {
                tag: delivery_tag(e),
                command: e.spec.command,
                phase: status.phase.unwrap_or(PromptPhase::Pending),
                sent: status.sent_time.map(|t| t.0),
                via: status.via,
                offset: status.sent_offset,
                attempts: status.attempts,
                returns: status.returns,
                not_before: e.spec.not_before.as_ref().map(|t| t.0),
                ..PendingWorkEvent::pending(&e.name_any(), &e.spec.prompt, created)
            }
        })
        .collect();
    queue::ordered(all)
}

/// The answers to permission requests not yet taken, oldest first.
pub fn pending_answers(events: &[WorkEvent]) -> Vec<PendingAnswer> {
    let mut answers: Vec<PendingAnswer> = events
        .iter()
        .filter(|e| e.status.as_ref().and_then(|s| s.phase).is_none_or(|p| p == PromptPhase::Pending))
        .filter_map(|e| {
            let created = e.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or_default();
            Some(PendingAnswer { name: e.name_any(), answer: e.spec.answer.clone()?, created })
        })
        .collect();
    answers.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    answers
}

/// The delivered and failed WorkEvents, with when they finished (a failed one: its creation).
pub fn finished_events(events: &[WorkEvent]) -> Vec<FinishedWorkEvent> {
    let finished = |e: &WorkEvent| {
        let st = e.status.as_ref()?;
        let at = match st.phase? {
            PromptPhase::Delivered => st.delivered_at.as_ref()?.0,
            PromptPhase::Failed => e.metadata.creation_timestamp.as_ref()?.0,
            PromptPhase::Pending | PromptPhase::Delivering => return None,
        };
        // An answer taken carried no prompt to any conversation.
        let delivered = st.phase == Some(PromptPhase::Delivered) && e.spec.answer.is_none();
        let conversation = st.harness_session_id.clone().filter(|_| delivered);
        let (name, prompt, tag) = (e.name_any(), e.spec.prompt.clone(), delivery_tag(e));
        let sent = st.sent_time.as_ref().map(|t| t.0);
        Some(FinishedWorkEvent { name, at, prompt, conversation, tag, delivered, sent })
    };
    events.iter().filter_map(finished).collect()
}

/// The tag a WorkEvent's paste gives its tmux session: its UID (local mode makes one from its name and creation), or
/// for an object without one of a plain shape, one made the same way; never its bare name.
fn delivery_tag(ev: &WorkEvent) -> String {
    let plain = |uid: &&str| crate::api::is_dns_label(uid) || uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    match ev.metadata.uid.as_deref().filter(|uid| !uid.is_empty() && plain(uid)) {
        Some(uid) => uid.to_string(),
        None => {
            let created = ev.metadata.creation_timestamp.as_ref().map(|t| t.0.as_nanosecond()).unwrap_or_default();
            crate::api::made_uid(&ev.namespace().unwrap_or_default(), &ev.name_any(), created)
        }
    }
}

/// The object's identity in tmux tags: its UID, or `namespace/name` where objects have none (local mode); and its
/// `namespace/name` for people.
pub fn owner_tags(ws: &WorkSession) -> (String, String) {
    let name = crate::api::identity(ws);
    let uid = ws.metadata.uid.clone().filter(|u| crate::node::tmux::is_tag(u) && !u.is_empty());
    (uid.unwrap_or_else(|| name.clone()), name)
}

/// What was read of the harness's side: its pane's, and the evidence of its files.
#[derive(Debug, Default)]
struct Reads {
    last_output: String,
    screen: Option<String>,
    evidence: Evidence,
}

/// What gathering reads beyond the objects and the observation: this node's registries, and tmux (a pane's last
/// lines, its screen).
pub struct Gathering<'a, T> {
    /// The node's registries.
    pub registries: &'a Registries,
    /// The tmux edge.
    pub tmux: &'a T,
}

/// How long what `ws`'s harness writes about itself is, together: its hook file, for a hook-backed profile, and its
/// usage record, where its profile names one by a plain template (a record found by a pattern, Codex's, is read at
/// the wakes its hooks give); 0 while there is none, `None`: neither, or no `HOME` for them. One stat each: when it
/// changes, the session is reconciled (a turn the model's API refused writes its record and no hook).
pub fn records_len(registries: &Registries, ws: &WorkSession, config: &Config) -> Option<u64> {
    let profile = config.harnesses.get(&ws.spec.harness)?;
    let usage = profile.usage.as_ref().and_then(|u| u.path.as_ref().or(profile.conversation_path.as_ref()));
    let usage = usage.filter(|path| !path.contains('*'));
    if profile.hooks.is_none() && usage.is_none() {
        return None;
    }
    let identity = crate::api::identity(ws);
    let home = match &config.rooms {
        Some(rooms) => registries.rooms.existing(rooms, &identity)?.home,
        None => config.harness_home.clone()?,
    };
    let hooks = profile.hooks.and_then(|_| crate::node::hook::length(&home, &identity)).unwrap_or(0);
    let conversation = ws.status.as_ref().and_then(|s| s.harness_session_id.as_deref());
    let record = match (usage, conversation.filter(|id| crate::api::is_valid_session_id(id))) {
        (Some(template), Some(id)) => {
            transcript::length(&home, &transcript::locate(template, &home, &ws.spec.workdir, id))
        }
        _ => None,
    };
    Some(hooks.wrapping_add(record.unwrap_or(0)))
}

impl<T: Tmux> Gathering<'_, T> {
    /// Gathers what the decision about `ws` needs beyond `events` and `observation`, and nothing else.
    pub(super) async fn gather(
        &self,
        ws: &WorkSession,
        events: &[WorkEvent],
        observation: &Observation,
        config: &Config,
    ) -> Gathered {
        let owner = owner_tags(ws);
        let pending = pending_events(events);
        let session = crate::core::tmux_session(ws, config, |s| observation.session(s).is_some());
        let liveness = observation.liveness(&session.current);
        // Its room (the plan gives one it has not): where its harness runs and where its HOME is. Only an object the
        // finalizer guards may be given one: one deleted before that would keep its uid for good.
        let guarded = ws.finalizers().iter().any(|f| f == FINALIZER) && ws.metadata.deletion_timestamp.is_none();
        let room = match &config.rooms {
            Some(rooms) if !guarded => self.registries.rooms.existing(rooms, &owner.1).map(|room| Ok(Some(room))),
            Some(rooms) => {
                Some(self.registries.rooms.look(rooms, &owner.1, Path::new(&ws.spec.workdir), &agent_dirs(config)))
            }
            None => None,
        };
        let home = match &room {
            Some(Ok(room)) => room.as_ref().map(|room| room.home.as_path()),
            Some(Err(_)) => None,
            None => config.harness_home.as_deref(),
        };
        let status = ws.status.clone().unwrap_or_default();
        let spawn = observation.session(&session.current).map(|v| v.spawn.as_str());
        let read = self.read(ws, &status, &pending, (&session.current, liveness, spawn), home, config).await;
        // A conversation to adopt that another session of this node holds is never taken over.
        let adopting = ws.spec.harness_session_id.as_deref().filter(|_| status.harness_session_id.is_none());
        let discoveries = &self.registries.discoveries;
        Gathered {
            pending,
            finished: finished_events(events),
            answers: pending_answers(events),
            liveness,
            last_output: read.last_output,
            screen: read.screen,
            evidence: Evidence {
                hooked: read.evidence.hooked.filter(|id| discoveries.conversation_holder(id, &owner.1).is_none()),
                workspace: self.registries.workspaces.state(&owner.1, ws, config),
                room: match room {
                    None => Confinement::Off,
                    Some(Ok(Some(room))) => Confinement::Room(room),
                    Some(Ok(None)) => Confinement::Due,
                    Some(Err(why)) => Confinement::Unavailable(why),
                },
                discovering_here: discoveries.workdir_holder(&ws.spec.workdir, &owner.1),
                id_taken_by: adopting.and_then(|id| discoveries.conversation_holder(id, &owner.1)),
                spawn_failure: status
                    .verification
                    .as_ref()
                    .and_then(|v| self.registries.spawn_failures.of(&owner.1, &v.spawn)),
                // Read only while a spawn may come: what a handoff tells a fresh conversation.
                checkout: (ws.spec.workspace.is_some() && liveness != Liveness::Alive)
                    .then(|| crate::node::workspace::head_of(Path::new(&ws.spec.workdir)))
                    .flatten(),
                push: self.registries.push.of(&owner.1),
                limited: self.registries.limits.of(&owner.1, &ws.spec.harness),
                limit_reset: self.registries.limits.reset(&owner.1, &ws.spec.harness),
                budgets: self.registries.budgets.of(&ws.namespace().unwrap_or_default()),
                ..read.evidence
            },
            now: Timestamp::now(),
            new_session_id: uuid::Uuid::new_v4().to_string(),
            session,
            owner,
        }
    }

    /// Reads the harness's side: its pane's last lines or screen, its store and transcript, its shown id.
    async fn read(
        &self,
        ws: &WorkSession,
        status: &WorkSessionStatus,
        events: &[PendingWorkEvent],
        (session, liveness, spawn): (&str, Liveness, Option<&str>),
        home: Option<&Path>,
        config: &Config,
    ) -> Reads {
        let tmux = self.tmux;
        let profile = config.harnesses.get(&ws.spec.harness);
        let mut reads = Reads::default();
        // A dead pane's last lines matter only for a death not yet recorded (Running) or a spawn being verified.
        let unexplained = status.verification.is_some() || status.phase == Some(Phase::Running);
        if liveness == Liveness::Dead && unexplained {
            reads.last_output = tmux.last_lines(session, LAST_LINES).await.unwrap_or_default();
        }
        let Some(profile) = profile else { return reads };
        let initial = initial_prompt_owed(&ws.spec, status);
        let waiting = events.iter().any(|e| e.phase == PromptPhase::Pending) || initial == Some(PromptPhase::Pending);
        // A harness that takes prompts one at a time may get a paste's Enter again, unless its screen is busy.
        let pasted = !profile.queues_prompts && events.iter().any(|e| e.via == Some(crate::api::Via::Pasted));
        let unconfirmed = pasted && events.iter().any(|e| e.phase == PromptPhase::Delivering);
        if liveness == Liveness::Alive && (waiting || unconfirmed) && profile.reads_screen() {
            reads.screen = tmux.screen(session).await.ok();
        }
        let identity = owner_tags(ws).1;
        // Given hooks that name its conversation (Codex's notify, opencode's prompts), a harness's id is what they say,
        // found or not in its store; the store is still looked at meanwhile (a harness started before it was given
        // hooks says nothing).
        let hooks_given = crate::core::hook_args(profile, config, home, &identity, "spawn", None).is_some();
        let named_by_hooks = hooks_given && profile.hooks.is_some_and(crate::harness::hooks::Hooks::names_conversation);
        // A harness that shows its id after the start: looked for only while its status waits for it.
        let scan = liveness == Liveness::Alive && discovering(status);
        if let Some(d) = profile.discover.as_ref().filter(|_| scan) {
            let screen = match (&d.screen_pattern, &reads.screen) {
                (Some(_), None) => tmux.screen(session).await.ok(),
                _ => reads.screen.clone(),
            };
            let (_, owner) = owner_tags(ws);
            let since = discovering_since(status).map_or(i64::MAX, |t| t.0.as_second());
            let (d, home, workdir) = (d.clone(), home.map(Path::to_path_buf), ws.spec.workdir.clone());
            // The harness's folders are read off the async workers: however many files it made, others go on.
            let look = move || super::discovery::candidates(&d, since, (home.as_deref(), &workdir), screen.as_deref());
            let candidates = tokio::task::spawn_blocking(look).await.unwrap_or_default();
            reads.evidence.discovered = self.registries.discoveries.first_free(candidates, &owner);
        }
        let Some(home) = home else { return reads };
        let workdir = &ws.spec.workdir;
        // The conversation a respawn would resume; while a fresh spawn is verified, the one it made (if it is in the
        // store, the spawn ran, whatever tmux shows: a restarted tmux server has no session of it).
        let recorded = match &status.verification {
            Some(v) if !v.resume => Some(&v.harness_session_id),
            Some(_) => None,
            None => resume::candidate(&ws.spec, status),
        };
        let store = profile.store_path.as_ref().or(profile.conversation_path.as_ref());
        if liveness != Liveness::Alive
            && let (Some(store), Some(id)) = (store, recorded.filter(|id| crate::api::is_valid_session_id(id)))
        {
            reads.evidence.conversation_found = Some(transcript::locate(store, home, workdir, id).exists());
        }
        // What the harness's own record says of the prompts sent to it.
        let sent = super::record::sent(&ws.spec, status, events);
        // The conversation running (a spawn verified: the one it runs), or the one a resume would take.
        let running = status.verification.as_ref().map(|v| v.harness_session_id.as_str());
        let conversation = match liveness {
            Liveness::Alive => running.or(status.harness_session_id.as_deref()),
            Liveness::Dead | Liveness::Absent => running.or(resume::candidate(&ws.spec, status).map(|s| s.as_str())),
        };
        let place = super::record::Place { home, identity: &identity, workdir, spawn, conversation };
        let proof = crate::core::Proof::of(profile, config, Some(home), &identity);
        if named_by_hooks && liveness == Liveness::Alive {
            // Hooks that name the conversation: its id (at Codex's first turn's end, at opencode's first prompt), and
            // the one it moved to (a new thread of the same process, a new session a person opened).
            let named = super::record::hooks(&place, &[], profile).await.named;
            // The newest the harness keeps (in its store, where the profile names one: Codex notifies for threads
            // it keeps nowhere too), else the newest. A harness writes its hook file: an id another session of the
            // node holds is never taken.
            let kept = match profile.discover.as_ref().and_then(|d| d.path.clone()) {
                Some(template) => {
                    let (home, workdir, ids) = (home.to_path_buf(), workdir.clone(), named.clone());
                    let look = move || super::discovery::stored(&template, &home, &workdir, &ids);
                    tokio::task::spawn_blocking(look).await.unwrap_or_default()
                }
                None => named.clone(),
            };
            let kept = |id: &String| kept.contains(id);
            let free = |id: &&String| self.registries.discoveries.conversation_holder(id, &identity).is_none();
            let named = named.iter().filter(|id| kept(id)).find(free).or_else(|| named.iter().find(free)).cloned();
            if discovering(status) && named.is_some() {
                reads.evidence.discovered = named.clone();
            }
            reads.evidence.hooked = named.filter(|id| status.harness_session_id.as_ref().is_some_and(|r| r != id));
        }
        if let (Some(profile), Some(id)) = (profile.usage.as_ref().map(|_| profile), conversation) {
            reads.evidence.usage = super::usage::read(profile, status, (home, workdir), id).await;
        }
        let said = match proof {
            Proof::Hooks => super::record::hooks(&place, &sent, profile).await,
            Proof::Transcript => super::record::transcript(&place, &sent, profile).await,
            Proof::Settle => super::record::Said::default(),
        };
        reads.evidence.record =
            Record { proof, len: said.len, awaits_transcript: !said.reported.is_empty() || said.settling };
        reads.evidence.hooked = reads.evidence.hooked.or(said.moved_to);
        (reads.evidence.confirmed, reads.evidence.turn) = (said.confirmed, said.turn);
        reads.evidence.asked = said.asked;
        (reads.evidence.queued, reads.evidence.dropped, reads.evidence.steered) =
            (said.queued, said.dropped, said.steered);
        reads
    }
}
