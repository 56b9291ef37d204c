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

/// Which of `needles` occur in the last `tail` bytes of a file a harness wrote ([`open`]): read in chunks of 64 KiB
/// (carrying the few bytes a needle could straddle), so the search holds 64 KiB whatever the tail; `None` when the
/// file cannot be read.
pub fn find_in_tail(home: &Path, path: &Path, tail: u64, needles: &[&str]) -> Option<Vec<bool>> {
    use std::io::{Read, Seek, SeekFrom};
    const CHUNK: usize = 64 << 10;
    let mut file = open(home, path)?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(tail))).ok()?;
    let mut file = file.take(tail);
    let finders: Vec<_> = needles.iter().map(|n| memchr::memmem::Finder::new(n.as_bytes())).collect();
    let carry = needles.iter().map(|n| n.len()).max().unwrap_or(0).saturating_sub(1);
    let (mut found, mut buf) = (vec![false; needles.len()], Vec::with_capacity(CHUNK + carry));
    loop {
        let kept = buf.len();
        buf.resize(kept + CHUNK, 0);
        let n = file.read(&mut buf[kept..]).ok()?;
        buf.truncate(kept + n);
        for (f, hit) in finders.iter().zip(found.iter_mut()) {
            *hit = *hit || (!f.needle().is_empty() && f.find(&buf).is_some());
        }
        if n == 0 || found.iter().all(|h| *h) {
            return Some(found);
        }
        let from = buf.len().saturating_sub(carry);
        buf.drain(..from);
    }
}

pub use crate::core::AFTER_OFFSET_LIMIT;

/// At most `limit` bytes of a file a harness wrote ([`open`]) from `start`, and how long the file is.
pub fn read_from(home: &Path, path: &Path, start: u64, limit: u64) -> Option<(Vec<u8>, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = open(home, path)?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(start.min(len))).ok()?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes).ok()?;
    Some((bytes, len))
}

/// How long a file a harness wrote ([`open`]) is.
pub fn length(home: &Path, path: &Path) -> Option<u64> {
    open(home, path)?.metadata().ok().map(|m| m.len())
}

/// The whole lines of `bytes` (read from `start` of a file), each with where it starts in the file: a first line
/// cut by the read (`cut_first`) and a last one not yet ended by its newline (being written) are left out, and so is
/// a line that is not UTF-8.
pub fn lines(bytes: &[u8], start: u64, cut_first: bool) -> impl Iterator<Item = (u64, &str)> {
    let mut at = start;
    let mut pieces = bytes.split_inclusive(|b| *b == b'\n').peekable();
    if cut_first {
        at += pieces.next().map_or(0, |p| p.len() as u64);
    }
    pieces.filter_map(move |piece| {
        let offset = at;
        at += piece.len() as u64;
        let line = piece.strip_suffix(b"\n")?;
        Some((offset, std::str::from_utf8(line).ok()?))
    })
}

/// A prompt's words: its text with every run of whitespace one space, none at its ends. A harness may store a prompt
/// with its whitespace altered (Claude Code expands a tab to four spaces, in its transcript and its hooks alike), and
/// a long paste wrapped: Claude Code 2.1.332 records a large bracketed paste as `<pasted_content id="N">`, the text,
/// `</pasted_content id="N">` (measured); the words are the text's.
pub fn words(prompt: &str) -> String {
    unwrap_paste(prompt).split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The text of a prompt that is one wrapped paste ([`words`]), else the prompt.
fn unwrap_paste(prompt: &str) -> &str {
    let trimmed = prompt.trim();
    let Some(rest) = trimmed.strip_prefix("<pasted_content id=\"") else { return prompt };
    let Some((id, body)) = rest.split_once("\">") else { return prompt };
    let plain = !id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let close = format!("</pasted_content id=\"{id}\">");
    match body.strip_suffix(close.as_str()) {
        Some(text) if plain => text,
        _ => prompt,
    }
}

/// What a transcript's line of a prompt holds beside the prompt (Claude Code's: ids, times, its working directory,
/// about 1 KiB).
const LINE_SLACK: usize = 64 << 10;

/// Whether the JSON line `line` holds a string whose [`words`] are `words` (not empty): a prompt as the harness
/// recorded it, whole, not a mention of it inside other text.
pub fn holds(line: &str, words: &str) -> bool {
    // Parsed only when the prompt's first word is there as JSON writes it, and only a line that could hold the prompt
    // with a harness's fields beside it (JSON writes a character in at most six): a harness's long line is no parse.
    let Some(first) = words.split(' ').next().filter(|w| !w.is_empty()) else { return false };
    if line.len() > words.len().saturating_mul(6).saturating_add(LINE_SLACK) {
        return false;
    }
    let quoted = serde_json::to_string(first).expect("a string serializes");
    if !line.contains(&quoted[1..quoted.len() - 1]) {
        return false;
    }
    fn any(value: &serde_json::Value, words: &str) -> bool {
        match value {
            serde_json::Value::String(s) => s.len() >= words.len() && self::words(s) == words,
            serde_json::Value::Array(items) => items.iter().any(|v| any(v, words)),
            serde_json::Value::Object(map) => map.values().any(|v| any(v, words)),
            _ => false,
        }
    }
    serde_json::from_str(line).is_ok_and(|value| any(&value, words))
}

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
    fn a_long_paste_claude_code_wrapped_has_the_words_of_its_text() {
        let recorded = "\n\n<pasted_content id=\"7344\">\nline one\n\nline two \n</pasted_content id=\"7344\">\n";
        assert_eq!(words(recorded), "line one line two");
        let line = serde_json::json!({"type": "user", "message": {"content": recorded}}).to_string();
        assert!(holds(&line, &words("line one\n\nline two")));
        // Not one paste: the words are as written.
        let mismatched = "<pasted_content id=\"1\">x</pasted_content id=\"2\">";
        assert_eq!(words(mismatched), mismatched);
        assert!(words("before <pasted_content id=\"1\">x</pasted_content id=\"1\">").starts_with("before <pasted"));
    }

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
    fn a_prompt_is_held_whole_and_by_its_words_not_mentioned() {
        let line = r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"say \"hi\"\n  then    stop "}]}}"#;
        assert!(holds(line, &words("say \"hi\"\nthen\tstop")), "whitespace altered");
        assert!(!holds(line, &words("say \"hi\"")), "a part is not the prompt");
        let mention = r#"{"type":"assistant","message":{"content":"you said yes"}}"#;
        assert!(!holds(mention, "yes"), "a mention inside other text");
        assert!(holds(r#"{"content":"yes"}"#, "yes"));
        assert!(!holds(r#"{"content":""}"#, ""), "an empty prompt is never evidence");
        assert!(!holds("not json yes", "yes"));
    }

    #[test]
    fn only_whole_lines_are_read_each_with_its_offset() {
        let bytes = b"cut}\n{\"a\":1}\n\xff\n{\"b\":2}\n{\"c\"";
        let read: Vec<(u64, &str)> = lines(bytes, 100, true).collect();
        assert_eq!(
            read,
            [(105, r#"{"a":1}"#), (115, r#"{"b":2}"#)],
            "no cut line, no bad UTF-8, no line being written"
        );
        let read: Vec<(u64, &str)> = lines(b"x\ny\n", 0, false).collect();
        assert_eq!(read, [(0, "x"), (2, "y")]);
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
