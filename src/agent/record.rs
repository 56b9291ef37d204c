//! The harness's own record of the prompts it took, read for the core's [`crate::core::Evidence`]: with hooks, its
//! hook file (the `UserPromptSubmit` lines of the live spawn, the latest turn event, a move to another conversation);
//! else its transcript. Only what the harness wrote after a prompt's offset (where the record stood when it was sent)
//! confirms that prompt, and the prompt is compared by its words (a harness may alter its whitespace). Reads run off
//! the runtime's threads, and never more than [`transcript::AFTER_OFFSET_LIMIT`] past the earliest offset.

use std::path::Path;

use k8s_openapi::jiff::Timestamp;

use crate::api::{PromptPhase, WorkSessionSpec, WorkSessionStatus};
use crate::core::{INITIAL_PROMPT, PendingWorkEvent, PromptKey, initial_prompt_owed};
use crate::harness::Profile;
use crate::harness::clean_prompt;
use crate::harness::hooks::{Hooks, Turn};
use crate::node::hook::{Taken, TurnEnd};
use crate::node::transcript::{self, AFTER_OFFSET_LIMIT, words};

/// A prompt sent and not yet known delivered.
#[derive(Clone, Debug)]
pub struct Sent {
    key: String,
    text: String,
    command: bool,
    offset: Option<u64>,
    at: Option<Timestamp>,
}

