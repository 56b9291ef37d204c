//! What a decision needs to know beyond liveness, read only when it matters: a dead pane's last lines (for a
//! death not yet explained), a live pane's visible text (while a prompt waits for the profile's `readyPattern`),
//! the harness's transcript (whether a conversation to resume exists, and which sent prompts it shows), and the id a
//! harness shows after its start (while it is being discovered).

use std::path::Path;

use kube::ResourceExt;

use super::Reconciler;
use crate::api::{EventPhase, Phase, WorkEvent, WorkSession, WorkSessionStatus};
use crate::config::Config;
use crate::core::discover::discovering;
use crate::core::{INITIAL_PROMPT, PendingEvent, initial_prompt_owed};
use crate::harness::clean_prompt;
use crate::tmux::{Liveness, Tmux};
use crate::transcript;

/// Lines of a dead pane's output kept for conditions and messages.
const LAST_LINES: usize = 20;

/// Everything read for one decision besides the store and the observation.
#[derive(Debug, Default)]
pub struct Evidence {
    /// What a dead pane printed last.
    pub last_output: String,
    /// A live pane's visible text.
    pub screen: Option<String>,
    /// Keys of sent prompts the transcript shows.
    pub confirmed: Vec<String>,
    /// Whether the conversation a respawn would resume (while a fresh spawn is verified: the one it made) is in the
    /// harness's store.
    pub conversation_found: Option<bool>,
    /// The id a live harness shows for the conversation being discovered, once it shows it.
    pub discovered: Option<String>,
}

/// The undelivered WorkEvents as the core takes them, oldest first.
pub fn pending_events(undelivered: &[WorkEvent]) -> Vec<PendingEvent> {
    undelivered
        .iter()
        .map(|e| {
            let status = e.status.clone().unwrap_or_default();
            let created = e.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or_default();
            PendingEvent {
                tag: delivery_tag(e),
                command: e.spec.command,
                phase: status.phase.unwrap_or(EventPhase::Pending),
                sent: status.sent_time.map(|t| t.0),
                via: status.via,
                ..PendingEvent::pending(&e.name_any(), &e.spec.prompt, created)
            }
        })
        .collect()
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
    let uid = ws.metadata.uid.clone().filter(|u| crate::tmux::is_tag(u) && !u.is_empty());
    (uid.unwrap_or_else(|| name.clone()), name)
}

impl<S, T: Tmux> Reconciler<S, T> {
    /// Reads what this decision needs, and nothing else.
    pub(super) async fn gather(
        &self,
        ws: &WorkSession,
        status: &WorkSessionStatus,
        events: &[PendingEvent],
        (session, liveness): (&str, Liveness),
        home: Option<&Path>,
        config: &Config,
    ) -> Evidence {
        let tmux = self.observer.tmux();
        let profile = config.harnesses.get(&ws.spec.harness);
        let mut evidence = Evidence::default();
        // A dead pane's last lines matter only for a death not yet recorded (Running) or a spawn being verified.
        let unexplained = status.verification.is_some() || status.phase == Some(Phase::Running);
        if liveness == Liveness::Dead && unexplained {
            evidence.last_output = tmux.last_lines(session, LAST_LINES).await.unwrap_or_default();
        }
        let Some(profile) = profile else { return evidence };
        let initial = initial_prompt_owed(&ws.spec, status);
        let waiting = events.iter().any(|e| e.phase == EventPhase::Pending) || initial == Some(EventPhase::Pending);
        if liveness == Liveness::Alive && waiting && profile.ready_pattern.is_some() {
            evidence.screen = tmux.screen(session).await.ok();
        }
        // A harness that shows its id after the start: looked for only while its status waits for it.
        if let Some(d) = profile.discover.as_ref().filter(|_| liveness == Liveness::Alive && discovering(status)) {
            let screen = match (&d.screen_pattern, &evidence.screen) {
                (Some(_), None) => tmux.screen(session).await.ok(),
                _ => evidence.screen.clone(),
            };
            let (_, owner) = owner_tags(ws);
            let place = (home, ws.spec.workdir.as_str());
            evidence.discovered = self.discoveries.find(d, status, place, screen.as_deref(), &owner);
        }
        let Some(home) = home else { return evidence };
        let workdir = &ws.spec.workdir;
        // The conversation a respawn would resume; while a fresh spawn is verified, the one it made (if it is in the
        // store, the spawn ran, whatever tmux shows: a restarted tmux server has no session of it).
        let recorded = match &status.verification {
            Some(v) if !v.resume => Some(&v.harness_session_id),
            Some(_) => None,
            None => status.harness_session_id.as_ref().or(ws.spec.harness_session_id.as_ref()),
        };
        let store = profile.store_path.as_ref().or(profile.conversation_path.as_ref());
        if liveness != Liveness::Alive
            && let (Some(store), Some(id)) = (store, recorded.filter(|id| crate::api::is_valid_session_id(id)))
        {
            evidence.conversation_found = Some(transcript::locate(store, home, workdir, id).exists());
        }
        let Some(template) = &profile.conversation_path else { return evidence };
        let current =
            status.verification.as_ref().map(|v| &v.harness_session_id).or(status.harness_session_id.as_ref());
        let mut sent: Vec<(&str, &str)> = events
            .iter()
            .filter(|e| e.phase == EventPhase::Delivering)
            .map(|e| (e.name.as_str(), e.prompt.as_str()))
            .collect();
        if initial == Some(EventPhase::Delivering) {
            sent.insert(0, (INITIAL_PROMPT, ws.spec.initial_prompt.as_deref().unwrap_or_default()));
        }
        if let (Some(id), false) = (current, sent.is_empty()) {
            let path = transcript::locate(template, home, workdir, id);
            let home = home.to_path_buf();
            // Read off the runtime's threads: a transcript grows to megabytes.
            let text =
                tokio::task::spawn_blocking(move || transcript::read_tail(&home, &path, transcript::TRANSCRIPT_LIMIT))
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or_default();
            // As sent: a prompt that starts with a command prefix went with the literal mark in front.
            let shows = |prompt: &str| {
                transcript::contains(&text, &clean_prompt(prompt))
                    || transcript::contains(&text, &profile.as_sent(prompt, false))
            };
            evidence.confirmed =
                sent.iter().filter(|(_, prompt)| shows(prompt)).map(|(key, _)| key.to_string()).collect();
        }
        evidence
    }
}
