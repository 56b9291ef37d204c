//! The harness stand-in (`tests/standin/harness`) and a private tmux server per test.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::support::{WAIT, poll, until};
use worksession::harness::{Mode, Profile};
use worksession::node::tmux::{Liveness, Spawn, Tmux, TmuxRunner};

/// A tmux server on a socket of its own, killed when dropped.
pub struct TmuxServer {
    /// Temp folder holding the socket, the stand-in's state and working directories.
    pub dir: tempfile::TempDir,
    /// A runner for it.
    pub runner: TmuxRunner,
}

impl TmuxServer {
    /// A fresh, not yet started server (tmux starts it with the first session).
    pub fn new() -> Self {
        Self::in_dir(tempfile::tempdir().unwrap())
    }

    /// The same, in a folder of its own under `base` (a harness that refuses files under a folder others can write,
    /// as Gemini CLI does its settings, cannot live under `/tmp`).
    pub fn new_in(base: &Path) -> Self {
        std::fs::create_dir_all(base).unwrap();
        Self::in_dir(tempfile::tempdir_in(base).unwrap())
    }

    fn in_dir(dir: tempfile::TempDir) -> Self {
        let runner = TmuxRunner::new(Some(dir.path().join("tmux.sock")));
        std::fs::create_dir_all(dir.path().join("state")).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        Self { dir, runner }
    }

    /// The stand-in's state folder.
    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// A working directory for harnesses.
    pub fn workdir(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        self.runner.socket().unwrap()
    }

    /// A stand-in profile writing into this server's state folder, with extra stand-in flags.
    pub fn profile(&self, flags: &[&str]) -> Profile {
        standin_profile(&self.state(), flags)
    }

    /// A spawn of the stand-in in session `session`.
    pub fn spawn_of(&self, session: &str, mode: Mode, id: &str, prompt: Option<&str>, flags: &[&str]) -> Spawn {
        let profile = self.profile(flags);
        Spawn {
            session: session.into(),
            workdir: self.workdir(),
            binary: profile.binary.clone(),
            argv: profile.argv("standin", mode, id, prompt).unwrap(),
            tag: format!("spawn-{id}"),
            owner: "test-owner".into(),
            owner_name: "tests/standin".into(),
            env: Vec::new(),
            confine: None,
            clear: true,
        }
    }

    /// Awaits `session` reaching `liveness`.
    pub async fn await_liveness(&self, session: &str, liveness: Liveness) {
        until(&format!("{session} to be {liveness:?}"), || async {
            self.runner.observe().await.unwrap().liveness(session) == liveness
        })
        .await;
    }

    /// Awaits the pane of `session` printing `text`; returns its last lines.
    pub async fn await_output(&self, session: &str, text: &str) -> String {
        poll(&format!("pane {session} to print {text:?}"), WAIT, || async {
            let last = self.runner.last_lines(session, 50).await.unwrap_or_else(|e| format!("({e})"));
            if last.contains(text) { Ok(last) } else { Err(format!("last lines:\n{last}")) }
        })
        .await
    }