/// The prompts `Delivering` now: `initialPrompt` first, then the events.
pub fn sent(spec: &WorkSessionSpec, status: &WorkSessionStatus, events: &[PendingWorkEvent]) -> Vec<Sent> {
    let mut sent: Vec<Sent> = events
        .iter()
        .filter(|e| e.phase == PromptPhase::Delivering)
        .map(|e| {
            let text = crate::api::carried(status, &e.tag, &e.prompt).into_owned();
            Sent { key: e.name.clone(), text, command: e.command, offset: e.offset, at: e.sent }
        })
        .collect();
    if initial_prompt_owed(spec, status) == Some(PromptPhase::Delivering) {
        let text = crate::api::carried(status, INITIAL_PROMPT, spec.initial_prompt.as_deref().unwrap_or_default());
        let text = text.into_owned();
        let offset = status.initial_prompt.as_ref().and_then(|p| p.sent_offset);
        let at = status.initial_prompt.as_ref().and_then(|p| p.sent_time.as_ref()).map(|t| t.0);
        sent.insert(0, Sent { key: PromptKey::Initial.to_string(), text, command: false, offset, at });
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
    /// The conversation it runs (the one verified, else the recorded one), if known.
    pub conversation: Option<&'a str>,
}

/// What the record said.
#[derive(Debug, Default)]
pub struct Said {
    /// How long the record is.
    pub len: u64,
    /// Keys of the sent prompts it shows taken after their offsets.
    pub confirmed: Vec<String>,
    /// Keys of the sent prompts its hooks reported taken whose transcript does not show them yet (written just after
    /// the hook: looked at again soon).
    pub reported: Vec<String>,
    /// Keys of the sent prompts its hooks reported queued behind a turn that still runs (hooks).
    pub queued: Vec<String>,
    /// Keys of the sent prompts its hooks reported queued behind a turn that then failed for good, which the harness
    /// never sent to its model (hooks).
    pub dropped: Vec<String>,
    /// Keys among `confirmed` its events file records as steered into a running turn, which runs no hook (Copilot).
    pub steered: Vec<String>,
    /// A prompt sent during a turn that ended moments ago is not yet shown steered into it: Copilot CLI may write its
    /// events file after the turn's end hook, and nothing else wakes the session then, so it is looked at again soon.
    pub settling: bool,
    /// The conversation the live harness moved to (hooks).
    pub moved_to: Option<String>,
    /// The conversations the live harness's latest hooks naming one named, newest first (hooks).
    pub named: Vec<String>,
    /// Its latest turn event (hooks).
    pub turn: Option<Turn>,
    /// Its latest permission request (hooks).
    pub asked: Option<crate::harness::hooks::Asked>,
}

/// Where reading starts for `sent`: the earliest offset, or (for a prompt sent before offsets were kept) the end of the
/// record less what is read past an offset.
fn earliest(sent: &[Sent], len: u64) -> Option<u64> {
    sent.iter().map(|s| offset_of(s, len)).min()
}

fn offset_of(sent: &Sent, len: u64) -> u64 {
    sent.offset.unwrap_or(len.saturating_sub(AFTER_OFFSET_LIMIT))
}

/// The words `sent` may be recorded with: as typed (cleaned), or as sent (a literal mark in front).
fn forms(sent: &Sent, profile: &Profile) -> [String; 2] {
    [words(&clean_prompt(&sent.text)), words(&profile.as_sent(&sent.text, sent.command))]
}

/// The hook file: the live spawn's latest move and turn event, and its `UserPromptSubmit` prompts after each offset.
pub async fn hooks(place: &Place<'_>, sent: &[Sent], profile: &Profile) -> Said {
    let len = crate::node::hook::length(place.home, place.identity).unwrap_or(0);
    let (home, identity, spawn) = (place.home.to_path_buf(), place.identity.to_string(), place.spawn.map(String::from));
    let from = earliest(sent, len);
    let read = move || crate::node::hook::hear(&home, &identity, spawn.as_deref(), from);
    let Some(heard) = tokio::task::spawn_blocking(read).await.ok().flatten() else {
        return Said { len, ..Said::default() };
    };
    // The report of each sent prompt, after its offset, by its words: each report one prompt's, in order (two events
    // of the same words, one of them lost, are not both confirmed by the other's report).
    let mut used = vec![false; heard.prompts.len()];
    let (mut taken, mut queued, mut dropped): (Vec<(String, Taken)>, _, _) = (Vec::new(), Vec::new(), Vec::new());
    for s in sent {
        let (at, forms) = (offset_of(s, heard.len), forms(s, profile));
        let report = heard
            .prompts
            .iter()
            .enumerate()
            .find(|(i, t)| !used[*i] && t.at >= at && forms.contains(&words(&t.prompt)));
        let Some((i, t)) = report else { continue };
        used[i] = true;
        // Only opencode's plugin says a prompt was queued: another CLI's hook payload is its own words.
        let behind = t.queued && profile.hooks == Some(Hooks::Opencode);
        match (behind, t.ended) {
            (true, None) => queued.push(s.key.clone()),
            (true, Some(TurnEnd::Failed)) => dropped.push(s.key.clone()),
            _ => taken.push((s.key.clone(), t.clone())),
        }
    }
    let (mut confirmed, reported) = persisted(place, profile, taken).await;
    let (mut steered, mut settling) = (Vec::new(), false);
    if profile.hooks == Some(Hooks::Copilot) {
        let told = |s: &&Sent| ![&confirmed, &queued, &dropped, &reported].iter().any(|keys| keys.contains(&s.key));
        let unheard: Vec<Sent> = sent.iter().filter(told).cloned().collect();
        // Only where the events file can be read is it worth reading again.
        if let Some(shown) = self::steered(place, profile, unheard.clone()).await {
            let ended = heard.turn.as_ref().filter(|t| t.hook == "Stop").and_then(|t| t.at);
            settling = settling_after(ended, Timestamp::now(), &unheard, &shown);
            steered = shown;
        }
        confirmed.extend(steered.iter().cloned());
    }
    let (moved_to, named, turn, asked) = (heard.moved_to, heard.named, heard.turn, heard.asked);
    Said { len: heard.len, confirmed, reported, queued, dropped, steered, settling, moved_to, named, turn, asked }
}

/// How much of a transcript's end is searched for a prompt its hook reported: the harness writes the prompt there
/// right after the hook ran.
const PERSISTED_TAIL: u64 = 8 << 20;

/// The keys of the `taken` prompts that reached a conversation that lives on. A harness runs `UserPromptSubmit` just
/// before it writes the prompt to its transcript (Claude Code, measured: a harness killed in between lost the prompt,
/// and its conversation with it), so where the profile names a transcript and the hook gave the prompt an id, the
/// transcript of the conversation the harness runs must hold that id (Claude Code's `promptId`) in its last
/// [`PERSISTED_TAIL`] bytes; a prompt reported for another conversation waits for the id to follow it, and one without
/// an id is taken at the hook's word. One transcript is searched, chunk by chunk: what the harness writes there costs
/// the agent no more memory than a chunk.
async fn persisted(place: &Place<'_>, profile: &Profile, taken: Vec<(String, Taken)>) -> (Vec<String>, Vec<String>) {
    let Some(template) = profile.conversation_path.clone() else {
        return (taken.into_iter().map(|(k, _)| k).collect(), Vec::new());
    };
    let (mut confirmed, mut ids) = (Vec::new(), Vec::new());
    let running = place.conversation.filter(|id| crate::api::is_valid_session_id(id));
    for (key, t) in taken {
        match (t.prompt_id, t.conversation) {
            (None, _) => confirmed.push(key),
            (Some(id), Some(c)) if Some(c.as_str()) == running && crate::api::is_valid_session_id(&id) => {
                ids.push((key, id))
            }
            _ => {} // not the conversation it runs, or no id a harness gives: nothing said is taken
        }
    }
    let (Some(running), false) = (running, ids.is_empty()) else { return (confirmed, Vec::new()) };
    let path = transcript::locate(&template, place.home, place.workdir, running);
    let home = place.home.to_path_buf();
    let search = move || {
        let needles: Vec<&str> = ids.iter().map(|(_, id)| id.as_str()).collect();
        let found = transcript::find_in_tail(&home, &path, PERSISTED_TAIL, &needles).unwrap_or_default();
        let found = found.into_iter().chain(std::iter::repeat(false));
        let (written, waiting): (Vec<_>, Vec<_>) = ids.into_iter().zip(found).partition(|(_, hit)| *hit);
        let keys = |pairs: Vec<((String, String), bool)>| pairs.into_iter().map(|((k, _), _)| k).collect::<Vec<_>>();
        (keys(written), keys(waiting))
    };
    let (written, reported) = tokio::task::spawn_blocking(search).await.unwrap_or_default();
    confirmed.extend(written);
    (confirmed, reported)
}

/// How long after a turn's end its events file is looked at again for a prompt steered into that turn.
const STEERED_SETTLE_SECONDS: i64 = 10;

/// Whether a turn that ended (`ended`, its `Stop`) within [`STEERED_SETTLE_SECONDS`] before `now` leaves a prompt
/// sent before its end that the events file does not show steered yet: Copilot CLI may write that line just after
/// the hook. A `Stop` stamped after `now` (another clock) counts as long ago: never a recheck without end.
fn settling_after(ended: Option<Timestamp>, now: Timestamp, unheard: &[Sent], steered: &[String]) -> bool {
    let Some(end) = ended.filter(|end| (0..STEERED_SETTLE_SECONDS).contains(&now.duration_since(*end).as_secs()))
    else {
        return false;
    };
    unheard.iter().any(|s| !steered.contains(&s.key) && s.at.is_some_and(|sent| sent <= end))
}

/// How much of Copilot CLI's events file is searched for a prompt steered into a turn: it writes the prompt there
/// as it takes it.
const STEERED_TAIL: u64 = 4 << 20;

/// How long a line of Copilot CLI's events file holding a steered prompt may be beyond the prompt itself (its ids and
/// times: about 400 bytes); a longer one is not parsed.
const STEERED_SLACK: usize = 4 << 10;

/// One line of Copilot CLI's events file, as far as a steered prompt needs it.
#[derive(serde::Deserialize)]
struct CopilotEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    timestamp: Option<std::borrow::Cow<'a, str>>,
    data: Option<CopilotMessage>,
}

