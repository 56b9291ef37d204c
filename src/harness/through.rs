//! What `worksession hook-exec` prepares for a harness that takes its hooks only from files, before it becomes that
//! harness ([`crate::hook::exec_through`]): Gemini CLI's settings file, Copilot CLI's plugin directory, opencode's
//! plugin. Each is written beside the session's hook file (in the session's own 0700 folder, as the harness's own user)
//! and names the receiver with plain words only; the harness is told of it by its environment or a flag in front of its
//! argv. Pure: what to write and how to run, no file touched here.

use std::path::{Path, PathBuf};

use super::hooks::Hooks;

/// What to write and how to start the harness so that it finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// Files to write, each `0600` (their folders `0700`), never through a link.
    pub files: Vec<(PathBuf, String)>,
    /// Environment variables to set for the harness.
    pub env: Vec<(&'static str, String)>,
    /// Words in front of the harness's own argv.
    pub before: Vec<String>,
}

/// Gemini CLI's hook events, each with the name the receiver records it under (Claude Code's, which the agent reads).
pub const GEMINI_EVENTS: &[(&str, &str)] = &[
    ("SessionStart", "SessionStart"),
    ("BeforeAgent", "UserPromptSubmit"),
    ("AfterAgent", "Stop"),
    ("Notification", "Notification"),
    ("SessionEnd", "SessionEnd"),
];

/// Copilot CLI's hook events (measured with 1.0.102), each with the name the receiver records it under. Its
/// `errorOccurred` is left out: it fires for errors a turn retries past too, so it is no end of a turn.
pub const COPILOT_EVENTS: &[(&str, &str)] = &[
    ("sessionStart", "SessionStart"),
    ("userPromptSubmitted", "UserPromptSubmit"),
    ("agentStop", "Stop"),
    ("notification", "Notification"),
    ("sessionEnd", "SessionEnd"),
];

/// The environment variable opencode reads its config from (a JSON object), where its plugin is named.
pub const OPENCODE_CONFIG: &str = "OPENCODE_CONFIG_CONTENT";