    /// The agent config used by the end-to-end tests (Kubernetes and local alike): this server's socket, a 1 s
    /// probe, a 10 s settle window (longer than `standin-slow`'s 3 s failure plus a loaded machine's python start-up),
    /// the stand-in's state folder as the harnesses' home, and the stand-in as
    /// - `standin`: with its transcript (`conversationPath`) and its ready prompt (`readyPattern`), as the built-in
    ///   `claude` profile has them;
    /// - `standin-blind`: the same without either (only the probe and the settle window tell);
    /// - `standin-slow`: blind, its failed resume takes 3 s with its TUI up (pastes meanwhile go nowhere);
    /// - `standin-boot`: with its ready prompt, dropping input for its first 4 s;
    /// - `standin-crash`: blind, crashing after 0.3 s;
    /// - `standin-chatty`: with its ready prompt and transcript, printing a line every 0.5 s (output flowing);
    /// - `standin-codex`: Codex CLI's shapes (no id at start, `resume <id>`, its rollout found by `discover`), with its
    ///   ready prompt;
    /// - `standin-hooks`: `standin` with Claude Code's hooks (`hooks: claude`, received by this build's `worksession
    ///   hook`): they, not the transcript, confirm a delivery;
    /// - `standin-unkind`: the same, storing each prompt with its whitespace altered, firing each hook 1 s late;
    /// - `standin-deaf`: the same as `standin-hooks`, losing the first paste it is given;
    /// - `standin-codex-notify`, `standin-codex-titled`: `standin-codex` with Codex CLI's hooks (`hooks: codex`), the
    ///   first writing no rollout, the second notifying for a title thread of its own as Codex does;
    ///   `standin-codex-deaf`: with its hooks, losing the first paste it is given;
    /// - `standin-usage`: `standin-hooks` writing each prompt's reply with its usage (Claude Code's shape), which its
    ///   profile reads (`usage: {format: claude}`); the config prices its model, `standin-model`;
    /// - `standin-gemini`, `standin-copilot`, `standin-opencode`, `standin-codex`: those CLIs' shapes with the built-in
    ///   profiles' argv, patterns and hooks (opencode's logging nothing, so its hooks alone name its conversation).
    ///
    /// A sent prompt waits 15 s (`delivery.confirmTimeoutSeconds`) for its confirmation before it is sent again; a
    /// session refused for a usage limit is parked 3 s, those parked together woken 2 s apart.
    pub fn agent_config_yaml(&self) -> String {
        let profile = |flags: &str, ready: bool, transcript: bool| {
            let mut sees = String::new();
            if ready {
                sees.push_str("\n    readyPattern: 'ready>'");
            }
            if transcript {
                sees.push_str("\n    conversationPath: '{home}/conversations/{sessionId}.jsonl'");
            }
            format!(
                "binary: {bin}\n    extraArgs: [--state, {state}{flags}]\n    interactive: [--session-id, '{{sessionId}}', '{{extraArgs}}', '--', '{{prompt}}']\n    resume: [--resume, '{{sessionId}}', '{{extraArgs}}', '--', '{{prompt}}']\n    resumeFailedPattern: No conversation found{sees}",
                bin = standin_binary().display(),
                state = self.state().display(),
            )
        };
        // The other CLIs' shapes, with the built-in profiles' argv and patterns, no transcript (as the built-ins: a
        // resume runs, and its failure speaks) and the stand-in's ready prompt.
        let shape = |shape: &str, interactive: &str, resume: &str, failed: &str, discover: &str| {
            format!(
                "binary: {bin}\n    extraArgs: [--state, {state}, --shape, {shape}]\n    interactive: {interactive}\n    resume: {resume}\n    resumeFailedPattern: '{failed}'\n    readyPattern: 'ready>'{discover}",
                bin = standin_binary().display(),
                state = self.state().display(),
            )
        };
        let gemini = shape(
            "gemini",
            "['--session-id', '{sessionId}', '{extraArgs}', '--prompt-interactive={prompt}']",
            "['--resume', '{sessionId}', '{extraArgs}', '--prompt-interactive={prompt}']",
            "Error resuming session|Invalid session identifier",
            "\n    hooks: gemini\n    queuesPrompts: false",
        );
        let copilot = shape(
            "copilot",
            "['--session-id={sessionId}', '{extraArgs}', '--interactive={prompt}']",
            "['--resume={sessionId}', '{extraArgs}', '--interactive={prompt}']",
            "No session, task, or name matched",
            "\n    storePath: '{home}/.copilot/session-state/{sessionId}'\n    hooks: copilot",
        );
        // It logs no "created" line (`--no-log`): its plugin's hooks alone name its conversation.
        let opencode = shape(
            "opencode",
            "['{extraArgs}', '--prompt={prompt}']",
            "['--session={sessionId}', '{extraArgs}']",
            "Session not found",
            "\n    discover:\n      log: {path: '{home}/.local/share/opencode/log/*.log', pattern: '^timestamp=(?P<time>\\S+) .*\\bmessage=created id=(?P<id>ses_[A-Za-z0-9]+) .*\\bdirectory={workdir} '}\n    hooks: opencode",
        )
        .replace("--shape, opencode]", "--shape, opencode, --no-log]");
        let codex = |flags: &str| {
            format!(
                "binary: {bin}\n    extraArgs: [--state, {state}, --codex-store{flags}]\n    interactive: ['{{extraArgs}}', '--', '{{prompt}}']\n    resume: [--resume, '{{sessionId}}', '{{extraArgs}}', '--', '{{prompt}}']\n    resumeFailedPattern: No saved session found\n    readyPattern: 'ready>'\n    discover: {{path: '{{home}}/.codex/sessions/*/*/*/rollout-*-{{sessionId}}.jsonl', namesWorkdir: true}}",
                bin = standin_binary().display(),
                state = self.state().display(),
            )
        };
        format!(
            "tmux:\n  socket: {sock}\nharnessHome: {home}\nhookReceiver: {receiver}\ndelivery:\n  confirmTimeoutSeconds: 15\n  usageLimitWaitSeconds: 3\n  usageLimitSpreadSeconds: 2\nworkspaces:\n  mirrors: {home}/repos\n  credentials: {{tokenFile: {home}/git-token, hosts: [127.0.0.1]}}\n  protocols: [https, ssh, http, file]\n  repositories: {{'*': ['file://*', 'http://*']}}\n  gitTimeoutSeconds: 60\ndefaults:\n  resumeProbeSeconds: 1\n  resumeSettleSeconds: 10\nprices:\n  standin-model: {{input: 10, output: 100, cacheWrite: 100, cacheRead: 1}}\nharnesses:\n  standin:\n    {a}\n  standin-hooks:\n    {hooks}\n  standin-unkind:\n    {unkind}\n  standin-deaf:\n    {deaf}\n  standin-late:\n    {late}\n  standin-blind:\n    {b}\n  standin-slow:\n    {c}\n  standin-boot:\n    {boot}\n  standin-crash:\n    {d}\n  standin-chatty:\n    {chatty}\n  standin-codex:\n    {codex}\n  standin-codex-notify:\n    {codex_notify}\n  standin-codex-titled:\n    {codex_titled}\n  standin-codex-deaf:\n    {codex_deaf}\n  standin-gemini:\n    {gemini}\n  standin-copilot:\n    {copilot}\n  standin-opencode:\n    {opencode}\n  standin-claude:\n    {claude}\n  standin-usage:\n    {usage}\n",
            sock = self.socket().display(),
            home = self.state().display(),
            receiver = env!("CARGO_BIN_EXE_worksession"),
            a = profile("", true, true),
            hooks = profile("", true, true) + "\n    hooks: claude",
            unkind = profile(", --alter-whitespace, --hook-delay, '1'", true, true) + "\n    hooks: claude",
            deaf = profile(", --deaf-pastes, '1'", true, true) + "\n    hooks: claude",
            late = profile(", --transcript-delay, '6'", true, true) + "\n    hooks: claude",
            b = profile("", false, false),
            c = profile(", --resume-fail-delay, '3'", false, false),
            boot = profile(", --boot-delay, '4'", true, false),
            d = profile(", --crash-after, '0.3'", false, false),
            chatty = profile(", --chatter, '0.5'", true, true),
            codex = codex(""),
            // Its notify alone names the conversation: it writes no rollout to find.
            codex_notify = codex(", --no-rollout") + "\n    hooks: codex",
            // Codex's own shape: a rollout, and a notify for each turn, its title thread's too.
            codex_titled = codex("") + "\n    hooks: codex",
            codex_deaf = codex(", --deaf-pastes, '1'") + "\n    hooks: codex",
            gemini = gemini,
            copilot = copilot,
            opencode = opencode,
            claude = claude_hazards(profile(", --summary-picker, --resume-fail-delay, '2'", true, true)),
            usage =
                profile(", --usage, '100,20,30,900'", true, true) + "\n    hooks: claude\n    usage: {format: claude}",
        )
    }