#[derive(serde::Deserialize)]
struct CopilotMessage {
    content: Option<String>,
    delivery: Option<String>,
}

/// The keys of the `unheard` prompts (sent, no hook reported them) that Copilot CLI's events file (`conversationPath`)
/// records as steered into a turn: a `user.message` of their words with `delivery: "steering"`, written at or after
/// their send. Copilot CLI steers a prompt pasted while its turn runs into that turn and runs no `userPromptSubmitted`
/// hook for it (measured with 1.0.102; the turn's next model request carries it); without this, the deadline sent it
/// again and the model got it twice. A prompt taken between turns has its hook, and its line says `idle`: never
/// counted here. Read whenever the record is (a hook file that grows wakes the session: the turn's end). `None`:
/// there is no events file to read (no `conversationPath`, no valid conversation id).
async fn steered(place: &Place<'_>, profile: &Profile, unheard: Vec<Sent>) -> Option<Vec<String>> {
    let (Some(template), Some(id)) = (&profile.conversation_path, place.conversation) else { return None };
    if !crate::api::is_valid_session_id(id) {
        return None;
    }
    if unheard.is_empty() {
        return Some(Vec::new());
    }
    let path = transcript::locate(template, place.home, place.workdir, id);
    let home = place.home.to_path_buf();
    let wanted: Vec<(Sent, [String; 2])> = unheard.into_iter().map(|s| (s.clone(), forms(&s, profile))).collect();
    let read = move || {
        let len = transcript::length(&home, &path)?;
        let from = len.saturating_sub(STEERED_TAIL);
        let (bytes, _) = transcript::read_from(&home, &path, from, STEERED_TAIL)?;
        let mut confirmed: Vec<String> = Vec::new();
        let longest = wanted.iter().map(|(s, _)| s.text.len()).max().unwrap_or(0);
        for (_, line) in transcript::lines(&bytes, from, from > 0) {
            if !line.contains("\"steering\"") || line.len() > longest.saturating_mul(6).saturating_add(STEERED_SLACK) {
                continue;
            }
            let Ok(event) = serde_json::from_str::<CopilotEvent>(line) else { continue };
            let Some(CopilotMessage { content: Some(content), delivery: Some(delivery) }) = event.data else {
                continue;
            };
            if event.kind != "user.message" || delivery != "steering" {
                continue;
            }
            let content = content.as_str();
            let written = event.timestamp.and_then(|t| t.parse::<Timestamp>().ok());
            // Each line one prompt's: the first sent before it, not yet shown, of its words.
            let shows = |(s, forms): &&(Sent, [String; 2])| {
                !confirmed.contains(&s.key)
                    && s.at.zip(written).is_some_and(|(sent, written)| written >= sent)
                    && forms.contains(&words(content))
            };
            if let Some((s, _)) = wanted.iter().find(shows) {
                confirmed.push(s.key.clone());
            }
        }
        Some(confirmed)
    };
    Some(tokio::task::spawn_blocking(read).await.ok().flatten().unwrap_or_default())
}

