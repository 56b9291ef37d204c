//! A profile's hooks, as the core uses them: which events a hook-backed harness reports, where its reports go, and the
//! arguments that make it run the receiver (`worksession hook`, [`crate::hook`]) on them: Claude Code's per-run
//! `--settings` (a command hook per event) or Codex CLI's `-c notify=[...]` (a program at the end of each turn).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

crate::words::words! {
    /// How a profile's harness is given hooks (`hooks` in a profile).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Hooks {
        /// Claude Code: `--settings <json>` in front of its argv, a command hook per event.
        Claude = "claude",
        /// Codex CLI: `-c notify=[...]` in front of its argv, a program it runs at the end of each turn with one JSON
        /// argument naming the thread (`thread-id`): how its conversation's id is known without scanning its rollouts.
        Codex = "codex",
    }
}

impl Hooks {
    /// Whether the harness reports each prompt as it takes it (`UserPromptSubmit`), so that a delivery is confirmed
    /// by its hooks. Codex's notify comes only when a turn ends, minutes later maybe: a deadline on it would send a
    /// prompt again in the middle of its turn.
    pub fn confirms_prompts(self) -> bool {
        match self {
            Hooks::Claude => true,
            Hooks::Codex => false,
        }
    }

    /// Whether the harness's hooks name the conversation it runs without being told it (Codex's notify, its
    /// `thread-id`): an id discovered from them.
    pub fn names_conversation(self) -> bool {
        match self {
            Hooks::Claude => false,
            Hooks::Codex => true,
        }
    }
}

/// The events a hook-backed profile asks the harness to report (Claude Code's names).
pub const EVENTS: &[&str] = &["SessionStart", "UserPromptSubmit", "Stop", "Notification", "SessionEnd"];

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
}

/// The arguments that make the harness of the spawn tagged `spawn` run the receiver `helper` on its events (each of
/// [`EVENTS`] for Claude Code, the end of each turn for Codex), appending to `out`; `None` when a value could not go
/// into a hook's command as a plain word (Claude Code runs it through a shell, Codex parses it as TOML).
pub fn args(style: Hooks, helper: &Path, out: &Path, spawn: &str) -> Option<Vec<String>> {
    let plain = |s: &str| (!s.is_empty() && crate::api::is_tag(s)).then(|| s.to_string());
    let (helper, out, spawn) = (plain(helper.to_str()?)?, plain(out.to_str()?)?, plain(spawn)?);
    match style {
        Hooks::Claude => {
            let hooks: serde_json::Map<String, serde_json::Value> = EVENTS
                .iter()
                .map(|event| {
                    let command = format!("{helper} hook --out {out} --spawn {spawn} --event {event}");
                    (event.to_string(), serde_json::json!([{"hooks": [{"type": "command", "command": command}]}]))
                })
                .collect();
            Some(vec!["--settings".into(), serde_json::json!({ "hooks": hooks }).to_string()])
        }
        Hooks::Codex => {
            // A TOML array of plain words (`-c` values are TOML); Codex appends its JSON as the last argument.
            let words = [helper.as_str(), "hook", "--out", &out, "--spawn", &spawn, "--event", NOTIFY];
            let words: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
            Some(vec!["-c".into(), format!("notify=[{}]", words.join(","))])
        }
    }
}

/// The event name a Codex notify is received under.
pub const NOTIFY: &str = "notify";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_settings_name_the_receiver_for_each_event_as_plain_words() {
        let (helper, out) = (Path::new("/usr/local/bin/worksession"), Path::new("/h/.worksession/hooks/a_b.jsonl"));
        let args = args(Hooks::Claude, helper, out, "spawn-1").unwrap();
        assert_eq!(args[0], "--settings");
        let v: serde_json::Value = serde_json::from_str(&args[1]).unwrap();
        let command = v["hooks"]["SessionStart"][0]["hooks"][0]["command"].as_str().unwrap();
        assert_eq!(
            command,
            "/usr/local/bin/worksession hook --out /h/.worksession/hooks/a_b.jsonl --spawn spawn-1 --event SessionStart"
        );
        assert_eq!(v["hooks"].as_object().unwrap().len(), EVENTS.len());
        assert_eq!(super::args(Hooks::Claude, Path::new("/bin/x;rm"), out, "s"), None, "never a shell word");
        assert_eq!(super::args(Hooks::Claude, helper, out, "s $(id)"), None);
        let codex = super::args(Hooks::Codex, helper, out, "spawn-1").unwrap();
        assert_eq!(
            codex,
            [
                "-c",
                r#"notify=["/usr/local/bin/worksession","hook","--out","/h/.worksession/hooks/a_b.jsonl","--spawn","spawn-1","--event","notify"]"#
            ]
        );
        assert_eq!(super::args(Hooks::Codex, Path::new("/bin/x\"y"), out, "s"), None, "never a TOML string's end");
    }
}
