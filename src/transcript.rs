//! A harness's own record of a conversation (its transcript), as evidence: whether a recorded conversation exists
//! before resuming it, and whether a prompt reached it. The agent reads it; the core only sees the answers.
//!
//! A profile's `conversationPath` is a template: `{home}` is the harnesses' `HOME` (agent config `harnessHome`),
//! `{cwdSlug}` the working directory with every character other than an ASCII letter or digit replaced by `-` (the
//! Claude Code CLI's project folder, measured), and `{sessionId}` the conversation id.

use std::path::{Path, PathBuf};

/// Placeholder for the harnesses' `HOME`.
pub const HOME: &str = "{home}";
/// Placeholder for the working directory as a folder name.
pub const CWD_SLUG: &str = "{cwdSlug}";

/// The working directory as the Claude Code CLI names its project folder.
pub fn cwd_slug(workdir: &str) -> String {
    workdir.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

/// The transcript of conversation `id` run in `workdir`, by `template`.
pub fn locate(template: &str, home: &Path, workdir: &str, id: &str) -> PathBuf {
    let home = home.to_string_lossy();
    PathBuf::from(
        template.replace(HOME, &home).replace(CWD_SLUG, &cwd_slug(workdir)).replace(crate::harness::SESSION_ID, id),
    )
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
    fn the_claude_path_names_the_project_folder_by_its_slug() {
        let path =
            locate(crate::harness::CLAUDE_CONVERSATION_PATH, Path::new("/home/u"), "/srv/work/my_repo.x", "id-1");
        assert_eq!(path, Path::new("/home/u/.claude/projects/-srv-work-my-repo-x/id-1.jsonl"));
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
