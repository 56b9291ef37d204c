//! The answers to a harness's permission requests, an edge of the executor like [`crate::node::hook`]: the receiver
//! of Claude Code's `PermissionRequest` hook ([`ask`]) records the request in the session's hook file and waits for
//! the agent's answer in the session's answers folder, which the agent alone writes ([`answer`]): with rooms, out of
//! the harness's `HOME`, readable by its room's group and written by no room.

use std::io::{Read, Write};
use std::path::Path;

use super::hook::{Line, append, read_json};
use crate::harness::hooks::{PERMISSION_DECIDED, PERMISSION_REQUEST, Written, answer_file};

/// How often a waiting permission request looks for its answer.
const ANSWER_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// The most of an answer file read.
const ANSWER_LIMIT: u64 = 8192;

/// `worksession hook --event PermissionRequest --answers DIR --wait SECONDS ...`: records the harness's permission
/// request under an id of its own (a line with `request` and `deadline`), waits for the agent's answer to that id in
/// `answers` (a folder only the agent writes) until the deadline, records what it answers (a [`PERMISSION_DECIDED`]
/// line), and returns what the harness is told on stdout: allow, or deny with why (at the deadline: denied). Run by
/// the harness as its own user, for as long as the request waits.
pub fn ask(out: &Path, spawn: &str, answers: &Path, wait: u32, stdin: impl Read) -> std::io::Result<String> {
    use k8s_openapi::jiff::{SignedDuration, Timestamp};
    let data = read_json(stdin)?;
    let digest = crate::harness::hooks::request_digest(&data);
    let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let asked = Timestamp::now();
    let deadline = asked.checked_add(SignedDuration::from_secs(wait.into())).unwrap_or(Timestamp::MAX);
    let (hook, spawn, request) = (PERMISSION_REQUEST.to_string(), spawn.to_string(), Some(id.clone()));
    let line =
        Line { hook, spawn: spawn.clone(), at: asked.to_string(), data, request, deadline: Some(deadline.to_string()) };
    append(out, &line)?;
    let file = answer_file(answers, &id);
    let denied =
        |why: String| Written { request: id.clone(), behavior: "deny".into(), message: Some(why), digest: None };
    let written = loop {
        let Some(digest) = &digest else {
            // What no person can be shown is never allowed.
            break denied("worksession could not read this request to show it: denied.".into());
        };
        if let Some(written) = read_answer(&file).filter(|w| w.request == id) {
            if written.digest.as_ref() == Some(digest) {
                break written;
            }
            // An answer to what another line of the hook file said this request was: never this one's.
            break denied("The answer given was for another request than this one: denied.".into());
        }
        if Timestamp::now() >= deadline {
            break denied(format!("No answer came within {wait} seconds: denied."));
        }
        std::thread::sleep(ANSWER_POLL);
    };
    let data = serde_json::json!({"behavior": written.behavior, "message": written.message});
    let (hook, at) = (PERMISSION_DECIDED.to_string(), Timestamp::now().to_string());
    append(out, &Line { hook, spawn, at, data, request: Some(id), deadline: None })?;
    let mut decision = serde_json::json!({"behavior": written.behavior});
    if let Some(message) = &written.message {
        decision["message"] = message.clone().into();
    }
    let said = serde_json::json!({"hookSpecificOutput": {"hookEventName": PERMISSION_REQUEST, "decision": decision}});
    Ok(said.to_string())
}

/// The answer in `file`, if one is there whole: `allow` or `deny` (never through a link).
fn read_answer(file: &Path) -> Option<Written> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(file)
        .ok()?;
    let mut text = Vec::new();
    opened.take(ANSWER_LIMIT).read_to_end(&mut text).ok()?;
    let written: Written = serde_json::from_slice(&text).ok()?;
    matches!(written.behavior.as_str(), "allow" | "deny").then_some(written)
}

