//! Harness profiles: how to start (and resume) a harness CLI in tmux, as argv templates.
//!
//! A profile names a binary, extra args, an interactive argv and optionally a resume argv (flags first, prompt
//! last). `{sessionId}` and `{prompt}` are replaced inside one argument each; `{extraArgs}` is a
//! whole argument that expands to the list. Built in: the catalogue `catalogue.yaml` ([`builtin`]): `claude`, `codex`,
//! `copilot`, `cursor` (which cannot be tmux-hosted), `gemini` and `opencode`.

mod file;
pub mod hooks;
pub mod through;
pub mod usage;

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

pub use file::ProfileFile;

/// Placeholder for the conversation id, in a profile's argv templates and paths alike.
pub const SESSION_ID: &str = "{sessionId}";
/// Placeholder for the harnesses' `HOME`.
pub const HOME: &str = "{home}";
/// Placeholder for the working directory as a folder name.
pub const CWD_SLUG: &str = "{cwdSlug}";
/// Placeholder replaced by the prompt.
pub const PROMPT: &str = "{prompt}";
/// Placeholder expanded to the profile's extra args.
pub const EXTRA_ARGS: &str = "{extraArgs}";

/// How to run one harness CLI.
#[derive(Clone, Debug)]
pub struct Profile {
    /// The executable (a path, or a name looked up on `PATH`).
    pub binary: String,
    /// Arguments expanded where a template says `{extraArgs}`.
    pub extra_args: Vec<String>,
    /// Argv of a fresh interactive conversation; `None`: the harness cannot be tmux-hosted.
    pub interactive: Option<Vec<String>>,
    /// Argv resuming a recorded conversation; `None`: the harness cannot resume.
    pub resume: Option<Vec<String>>,
    /// What a harness prints when it cannot find the conversation to resume.
    pub resume_failed_pattern: Option<Regex>,
    /// What a harness prints when it refuses to resume a conversation another process of its own holds (Claude
    /// Code's background sessions): the conversation exists and is busy elsewhere, so it is resumed again later and
    /// never replaced by a fresh one.
    pub resume_busy_pattern: Option<Regex>,
    /// Environment variables the harness is started with (tmux's `new-session -e`), in order.
    pub env: Vec<(String, String)>,
    /// What the pane's visible text shows once the harness accepts input; `None`: it is assumed to once the probe
    /// passed. Nothing is pasted before it shows (a real TUI drops what is typed while it boots).
    pub ready_pattern: Option<Regex>,
    /// What the pane's visible text shows while the harness takes no input though it looks ready (Gemini CLI running
    /// its hooks after a turn: an Enter then is lost, and the paste stays in its input box); nothing is pasted while
    /// it shows.
    pub busy_pattern: Option<Regex>,
    /// Where the harness keeps a conversation: a template of `{home}`, `{cwdSlug}` and `{sessionId}`
    /// (see [`crate::node::transcript`]). A recorded id whose file is missing is not resumed, and a prompt the file
    /// contains is known delivered.
    pub conversation_path: Option<String>,
    /// Where the harness keeps a conversation (a file or a directory), only to tell whether it exists before a resume
    /// (a template like `conversation_path`'s, which it falls back to): for a harness whose store is no transcript.
    pub store_path: Option<String>,
    /// How the id of a conversation is found once the harness runs, for a harness that cannot be told one at start
    /// (its `interactive` argv has no `{sessionId}`).
    pub discover: Option<Discover>,
    /// How the harness is given hooks that report what it accepted ([`hooks`]); `None`: it reports nothing.
    pub hooks: Option<hooks::Hooks>,
    /// Whether the harness takes a prompt pasted while it works on a turn (Claude Code and opencode queue it). One
    /// that does not (Gemini CLI: the paste stays unsent in its input box, and the next one joins it) is given prompts
    /// only between turns, one at a time, where its hooks say when a turn ends.
    pub queues_prompts: bool,
    /// What, leading a prompt (after any whitespace), makes the harness run it as one of its own commands (Claude
    /// Code runs a `/clear` given on its command line or pasted, and a pasted `!touch x` in its shell mode): such a
    /// prompt is sent with [`LITERAL_PREFIX`] in front (see [`Profile::literal`]).
    pub command_prefixes: Vec<String>,
    /// Whether a fresh conversation after a failed resume is handed what the lost one had taken
    /// ([`crate::api::HandoffSpec`]); a WorkSession can turn it off too.
    pub handoff: bool,
    /// Where the harness's record states what its model calls spent (`status.usage`); `None`: it is not read.
    pub usage: Option<usage::UsageRecord>,
}

