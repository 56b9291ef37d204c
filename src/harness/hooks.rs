//! A profile's hooks, as the core uses them: which events a hook-backed harness reports, where its reports go, and the
//! arguments that make it run the receiver (`worksession hook`, [`crate::node::hook`]) on them: Claude Code's per-run
//! `--settings` (a command hook per event), Codex CLI's `-c notify=[...]` (a program at the end of each turn), or, for
//! the harnesses that take hooks only from files (Gemini CLI, Copilot CLI, opencode), `worksession hook-exec`, which
//! writes them ([`super::through`]) and becomes the harness.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

crate::words::words! {
    /// How a profile's harness is given hooks (`hooks` in a profile).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Hooks {
        /// Claude Code: `--settings <json>` in front of its argv, a command hook per event.
        Claude = "claude",
        /// Codex CLI: `-c notify=[...]` in front of its argv, a program it runs at the end of each turn with one JSON
        /// argument naming the thread (`thread-id`), and `-c hooks.<event>=[...]`, command hooks for
        /// [`CODEX_EVENTS`] run as Claude Code's are (`session_id`, the prompt taken, the turn's end), with
        /// `--dangerously-bypass-hook-trust`: Codex runs no hook a person has not reviewed in its `/hooks` screen
        /// otherwise, and says nothing when it skips one.
        Codex = "codex",
        /// Gemini CLI: run through `worksession hook-exec`, which writes a settings file of command hooks and starts
        /// the harness with `GEMINI_CLI_SYSTEM_SETTINGS_PATH` naming it (Gemini takes hooks from settings files only).
        Gemini = "gemini",
        /// Copilot CLI: run through `worksession hook-exec`, which writes a plugin directory whose `hooks.json` runs
        /// the receiver, and starts the harness with `--plugin-dir` naming it.
        Copilot = "copilot",
        /// opencode: run through `worksession hook-exec`, which writes a plugin (JavaScript) that runs the receiver,
        /// and starts the harness with `OPENCODE_CONFIG_CONTENT` naming it. Its prompts carry their conversation's
        /// id: how the id is known without reading its log.
        Opencode = "opencode",
    }
}

impl Hooks {
    /// Whether the harness's hooks name the conversation it runs without being told it (Codex's notify, its
    /// `thread-id`; opencode's prompts, their `sessionID`): an id discovered from them.
    pub fn names_conversation(self) -> bool {
        match self {
            Hooks::Claude | Hooks::Gemini | Hooks::Copilot => false,
            Hooks::Codex | Hooks::Opencode => true,
        }
    }
}

/// The events a hook-backed profile asks the harness to report (Claude Code's names).
pub const EVENTS: &[&str] = &["SessionStart", "UserPromptSubmit", "Stop", "Notification", "SessionEnd"];

/// Claude Code's hook that asks before a tool runs: its receiver waits for the answer ([`Asks`]) and prints it.
pub const PERMISSION_REQUEST: &str = "PermissionRequest";

/// The line the receiver of a [`PERMISSION_REQUEST`] appends once it answered the harness (its `data` holds the
/// `behavior` it printed): the harness's own record that the answer was taken.
pub const PERMISSION_DECIDED: &str = "PermissionDecided";

/// Seconds Claude Code is told to give the permission hook beyond its wait, so the receiver's own deadline answers
/// first.
const PERMISSION_SLACK: u32 = 30;

/// Where a harness's permission requests wait for their answers: the folder the agent writes them to (never one the
/// harness may write: with rooms, outside its `HOME`), and how long a request waits before it is denied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asks {
    /// The session's answers folder ([`answers_of`]).
    pub dir: PathBuf,
    /// Seconds a request waits.
    pub wait: u32,
}

/// The answers folder of the WorkSession `identity` (`namespace/name`) under `base`.
pub fn answers_of(base: &Path, identity: &str) -> PathBuf {
    base.join(identity.replacen('/', "_", 1))
}

/// The file an answer to the request `id` is written to, in a session's answers folder.
pub fn answer_file(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.json"))
}