/// What a harness of `style` run through `worksession hook-exec` needs to call the receiver `helper` on its events,
/// reporting for the spawn tagged `spawn` to the hook file `out`; `None` for a style given its hooks on its command
/// line, or unless each value is a plain word (the hooks' commands go through a shell, or into JavaScript).
/// `config` is the harness's own `OPENCODE_CONFIG_CONTENT`, which opencode's plugin is added to.
pub fn prepare(style: Hooks, helper: &Path, out: &Path, spawn: &str, config: Option<&str>) -> Option<Prepared> {
    let plain = |s: &str| (!s.is_empty() && crate::api::is_tag(s)).then(|| s.to_string());
    let (helper, out, spawn) = (plain(helper.to_str()?)?, PathBuf::from(plain(out.to_str()?)?), plain(spawn)?);
    let receiver = |event: &str| format!("{helper} hook --out {} --spawn {spawn} --event {event}", out.display());
    match style {
        Hooks::Claude | Hooks::Codex => None,
        Hooks::Gemini => {
            // A command hook per event, as Claude Code's settings have them (Gemini runs each through a shell).
            let hooks: serde_json::Map<String, serde_json::Value> = GEMINI_EVENTS
                .iter()
                .map(|(event, as_)| {
                    (event.to_string(), serde_json::json!([{"hooks": [{"type": "command", "command": receiver(as_)}]}]))
                })
                .collect();
            let path = out.with_extension("settings.json");
            let env = vec![("GEMINI_CLI_SYSTEM_SETTINGS_PATH", path.to_str()?.to_string())];
            Some(Prepared {
                files: vec![(path, serde_json::json!({ "hooks": hooks }).to_string())],
                env,
                before: vec![],
            })
        }
        Hooks::Copilot => {
            // A plugin given per run: it needs no folder trust and writes nothing into the repository, unlike the
            // repository's `.github/hooks`. Its hooks run through bash.
            let dir = out.with_extension("copilot");
            let hooks: serde_json::Map<String, serde_json::Value> = COPILOT_EVENTS
                .iter()
                .map(|(event, as_)| {
                    (event.to_string(), serde_json::json!([{"type": "command", "bash": receiver(as_)}]))
                })
                .collect();
            let manifest = serde_json::json!({"name": "worksession", "version": "1.0.0",
                "description": "tells worksession what the harness takes and when its turn ends"});
            let files = vec![
                (dir.join("plugin.json"), manifest.to_string()),
                (dir.join("hooks.json"), serde_json::json!({"version": 1, "hooks": hooks}).to_string()),
            ];
            Some(Prepared { files, env: vec![], before: vec!["--plugin-dir".into(), dir.to_str()?.to_string()] })
        }
        Hooks::Opencode => {
            let path = out.with_extension("opencode.js");
            let words = serde_json::json!([helper, "hook", "--out", out.to_str()?, "--spawn", spawn, "--event"]);
            let plugin = OPENCODE_PLUGIN.replace("RECEIVER_WORDS", &words.to_string());
            // Added to the harness's own config where it has one (a profile's `env`), never replacing it.
            let mut content = config
                .and_then(|c| serde_json::from_str::<serde_json::Value>(c).ok())
                .filter(serde_json::Value::is_object)
                .unwrap_or_else(|| serde_json::json!({}));
            let named = serde_json::Value::String(format!("file://{}", path.to_str()?));
            match content.get_mut("plugin").and_then(serde_json::Value::as_array_mut) {
                Some(plugins) => plugins.push(named),
                None => content["plugin"] = serde_json::json!([named]),
            }
            Some(Prepared {
                files: vec![(path, plugin)],
                env: vec![(OPENCODE_CONFIG, content.to_string())],
                before: vec![],
            })
        }
    }
}