/// Where a harness shows the id of the conversation it started.
#[derive(Clone, Debug)]
pub struct Discover {
    /// A file its store creates for the conversation, whose name holds the id: a template of `{home}`, `{cwdSlug}`,
    /// `*` (any characters within one path segment) and `{sessionId}` (the id, a UUID), for example Codex CLI's
    /// `{home}/.codex/sessions/*/*/*/rollout-*-{sessionId}.jsonl`. Only a file created after the spawn counts.
    pub path: Option<String>,
    /// The file's first line must name the workdir (`"cwd":"<workdir>"`, as Codex CLI's `session_meta` does).
    pub names_workdir: bool,
    /// Or: a pattern on its screen whose first group is the id.
    pub screen_pattern: Option<Regex>,
    /// Or: a line of its log that says it created the conversation.
    pub log: Option<LogLine>,
}

/// A harness's log line announcing a new conversation (opencode logs
/// `timestamp=<time> ... message=created id=<id> ... directory=<workdir> ...`).
#[derive(Clone, Debug)]
pub struct LogLine {
    /// The log files: a template of `{home}` and `*`.
    pub path: String,
    /// The line: a regular expression with the groups `id` and `time` (RFC 3339), where `{workdir}` stands for the
    /// session's workdir (matched literally).
    pub pattern: String,
}

/// Where a log line's pattern names the workdir.
pub const WORKDIR: &str = "{workdir}";

impl Profile {
    /// Whether the conversation's id is found after the start instead of given to it.
    pub fn discovers(&self) -> bool {
        self.discover.is_some()
    }

    /// `prompt` as the harness reads it as text: with [`LITERAL_PREFIX`] in front when its first visible character
    /// (after whitespace and invisible characters such as U+200B or U+FEFF, which a harness may trim or ignore) starts
    /// one of its [`Profile::command_prefixes`], on a command line and pasted alike.
    pub fn literal<'p>(&self, prompt: &'p str) -> std::borrow::Cow<'p, str> {
        let head = prompt.trim_start_matches(|c: char| c.is_whitespace() || invisible(c));
        if self.command_prefixes.iter().any(|p| !p.is_empty() && head.starts_with(p.as_str())) {
            format!("{LITERAL_PREFIX}{prompt}").into()
        } else {
            prompt.into()
        }
    }
}

impl Profile {
    /// `prompt` as it goes to the harness: without control characters ([`clean_prompt`]) and, unless a person made it
    /// a `command`, [`Profile::literal`]; on a command line and pasted alike.
    pub fn as_sent(&self, prompt: &str, command: bool) -> String {
        let clean = clean_prompt(prompt);
        if command { clean.into_owned() } else { self.literal(&clean).into_owned() }
    }
}

/// Characters that show nothing: format characters (zero-width spaces and joiners, the byte-order mark, the soft
/// hyphen, bidirectional marks), variation selectors and tags. A harness may drop them before it looks for a command.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}' | '\u{180B}'..='\u{180F}'
        | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}'
        | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF0}'..='\u{FFF8}' | '\u{1D173}'..='\u{1D17A}' | '\u{E0000}'..='\u{E0FFF}')
}