/// An answer as the agent writes it for the receiver: what the harness is told.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Written {
    /// The request it answers (the file's name says it too: both must agree).
    pub request: String,
    /// `allow` or `deny`, as Claude Code's `PermissionRequest` output takes it.
    pub behavior: String,
    /// With a denial, what the harness's model is told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The [`request_digest`] of the request it answers, as the agent first read it: the receiver takes an answer
    /// only for the very tool and input it was handed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// Whether `id` has the shape of a request's id ([`crate::api::REQUEST_ID_PATTERN`]): 12 lowercase hexadecimal digits.
pub fn is_request_id(id: &str) -> bool {
    id.len() == 12 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The sha256 of a permission request's tool and input (`tool_name`, then `tool_input` as JSON with its keys sorted),
/// in hexadecimal; `None` where it names no tool.
pub fn request_digest(data: &serde_json::Value) -> Option<String> {
    use sha2::Digest;
    let tool = data.get("tool_name")?.as_str()?;
    let input = data.get("tool_input").cloned().unwrap_or_default();
    let mut hash = sha2::Sha256::new();
    hash.update(tool.as_bytes());
    hash.update(b"\n");
    hash.update(input.to_string().as_bytes());
    Some(hex::encode(hash.finalize()))
}

/// A permission request of the live spawn, as its hook file says it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Asked {
    /// The id the receiver gave it.
    pub id: String,
    /// The tool (`Bash`, `Write`, ...), where its name is a plain word of at most 64 characters (else `None`).
    pub tool: Option<String>,
    /// What the tool is given that a rule matches, whole: a command, a file's path, a URL (`None`: nothing of the
    /// kind).
    pub subject: Option<String>,
    /// Its [`request_digest`] (`None`: it names no tool).
    pub digest: Option<String>,
    /// More of what it would do, for a person: how many lines it writes or changes, or the tool's input as JSON.
    pub detail: Option<String>,
    /// When it was asked (the receiver's clock).
    pub at: Option<k8s_openapi::jiff::Timestamp>,
    /// Until when the receiver waits.
    pub deadline: Option<k8s_openapi::jiff::Timestamp>,
    /// The answer the receiver gave the harness (`allow` or `deny`), once it gave one.
    pub answered: Option<String>,
    /// A later turn event of the spawn came (a prompt taken, a turn's end): the request was answered elsewhere, in
    /// the harness's own terminal.
    pub passed: bool,
}

/// The hook file of the WorkSession `identity` (`namespace/name`) under the harness's `home`.
pub fn file_of(home: &Path, identity: &str) -> PathBuf {
    home.join(".worksession/hooks").join(format!("{}.jsonl", identity.replacen('/', "_", 1)))
}

/// A harness's latest turn event, as its hook said it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    /// The hook: `SessionStart`, `UserPromptSubmit`, `Stop` or `Notification`.
    pub hook: String,
    /// When the receiver ran.
    pub at: Option<k8s_openapi::jiff::Timestamp>,
    /// A `Notification`'s words.
    pub message: Option<String>,
    /// A `Notification`'s kind (Claude Code's `notification_type`: `permission_prompt`, `idle_prompt`, ...).
    pub kind: Option<String>,
}

/// One line of a hook file.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Line {
    /// The hook's event name (`SessionStart`, ...), as the settings named it.
    pub hook: String,
    /// The tag of the spawn whose harness ran the hook: only the live spawn's lines speak of the live harness.
    pub spawn: String,
    /// When the receiver ran (RFC 3339, its clock).
    #[serde(default)]
    pub at: String,
    /// What the harness handed over, as it did (its JSON object), or `null` when that was not JSON.
    #[serde(default)]
    pub data: serde_json::Value,
    /// A permission request's id, given by the receiver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// Until when a permission request waits (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
}

/// How a spawn is given its hooks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Launch {
    /// Words in front of the harness's own argv (Claude Code's `--settings`, Codex's `-c notify=[...]`).
    Before(Vec<String>),
    /// The receiver runs first and becomes the harness (`<helper> hook-exec ... -- <binary> <argv>`): the helper,
    /// then these words; the harness's binary and argv follow them.
    Through(String, Vec<String>),
}

