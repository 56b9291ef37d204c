//! The harness's own record of the prompts it took, read for the core's [`crate::core::Evidence`]: with hooks, its
//! hook file (the `UserPromptSubmit` lines of the live spawn, the latest turn event, a move to another conversation);
//! else its transcript. Only what the harness wrote after a prompt's mark (where the record stood when it was sent)
//! confirms that prompt, and the prompt is compared by its words (a harness may alter its whitespace). Reads run off
//! the runtime's threads, and never more than [`transcript::AFTER_MARK_LIMIT`] past the earliest mark.

use std::path::Path;

use crate::api::{EventPhase, WorkSessionSpec, WorkSessionStatus};
use crate::core::{INITIAL_PROMPT, PendingEvent, initial_prompt_owed};
use crate::harness::Profile;
use crate::harness::clean_prompt;
use crate::harness::hooks::Turn;
use crate::hook::Taken;
use crate::transcript::{self, AFTER_MARK_LIMIT, words};

/// A prompt sent and not yet known delivered.
#[derive(Clone, Debug)]
pub struct Sent {
    key: String,
    text: String,
    command: bool,
    offset: Option<u64>,
}

/// The prompts `Delivering` now: `initialPrompt` first, then the events.
pub fn sent(spec: &WorkSessionSpec, status: &WorkSessionStatus, events: &[PendingEvent]) -> Vec<Sent> {
    let mut sent: Vec<Sent> = events
        .iter()
        .filter(|e| e.phase == EventPhase::Delivering)
        .map(|e| Sent { key: e.name.clone(), text: e.prompt.clone(), command: e.command, offset: e.offset })
        .collect();
    if initial_prompt_owed(spec, status) == Some(EventPhase::Delivering) {
        let text = spec.initial_prompt.clone().unwrap_or_default();
        let offset = status.initial_prompt.as_ref().and_then(|p| p.sent_offset);
        sent.insert(0, Sent { key: INITIAL_PROMPT.into(), text, command: false, offset });
    }
    sent
}

/// Where the harness's record is.
pub struct Place<'a> {
    /// Its `HOME`.
    pub home: &'a Path,
    /// The WorkSession's `namespace/name`.
    pub identity: &'a str,
    /// Its workdir.
    pub workdir: &'a str,
    /// The tag of the spawn its tmux session runs, if it exists.
    pub spawn: Option<&'a str>,
}

/// What the record said.
#[derive(Debug, Default)]
pub struct Said {
    /// How long the record is.
    pub len: u64,
    /// Keys of the sent prompts it shows taken after their marks.
    pub confirmed: Vec<String>,
    /// The conversation the live harness moved to (hooks).
    pub moved_to: Option<String>,
    /// The conversation the live harness's latest Codex notify named (hooks).
    pub thread: Option<String>,
    /// Its latest turn event (hooks).
    pub turn: Option<Turn>,
}

/// Where reading starts for `sent`: the earliest mark, or (for a prompt sent before marks were kept) the end of the
/// record less what is read past a mark.
fn earliest(sent: &[Sent], len: u64) -> Option<u64> {
    sent.iter().map(|s| mark(s, len)).min()
}

fn mark(sent: &Sent, len: u64) -> u64 {
    sent.offset.unwrap_or(len.saturating_sub(AFTER_MARK_LIMIT))
}

/// The words `sent` may be recorded with: as typed (cleaned), or as sent (a literal mark in front).
fn forms(sent: &Sent, profile: &Profile) -> [String; 2] {
    [words(&clean_prompt(&sent.text)), words(&profile.as_sent(&sent.text, sent.command))]
}

/// The hook file: the live spawn's latest move and turn event, and its `UserPromptSubmit` prompts after each mark.
pub async fn hooks(place: &Place<'_>, sent: &[Sent], profile: &Profile) -> Said {
    let len = crate::hook::length(place.home, place.identity).unwrap_or(0);
    let Some(spawn) = place.spawn else { return Said { len, ..Said::default() } };
    let (home, identity, spawn_tag) = (place.home.to_path_buf(), place.identity.to_string(), spawn.to_string());
    let from = earliest(sent, len);
    let read = move || crate::hook::hear(&home, &identity, &spawn_tag, from);
    let Some(heard) = tokio::task::spawn_blocking(read).await.ok().flatten() else {
        return Said { len, ..Said::default() };
    };
    // The report of each sent prompt, after its mark, by its words.
    let taken: Vec<(String, Taken)> = sent
        .iter()
        .filter_map(|s| {
            let (at, forms) = (mark(s, heard.len), forms(s, profile));
            let taken = heard.prompts.iter().find(|t| t.at >= at && forms.contains(&words(&t.prompt)))?;
            Some((s.key.clone(), taken.clone()))
        })
        .collect();
    let confirmed = persisted(place, profile, taken).await;
    Said { len: heard.len, confirmed, moved_to: heard.moved_to, thread: heard.thread, turn: heard.turn }
}