/// Put before a prompt that would otherwise start with a command prefix: harnesses tell a command by the first
/// characters of the input (Claude Code after trimming whitespace for `/`, the very first for `!`), and a word is
/// none. Measured with Claude Code 2.1.332 offline: a leading space keeps `!` a prompt but not `/clear`; a leading
/// zero-width space (U+200B) left the text unsent in the input box with the slash-command menu open, where the next
/// Enter would choose `/clear`. Visible, so the model and a person read what was sent.
pub const LITERAL_PREFIX: &str = "Prompt: ";

/// The command prefixes of the built-in profiles: `/` (slash commands) and `!` (shell mode). Measured with Claude
/// Code 2.1.332 offline: an argv `/clear` (fresh and resumed) switched to a new conversation, and a bracketed paste
/// of `!touch <file>` into its idle input box ran it in its shell mode; `#` and `@file` were prompts (`@file`
/// attaches the file, as a person's mention would). The other CLIs have slash commands and a `!` shell mode of their
/// own, so they get the same prefixes.
pub const COMMAND_PREFIXES: &[&str] = &["/", "!"];

/// Which argv of a profile to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A fresh conversation under a new session id.
    Fresh,
    /// Resume the recorded conversation.
    Resume,
}

/// Why a profile cannot build an argv.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArgvError {
    /// The profile has no `interactive` argv.
    #[error("the {0} harness cannot be hosted in tmux (its profile has no interactive argv)")]
    NotHostable(String),
    /// The profile has no `resume` argv.
    #[error("the {0} harness cannot resume a conversation in interactive mode")]
    CannotResume(String),
    /// The prompt would reach the harness where it parses flags.
    #[error(
        "the prompt starts with '-' and the {0} profile has no \"--\" before {{prompt}}: it would be taken as a flag"
    )]
    PromptLooksLikeFlag(String),
}

/// A template or pattern that cannot work, found when a profile is loaded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{key}: {problem}")]
pub struct TemplateError {
    /// The config key, for example `harnesses.myharness.resume`.
    pub key: String,
    /// What is wrong with it.
    pub problem: String,
}