/// The arguments that make the harness of the spawn tagged `spawn` run the receiver `helper` on its events (each of
/// [`EVENTS`] for Claude Code, and its [`PERMISSION_REQUEST`] waiting on `asks`; the end of each turn for Codex, the
/// events of [`super::through`] for the others), appending to `out`; `None` when a value could not go into a hook's
/// command as a plain word (Claude Code and Gemini run it through a shell, Codex parses it as TOML, opencode's plugin
/// holds it in JavaScript).
pub fn args(style: Hooks, helper: &Path, out: &Path, spawn: &str, asks: Option<&Asks>) -> Option<Launch> {
    let (helper, out, spawn) = plain_words(helper, out, spawn)?;
    match style {
        Hooks::Claude => {
            let mut hooks: serde_json::Map<String, serde_json::Value> = EVENTS
                .iter()
                .map(|event| {
                    let command = format!("{helper} hook --out {out} --spawn {spawn} --event {event}");
                    (event.to_string(), serde_json::json!([{"hooks": [{"type": "command", "command": command}]}]))
                })
                .collect();
            if let Some(asks) = asks {
                let dir = asks.dir.to_str().filter(|d| !d.is_empty() && crate::api::is_tag(d))?;
                let command = format!(
                    "{helper} hook --out {out} --spawn {spawn} --event {PERMISSION_REQUEST} --answers {dir} --wait {}",
                    asks.wait
                );
                let timeout = asks.wait.saturating_add(PERMISSION_SLACK);
                let hook = serde_json::json!({"type": "command", "command": command, "timeout": timeout});
                hooks.insert(PERMISSION_REQUEST.into(), serde_json::json!([{"hooks": [hook]}]));
            }
            Some(Launch::Before(vec!["--settings".into(), serde_json::json!({ "hooks": hooks }).to_string()]))
        }
        Hooks::Codex => {
            // A TOML array of plain words (`-c` values are TOML); Codex appends its JSON as the last argument.
            let words = [helper.as_str(), "hook", "--out", &out, "--spawn", &spawn, "--event", NOTIFY];
            let words: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
            let mut args =
                vec!["--dangerously-bypass-hook-trust".into(), "-c".into(), format!("notify=[{}]", words.join(","))];
            for event in CODEX_EVENTS {
                let command = format!("{helper} hook --out {out} --spawn {spawn} --event {event}");
                args.push("-c".into());
                args.push(format!("hooks.{event}=[{{hooks=[{{type=\"command\",command=\"{command}\"}}]}}]"));
            }
            Some(Launch::Before(args))
        }
        Hooks::Gemini | Hooks::Copilot | Hooks::Opencode => {
            // What `hook-exec` writes holds only these plain words (`super::through::prepare`).
            let words = ["hook-exec", "--style", style.as_str(), "--out", &out, "--spawn", &spawn, "--"];
            Some(Launch::Through(helper.clone(), words.map(String::from).to_vec()))
        }
    }
}

/// The receiver, the hook file and the spawn's tag, each only as a plain word (letters, digits, `-`, `.`, `_`, `/`):
/// what goes into a hook's command, which a harness runs through a shell, parses as TOML or holds in JavaScript.
pub(super) fn plain_words(helper: &Path, out: &Path, spawn: &str) -> Option<(String, String, String)> {
    let plain = |s: Option<&str>| s.filter(|s| !s.is_empty() && crate::api::is_tag(s)).map(str::to_string);
    Some((plain(helper.to_str())?, plain(out.to_str())?, plain(Some(spawn))?))
}

/// The hooks Codex is given beside its notify.
pub const CODEX_EVENTS: &[&str] = &["SessionStart", "UserPromptSubmit", "Stop"];

