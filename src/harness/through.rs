//! What `worksession hook-exec` prepares for a harness that takes its hooks only from files, before it becomes that
//! harness ([`crate::node::hook::exec_through`]): Gemini CLI's settings file, Copilot CLI's plugin directory, opencode's
//! plugin. Each is written beside the session's hook file (in the session's own 0700 folder, as the harness's own user)
//! and names the receiver with plain words only; the harness is told of it by its environment or a flag in front of its
//! argv. Pure: what to write and how to run, no file touched here.

use std::path::{Path, PathBuf};

use super::hooks::Hooks;

/// What to write and how to start the harness so that it finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookFiles {
    /// Files to write, each `0600` (their folders `0700`), never through a link.
    pub files: Vec<(PathBuf, String)>,
    /// Environment variables to set for the harness.
    pub env: Vec<(&'static str, String)>,
    /// Words in front of the harness's own argv.
    pub before: Vec<String>,
    /// Folders emptied before the files are written: what a harness left there would load at its next start.
    pub fresh: Vec<PathBuf>,
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

/// Why `worksession hook-exec` cannot prepare a harness's hooks.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unprepared {
    /// The style is given its hooks on the harness's command line.
    #[error("hooks {0} are given on the command line, not through hook-exec")]
    OnTheCommandLine(Hooks),
    /// A value that goes into a hook's command is not a plain word.
    #[error("the receiver, hook file or spawn tag is not a plain word (letters, digits, '-', '.', '_', '/')")]
    NotPlain,
    /// The harness's own `OPENCODE_CONFIG_CONTENT` is no JSON object with a `plugin` list: never replaced.
    #[error("{OPENCODE_CONFIG} is not a JSON object whose plugin is a list; the plugin is not added to it")]
    OpencodeConfig,
}

/// What a harness of `style` run through `worksession hook-exec` needs to call the receiver `helper` on its events,
/// reporting for the spawn tagged `spawn` to the hook file `out`; refused for a style given its hooks on its command
/// line, unless each value is a plain word (the hooks' commands go through a shell, or into JavaScript), and where the
/// harness's own `config` (its `OPENCODE_CONFIG_CONTENT`, which opencode's plugin is added to) cannot take it.
pub fn prepare(
    style: Hooks,
    helper: &Path,
    out: &Path,
    spawn: &str,
    config: Option<&str>,
) -> Result<HookFiles, Unprepared> {
    let (helper, out, spawn) = super::hooks::plain_words(helper, out, spawn).ok_or(Unprepared::NotPlain)?;
    let receiver = |event: &str| format!("{helper} hook --out {out} --spawn {spawn} --event {event}");
    // Each beside the hook file: a plain word with another ending.
    let beside = |ending: &str| Path::new(&out).with_extension(ending).display().to_string();
    match style {
        Hooks::Claude | Hooks::Codex => Err(Unprepared::OnTheCommandLine(style)),
        Hooks::Gemini => {
            // A command hook per event, as Claude Code's settings have them (Gemini runs each through a shell).
            let hooks: serde_json::Map<String, serde_json::Value> = GEMINI_EVENTS
                .iter()
                .map(|(event, as_)| {
                    (event.to_string(), serde_json::json!([{"hooks": [{"type": "command", "command": receiver(as_)}]}]))
                })
                .collect();
            let settings = beside("settings.json");
            let files = vec![(PathBuf::from(&settings), serde_json::json!({ "hooks": hooks }).to_string())];
            Ok(HookFiles {
                files,
                env: vec![("GEMINI_CLI_SYSTEM_SETTINGS_PATH", settings)],
                before: vec![],
                fresh: vec![],
            })
        }
        Hooks::Copilot => {
            // A plugin given per run: it needs no folder trust and writes nothing into the repository, unlike the
            // repository's `.github/hooks`. Its hooks run through bash. Emptied at each start: a harness that left
            // agents or skills of its own there would have them loaded by its next start.
            let dir = PathBuf::from(beside("copilot"));
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
            let before = vec!["--plugin-dir".into(), dir.display().to_string()];
            Ok(HookFiles { files, env: vec![], before, fresh: vec![dir] })
        }
        Hooks::Opencode => {
            let plugin = beside("opencode.js");
            let words = serde_json::json!([helper, "hook", "--out", out, "--spawn", spawn, "--event"]);
            let code = OPENCODE_PLUGIN.replace("RECEIVER_WORDS", &words.to_string());
            // Added to the harness's own config where it has one (a profile's `env`), never replacing it.
            let mut content = match config {
                None => serde_json::json!({}),
                Some(c) => serde_json::from_str::<serde_json::Value>(c)
                    .ok()
                    .filter(serde_json::Value::is_object)
                    .ok_or(Unprepared::OpencodeConfig)?,
            };
            let named = serde_json::Value::String(format!("file://{plugin}"));
            match content.get_mut("plugin") {
                None => content["plugin"] = serde_json::json!([named]),
                Some(serde_json::Value::Array(plugins)) => plugins.push(named),
                Some(_) => return Err(Unprepared::OpencodeConfig),
            }
            let env = vec![(OPENCODE_CONFIG, content.to_string())];
            Ok(HookFiles { files: vec![(PathBuf::from(plugin), code)], env, before: vec![], fresh: vec![] })
        }
    }
}

