//! The receiver of a harness's hooks, and the agent's reading of what it appended: an edge of the executor like
//! [`crate::node::transcript`]. A profile with `hooks` ([`crate::harness::hooks`]) makes its harness run `worksession hook`
//! on its events ([`receive`]), which appends one JSON line per event to a file of the session's own in the harness's
//! `HOME` (with rooms, the room's: the harness can write it, no other session can). The agent reads it back ([`read`])
//! through [`crate::node::transcript::open`]; the core only sees what it says.
//!
//! Measured with the real Claude Code CLI offline (hooks given per run with `--settings`): `SessionStart` fires at the
//! start (`source: "startup"`) and after `/clear` (`"clear"`, with the **new** `session_id`); `UserPromptSubmit` fires
//! for the command-line prompt and for a pasted one, with `prompt`.

use std::io::{Read, Write};
use std::path::Path;

pub use crate::harness::hooks::{Asked, Hooks, Line, Turn, file_of};
use crate::harness::hooks::{PERMISSION_DECIDED, PERMISSION_REQUEST};

/// The most a hook may hand over on stdin: a prompt is at most what the API allows, far below this.
const STDIN_LIMIT: u64 = 1 << 20;

/// How much of a hook file is read back: its end, where the latest events are.
pub const READ_LIMIT: u64 = 1 << 20;

/// `worksession hook --out FILE --spawn TAG --event NAME`: appends `{"hook": NAME, "spawn": TAG, "data": <stdin>}` to
/// `FILE` (made `0600`, its directory `0700`; never through a link). Run by the harness as its own user; whatever it is
/// given, it only writes that one line.
pub fn receive(out: &Path, event: &str, spawn: &str, stdin: impl Read) -> std::io::Result<()> {
    let data = read_json(stdin)?;
    let at = k8s_openapi::jiff::Timestamp::now().to_string();
    append(out, &Line { hook: event.into(), spawn: spawn.into(), at, data, ..Line::default() })
}

/// What a harness hands over on stdin: its JSON object, or `null` when it is not JSON.
pub(crate) fn read_json(stdin: impl Read) -> std::io::Result<serde_json::Value> {
    let mut input = Vec::new();
    stdin.take(STDIN_LIMIT).read_to_end(&mut input)?;
    Ok(serde_json::from_slice(&input).unwrap_or(serde_json::Value::Null))
}

/// Appends `line` to the hook file `out` (made `0600`, its directory `0700`; never through a link).
pub(crate) fn append(out: &Path, line: &Line) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let mut line = serde_json::to_vec(line)?;
    line.push(b'\n');
    if let Some(dir) = out.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(out)?;
    // One write of one line: appends of a few KiB are not interleaved with another hook's.
    file.write_all(&line)
}

/// `worksession hook-exec --style STYLE --out FILE --spawn TAG -- COMMAND...`: writes what a harness that takes its
/// hooks only from files needs to run the receiver on its events ([`crate::harness::through::prepare`]: Gemini CLI's
/// settings, Copilot CLI's plugin directory, emptied first, opencode's plugin; beside its hook file, `0600`, folders
/// `0700`, never through a link in the last folder or the file), then becomes `COMMAND` told of them (its environment,
/// or words in front of its argv). Run where the harness runs, as its user (in its room): the files are the harness's
/// own, so a link further up gains it nothing it could not write itself. Returns only when it could not.
pub fn exec_through(style: Hooks, out: &Path, spawn: &str, command: &[std::ffi::OsString]) -> std::io::Error {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    use std::os::unix::process::CommandExt;
    let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string());
    let Some((program, args)) = command.split_first() else { return invalid("no command to run") };
    let helper = match std::env::current_exe() {
        Ok(helper) => helper,
        Err(e) => return e,
    };
    let config = std::env::var(crate::harness::through::OPENCODE_CONFIG).ok();
    let prepared = match crate::harness::through::prepare(style, &helper, out, spawn, config.as_deref()) {
        Ok(prepared) => prepared,
        Err(why) => return invalid(&why.to_string()),
    };
    // A folder a link was planted at is never written through (the files themselves are opened without following
    // one); a fresh one is emptied first.
    let not_a_link = |dir: &Path| match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => Err(std::io::Error::other(format!("{} is a link", dir.display()))),
        _ => Ok(()),
    };
    for dir in &prepared.fresh {
        let emptied = not_a_link(dir).and_then(|()| match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        });
        if let Err(e) = emptied {
            return e;
        }
    }
    for (path, content) in &prepared.files {
        let written = (|| {
            if let Some(dir) = path.parent() {
                std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
                not_a_link(dir)?;
            }
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(path)?;
            file.write_all(content.as_bytes())
        })();
        if let Err(e) = written {
            return e;
        }
    }
    let mut harness = std::process::Command::new(program);
    harness.args(&prepared.before).args(args).envs(prepared.env.iter().map(|(k, v)| (k, v)));
    harness.exec()
}

