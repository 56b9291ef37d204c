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

/// The lines of the hook file of `identity` under `home`, oldest first (a line that does not parse is skipped).
pub fn read(home: &Path, identity: &str) -> Vec<Line> {
    let text = crate::transcript::read_tail(home, &file_of(home, identity), READ_LIMIT).unwrap_or_default();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_appends_one_line_of_its_own_and_never_through_a_link() {
        let home = tempfile::tempdir().unwrap();
        let out = file_of(home.path(), "agents/repo-12");
        receive(&out, "SessionStart", "spawn-1", &br#"{"session_id":"abc","source":"clear"}"#[..]).unwrap();
        receive(&out, "UserPromptSubmit", "spawn-1", &b"not json"[..]).unwrap();
        let lines = read(home.path(), "agents/repo-12");
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].hook.as_str(), lines[0].spawn.as_str()), ("SessionStart", "spawn-1"));
        assert_eq!(lines[0].data["session_id"].as_str(), Some("abc"));
        assert_eq!(lines[1].data, serde_json::Value::Null, "what is not JSON is not passed on");
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