impl Profile {
    /// Checks the templates of the profile named `name` (used in error keys).
    pub fn validate(&self, name: &str) -> Result<(), TemplateError> {
        let err = |field: &str, problem: String| TemplateError { key: format!("harnesses.{name}.{field}"), problem };
        if self.binary.is_empty() {
            return Err(err("binary", "must not be empty".into()));
        }
        for (key, value) in &self.env {
            // A name env(7) allows, and a value without control characters: tmux takes each as one `-e` word.
            let named = key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !named {
                return Err(err("env", format!("{key:?} is not a variable name (letters, digits and '_')")));
            }
            // With rooms the variables are set on `worksession room`, which starts as root: nothing that loads code.
            if key.starts_with("LD_") || key == "GCONV_PATH" {
                return Err(err("env", format!("{key} would load code into the process that enters a room")));
            }
            if value.chars().any(char::is_control) {
                return Err(err(&format!("env.{key}"), "must not hold control characters".into()));
            }
        }
        for (field, template) in [("interactive", &self.interactive), ("resume", &self.resume)] {
            let Some(template) = template else { continue };
            for arg in template {
                let rest = arg.replace(SESSION_ID, "").replace(PROMPT, "");
                if arg != EXTRA_ARGS && (rest.contains('{') || rest.contains('}')) {
                    return Err(err(
                        field,
                        format!(
                            "unknown placeholder in {arg:?} (known: {SESSION_ID}, {PROMPT}, {EXTRA_ARGS} as a whole argument)"
                        ),
                    ));
                }
            }
            let count = |p: &str| template.iter().map(|a| a.matches(p).count()).sum::<usize>();
            if count(PROMPT) > 1 {
                return Err(err(field, format!("{PROMPT} appears more than once")));
            }
            if field == "resume" && count(SESSION_ID) == 0 {
                return Err(err(field, format!("must contain {SESSION_ID}: what else would it resume?")));
            }
        }
        let preset = self.interactive.as_ref().is_none_or(|t| t.iter().any(|a| a.contains(SESSION_ID)));
        match &self.discover {
            None if !preset && self.resume.is_some() => {
                return Err(err(
                    "discover",
                    format!(
                        "interactive has no {SESSION_ID}: say where the harness shows its id (discover.path or discover.screenPattern)"
                    ),
                ));
            }
            Some(d) => {
                if d.path.is_none() && d.screen_pattern.is_none() && d.log.is_none() {
                    return Err(err("discover", "needs path, screenPattern or log".into()));
                }
                if let Some(log) = &d.log {
                    let compiled = Regex::new(&log.pattern.replace(WORKDIR, "/w"));
                    let groups = compiled.as_ref().map(|r| r.capture_names().flatten().collect::<Vec<_>>());
                    match groups {
                        Err(e) => return Err(err("discover.log.pattern", e.to_string())),
                        Ok(names) if !names.contains(&"id") || !names.contains(&"time") => {
                            return Err(err(
                                "discover.log.pattern",
                                "needs the groups (?P<id>...) and (?P<time>...)".into(),
                            ));
                        }
                        Ok(_) => {}
                    }
                }
                if let Some(path) = &d.path {
                    let rest = path.replace(SESSION_ID, "").replace(HOME, "").replace(CWD_SLUG, "");
                    if rest.contains('{') || rest.contains('}') || path.matches(SESSION_ID).count() != 1 {
                        return Err(err(
                            "discover.path",
                            format!(
                                "{path:?} must name {SESSION_ID} once and no placeholder but {{home}} and {{cwdSlug}}"
                            ),
                        ));
                    }
                }
                if d.screen_pattern.as_ref().is_some_and(|p| p.captures_len() < 2) {
                    return Err(err("discover.screenPattern", "needs a group that captures the id".into()));
                }
            }
            None => {}
        }
        for (key, path) in [("conversationPath", &self.conversation_path), ("storePath", &self.store_path)] {
            let Some(path) = path else { continue };
            let rest = path.replace(SESSION_ID, "").replace(HOME, "").replace(CWD_SLUG, "");
            if rest.contains('{') || rest.contains('}') || !path.contains(SESSION_ID) {
                let known = format!("{}, {} and {SESSION_ID}", HOME, CWD_SLUG);
                return Err(err(key, format!("{path:?} must name {SESSION_ID} and no placeholder but {known}")));
            }
        }
        if let Some(usage) = &self.usage {
            match usage.path.as_ref().or(self.conversation_path.as_ref()) {
                None => {
                    return Err(err("usage.path", "is required where the profile names no conversationPath".into()));
                }
                Some(path) => {
                    let rest = path.replace(SESSION_ID, "").replace(HOME, "").replace(CWD_SLUG, "");
                    if rest.contains('{')
                        || rest.contains('}')
                        || !path.contains(SESSION_ID)
                        || !path.starts_with('/') && !path.starts_with(HOME)
                    {
                        let known = format!("{}, {}, * and {SESSION_ID}", HOME, CWD_SLUG);
                        return Err(err(
                            "usage.path",
                            format!("{path:?} must be absolute, name {SESSION_ID} and no placeholder but {known}"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Builds the argv (after the binary) for `mode`, with `prompt` as the boot prompt if any.
    ///
    /// Without a prompt, the argument holding `{prompt}` is left out, with a `--` right before it.
    /// Whether the command line of `mode` carries a prompt (`{prompt}`); one that does not has its boot prompt
    /// pasted once the spawn is verified (opencode ignores `--prompt` beside `--session`, measured).
    pub fn takes_prompt(&self, mode: Mode) -> bool {
        let template = match mode {
            Mode::Fresh => self.interactive.as_ref(),
            Mode::Resume => self.resume.as_ref(),
        };
        template.is_some_and(|t| t.iter().any(|a| a.contains(PROMPT)))
    }

    pub fn argv(
        &self,
        name: &str,
        mode: Mode,
        session_id: &str,
        prompt: Option<&str>,
    ) -> Result<Vec<String>, ArgvError> {
        let interactive = self.interactive.as_ref().ok_or_else(|| ArgvError::NotHostable(name.into()))?;
        let template = match mode {
            Mode::Fresh => interactive,
            Mode::Resume => self.resume.as_ref().ok_or_else(|| ArgvError::CannotResume(name.into()))?,
        };
        let mut argv: Vec<String> = Vec::with_capacity(template.len() + self.extra_args.len());
        for (i, arg) in template.iter().enumerate() {
            if arg == EXTRA_ARGS {
                argv.extend(self.extra_args.iter().cloned());
                continue;
            }
            if arg.contains(PROMPT) {
                let Some(prompt) = prompt else {
                    if argv.last().is_some_and(|a| a == "--")
                        && template.get(i.wrapping_sub(1)).is_some_and(|a| a == "--")
                    {
                        argv.pop();
                    }
                    continue;
                };
                let after_dashdash = template[..i].iter().any(|a| a == "--");
                if arg == PROMPT && prompt.starts_with('-') && !after_dashdash {
                    return Err(ArgvError::PromptLooksLikeFlag(name.into()));
                }
                argv.push(arg.replace(SESSION_ID, session_id).replace(PROMPT, prompt));
                continue;
            }
            argv.push(arg.replace(SESSION_ID, session_id));
        }
        Ok(argv)
    }

    /// Whether what a dead pane printed says the conversation to resume does not exist.
    pub fn resume_failed(&self, output: &str) -> bool {
        self.resume_failed_pattern.as_ref().is_some_and(|p| p.is_match(output))
    }

    /// Whether a dead pane's last output says the conversation is held by another process of the harness.
    pub fn resume_busy(&self, output: &str) -> bool {
        self.resume_busy_pattern.as_ref().is_some_and(|p| p.is_match(output))
    }

    /// Whether a pane showing `screen` takes input: its ready pattern shows (always, for a profile without one) and
    /// its busy pattern does not.
    pub fn ready(&self, screen: Option<&str>) -> bool {
        !self.busy(screen)
            && match &self.ready_pattern {
                None => true,
                Some(pattern) => screen.is_some_and(|s| pattern.is_match(s)),
            }
    }

    /// Whether a pane showing `screen` shows the busy pattern (never, for a profile without one or an unread screen).
    pub fn busy(&self, screen: Option<&str>) -> bool {
        self.busy_pattern.as_ref().is_some_and(|p| screen.is_some_and(|s| p.is_match(s)))
    }

    /// Whether deciding to paste needs the pane's visible text.
    pub fn reads_screen(&self) -> bool {
        self.ready_pattern.is_some() || self.busy_pattern.is_some()
    }
}

/// A prompt as it may reach a harness: without NUL (which no argv can carry) and without other control
/// characters (an escape sequence in a paste could end the bracketed paste early or drive the terminal); tabs and
/// line breaks stay.
pub fn clean_prompt(prompt: &str) -> std::borrow::Cow<'_, str> {
    let keep = |c: char| !c.is_control() || matches!(c, '\n' | '\t');
    if prompt.chars().all(keep) {
        return prompt.into();
    }
    prompt.replace("\r\n", "\n").replace('\r', "\n").chars().filter(|c| keep(*c)).collect::<String>().into()
}

/// The built-in catalogue, as written ([`builtin`] parses it).
pub const CATALOGUE: &str = include_str!("catalogue.yaml");

/// The built-in profiles: the one catalogue (`src/harness/catalogue.yaml`, embedded), parsed as the agent config's
/// `harnesses:` are. A profile the config names overrides the built-in one key by key.
pub fn builtin() -> BTreeMap<String, Profile> {
    static PROFILES: LazyLock<BTreeMap<String, Profile>> = LazyLock::new(|| {
        let written: BTreeMap<String, ProfileFile> = serde_yaml_ng::from_str(CATALOGUE).expect("the catalogue parses");
        let profile = |(name, p): (String, ProfileFile)| {
            let profile = p.into_profile(&name, None).unwrap_or_else(|e| panic!("built-in profile {name}: {e}"));
            (name, profile)
        };
        written.into_iter().map(profile).collect()
    });
    PROFILES.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    fn claude() -> Profile {
        Profile { extra_args: strings(&["--model", "opus"]), ..builtin().remove("claude").unwrap() }
    }

    #[test]
    fn gemini_and_copilot_take_the_prompt_as_one_flag_value() {
        let profiles = builtin();
        let gemini = &profiles["gemini"];
        assert_eq!(
            gemini.argv("gemini", Mode::Fresh, "id-1", Some("-dash led")).unwrap(),
            ["--session-id", "id-1", "--prompt-interactive=-dash led"]
        );
        assert_eq!(gemini.argv("gemini", Mode::Resume, "id-1", None).unwrap(), ["--resume", "id-1"]);
        let copilot = &profiles["copilot"];
        assert_eq!(
            copilot.argv("copilot", Mode::Resume, "id-1", Some("hi")).unwrap(),
            ["--resume=id-1", "--interactive=hi"]
        );
        assert!(gemini.resume_failed("Error resuming session: No previous sessions found for this project."));
        assert!(copilot.resume_failed("Error: No session, task, or name matched 'x'."));
    }

    #[test]
    fn claude_argv_is_flags_first_prompt_last() {
        let p = claude();
        assert_eq!(
            p.argv("claude", Mode::Fresh, "id-1", Some("hello")).unwrap(),
            ["--session-id", "id-1", "--model", "opus", "--", "hello"]
        );
        assert_eq!(
            p.argv("claude", Mode::Resume, "id-1", Some("hello")).unwrap(),
            ["--resume", "id-1", "--model", "opus", "--", "hello"]
        );
    }

    #[test]
    fn no_prompt_drops_the_prompt_and_its_dashdash() {
        assert_eq!(claude().argv("claude", Mode::Fresh, "x", None).unwrap(), ["--session-id", "x", "--model", "opus"]);
    }

    #[test]
    fn dash_led_prompt_needs_a_dashdash() {
        let p = claude();
        let argv = p.argv("claude", Mode::Fresh, "x", Some("--dangerously-skip-permissions")).unwrap();
        assert_eq!(argv.last().unwrap(), "--dangerously-skip-permissions");
        let bare = Profile { interactive: Some(strings(&[SESSION_ID, PROMPT])), ..claude() };
        assert_eq!(
            bare.argv("bare", Mode::Fresh, "x", Some("-rf")),
            Err(ArgvError::PromptLooksLikeFlag("bare".into()))
        );
    }

    #[test]
    fn placeholders_inside_an_argument() {
        let p = Profile { interactive: Some(strings(&["--id={sessionId}", "--prompt={prompt}"])), ..claude() };
        assert_eq!(p.argv("p", Mode::Fresh, "abc", Some("-x")).unwrap(), ["--id=abc", "--prompt=-x"]);
        assert_eq!(p.argv("p", Mode::Fresh, "abc", None).unwrap(), ["--id=abc"]);
    }

    #[test]
    fn cursor_cannot_be_hosted_or_resumed() {
        let cursor = builtin().remove("cursor").unwrap();
        assert_eq!(cursor.argv("cursor", Mode::Fresh, "x", None), Err(ArgvError::NotHostable("cursor".into())));
        assert_eq!(cursor.argv("cursor", Mode::Resume, "x", None), Err(ArgvError::NotHostable("cursor".into())));
        let no_resume = Profile { resume: None, ..claude() };
        assert_eq!(no_resume.argv("c", Mode::Resume, "x", None), Err(ArgvError::CannotResume("c".into())));
    }

    #[test]
    fn malformed_templates_are_named() {
        let bad = Profile { resume: Some(strings(&["--resume", "{sessionID}"])), ..claude() };
        let e = bad.validate("mine").unwrap_err();
        assert_eq!(e.key, "harnesses.mine.resume");
        assert!(e.problem.contains("unknown placeholder"), "{e}");
        let twice = Profile { interactive: Some(strings(&[PROMPT, PROMPT])), ..claude() };
        assert_eq!(twice.validate("t").unwrap_err().key, "harnesses.t.interactive");
        let no_id = Profile { resume: Some(strings(&["--continue", PROMPT])), ..claude() };
        assert!(no_id.validate("n").unwrap_err().problem.contains("{sessionId}"));
        let no_store_id = Profile { conversation_path: Some("{home}/{cwd}.jsonl".into()), ..claude() };
        assert_eq!(no_store_id.validate("s").unwrap_err().key, "harnesses.s.conversationPath");
        for (name, p) in builtin() {
            p.validate(&name).unwrap();
        }
    }

    #[test]
    fn prompts_lose_control_characters_but_keep_lines() {
        assert_eq!(clean_prompt("plain\ttext\nline"), "plain\ttext\nline");
        assert_eq!(clean_prompt("a\u{0}b\u{1b}[201~c\u{7}d\r\ne\u{7f}"), "ab[201~cd\ne");
        assert!(matches!(clean_prompt("fine"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn gemini_is_not_ready_while_it_runs_its_hooks() {
        let gemini = builtin().remove("gemini").unwrap();
        let screen = " ✦ Done.\n Executing Hooks: /usr/local/bin/worksession hook --out x\n >   Type your message";
        assert!(!gemini.ready(Some(screen)), "busy");
        assert!(gemini.ready(Some(" ✦ Done.\n >   Type your message or @path/to/file")));
        assert!(
            gemini.ready(Some(" > what does Executing Hooks: mean?\n >   Type your message")),
            "a mention is no status"
        );
        assert!(gemini.ready(None), "no screen read: nothing says it is busy");
        assert!(gemini.reads_screen());
    }

    #[test]
    fn claude_ready_pattern_matches_the_input_box_only() {
        let claude = builtin().remove("claude").unwrap();
        let rule = "─".repeat(60);
        let booting = "╭───╮\n│ Claude Code v2.1 │\n╰───╯\n\n❯ the argv prompt\n\n  ⎿  Can't reach the API server\n";
        assert!(!claude.ready(Some(booting)), "the banner's echo of the prompt is not the input box");
        let up = format!("{booting}\n{rule}\n❯ \n{rule}\n  ? for shortcuts\n");
        assert!(claude.ready(Some(&up)));
        assert!(!claude.ready(None), "no screen read: not known ready");
        assert!(builtin()["cursor"].ready(None), "without a pattern the probe is the only wait");
    }

    /// A command prefix is found behind whitespace and invisible characters, which a harness may trim.
    #[test]
    fn literal_prompts_see_through_invisible_characters() {
        let claude = builtin().remove("claude").unwrap();
        for sneaky in [
            "/clear",
            "  /clear",
            "\u{FEFF}/clear",
            "\u{200B}/clear",
            "\u{2060}!rm -rf x",
            "\u{00AD}\t!id",
            "\n/compact",
        ] {
            assert_eq!(claude.literal(sneaky), format!("{LITERAL_PREFIX}{sneaky}"), "{sneaky:?}");
        }
        for plain in ["fix /tmp/x", "# heading", "@notes.txt", "\u{200B}hello", "mona commented: /clear"] {
            assert_eq!(claude.literal(plain), plain, "{plain:?}");
        }
    }

    #[test]
    fn resume_failure_pattern() {
        let p = claude();
        assert!(p.resume_failed("Error\nNo conversation found with session ID: abc\n"));
        assert!(!p.resume_failed("Segmentation fault"));
        assert!(!builtin()["cursor"].resume_failed("No conversation found"));
    }
}