/// The longest hook line read back: a `UserPromptSubmit` carries its prompt (at most [`STDIN_LIMIT`] handed over,
/// escaped as JSON); a longer line (a hostile harness's padding, say) is skipped unparsed.
const LINE_LIMIT: usize = 2 * STDIN_LIMIT as usize + 4096;

/// What is read of a line: its hook, spawn and time, and of what the harness handed over only the fields below;
/// everything else is skipped without being kept (a harness writes the file, so what it holds costs the agent no
/// more than this).
#[derive(serde::Deserialize)]
struct Fields<'a> {
    #[serde(borrow)]
    hook: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    spawn: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    at: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    request: Option<String>,
    #[serde(default)]
    deadline: Option<String>,
}

#[derive(Default, serde::Deserialize)]
struct Data {
    session_id: Option<String>,
    source: Option<String>,
    prompt: Option<String>,
    message: Option<String>,
    notification_type: Option<String>,
    prompt_id: Option<String>,
    /// A prompt taken while the harness worked on a turn (opencode's plugin says so).
    queued: Option<bool>,
    /// Codex's notify: the thread (conversation) its turn ran in.
    #[serde(rename = "thread-id")]
    thread_id: Option<String>,
    /// A permission request's tool.
    tool_name: Option<String>,
    /// What the tool is given.
    tool_input: Option<serde_json::Value>,
    /// What the receiver answered a permission request.
    behavior: Option<String>,
}

/// A line of the spawn tagged `spawn`, parsed; `None` for any other (or one too long to parse).
fn said<'l>(line: &'l str, spawn: &str) -> Option<Fields<'l>> {
    if !line.contains(spawn) {
        return None;
    }
    said_by_any(line).filter(|s| s.spawn == spawn)
}

/// A line of any spawn, parsed; `None` for one too long to parse.
fn said_by_any(line: &str) -> Option<Fields<'_>> {
    (line.len() <= LINE_LIMIT).then(|| serde_json::from_str::<Fields>(line).ok()).flatten()
}

/// How many conversations a spawn's hooks named are kept, newest first.
pub const NAMED_KEPT: usize = 4;

/// What the hooks of one spawn said, read from the session's hook file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Heard {
    /// The conversation the harness moved to: its latest `SessionStart` whose `source` says it moved (`clear`,
    /// `compact`, `resume`).
    pub moved_to: Option<String>,
    /// The conversations its latest hooks naming one named, newest first (at most [`NAMED_KEPT`], each once): Codex's
    /// notify (`thread-id`, known at its first turn's end; Codex also notifies for threads of its own, such as the
    /// one that writes a task's title, which it keeps nowhere), a `UserPromptSubmit` or `SessionStart` (`session_id`:
    /// opencode's prompts name their conversation).
    pub named: Vec<String>,
    /// Its latest turn event ([`TURN_EVENTS`]).
    pub turn: Option<Turn>,
    /// Its latest permission request, with its answer if the receiver gave one.
    pub asked: Option<Asked>,
    /// The prompts it reported taking (`UserPromptSubmit`) from the offset asked for on.
    pub prompts: Vec<Taken>,
    /// How long the file was.
    pub len: u64,
}

/// A prompt a harness reported taking.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// Where its line starts in the hook file.
    pub at: u64,
    /// The prompt, as the harness has it.
    pub prompt: String,
    /// The id the harness gave it (Claude Code's `prompt_id`, which its transcript's line of the prompt carries as
    /// `promptId`), if it gave one.
    pub prompt_id: Option<String>,
    /// The conversation it went to (`session_id`).
    pub conversation: Option<String>,
    /// Taken while the harness worked on a turn: the harness sends it to its model once that turn is over.
    pub queued: bool,
    /// How the turn it was taken in (or behind) ended, as the first `Stop` or `StopFailure` after it says; `None`
    /// while it runs.
    pub ended: Option<TurnEnd>,
}