    /// The pid of the harness in `session`'s pane.
    pub fn pane_pid(&self, session: &str) -> u32 {
        self.pane_pid_if_any(session).expect("a pane pid")
    }

    /// Kills the harness of `session` (as a crash would), once it is up, and awaits its dead pane.
    pub async fn kill_harness(&self, session: &str) {
        self.await_output(session, "ready>").await;
        self.kill_pane(session).await;
    }

    /// Kills whatever runs in `session`'s pane, at once, and awaits its end: a dead pane, or one the agent already
    /// respawned (a prompt put back by the settle window wakes it at once; under load it can beat an observation).
    pub async fn kill_pane(&self, session: &str) {
        let pid = self.pane_pid(session);
        std::process::Command::new("kill").arg("-9").arg(pid.to_string()).status().unwrap();
        until(&format!("the harness of {session} (pid {pid}) gone"), || async {
            match self.runner.observe().await.unwrap().liveness(session) {
                Liveness::Alive => self.pane_pid_if_any(session) != Some(pid),
                Liveness::Dead | Liveness::Absent => true,
            }
        })
        .await;
    }

    /// The pid of `session`'s pane, if it has one.
    fn pane_pid_if_any(&self, session: &str) -> Option<u32> {
        let out = std::process::Command::new("tmux")
            .arg("-S")
            .arg(self.socket())
            .args(["list-panes", "-t", &format!("={session}:"), "-F", "#{pane_pid}"])
            .output()
            .ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    }

    /// Kills the tmux server and every harness in it (as a restarted tmux container would); whether tmux said so.
    pub fn kill_server(&self) -> bool {
        let out = std::process::Command::new("tmux").arg("-S").arg(self.socket()).arg("kill-server").output();
        out.is_ok_and(|out| out.status.success())
    }

