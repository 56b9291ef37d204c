//! The receiver of a harness's hooks, and the agent's reading of what it appended: an edge of the executor like
//! [`crate::transcript`]. A profile with `hooks` ([`crate::harness::hooks`]) makes its harness run `worksession hook`
//! on its events ([`receive`]), which appends one JSON line per event to a file of the session's own in the harness's
//! `HOME` (with rooms, the room's: the harness can write it, no other session can). The agent reads it back ([`read`])
//! through [`crate::transcript::open`]; the core only sees what it says.
//!
//! Measured with the real Claude Code CLI offline (hooks given per run with `--settings`): `SessionStart` fires at the
//! start (`source: "startup"`) and after `/clear` (`"clear"`, with the **new** `session_id`); `UserPromptSubmit` fires
//! for the command-line prompt and for a pasted one, with `prompt`.

use std::io::{Read, Write};
use std::path::Path;

pub use crate::harness::hooks::{Line, file_of};

/// The most a hook may hand over on stdin: a prompt is at most what the API allows, far below this.
const STDIN_LIMIT: u64 = 1 << 20;

/// How much of a hook file is read back: its end, where the latest events are.
pub const READ_LIMIT: u64 = 1 << 20;

/// `worksession hook --out FILE --spawn TAG --event NAME`: appends `{"hook": NAME, "spawn": TAG, "data": <stdin>}` to
/// `FILE` (made `0600`, its directory `0700`; never through a link). Run by the harness as its own user; whatever it is
/// given, it only writes that one line.
pub fn receive(out: &Path, event: &str, spawn: &str, stdin: impl Read) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let mut input = Vec::new();
    stdin.take(STDIN_LIMIT).read_to_end(&mut input)?;
    let data = serde_json::from_slice(&input).unwrap_or(serde_json::Value::Null);
    let mut line = serde_json::to_vec(&Line { hook: event.to_string(), spawn: spawn.to_string(), data })?;
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

/// The longest hook line read back: a `SessionStart` is a few hundred bytes; a longer line (a hostile harness's
/// padding, say) is skipped unparsed.
const LINE_LIMIT: usize = 64 << 10;

/// What is read of a line: its hook, its spawn and the conversation it names; everything else is skipped without
/// being kept (a harness writes the file, so what it holds costs the agent no more than this).
#[derive(serde::Deserialize)]
struct Said<'a> {
    #[serde(borrow)]
    hook: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    spawn: std::borrow::Cow<'a, str>,
    #[serde(default)]
    data: Data,
}

#[derive(Default, serde::Deserialize)]
struct Data {
    session_id: Option<String>,
    source: Option<String>,
}

/// The conversation the harness of the spawn tagged `spawn` moved to, by the latest `SessionStart` of that spawn in
/// the hook file of `identity` under `home` whose `source` says it moved (`clear`, `compact`, `resume`): read from
/// the end of the file's last MiB, one line at a time, stopping at the first.
pub fn conversation_started(home: &Path, identity: &str, spawn: &str) -> Option<String> {
    let text = crate::transcript::read_tail(home, &file_of(home, identity), READ_LIMIT)?;
    let moved = |source: &str| matches!(source, "clear" | "compact" | "resume");
    text.lines()
        .rev()
        .filter(|l| l.len() <= LINE_LIMIT && l.contains("SessionStart") && l.contains(spawn))
        .filter_map(|l| serde_json::from_str::<Said>(l).ok())
        .find(|s| s.hook == "SessionStart" && s.spawn == spawn && s.data.source.as_deref().is_some_and(moved))
        .and_then(|s| s.data.session_id)
}

/// How long the hook file of `identity` under `home` is (opened as [`crate::transcript::open`] does: below `home`,
/// through no link), to tell that it grew.
pub fn length(home: &Path, identity: &str) -> Option<u64> {
    crate::transcript::open(home, &file_of(home, identity))?.metadata().ok().map(|m| m.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_appends_one_line_of_its_own_and_never_through_a_link() {
        let home = tempfile::tempdir().unwrap();
        let out = file_of(home.path(), "agents/repo-12");
        receive(&out, "SessionStart", "spawn-1", &br#"{"session_id":"first","source":"startup"}"#[..]).unwrap();
        let started = |spawn| conversation_started(home.path(), "agents/repo-12", spawn);
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
}