/// How a turn ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnEnd {
    /// `Stop`: it was over.
    Stopped,
    /// `StopFailure`: it failed for good (opencode: a prompt queued behind it never reached the model).
    Failed,
}

/// The hooks that say where a harness is in its turn.
pub const TURN_EVENTS: &[&str] = &[
    "SessionStart",
    "UserPromptSubmit",
    "Stop",
    "StopFailure",
    "Notification",
    PERMISSION_REQUEST,
    PERMISSION_DECIDED,
];

/// The turn events after which a permission request of before no longer waits: the harness went on without it.
const PAST_A_REQUEST: &[&str] = &["SessionStart", "UserPromptSubmit", "Stop", "StopFailure"];

/// Reads what the hooks of the spawn tagged `spawn` said in the hook file of `identity` under `home` (through
/// [`crate::node::transcript::open`]): the latest move and turn event from the file's last MiB, read from its end (none when
/// the spawn is not known: its tmux session is gone); and from `offset` on (at most
/// [`crate::node::transcript::AFTER_OFFSET_LIMIT`]), the prompts taken, by whichever spawn of the session took them: only the
/// one a prompt was sent to could report it after its offset, and the session's tmux session may be gone meanwhile (a
/// tmux server restarted) while what its harness took must still count.
pub fn hear(home: &Path, identity: &str, spawn: Option<&str>, offset: Option<u64>) -> Option<Heard> {
    use crate::node::transcript::{AFTER_OFFSET_LIMIT, lines, read_from};
    let path = file_of(home, identity);
    let len = crate::node::transcript::length(home, &path)?;
    let tail_start = len.saturating_sub(READ_LIMIT);
    let (tail, len) = read_from(home, &path, tail_start, READ_LIMIT)?;
    let said = |line| said(line, spawn?);
    let moved = |source: &str| matches!(source, "clear" | "compact" | "resume");
    let mut heard = Heard { len, ..Heard::default() };
    let tail_lines: Vec<(u64, &str)> = lines(&tail, tail_start, tail_start > 0).collect();
    // Going back from the end: the answers given and whether the harness went on, until its latest request.
    let (mut decided, mut went_on, mut asked_done) = (Vec::new(), false, false);
    for (_, line) in tail_lines.iter().rev() {
        if heard.moved_to.is_some() && heard.turn.is_some() && heard.named.len() >= NAMED_KEPT && asked_done {
            break;
        }
        let Some(s) = said(line) else { continue };
        let data = s.data.unwrap_or_default();
        if !asked_done {
            match s.hook.as_ref() {
                PERMISSION_DECIDED => decided.push((s.request.clone(), data.behavior.clone())),
                PERMISSION_REQUEST => {
                    asked_done = true;
                    heard.asked = s.request.clone().filter(|id| crate::harness::hooks::is_request_id(id)).map(|id| {
                        let answered = decided.iter().find(|(r, _)| r.as_ref() == Some(&id)).and_then(|d| d.1.clone());
                        asked(id, &s.at, s.deadline.as_deref(), &data, answered, went_on)
                    });
                }
                hook if PAST_A_REQUEST.contains(&hook) => went_on = true,
                _ => {}
            }
        }
        if heard.named.len() < NAMED_KEPT {
            let names = matches!(s.hook.as_ref(), "UserPromptSubmit" | "SessionStart");
            let named = data.thread_id.clone().or_else(|| data.session_id.clone().filter(|_| names));
            if let Some(id) = named.filter(|id| !heard.named.contains(id)) {
                heard.named.push(id);
            }
        }
        if s.hook == crate::harness::hooks::NOTIFY {
            continue;
        }
        if heard.moved_to.is_none() && s.hook == "SessionStart" && data.source.as_deref().is_some_and(moved) {
            heard.moved_to = data.session_id.clone();
        }
        if heard.turn.is_none() && TURN_EVENTS.contains(&s.hook.as_ref()) {
            // The harness's words go to a condition and an Event: no terminal control reaches whoever reads them.
            let message = data.message.filter(|m| m.len() <= 1024).map(|m| m.replace(char::is_control, " "));
            let at = s.at.and_then(|at| at.parse().ok());
            heard.turn = Some(Turn { hook: s.hook.into_owned(), at, message, kind: data.notification_type });
        }
    }
    let Some(offset) = offset else { return Some(heard) };
    let far;
    let after: Vec<(u64, &str)> = if offset >= tail_start {
        tail_lines.into_iter().filter(|(at, _)| *at >= offset).collect()
    } else {
        far = read_from(home, &path, offset, AFTER_OFFSET_LIMIT)?.0;
        lines(&far, offset, false).collect()
    };
    let said: Vec<(u64, Fields)> = after
        .into_iter()
        .filter(|(_, line)| line.contains("UserPromptSubmit") || line.contains("\"Stop"))
        .filter_map(|(at, line)| Some((at, said_by_any(line)?)))
        .collect();
    // One pass from the end, keeping each spawn's next turn end: a harness's many lines cost the agent one read.
    let mut next_end: std::collections::HashMap<&str, TurnEnd> = std::collections::HashMap::new();
    for (at, s) in said.iter().rev() {
        let end = match s.hook.as_ref() {
            "Stop" => Some(TurnEnd::Stopped),
            "StopFailure" => Some(TurnEnd::Failed),
            _ => None,
        };
        if let Some(end) = end {
            next_end.insert(s.spawn.as_ref(), end);
            continue;
        }
        let Some(data) = s.data.as_ref().filter(|_| s.hook == "UserPromptSubmit") else { continue };
        let Some(prompt) = data.prompt.clone() else { continue };
        let ended = next_end.get(s.spawn.as_ref()).copied();
        heard.prompts.push(Taken {
            at: *at,
            prompt,
            prompt_id: data.prompt_id.clone(),
            conversation: data.session_id.clone(),
            queued: data.queued == Some(true),
            ended,
        });
    }
    heard.prompts.reverse();
    Some(heard)
}