/// The transcript of the conversation the harness runs (or a resume would take): its length, and the sent prompts it
/// holds after their offsets.
pub async fn transcript(place: &Place<'_>, sent: &[Sent], profile: &Profile) -> Said {
    let id = place.conversation;
    let Some(template) = &profile.conversation_path else { return Said::default() };
    let Some(id) = id.filter(|id| crate::api::is_valid_session_id(id)) else { return Said::default() };
    let path = transcript::locate(template, place.home, place.workdir, id);
    let home = place.home.to_path_buf();
    let wanted: Vec<(&Sent, [String; 2])> = sent.iter().map(|s| (s, forms(s, profile))).collect();
    let wanted: Vec<(Sent, [String; 2])> = wanted.into_iter().map(|(s, f)| (s.clone(), f)).collect();
    let read = move || {
        let len = transcript::length(&home, &path).unwrap_or(0);
        let mut confirmed: Vec<String> = Vec::new();
        let Some(from) = wanted.iter().map(|(s, _)| offset_of(s, len)).min() else {
            return Said { len, ..Said::default() };
        };
        let Some((bytes, len)) = transcript::read_from(&home, &path, from, AFTER_OFFSET_LIMIT) else {
            return Said { len, ..Said::default() };
        };
        for (at, line) in transcript::lines(&bytes, from, false) {
            // A line shows one prompt: the first sent before it and not yet shown (two of the same words, one lost,
            // are not both confirmed by the other's line).
            let shows = |(s, forms): &&(Sent, [String; 2])| {
                !confirmed.contains(&s.key)
                    && at >= offset_of(s, len)
                    && forms.iter().any(|f| transcript::holds(line, f))
            };
            if let Some((s, _)) = wanted.iter().find(shows) {
                confirmed.push(s.key.clone());
            }
        }
        Said { len, confirmed, ..Said::default() }
    };
    tokio::task::spawn_blocking(read).await.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn sent(key: &str, seconds: i64) -> Sent {
        Sent { key: key.into(), text: "steered".into(), command: false, offset: None, at: Some(at(seconds)) }
    }

    /// The events file is looked at again only within seconds of a turn's end, and only for a prompt sent before
    /// that end and not shown steered yet.
    #[test]
    fn a_steered_prompt_is_awaited_for_a_few_seconds_after_the_turn_it_was_sent_into() {
        let unheard = [sent("e1", 0)];
        let after = |end: i64, now: i64| settling_after(Some(at(end)), at(now), &unheard, &[]);
        assert!(after(2, 7), "5 s after the end");
        assert!(!after(2, 13), "11 s after: the deadline's turn");
        assert!(!after(9, 2), "a Stop stamped in the future");
        assert!(!after(-1, 2), "sent after that turn ended");
        assert!(!settling_after(Some(at(2)), at(7), &unheard, &["e1".into()]), "already shown steered");
        assert!(!settling_after(None, at(7), &unheard, &[]), "no turn ended");
    }
}
