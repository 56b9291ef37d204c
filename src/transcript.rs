//! A harness's own record of a conversation (its transcript), as evidence: whether a recorded conversation exists
//! before resuming it, and whether a prompt reached it. The agent reads it; the core only sees the answers.
//!
//! A profile's `conversationPath` is a template: `{home}` is the harnesses' `HOME` (agent config `harnessHome`),
//! `{cwdSlug}` the working directory with every character other than an ASCII letter or digit replaced by `-` (the
//! Claude Code CLI's project folder, measured), and `{sessionId}` the conversation id.

use std::path::{Path, PathBuf};

pub use crate::harness::{CWD_SLUG, HOME, SESSION_ID};

/// The working directory as the Claude Code CLI names its project folder.
pub fn cwd_slug(workdir: &str) -> String {
    workdir.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

/// The transcript of conversation `id` run in `workdir`, by `template`.
pub fn locate(template: &str, home: &Path, workdir: &str, id: &str) -> PathBuf {
    let home = home.to_string_lossy();
    PathBuf::from(template.replace(HOME, &home).replace(CWD_SLUG, &cwd_slug(workdir)).replace(SESSION_ID, id))
}

/// Opens a file a harness wrote (its transcript, its store), for reading, as the harness could not make the agent
/// open anything else: below `home`, no link anywhere on the way (a harness can link its transcript to a secret the
/// agent's user reads, and learn it from which prompts count as delivered), and only a regular file (a FIFO would
/// hang the agent, a device feed it without end). Outside `home` (a template without `{home}`), the last component
/// is still never a link.
pub fn open(home: &Path, path: &Path) -> Option<std::fs::File> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match path.strip_prefix(home) {
        Ok(below) => {
            let dir =
                rustix::fs::open(home, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).ok()?;
            let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
            rustix::fs::openat2(&dir, below, flags, Mode::empty(), resolve).ok()?
        }
        Err(_) => rustix::fs::open(path, flags | OFlags::NOFOLLOW, Mode::empty()).ok()?,
    };
    let stat = rustix::fs::fstat(&fd).ok()?;
    (rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::RegularFile).then(|| fd.into())
}

/// The text of a file a harness wrote ([`open`]), at most `limit` bytes of its end.
pub fn read_tail(home: &Path, path: &Path, limit: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = open(home, path)?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(limit))).ok()?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// How much of a transcript is read: its last 64 MiB (a prompt just sent is at its end).
pub const TRANSCRIPT_LIMIT: u64 = 64 << 20;

/// Whether `transcript` holds `prompt` as a harness writes it: JSON-escaped inside a line. Tabs are also looked for
/// as the Claude Code CLI writes a prompt typed while it is busy (expanded to four spaces).
pub fn contains(transcript: &str, prompt: &str) -> bool {
    let escaped = |p: &str| {
        let quoted = serde_json::to_string(p).expect("a string serializes");
        quoted[1..quoted.len() - 1].to_string()
    };
    let exact = escaped(prompt);
    if !exact.is_empty() && transcript.contains(&exact) {
        return true;
    }
    prompt.contains('\t') && transcript.contains(&escaped(&prompt.replace('\t', "    ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claude_path_names_the_project_folder_by_its_slug() {
        let path = locate(
            "{home}/.claude/projects/{cwdSlug}/{sessionId}.jsonl",
            Path::new("/home/u"),
            "/srv/work/my_repo.x",
            "id-1",
        );
        assert_eq!(path, Path::new("/home/u/.claude/projects/-srv-work-my-repo-x/id-1.jsonl"));
    }

    #[test]
    fn a_harness_file_is_read_only_through_no_link_and_only_if_regular() {
        let dir = std::env::temp_dir().join(format!("transcript-open-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (home, secret) = (dir.join("home"), dir.join("secret"));
        std::fs::create_dir_all(home.join("sub")).unwrap();
        std::fs::write(&secret, "token").unwrap();
        std::fs::write(home.join("sub/t.jsonl"), "prompt").unwrap();
        std::os::unix::fs::symlink(&secret, home.join("link.jsonl")).unwrap();
        std::os::unix::fs::symlink(dir.join("home/sub"), home.join("via")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", home.join("zero.jsonl")).unwrap();
        let read = |p: &str| read_tail(&home, &home.join(p), 1024);
        assert_eq!(read("sub/t.jsonl").as_deref(), Some("prompt"));
        assert_eq!(read("link.jsonl"), None, "a link to a secret");
        assert_eq!(read("via/t.jsonl"), None, "a linked directory on the way");
        assert_eq!(read("zero.jsonl"), None, "a device");
        assert_eq!(read("../secret"), None, "out of the home");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn prompts_are_found_json_escaped() {
        let line = r#"{"type":"user","message":{"role":"user","content":"say \"hi\"\nthen\tstop"}}"#;
        assert!(contains(line, "say \"hi\"\nthen\tstop"));
        assert!(!contains(line, "something else"));
        let queued = r#"{"type":"queue-operation","content":"a    b"}"#;
        assert!(contains(queued, "a\tb"), "a tab typed while busy is stored as four spaces");
        assert!(!contains("", ""), "an empty prompt is never evidence");
    }
}