/// The most of what a tool is given beside its subject that is kept of a request, for a person to read.
const DETAIL_LIMIT: usize = 8192;

/// A permission request as its line says it: its subject whole (a rule matches all of it), its tool only where its
/// name is a plain word.
fn asked(
    id: String,
    at: &Option<std::borrow::Cow<'_, str>>,
    deadline: Option<&str>,
    data: &Data,
    answered: Option<String>,
    passed: bool,
) -> Asked {
    let input = data.tool_input.clone().unwrap_or_default();
    let text = |key: &str| input.get(key).and_then(|v| v.as_str()).map(str::to_string);
    let lines = |key: &str| input.get(key).and_then(|v| v.as_str()).map(|s| s.lines().count());
    let plain = |t: &&String| {
        t.len() <= 64 && !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
    };
    let tool = data.tool_name.as_ref().filter(plain).cloned();
    let (subject, detail) = match tool.as_deref().unwrap_or_default() {
        "Bash" => (text("command"), text("description").map(|d| cut(&d, DETAIL_LIMIT))),
        "Write" => (text("file_path"), lines("content").map(|n| format!("writes {n} lines"))),
        "Edit" | "MultiEdit" => {
            let change = match (lines("old_string"), lines("new_string")) {
                (Some(old), Some(new)) => Some(format!("replaces {old} lines with {new}")),
                _ => None,
            };
            (text("file_path"), change)
        }
        "NotebookEdit" => (text("notebook_path"), None),
        "Read" => (text("file_path"), None),
        "WebFetch" => (text("url"), None),
        _ => (None, Some(cut(&input.to_string(), DETAIL_LIMIT))),
    };
    let handed = serde_json::json!({"tool_name": data.tool_name, "tool_input": input});
    let digest = data.tool_name.as_ref().and_then(|_| crate::harness::hooks::request_digest(&handed));
    let time = |t: Option<&str>| t.and_then(|t| t.parse().ok());
    let (at, deadline) = (time(at.as_deref()), time(deadline));
    Asked { id, tool, subject, digest, detail, at, deadline, answered, passed }
}