/// How much of a transcript's end is searched for a prompt its hook reported: the harness writes the prompt there
/// right after the hook ran.
const PERSISTED_TAIL: u64 = 8 << 20;

/// The keys of the `taken` prompts that reached a conversation that lives on. A harness runs `UserPromptSubmit` just
/// before it writes the prompt to its transcript (Claude Code, measured: a harness killed in between lost the prompt,
/// and its conversation with it), so where the profile names a transcript and the hook gave the prompt an id, that
/// transcript must hold the id (Claude Code's `promptId`); a prompt without one is taken at the hook's word.
async fn persisted(place: &Place<'_>, profile: &Profile, taken: Vec<(String, Taken)>) -> Vec<String> {
    let Some(template) = profile.conversation_path.clone() else { return taken.into_iter().map(|(k, _)| k).collect() };
    let (home, workdir) = (place.home.to_path_buf(), place.workdir.to_string());
    let check = move || {
        let mut tails: std::collections::HashMap<String, Option<Vec<u8>>> = std::collections::HashMap::new();
        let mut confirmed = Vec::new();
        for (key, t) in taken {
            let (Some(id), Some(conversation)) = (t.prompt_id.as_deref(), t.conversation.as_deref()) else {
                confirmed.push(key);
                continue;
            };
            if !crate::api::is_valid_session_id(id) || !crate::api::is_valid_session_id(conversation) {
                continue; // not an id a harness gives: nothing it says is taken
            }
            let tail = tails.entry(conversation.to_string()).or_insert_with(|| {
                let path = transcript::locate(&template, &home, &workdir, conversation);
                let len = transcript::length(&home, &path)?;
                transcript::read_from(&home, &path, len.saturating_sub(PERSISTED_TAIL), PERSISTED_TAIL).map(|r| r.0)
            });
            if tail.as_deref().is_some_and(|tail| holds(tail, id)) {
                confirmed.push(key);
            }
        }
        confirmed
    };
    tokio::task::spawn_blocking(check).await.unwrap_or_default()
}

/// Whether `bytes` hold `id` (a literal search, as fast as the regex crate's, which looks for literals with memchr).
fn holds(bytes: &[u8], id: &str) -> bool {
    regex::bytes::Regex::new(&regex::escape(id)).is_ok_and(|r| r.is_match(bytes))
}

/// The transcript of conversation `id` (the one the harness runs, or a resume would take): its length, and the sent
/// prompts it holds after their marks.
pub async fn transcript(place: &Place<'_>, id: Option<&str>, sent: &[Sent], profile: &Profile) -> Said {
    let Some(template) = &profile.conversation_path else { return Said::default() };
    let Some(id) = id.filter(|id| crate::api::is_valid_session_id(id)) else { return Said::default() };
    let path = transcript::locate(template, place.home, place.workdir, id);
    let home = place.home.to_path_buf();
    let wanted: Vec<(&Sent, [String; 2])> = sent.iter().map(|s| (s, forms(s, profile))).collect();
    let wanted: Vec<(Sent, [String; 2])> = wanted.into_iter().map(|(s, f)| (s.clone(), f)).collect();
    let read = move || {
        let len = transcript::length(&home, &path).unwrap_or(0);
        let mut confirmed: Vec<String> = Vec::new();
        let Some(from) = wanted.iter().map(|(s, _)| mark(s, len)).min() else { return Said { len, ..Said::default() } };
        let Some((bytes, len)) = transcript::read_from(&home, &path, from, AFTER_MARK_LIMIT) else {
            return Said { len, ..Said::default() };
        };
        for (at, line) in transcript::lines(&bytes, from, false) {
            for (s, forms) in &wanted {
                let shown = at >= mark(s, len) && forms.iter().any(|f| transcript::holds(line, f));
                if shown && !confirmed.contains(&s.key) {
                    confirmed.push(s.key.clone());
                }
            }
        }
        Said { len, confirmed, ..Said::default() }
    };
    tokio::task::spawn_blocking(read).await.unwrap_or_default()
}