    /// The prompts the stand-in recorded.
    pub fn prompts(&self) -> Vec<Prompt> {
        read_prompts(&self.state())
    }

    /// Awaits at least `n` recorded prompts.
    pub async fn await_prompts(&self, n: usize) -> Vec<Prompt> {
        until(&format!("{n} prompts"), || async { self.prompts().len() >= n }).await;
        self.prompts()
    }
}

impl Drop for TmuxServer {
    /// Kills the server, then every process it leaves behind: a harness's daemon that left its process group (Codex
    /// CLI's app server, a shell Claude Code snapshots) outlives the panes, and a suite run again and again would pile
    /// them up. Also when the test failed.
    fn drop(&mut self) {
        self.kill_server();
        for _ in 0..3 {
            let left = processes_under(self.dir.path());
            if left.is_empty() {
                break;
            }
            for pid in left.into_iter().filter_map(rustix::process::Pid::from_raw) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// The processes but this one whose command line or environment names `dir`: everything a test's tmux server ran,
/// with whatever those started, since each inherits the pane's `TMUX` (the socket under `dir`) or a `HOME` under it.
pub fn processes_under(dir: &Path) -> Vec<i32> {
    use std::os::unix::ffi::OsStrExt;
    let needle = dir.as_os_str().as_bytes();
    let names = |b: &[u8]| b.windows(needle.len()).any(|w| w == needle);
    let me = std::process::id() as i32;
    let pids = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    pids.filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            ["cmdline", "environ"].iter().any(|f| std::fs::read(format!("/proc/{pid}/{f}")).is_ok_and(|b| names(&b)))
        })
        .collect()
}

/// The stand-in executable.
pub fn standin_binary() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/harness")
}

/// `profile` with what the built-in `claude` profile ships against Claude Code's hazards, as it ships: its
/// `resumeBusyPattern` and its `env` (the stand-in's `--summary-picker` reads the same variables the real CLI does).
fn claude_hazards(profile: String) -> String {
    let claude = &worksession::harness::builtin()["claude"];
    let busy = claude.resume_busy_pattern.as_ref().expect("the built-in claude knows a busy conversation");
    let env: Vec<String> = claude.env.iter().map(|(k, v)| format!("{k}: {v:?}")).collect();
    format!("{profile}\n    resumeBusyPattern: {:?}\n    env: {{{}}}", busy.as_str(), env.join(", "))
}

/// A Claude-shaped profile for the stand-in; `flags` go into `extraArgs` after `--state`.
pub fn standin_profile(state: &Path, flags: &[&str]) -> Profile {
    let strings = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut extra_args = vec!["--state".to_string(), state.display().to_string()];
    extra_args.extend(strings(flags));
    Profile {
        binary: standin_binary().display().to_string(),
        extra_args,
        interactive: Some(strings(&["--session-id", "{sessionId}", "{extraArgs}", "--", "{prompt}"])),
        resume: Some(strings(&["--resume", "{sessionId}", "{extraArgs}", "--", "{prompt}"])),
        resume_failed_pattern: Some(regex::Regex::new("No conversation found").unwrap()),
        resume_busy_pattern: None,
        env: Vec::new(),
        ready_pattern: None,
        busy_pattern: None,
        conversation_path: None,
        store_path: None,
        discover: None,
        command_prefixes: strings(worksession::harness::COMMAND_PREFIXES),
        hooks: None,
        queues_prompts: true,
        handoff: true,
        usage: None,
    }
}

/// One prompt the stand-in received.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Prompt {
    /// The conversation it went to.
    pub conversation: String,
    /// `argv` (boot prompt) or `paste`.
    pub via: String,
    /// The text.
    pub prompt: String,
    /// The stand-in process.
    pub pid: u32,
}

/// The prompts recorded in a stand-in state folder.
pub fn read_prompts(state: &Path) -> Vec<Prompt> {
    match std::fs::read_to_string(state.join("prompts.jsonl")) {
        Ok(text) => text.lines().map(|l| serde_json::from_str(l).expect("a prompt record")).collect(),
        Err(_) => Vec::new(),
    }
}

/// Creates a conversation the stand-in will know on `--resume` (an empty transcript).
pub fn seed_conversation(state: &Path, id: &str) {
    std::fs::create_dir_all(state.join("conversations")).unwrap();
    std::fs::write(transcript_of(state, id), "").unwrap();
}

/// The stand-in's transcript of conversation `id`.
pub fn transcript_of(state: &Path, id: &str) -> PathBuf {
    state.join("conversations").join(format!("{id}.jsonl"))
}