/// `text`, at most `max` bytes of it (cut at a character's edge).
fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// How long the hook file of `identity` under `home` is (opened as [`crate::node::transcript::open`] does: below `home`,
/// through no link), to tell that it grew.
pub fn length(home: &Path, identity: &str) -> Option<u64> {
    crate::node::transcript::length(home, &file_of(home, identity))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conversations_named_are_kept_newest_first_each_once() {
        let home = tempfile::tempdir().unwrap();
        let out = file_of(home.path(), "agents/cx");
        let notify = |thread: &str| format!(r#"{{"type":"agent-turn-complete","thread-id":"{thread}"}}"#);
        for thread in ["real", "title", "real", "a", "b", "c"] {
            receive(&out, crate::harness::hooks::NOTIFY, "spawn-1", notify(thread).as_bytes()).unwrap();
        }
        receive(&out, crate::harness::hooks::NOTIFY, "spawn-2", notify("other").as_bytes()).unwrap();
        let heard = hear(home.path(), "agents/cx", Some("spawn-1"), None).unwrap();
        assert_eq!(heard.named, ["c", "b", "a", "real"], "newest first, each once, at most {NAMED_KEPT}");
    }

    #[test]
    fn a_hook_appends_one_line_of_its_own_and_never_through_a_link() {
        let home = tempfile::tempdir().unwrap();
        let out = file_of(home.path(), "agents/repo-12");
        receive(&out, "SessionStart", "spawn-1", &br#"{"session_id":"first","source":"startup"}"#[..]).unwrap();
        let started = |spawn| hear(home.path(), "agents/repo-12", Some(spawn), None).and_then(|h| h.moved_to);
        assert_eq!(started("spawn-1"), None, "the start is the spawn's own conversation, no move");
        receive(&out, "SessionStart", "spawn-1", &br#"{"session_id":"abc","source":"clear"}"#[..]).unwrap();
        receive(&out, "UserPromptSubmit", "spawn-1", &b"not json"[..]).unwrap();
        assert_eq!(started("spawn-1").as_deref(), Some("abc"));
        assert_eq!(started("spawn-2"), None, "another spawn's lines say nothing of this one");
        let len = length(home.path(), "agents/repo-12").unwrap();
        let last = std::fs::read_to_string(&out).unwrap().lines().nth(2).unwrap().to_string();
        assert!(last.contains(r#""data":null"#), "what is not JSON is not passed on: {last}");
        // Padding a harness appends is skipped unparsed, and the latest move is still found.
        let padding =
            format!("{{\"hook\":\"SessionStart\",\"spawn\":\"spawn-1\",\"data\":[{}0]}}\n", "0,".repeat(100_000));
        std::fs::OpenOptions::new().append(true).open(&out).unwrap().write_all(padding.as_bytes()).unwrap();
        assert_eq!(started("spawn-1").as_deref(), Some("abc"));
        assert!(length(home.path(), "agents/repo-12").unwrap() > len, "it grew");
        // The latest turn event, and the prompts taken from an offset on.
        let heard = hear(home.path(), "agents/repo-12", Some("spawn-1"), Some(0)).unwrap();
        assert_eq!(heard.turn.as_ref().map(|t| t.hook.as_str()), Some("UserPromptSubmit"), "padding is no turn");
        assert!(heard.turn.unwrap().at.is_some(), "the receiver's time");
        assert!(heard.prompts.is_empty(), "a prompt that was not JSON is none");
        let offset = length(home.path(), "agents/repo-12").unwrap();
        receive(&out, "UserPromptSubmit", "spawn-1", &br#"{"prompt":"yes"}"#[..]).unwrap();
        let second = length(home.path(), "agents/repo-12").unwrap();
        receive(&out, "UserPromptSubmit", "spawn-2", &br#"{"prompt":"another spawn's","prompt_id":"p2"}"#[..]).unwrap();
        receive(
            &out,
            "Notification",
            "spawn-1",
            &br#"{"message":"Claude needs\u001b[2J your permission","notification_type":"permission_prompt"}"#[..],
        )
        .unwrap();
        let heard = hear(home.path(), "agents/repo-12", Some("spawn-1"), Some(offset)).unwrap();
        let taken = |at, prompt: &str, id: Option<&str>| Taken {
            at,
            prompt: prompt.into(),
            prompt_id: id.map(String::from),
            conversation: None,
            queued: false,
            ended: None,
        };
        // Taken after the offset by any spawn of the session (its tmux session may be gone); the turn is the spawn's.
        assert_eq!(heard.prompts, [taken(offset, "yes", None), taken(second, "another spawn's", Some("p2"))]);
        let turn = heard.turn.unwrap();
        assert_eq!((turn.hook.as_str(), turn.kind.as_deref()), ("Notification", Some("permission_prompt")));
        assert_eq!(turn.message.as_deref(), Some("Claude needs [2J your permission"), "no terminal control kept");
        let gone = hear(home.path(), "agents/repo-12", None, Some(offset)).unwrap();
        assert_eq!((gone.prompts.len(), gone.turn), (2, None), "no spawn known: what was taken, and no turn");
        let later = hear(home.path(), "agents/repo-12", Some("spawn-1"), Some(second + 1)).unwrap();
        assert!(later.prompts.is_empty(), "only what comes from the offset on");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(out.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        // A link planted where the file goes is not written through.
        let target = home.path().join("elsewhere");
        let linked = file_of(home.path(), "agents/linked");
        std::os::unix::fs::symlink(&target, &linked).unwrap();
        assert!(receive(&linked, "Stop", "spawn-1", &b"{}"[..]).is_err());
        assert!(!target.exists());
    }

    #[test]
    fn a_queued_prompt_carries_how_the_turn_it_waited_behind_ended() {
        let home = tempfile::tempdir().unwrap();
        let out = file_of(home.path(), "agents/q");
        let say = |hook: &str, spawn: &str, data: &str| receive(&out, hook, spawn, data.as_bytes()).unwrap();
        say("UserPromptSubmit", "s1", r#"{"prompt":"A"}"#);
        say("UserPromptSubmit", "s1", r#"{"prompt":"B","queued":true}"#);
        say("StopFailure", "s2", r#"{"message":"another spawn's"}"#);
        say("StopFailure", "s1", r#"{"message":"opencode: APIError 500 boom"}"#);
        say("UserPromptSubmit", "s1", r#"{"prompt":"C","queued":true}"#);
        say("Stop", "s1", "{}");
        say("UserPromptSubmit", "s1", r#"{"prompt":"D","queued":true}"#);
        let heard = hear(home.path(), "agents/q", Some("s1"), Some(0)).unwrap();
        let got: Vec<(&str, bool, Option<TurnEnd>)> =
            heard.prompts.iter().map(|t| (t.prompt.as_str(), t.queued, t.ended)).collect();
        assert_eq!(
            got,
            [
                ("A", false, Some(TurnEnd::Failed)),
                ("B", true, Some(TurnEnd::Failed)),
                ("C", true, Some(TurnEnd::Stopped)),
                ("D", true, None),
            ]
        );
        assert_eq!(heard.turn.map(|t| t.hook), Some("UserPromptSubmit".into()));
    }

    #[test]
    fn a_permission_request_is_heard_with_its_answer_and_whether_the_harness_went_on() {
        let home = tempfile::tempdir().unwrap();
        let out = file_of(home.path(), "agents/ap");
        let line = |hook: &str, request: Option<&str>, data: serde_json::Value| Line {
            hook: hook.into(),
            spawn: "s1".into(),
            at: "2026-12-05T10:00:00Z".into(),
            data,
            request: request.map(String::from),
            deadline: request.map(|_| "2026-12-05T10:10:00Z".into()),
        };
        let input =
            serde_json::json!({"tool_name": "Write", "tool_input": {"file_path": "/w/a.rs", "content": "a\nb\n"}});
        append(&out, &line(PERMISSION_REQUEST, Some("0123456789ab"), input)).unwrap();
        let heard = hear(home.path(), "agents/ap", Some("s1"), None).unwrap();
        let asked = heard.asked.unwrap();
        assert_eq!((asked.id.as_str(), asked.tool.as_deref()), ("0123456789ab", Some("Write")));
        assert!(asked.digest.is_some());
        assert_eq!((asked.subject.as_deref(), asked.detail.as_deref()), (Some("/w/a.rs"), Some("writes 2 lines")));
        assert_eq!((asked.answered, asked.passed), (None, false));
        assert_eq!(heard.turn.unwrap().hook, PERMISSION_REQUEST);
        append(&out, &line(PERMISSION_DECIDED, Some("0123456789ab"), serde_json::json!({"behavior": "allow"})))
            .unwrap();
        append(&out, &line("Stop", None, serde_json::json!({}))).unwrap();
        let asked = hear(home.path(), "agents/ap", Some("s1"), None).unwrap().asked.unwrap();
        assert_eq!((asked.answered.as_deref(), asked.passed), (Some("allow"), true));
        // An id of another shape is no request (it would reach a command line as a word of a person's answer).
        for odd in ["x; rm -rf /", "--namespace=victim", "", "0123456789AB"] {
            append(&out, &line(PERMISSION_REQUEST, Some(odd), serde_json::json!({}))).unwrap();
            assert_eq!(hear(home.path(), "agents/ap", Some("s1"), None).unwrap().asked, None, "{odd:?}");
        }
    }
}