/// The opencode plugin (measured with 1.18.33, offline): `chat.message` runs when a prompt is accepted, before any
/// model call and for queued prompts too, with the session's id, the message's id and its text parts; the `event` hook
/// sees `session.created` (a child session, a subagent's, names its `parentID`), `session.idle` at a turn's end (a
/// failed one too), and `permission.asked` or `question.asked` when it waits for a person. Each is handed to the
/// receiver as the Claude Code event it means, without a shell (`execFileSync`), in order (synchronously).
const OPENCODE_PLUGIN: &str = r#"// Written by worksession hook-exec for one spawn: tells worksession what opencode takes and when its turn ends.
import { execFileSync } from "node:child_process";
const receiver = RECEIVER_WORDS;
const children = new Set();
const tell = (event, data) => {
  try {
    execFileSync(receiver[0], [...receiver.slice(1), event], {
      input: JSON.stringify(data), stdio: ["pipe", "ignore", "ignore"], timeout: 10000,
    });
  } catch {}
};
export const Worksession = async () => ({
  "chat.message": async (input, output) => {
    const session_id = input?.sessionID ?? output?.message?.sessionID;
    if (children.has(session_id)) return;
    const prompt = (output?.parts ?? []).filter((p) => p?.type === "text" && !p.synthetic).map((p) => p.text).join("\n");
    tell("UserPromptSubmit", { session_id, prompt, prompt_id: output?.message?.id });
  },
  event: async ({ event }) => {
    const p = event?.properties ?? {};
    switch (event?.type) {
      case "session.created":
        if (p.info?.parentID) children.add(p.info.id);
        else tell("SessionStart", { session_id: p.info?.id, source: "startup" });
        break;
      case "session.idle":
        if (!children.has(p.sessionID)) tell("Stop", { session_id: p.sessionID });
        break;
      case "permission.asked":
      case "question.asked":
        if (!children.has(p.sessionID)) {
          const what = p.title ?? p.question ?? p.permission ?? event.type;
          tell("Notification", { session_id: p.sessionID, message: `opencode asks: ${what}`, notification_type: event.type });
        }
        break;
    }
  },
});
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> (&'static Path, &'static Path) {
        (Path::new("/usr/local/bin/worksession"), Path::new("/h/.worksession/hooks/a_b.jsonl"))
    }

    #[test]
    fn gemini_gets_a_settings_file_its_environment_names() {
        let (helper, out) = paths();
        let p = prepare(Hooks::Gemini, helper, out, "spawn-1", None).unwrap();
        assert_eq!(p.env, [("GEMINI_CLI_SYSTEM_SETTINGS_PATH", "/h/.worksession/hooks/a_b.settings.json".into())]);
        let settings: serde_json::Value = serde_json::from_str(&p.files[0].1).unwrap();
        let command = settings["hooks"]["BeforeAgent"][0]["hooks"][0]["command"].as_str().unwrap();
        assert!(command.ends_with("--spawn spawn-1 --event UserPromptSubmit"), "recorded as Claude Code names it");
        assert_eq!(settings["hooks"].as_object().unwrap().len(), GEMINI_EVENTS.len());
        assert_eq!(prepare(Hooks::Gemini, helper, out, "s `id`", None), None, "never a shell word");
    }

    #[test]
    fn copilot_gets_a_plugin_directory_in_front_of_its_argv() {
        let (helper, out) = paths();
        let p = prepare(Hooks::Copilot, helper, out, "spawn-1", None).unwrap();
        assert_eq!(p.before, ["--plugin-dir", "/h/.worksession/hooks/a_b.copilot"]);
        assert_eq!(p.files[0].0, Path::new("/h/.worksession/hooks/a_b.copilot/plugin.json"));
        let hooks: serde_json::Value = serde_json::from_str(&p.files[1].1).unwrap();
        assert_eq!(hooks["version"], 1);
        let bash = hooks["hooks"]["userPromptSubmitted"][0]["bash"].as_str().unwrap();
        assert_eq!(
            bash,
            "/usr/local/bin/worksession hook --out /h/.worksession/hooks/a_b.jsonl --spawn spawn-1 --event UserPromptSubmit"
        );
        assert_eq!(prepare(Hooks::Copilot, Path::new("/bin/x;id"), out, "s", None), None, "never a shell word");
    }

    #[test]
    fn opencode_gets_a_plugin_added_to_its_own_config() {
        let (helper, out) = paths();
        let p = prepare(Hooks::Opencode, helper, out, "spawn-1", None).unwrap();
        let (path, plugin) = &p.files[0];
        assert_eq!(path, Path::new("/h/.worksession/hooks/a_b.opencode.js"));
        let words = r#"["/usr/local/bin/worksession","hook","--out","/h/.worksession/hooks/a_b.jsonl","--spawn","spawn-1","--event"]"#;
        assert!(plugin.contains(&format!("const receiver = {words};")), "{plugin}");
        assert!(!plugin.contains("RECEIVER_WORDS"));
        let config = |p: &Prepared| serde_json::from_str::<serde_json::Value>(&p.env[0].1).unwrap();
        assert_eq!(p.env[0].0, OPENCODE_CONFIG);
        assert_eq!(config(&p)["plugin"], serde_json::json!(["file:///h/.worksession/hooks/a_b.opencode.js"]));
        let own = r#"{"plugin":["file:///opt/theirs.js"],"model":"m"}"#;
        let p = prepare(Hooks::Opencode, helper, out, "spawn-1", Some(own)).unwrap();
        assert_eq!(config(&p)["plugin"].as_array().unwrap().len(), 2, "theirs kept, ours added");
        assert_eq!(config(&p)["model"], "m");
        assert_eq!(prepare(Hooks::Opencode, helper, out, "s\"+x+\"", None), None, "never out of its string");
        assert_eq!(prepare(Hooks::Claude, helper, out, "s", None), None, "given on its command line");
    }
}