/// The event name a Codex notify is received under.
pub const NOTIFY: &str = "notify";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_settings_name_the_receiver_for_each_event_as_plain_words() {
        let (helper, out) = (Path::new("/usr/local/bin/worksession"), Path::new("/h/.worksession/hooks/a_b.jsonl"));
        let Some(Launch::Before(args)) = args(Hooks::Claude, helper, out, "spawn-1", None) else {
            panic!("words before")
        };
        assert_eq!(args[0], "--settings");
        let v: serde_json::Value = serde_json::from_str(&args[1]).unwrap();
        let command = v["hooks"]["SessionStart"][0]["hooks"][0]["command"].as_str().unwrap();
        assert_eq!(
            command,
            "/usr/local/bin/worksession hook --out /h/.worksession/hooks/a_b.jsonl --spawn spawn-1 --event SessionStart"
        );
        assert_eq!(v["hooks"].as_object().unwrap().len(), EVENTS.len());
        assert_eq!(super::args(Hooks::Claude, Path::new("/bin/x;rm"), out, "s", None), None, "never a shell word");
        assert_eq!(super::args(Hooks::Claude, helper, out, "s $(id)", None), None);
        let Some(Launch::Before(codex)) = super::args(Hooks::Codex, helper, out, "spawn-1", None) else {
            panic!("before")
        };
        let notify = r#"notify=["/usr/local/bin/worksession","hook","--out","/h/.worksession/hooks/a_b.jsonl","--spawn","spawn-1","--event","notify"]"#;
        assert_eq!(codex[..3], ["--dangerously-bypass-hook-trust", "-c", notify]);
        let submit = r#"hooks.UserPromptSubmit=[{hooks=[{type="command",command="/usr/local/bin/worksession hook --out /h/.worksession/hooks/a_b.jsonl --spawn spawn-1 --event UserPromptSubmit"}]}]"#;
        assert!(codex.windows(2).any(|w| w == ["-c", submit]), "{codex:?}");
        assert_eq!(codex.len(), 3 + 2 * CODEX_EVENTS.len());
        assert_eq!(
            super::args(Hooks::Codex, Path::new("/bin/x\"y"), out, "s", None),
            None,
            "never a TOML string's end"
        );
    }

    #[test]
    fn claude_code_asks_the_receiver_for_permission_which_waits_on_a_folder_the_agent_writes() {
        let (helper, out) = (Path::new("/usr/local/bin/worksession"), Path::new("/h/.worksession/hooks/a_b.jsonl"));
        let asks = Asks { dir: answers_of(Path::new("/rooms/answers"), "a/b"), wait: 600 };
        let Some(Launch::Before(args)) = args(Hooks::Claude, helper, out, "spawn-1", Some(&asks)) else { panic!() };
        let v: serde_json::Value = serde_json::from_str(&args[1]).unwrap();
        let hook = &v["hooks"][PERMISSION_REQUEST][0]["hooks"][0];
        assert_eq!(
            hook["command"],
            "/usr/local/bin/worksession hook --out /h/.worksession/hooks/a_b.jsonl --spawn spawn-1 \
             --event PermissionRequest --answers /rooms/answers/a_b --wait 600"
        );
        assert_eq!(hook["timeout"], 630, "the receiver's own deadline answers first");
        let odd = Asks { dir: PathBuf::from("/rooms/a b"), wait: 600 };
        assert_eq!(super::args(Hooks::Claude, helper, out, "s", Some(&odd)), None, "never a shell word");
    }

    #[test]
    fn the_file_taking_harnesses_run_through_the_receiver() {
        let (helper, out) = (Path::new("/usr/local/bin/worksession"), Path::new("/h/.worksession/hooks/a_b.jsonl"));
        for style in [Hooks::Gemini, Hooks::Copilot, Hooks::Opencode] {
            let Some(Launch::Through(program, words)) = args(style, helper, out, "spawn-1", None) else {
                panic!("{style} through the receiver")
            };
            assert_eq!(program, "/usr/local/bin/worksession");
            let want = format!("hook-exec --style {style} --out /h/.worksession/hooks/a_b.jsonl --spawn spawn-1 --");
            assert_eq!(words.join(" "), want);
            assert_eq!(super::args(style, helper, out, "s `id`", None), None, "never a shell word");
        }
    }
}