/// The opencode plugin (measured with 1.18.33, offline): `chat.message` runs when a prompt is accepted, before any
/// model call and for queued prompts too, with the session's id, the message's id and its text parts; the `event` hook
/// sees `session.created` (a child session, a subagent's, names its `parentID`), `session.idle` at a turn's end (a
/// failed one too), and `permission.asked` or `question.asked` when it waits for a person. Each is handed to the
/// receiver as the Claude Code event it means, without a shell (`execFileSync`), in order (synchronously). A child
/// session's prompts and turns are not the conversation's: a session not known yet is asked of opencode
/// (`client.session.get`, its own server, offline too), since its prompt may come before the event that says it is a
/// child; its wait for a person is told all the same (it holds up the whole turn). A prompt taken while the session
/// works (`session.status` busy or retrying) is queued: told so (`queued`), since opencode sends it to its model only
/// after the running turn, and never when that turn fails for good (`session.error`, told as `StopFailure`; the
/// `session.idle` that follows it is not told, so the failure stays the latest word until the next turn begins). A
/// person's Esc is no failure.
const OPENCODE_PLUGIN: &str = r#"// Written by worksession hook-exec for one spawn: tells worksession what opencode takes and when its turn ends.
import { execFileSync } from "node:child_process";
const receiver = RECEIVER_WORDS;
const tell = (event, data) => {
  try {
    execFileSync(receiver[0], [...receiver.slice(1), event], {
      input: JSON.stringify(data), stdio: ["pipe", "ignore", "ignore"], timeout: 10000,
    });
  } catch {}
};
export const Worksession = async ({ client } = {}) => {
  const children = new Set();
  const mains = new Set();
  const busy = new Set();
  const failed = new Set();
  const child = async (id) => {
    if (!id || children.has(id)) return Boolean(id);
    if (mains.has(id)) return false;
    try {
      const got = await client?.session?.get({ path: { id } });
      if (got?.data?.parentID) children.add(id);
      else if (got?.data) mains.add(id);
    } catch {}
    return children.has(id);
  };
  return {
    "chat.message": async (input, output) => {
      const session_id = input?.sessionID ?? output?.message?.sessionID;
      // Read before anything is awaited: the session's events are handled meanwhile.
      const queued = busy.has(session_id);
      failed.delete(session_id);
      if (await child(session_id)) return;
      const parts = (output?.parts ?? []).filter((p) => p?.type === "text" && !p.synthetic);
      tell("UserPromptSubmit", { session_id, prompt: parts.map((p) => p.text).join("\n"), prompt_id: output?.message?.id, queued });
    },
    event: async ({ event }) => {
      const p = event?.properties ?? {};
      switch (event?.type) {
        case "session.created":
          if (p.info?.parentID) children.add(p.info.id);
          else if (p.info?.id) {
            mains.add(p.info.id);
            tell("SessionStart", { session_id: p.info.id, source: "startup" });
          }
          break;
        case "session.status":
          if (p.status?.type === "idle") busy.delete(p.sessionID);
          else if (p.sessionID) {
            // A turn begins (a compaction's too): the last one's failure is no longer the latest word.
            if (p.status?.type === "busy") failed.delete(p.sessionID);
            busy.add(p.sessionID);
          }
          break;
        case "session.error": {
          // Marked before anything is awaited: the session.idle that follows is handled meanwhile. A turn a
          // person interrupted (Esc) is no failure.
          if (!p.sessionID || p.error?.name === "MessageAbortedError") break;
          failed.add(p.sessionID);
          if (await child(p.sessionID)) break;
          const e = p.error ?? {};
          const message = [e.name, e.data?.statusCode, e.data?.message].filter((w) => w !== undefined).join(" ");
          tell("StopFailure", { session_id: p.sessionID, message: `opencode: ${message}`.slice(0, 500) });
          break;
        }
        case "session.idle":
          busy.delete(p.sessionID);
          if (!failed.has(p.sessionID) && !(await child(p.sessionID))) tell("Stop", { session_id: p.sessionID });
          break;
        case "permission.asked":
        case "question.asked": {
          const what = p.title ?? p.question ?? p.permission ?? event.type;
          tell("Notification", { message: `opencode asks: ${what}`, notification_type: event.type });
          break;
        }
      }
    },
  };
};
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
        assert_eq!(
            prepare(Hooks::Gemini, helper, out, "s `id`", None),
            Err(Unprepared::NotPlain),
            "never a shell word"
        );
    }

    #[test]
    fn copilot_gets_a_plugin_directory_in_front_of_its_argv() {
        let (helper, out) = paths();
        let p = prepare(Hooks::Copilot, helper, out, "spawn-1", None).unwrap();
        assert_eq!(p.before, ["--plugin-dir", "/h/.worksession/hooks/a_b.copilot"]);
        assert_eq!(p.fresh, [Path::new("/h/.worksession/hooks/a_b.copilot")], "emptied first: nothing left loads");
        assert_eq!(p.files[0].0, Path::new("/h/.worksession/hooks/a_b.copilot/plugin.json"));
        let hooks: serde_json::Value = serde_json::from_str(&p.files[1].1).unwrap();
        assert_eq!(hooks["version"], 1);
        let bash = hooks["hooks"]["userPromptSubmitted"][0]["bash"].as_str().unwrap();
        assert_eq!(
            bash,
            "/usr/local/bin/worksession hook --out /h/.worksession/hooks/a_b.jsonl --spawn spawn-1 --event UserPromptSubmit"
        );
        let not_plain = prepare(Hooks::Copilot, Path::new("/bin/x;id"), out, "s", None);
        assert_eq!(not_plain, Err(Unprepared::NotPlain), "never a shell word");
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
        let config = |p: &HookFiles| serde_json::from_str::<serde_json::Value>(&p.env[0].1).unwrap();
        assert_eq!(p.env[0].0, OPENCODE_CONFIG);
        assert_eq!(config(&p)["plugin"], serde_json::json!(["file:///h/.worksession/hooks/a_b.opencode.js"]));
        let own = r#"{"plugin":["file:///opt/theirs.js"],"model":"m"}"#;
        let p = prepare(Hooks::Opencode, helper, out, "spawn-1", Some(own)).unwrap();
        assert_eq!(config(&p)["plugin"].as_array().unwrap().len(), 2, "theirs kept, ours added");
        assert_eq!(config(&p)["model"], "m");
        let escape = prepare(Hooks::Opencode, helper, out, "s\"+x+\"", None);
        assert_eq!(escape, Err(Unprepared::NotPlain), "never out of its string");
        for theirs in ["{\"plugin\": \"one.js\"}", "{ // jsonc\n}", "[]"] {
            let refused = prepare(Hooks::Opencode, helper, out, "s", Some(theirs));
            assert_eq!(refused, Err(Unprepared::OpencodeConfig), "{theirs}: never replaced");
        }
        let claude = prepare(Hooks::Claude, helper, out, "s", None);
        assert_eq!(claude, Err(Unprepared::OnTheCommandLine(Hooks::Claude)), "given on its command line");
    }
}