/// Writes the agent's answer for the receiver: `written` into the folder `below` under `trusted` (the rooms' root, or
/// the harness's `HOME` without rooms), each folder below `trusted` opened without following a link and made where
/// missing (`0711`, the session's own `0750`; the file `0640`), the session's folder and file given the group `group`
/// (its room's) where there is one, so that its harness may read them and no harness may write them. A request
/// answered already keeps its first answer (`Ok(false)`).
pub fn answer(trusted: &Path, below: &Path, written: &Written, group: Option<u32>) -> std::io::Result<bool> {
    use rustix::fs::{AtFlags, Gid, Mode, OFlags};
    let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string());
    if !crate::harness::hooks::is_request_id(&written.request) {
        return Err(invalid("not a request id"));
    }
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open(trusted, dir_flags, Mode::empty())?;
    let parts: Vec<_> = below.components().collect();
    for (i, part) in parts.iter().enumerate() {
        let std::path::Component::Normal(name) = part else { return Err(invalid("not a plain folder below")) };
        let last = i + 1 == parts.len();
        let mode = Mode::from_raw_mode(if last { 0o750 } else { 0o711 });
        match rustix::fs::mkdirat(&dir, *name, mode) {
            Err(e) if e != rustix::io::Errno::EXIST => return Err(e.into()),
            _ => {}
        }
        dir = rustix::fs::openat(&dir, *name, dir_flags, Mode::empty())?;
    }
    if let Some(gid) = group {
        rustix::fs::fchown(&dir, None, Some(Gid::from_raw(gid)))?;
        rustix::fs::fchmod(&dir, Mode::from_raw_mode(0o750))?;
    }
    let name = format!("{}.json", written.request);
    let staged = format!(".{}.staged", written.request);
    let _ = rustix::fs::unlinkat(&dir, &staged, AtFlags::empty());
    let file_flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = rustix::fs::openat(&dir, &staged, file_flags, Mode::from_raw_mode(0o640))?;
    if let Some(gid) = group {
        rustix::fs::fchown(&file, None, Some(Gid::from_raw(gid)))?;
    }
    std::fs::File::from(file).write_all(&serde_json::to_vec(written)?)?;
    // Whole or not at all, and never over an answer given before: a link fails where the name is taken.
    let linked = rustix::fs::linkat(&dir, &staged, &dir, &name, AtFlags::empty());
    let _ = rustix::fs::unlinkat(&dir, &staged, AtFlags::empty());
    match linked {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::EXIST) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(request: &str, behavior: &str) -> Written {
        Written { request: request.into(), behavior: behavior.into(), message: None, digest: Some(digest()) }
    }

    const STDIN: &[u8] = br#"{"tool_name":"Bash","tool_input":{"command":"make"}}"#;

    fn digest() -> String {
        crate::harness::hooks::request_digest(&serde_json::from_slice(STDIN).unwrap()).unwrap()
    }

    fn answer(root: &Path, written: &Written) -> std::io::Result<bool> {
        super::answer(root, Path::new("answers/ns_a"), written, None)
    }

    #[test]
    fn an_answer_is_written_whole_once_and_read_only_for_its_own_request() {
        let dir = tempfile::tempdir().unwrap();
        let answers = dir.path().join("answers/ns_a");
        assert!(answer(dir.path(), &written("0123456789ab", "allow")).unwrap());
        assert!(!answer(dir.path(), &written("0123456789ab", "deny")).unwrap(), "the first answer stays");
        let file = answer_file(&answers, "0123456789ab");
        assert_eq!(read_answer(&file).unwrap().behavior, "allow");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&answers).unwrap().permissions().mode() & 0o777, 0o750);
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o640);
        // Never a name that leaves the folder, nor a behavior the harness would not take.
        assert!(answer(dir.path(), &written("../x", "allow")).is_err());
        assert!(super::answer(dir.path(), Path::new("../up"), &written("0123456789ab", "allow"), None).is_err());
        std::fs::write(answer_file(&answers, "ffffffffffff"), r#"{"request":"ffffffffffff","behavior":"yes"}"#)
            .unwrap();
        assert_eq!(read_answer(&answer_file(&answers, "ffffffffffff")), None);
    }

    #[test]
    fn a_link_planted_for_the_folder_or_the_answer_is_never_written_or_read_through() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::create_dir(dir.path().join("answers")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.path().join("answers/ns_a")).unwrap();
        assert!(answer(dir.path(), &written("0123456789ab", "allow")).is_err());
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");
        // Nor through a link further up.
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(&elsewhere, other.path().join("answers")).unwrap();
        assert!(answer(other.path(), &written("0123456789ab", "allow")).is_err());
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(elsewhere.join("x.json"), r#"{"request":"0123456789ab","behavior":"allow"}"#).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("x.json"), answer_file(&real, "0123456789ab")).unwrap();
        assert_eq!(read_answer(&answer_file(&real, "0123456789ab")), None, "an answer is a file, not a link");
    }

    #[test]
    fn a_request_waits_for_its_own_answer_and_is_denied_at_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let (out, answers) = (dir.path().join("hooks/ns_a.jsonl"), dir.path().join("answers/ns_a"));
        let stdin = STDIN;
        // No answer: denied at the deadline, and the hook file says both the request and what was answered.
        let said = ask(&out, "s1", &answers, 0, stdin).unwrap();
        let said: serde_json::Value = serde_json::from_str(&said).unwrap();
        assert_eq!(said["hookSpecificOutput"]["decision"]["behavior"], "deny");
        assert!(said["hookSpecificOutput"]["decision"]["message"].as_str().unwrap().contains("No answer came"));
        let lines: Vec<Line> =
            std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.iter().map(|l| l.hook.as_str()).collect::<Vec<_>>(), [PERMISSION_REQUEST, PERMISSION_DECIDED]);
        let id = lines[0].request.clone().unwrap();
        assert_eq!(lines[1].request.as_deref(), Some(id.as_str()));
        assert!(regex::Regex::new(crate::api::REQUEST_ID_PATTERN).unwrap().is_match(&id));

        // A request waiting: the agent's answer to it, given while it waits, is what the harness is told.
        let (waiter, id) = waiting(dir.path(), "ns_b");
        super::answer(dir.path(), Path::new("answers/ns_b"), &written(&id, "allow"), None).unwrap();
        let said: serde_json::Value = serde_json::from_str(&waiter.join().unwrap()).unwrap();
        assert_eq!(said["hookSpecificOutput"]["decision"]["behavior"], "allow");
    }

    /// A receiver asking for [`STDIN`] under `root` for the session file `session`, and its request's id once its
    /// line is written.
    fn waiting(root: &Path, session: &str) -> (std::thread::JoinHandle<String>, String) {
        let out = root.join(format!("hooks/{session}.jsonl"));
        let answers = root.join("answers").join(session);
        let waiter = {
            let out = out.clone();
            std::thread::spawn(move || ask(&out, "s1", &answers, 30, STDIN).unwrap())
        };
        loop {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            if let Some(line) = text.lines().next() {
                return (waiter, serde_json::from_str::<Line>(line).unwrap().request.unwrap());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    #[test]
    fn an_answer_to_what_another_line_said_the_request_was_is_a_denial() {
        let dir = tempfile::tempdir().unwrap();
        let (waiter, id) = waiting(dir.path(), "ns_a");
        // A line a harness wrote after the real one (`git status` under the same id): the answer to it carries its
        // digest, which is not the real request's.
        let forged = serde_json::json!({"tool_name": "Bash", "tool_input": {"command": "git status"}});
        let digest = crate::harness::hooks::request_digest(&forged);
        let allow = Written { request: id.clone(), behavior: "allow".into(), message: None, digest };
        super::answer(dir.path(), Path::new("answers/ns_a"), &allow, None).unwrap();
        let said: serde_json::Value = serde_json::from_str(&waiter.join().unwrap()).unwrap();
        assert_eq!(said["hookSpecificOutput"]["decision"]["behavior"], "deny");
        // A request that cannot be shown is denied at once.
        let (out, answers) = (dir.path().join("hooks/ns_c.jsonl"), dir.path().join("answers/ns_c"));
        let said = ask(&out, "s1", &answers, 30, &b"not json"[..]).unwrap();
        assert!(said.contains("could not read this request"), "{said}");
    }
}
