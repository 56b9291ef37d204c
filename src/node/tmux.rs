//! tmux, the agent's only view of harness processes: observe every session in one call, spawn, stop, read a dead
//! pane's last lines, and paste a prompt into a live pane.
//!
//! Every argument goes to tmux as a separate word and every harness argv is exec'd by tmux without a shell: a
//! prompt is never interpreted by a shell, and never taken as a tmux or harness flag.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

pub use crate::core::{Confine, KeysFrom, Liveness, SessionView, Spawn, is_tag};

/// What the paste command prints when the pane turned out dead.
const PANE_DEAD: &str = "worksession:pane-dead";

/// How long one tmux call may take before it counts as failed.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The session option a spawn tags its session with (the spawn's nonce), in the spawn's own tmux call.
pub const SPAWN_TAG: &str = "@worksession-spawn";
/// The session option a paste tags its session with (the prompt's key), in the paste's own tmux call.
pub const PASTE_TAG: &str = "@worksession-pasted";
/// Seconds between a paste and the Enter that submits it, which the tmux server sends.
const SUBMIT_DELAY: &str = "0.15";
/// Seconds the paste's tmux call waits, so that its Enter is sent before the call returns.
const WAIT_DELAY: &str = "0.2";
/// The session option naming the object that owns a session (its UID), set by the spawn's own tmux call.
pub const OWNER_TAG: &str = "@worksession-owner";
/// The session option naming that object for people (`namespace/name`).
pub const OWNER_NAME_TAG: &str = "@worksession-owner-name";
/// The fields of an observation, one record per pane.
const OBSERVED: [&str; 7] = [
    "#{session_name}",
    "#{pane_dead}",
    "#{window_activity}",
    "#{@worksession-spawn}",
    "#{@worksession-pasted}",
    "#{@worksession-owner}",
    "#{@worksession-owner-name}",
];

/// The `list-panes` format of an observation whose records and fields are marked by `nonce` (a fresh random word
/// per call): whoever can set a session's name or options (a harness on the same tmux server) cannot forge a
/// record for another session with a tab or a newline, since they cannot know the marks.
pub fn observe_format(nonce: &str) -> String {
    format!("{nonce}R{}{nonce}E", OBSERVED.join(&format!("{nonce}F")))
}

/// Every tmux session, from one `list-panes -a` call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    sessions: HashMap<String, SessionView>,
    /// Whether a tmux server answered at all.
    pub server: bool,
}

impl Observation {
    /// Parses `list-panes -a -F` output in the observation's format marked by `nonce`; a record that is not whole
    /// (seven fields between its marks) is dropped.
    pub fn parse(output: &str, nonce: &str) -> Self {
        let mut sessions: HashMap<String, SessionView> = HashMap::new();
        let (record, field, end) = (format!("{nonce}R"), format!("{nonce}F"), format!("{nonce}E"));
        for line in output.split(record.as_str()).skip(1) {
            // What follows the end mark is tmux's newline: no value can hold the marks.
            let Some((line, _)) = line.split_once(end.as_str()) else { continue };
            if line.matches(field.as_str()).count() != OBSERVED.len() - 1 {
                continue;
            }
            let mut fields = line.split(field.as_str());
            let session = fields.next().unwrap_or_default();
            if session.is_empty() {
                continue;
            }
            let dead = fields.next().unwrap_or_default();
            let activity = fields.next().unwrap_or_default().trim().parse().unwrap_or(0);
            let mut next = || fields.next().unwrap_or_default().to_string();
            let (spawn, pasted, owner, owner_name) = (next(), next(), next(), next());
            let view = sessions.entry(session.to_string()).or_default();
            view.alive |= dead.trim() != "1"; // "0", or unreadable: live (in doubt, degrade to live)
            let activity = activity.max(view.activity); // the latest of its windows
            *view = SessionView { alive: view.alive, spawn, pasted, owner, owner_name, activity };
        }
        Self { sessions, server: true }
    }

    /// The liveness of the session named `session`.
    pub fn liveness(&self, session: &str) -> Liveness {
        match self.sessions.get(session) {
            Some(v) if v.alive => Liveness::Alive,
            Some(_) => Liveness::Dead,
            None => Liveness::Absent,
        }
    }

    /// What was seen of `session`, if it exists.
    pub fn session(&self, session: &str) -> Option<&SessionView> {
        self.sessions.get(session)
    }

    /// Every session seen, by name.
    pub fn sessions(&self) -> impl Iterator<Item = (&str, &SessionView)> {
        self.sessions.iter().map(|(name, view)| (name.as_str(), view))
    }

    /// How many sessions were seen.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether no session was seen.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

/// A tmux call that failed.
#[derive(Debug, thiserror::Error)]
pub enum TmuxError {
    /// tmux could not be run at all.
    #[error("cannot run tmux: {0}")]
    Exec(#[from] std::io::Error),
    /// tmux did not answer in time.
    #[error("tmux {0} did not answer within {CALL_TIMEOUT:?}")]
    Timeout(&'static str),
    /// tmux answered with an error.
    #[error("tmux {command} failed: {stderr}")]
    Failed {
        /// The tmux command.
        command: &'static str,
        /// What tmux said.
        stderr: String,
    },
    /// The working directory is not a directory.
    #[error("workdir {0} is not a directory on this node")]
    Workdir(PathBuf),
}

impl TmuxError {
    /// A short stable category for metrics and Events.
    pub fn category(&self) -> crate::words::ErrorCategory {
        use crate::words::ErrorCategory;
        match self {
            TmuxError::Exec(_) => ErrorCategory::TmuxExec,
            TmuxError::Timeout(_) => ErrorCategory::TmuxTimeout,
            TmuxError::Failed { .. } => ErrorCategory::TmuxFailed,
            TmuxError::Workdir(_) => ErrorCategory::Workdir,
        }
    }
}

/// The agent's edge to tmux. [`TmuxRunner`] is the real one.
pub trait Tmux: Send + Sync {
    /// Liveness of all sessions, in one tmux call. No server means every session is absent.
    fn observe(&self) -> impl Future<Output = Result<Observation, TmuxError>> + Send;
    /// Clears a stale session of that name, then starts the harness with `remain-on-exit` on.
    fn spawn(&self, spawn: &Spawn) -> impl Future<Output = Result<(), TmuxError>> + Send;
    /// Stops the session; an absent session is not an error.
    /// Stops `session` unless it belongs to another owner than `owner` (checked inside the tmux server, in the same
    /// command as the kill, so no other reconcile can slip in between).
    fn stop(&self, session: &str, owner: &str) -> impl Future<Output = Result<(), TmuxError>> + Send;
    /// The last `lines` non-empty lines the session's pane printed (dead or alive).
    fn last_lines(&self, session: &str, lines: usize) -> impl Future<Output = Result<String, TmuxError>> + Send;
    /// Pastes `text` into the session's pane as one bracketed paste, then presses Enter; tags the session with `key`
    /// in the same call.
    fn paste(&self, session: &str, text: &str, key: &str) -> impl Future<Output = Result<(), TmuxError>> + Send;

    /// Presses Enter in the session's pane, if it is alive.
    fn submit(&self, session: &str) -> impl Future<Output = Result<(), TmuxError>> + Send;

    /// The visible text of the session's active pane (what a person attached would see).
    fn screen(&self, session: &str) -> impl Future<Output = Result<String, TmuxError>> + Send;

    /// Kills every process of a room's uid (a harness's children can outlive its tmux session), returning once they
    /// are gone, so the uid can be given to another session.
    fn evict(&self, room: &Confine) -> impl Future<Output = Result<(), TmuxError>> + Send;
}

/// Runs the `tmux` binary, on a socket of its own (`-S`) or tmux's default server.
#[derive(Clone, Debug)]
pub struct TmuxRunner {
    binary: PathBuf,
    socket: Option<PathBuf>,
    start_server: bool,
}

/// Refuses a value that would sit inside a string tmux parses as commands unless it is a [`is_tag`] word: a name or
/// key never becomes a tmux command (`x ; run-shell ...`), whatever let it through upstream.
fn parsed_word(command: &'static str, what: &str, value: &str) -> Result<(), TmuxError> {
    if value.is_empty() || !is_tag(value) || value.starts_with('-') {
        return Err(TmuxError::Failed { command, stderr: format!("refused: {what} {value:?} is not a plain word") });
    }
    Ok(())
}

/// An exact-match target for a session's active pane.
fn pane_target(session: &str) -> String {
    format!("={session}:")
}

/// The spawn's tmux call `new_session` with the session of that name cleared first, in the same call, when it is
/// `owner`'s (decided by the server itself): it is renamed out of the way, the new one made, the old one killed. The
/// server never has no session in between, so it never exits under the call (killing the last session before
/// new-session in one call crashed tmux 3.3a's server, taking every session along); and one call is one round trip
/// where a clearing of its own was two. Another owner's session stays, and new-session is refused as a duplicate.
fn clearing(
    session: &str,
    owner: &str,
    new_session: &[std::ffi::OsString],
) -> Result<(Vec<std::ffi::OsString>, String), TmuxError> {
    let old = format!("{session}-cleared-{}", uuid::Uuid::new_v4().simple());
    let rename = if_owned(session, owner, &format!("rename-session -t ={session} {old}"))?;
    let kill = if_owned(&old, owner, &format!("kill-session -t ={old}"))?;
    let mut call: Vec<std::ffi::OsString> = rename.into_iter().map(Into::into).collect();
    call.push(";".into());
    call.extend(new_session.iter().cloned());
    call.push(";".into());
    call.extend(kill.into_iter().map(Into::into));
    Ok((call, old))
}

/// The tmux command that runs `command` on `session` only if it is `owner`'s, decided by the server itself; both are
/// plain words, as `command` is built from them. A session not found leaves the test without a session: it is false,
/// and nothing runs.
fn if_owned(session: &str, owner: &str, command: &str) -> Result<[String; 6], TmuxError> {
    parsed_word("kill-session", "owner", owner)?;
    parsed_word("kill-session", "session", session)?;
    let ours = format!("#{{==:#{{{OWNER_TAG}}},{owner}}}");
    // A pane target: tmux 3.3a expands `-t =name` (a session target) here without the session's options.
    Ok(["if-shell".into(), "-F".into(), "-t".into(), pane_target(session), ours, command.into()])
}

/// tmux splits a command line at any argument ending in `;`; `\;` at the end keeps it literal.
fn literal(arg: &str) -> String {
    match arg.strip_suffix(';') {
        Some(head) => format!("{head}\\;"),
        None => arg.to_string(),
    }
}

fn no_server(stderr: &str) -> bool {
    // A server whose last session was just killed exits: a call racing that exit is told so.
    stderr.contains("server exited unexpectedly")
        || stderr.contains("no server running")
        || stderr.contains("error connecting to")
        || stderr.contains("No such file or directory")
}

fn no_session(stderr: &str) -> bool {
    stderr.contains("can't find session")
        || stderr.contains("can't find pane")
        || stderr.contains("can't find window")
        || stderr.contains("no current target") // the server has no sessions at all
        || no_server(stderr)
}

impl TmuxRunner {
    /// A runner for the server at `socket`, or tmux's default server.
    pub fn new(socket: Option<PathBuf>) -> Self {
        Self { binary: "tmux".into(), socket, start_server: true }
    }

    /// The same, never starting a tmux server (`tmux -N`) when `start` is false: where tmux runs in a container of
    /// its own, a server started by the agent would take the socket from it.
    pub fn with_start_server(self, start: bool) -> Self {
        Self { start_server: start, ..self }
    }

    /// The same, running the tmux executable at `binary` instead of `tmux` from `PATH`.
    pub fn with_binary(self, binary: impl Into<PathBuf>) -> Self {
        Self { binary: binary.into(), ..self }
    }

    /// The socket this runner talks to, if not the default.
    pub fn socket(&self) -> Option<&Path> {
        self.socket.as_deref()
    }

    fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut cmd = Command::new(&self.binary);
        // UTF-8 output whatever the locale: without it tmux writes a tab in a format, and any non-ASCII character of
        // a pane, as `_` (an image without LANG did: found on a real node, where no observation parsed).
        cmd.arg("-u");
        if let Some(socket) = &self.socket {
            cmd.arg("-S").arg(socket);
        }
        if !self.start_server {
            cmd.arg("-N");
        }
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        cmd
    }

    /// Runs a tmux command, feeding `input` on stdin; returns stdout, or the exit status and stderr.
    async fn run(
        &self,
        name: &'static str,
        mut cmd: Command,
        input: Option<&str>,
    ) -> Result<Result<String, String>, TmuxError> {
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let call = async {
            let mut child = cmd.spawn()?;
            if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
                stdin.write_all(text.as_bytes()).await?;
            }
            child.wait_with_output().await
        };
        // A debug span as long as the call: `cargo bench --bench agent respawn` shows it within its op.
        let call = tracing::Instrument::instrument(call, tracing::debug_span!("tmux", command = name));
        let out = tokio::time::timeout(CALL_TIMEOUT, call).await.map_err(|_| TmuxError::Timeout(name))??;
        if out.status.success() {
            Ok(Ok(String::from_utf8_lossy(&out.stdout).into_owned()))
        } else {
            Ok(Err(String::from_utf8_lossy(&out.stderr).trim().to_string()))
        }
    }
}

impl Tmux for TmuxRunner {
    async fn observe(&self) -> Result<Observation, TmuxError> {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let cmd = self.command(["list-panes".to_string(), "-a".into(), "-F".into(), observe_format(&nonce)]);
        match self.run("list-panes", cmd, None).await? {
            Ok(out) => Ok(Observation::parse(&out, &nonce)),
            Err(stderr) if no_server(&stderr) => Ok(Observation::default()),
            Err(stderr) if no_session(&stderr) => Ok(Observation { server: true, ..Default::default() }),
            Err(stderr) => Err(TmuxError::Failed { command: "list-panes", stderr }),
        }
    }

    async fn spawn(&self, spawn: &Spawn) -> Result<(), TmuxError> {
        // tmux expands formats (`#(command)` included) in -c: a workdir holding '#' never reaches it.
        if !spawn.workdir.is_dir() || spawn.workdir.to_string_lossy().contains('#') {
            return Err(TmuxError::Workdir(spawn.workdir.clone()));
        }
        let mut args: Vec<std::ffi::OsString> =
            ["new-session", "-d", "-s", &spawn.session, "-c"].map(Into::into).to_vec();
        args.push(spawn.workdir.clone().into_os_string());
        // Each variable one word: tmux puts it in the session's environment as it is (no format expansion).
        let room_env = spawn.confine.iter().flat_map(|room| &room.env);
        for (name, value) in spawn.env.iter().chain(room_env) {
            args.extend(["-e".into(), literal(&format!("{name}={value}")).into()]);
        }
        args.push("--".into());
        if let Some(room) = &spawn.confine {
            let path = |p: &Path| literal(&p.to_string_lossy());
            let (helper, home, workdir) = (path(&room.helper), path(&room.home), path(&spawn.workdir));
            let words = [helper, "room".into(), "--uid".into(), room.uid.to_string(), "--home".into(), home];
            args.extend(words.map(Into::into));
            if let Some(port) = room.egress_port {
                args.extend(["--egress-port".into(), port.to_string().into()]);
            }
            args.extend(["--workdir".into(), workdir, "--".into()].map(Into::into));
        }
        // tmux runs a single-word command through `sh -c`: give it two words so it execs without a shell.
        if spawn.argv.is_empty() && spawn.confine.is_none() {
            args.extend(["env".into(), "--".into()]);
        }
        args.push(literal(&spawn.binary).into());
        args.extend(spawn.argv.iter().map(|a| literal(a).into()));
        // One tmux call, so remain-on-exit is on before the server can notice a harness that exits at once.
        args.extend(
            [";", "set-option", "-w", "-t", &pane_target(&spawn.session), "remain-on-exit", "on"].map(Into::into),
        );
        // The tag in the same call: an observation shows a session with it, or no session of this spawn at all.
        let target = pane_target(&spawn.session);
        for (tag, value) in [(SPAWN_TAG, &spawn.tag), (OWNER_TAG, &spawn.owner), (OWNER_NAME_TAG, &spawn.owner_name)] {
            args.extend([";", "set-option", "-t", &target, tag, value].map(Into::into));
        }
        let mut cleared = spawn.clear;
        let mut attempts = 0;
        loop {
            let (call, old) = match cleared {
                true => clearing(&spawn.session, &spawn.owner, &args).map(|(call, old)| (call, Some(old)))?,
                false => (args.clone(), None),
            };
            let result = self.run("new-session", self.command(&call), None).await?;
            // tmux ends a call at its first failing command: a session renamed out of the way before a refused
            // new-session is killed here (its owner's only, as in the call).
            if let (Err(_), Some(old)) = (&result, &old) {
                self.stop(old, &spawn.owner).await?;
            }
            match result {
                Ok(_) => return Ok(()),
                // A server that exited with its last session (killed by someone else) meanwhile: again.
                Err(stderr) if attempts < 3 && stderr.contains("server exited unexpectedly") => attempts += 1,
                // One made since the observation that saw none: cleared as any other (its owner's only), then again.
                Err(stderr) if !cleared && stderr.contains("duplicate session") => cleared = true,
                Err(stderr) => return Err(TmuxError::Failed { command: "new-session", stderr }),
            }
        }
    }

    async fn stop(&self, session: &str, owner: &str) -> Result<(), TmuxError> {
        // Only a session that is ours is killed.
        let cmd = self.command(if_owned(session, owner, &format!("kill-session -t ={session}"))?);
        match self.run("kill-session", cmd, None).await? {
            Err(stderr) if !no_session(&stderr) => Err(TmuxError::Failed { command: "kill-session", stderr }),
            _ => Ok(()),
        }
    }

    async fn evict(&self, room: &Confine) -> Result<(), TmuxError> {
        // run-shell hands its command to `sh -c` (as the server's user, root) and waits for it: the paths go in
        // single quotes, so they may hold neither a quote nor a '#' (tmux expands formats in it).
        let quoted = |p: &Path| {
            let text = p.to_string_lossy();
            match text.contains(['\'', '#']) {
                true => Err(TmuxError::Failed { command: "run-shell", stderr: format!("refused: path {text:?}") }),
                false => Ok(format!("'{text}'")),
            }
        };
        // As the room's uid, `kill -KILL -1` reaches every process of that uid and no other (not itself either). With
        // no environment: run-shell gives its job a session's, which may hold a tenant's keys, and the uid evicted
        // could read them from the helper's shell before the kill lands.
        let kill = format!(
            "exec /usr/bin/env -i {} room --uid {} --home {} --workdir / -- /bin/sh -c 'kill -KILL -1 2>/dev/null; true'",
            quoted(&room.helper)?,
            room.uid,
            quoted(&room.home)?
        );
        // A server of our own may have exited with its last session while a process it started lives on: start one.
        let cmd = match self.start_server {
            true => self.command(["start-server", ";", "run-shell", &kill]),
            false => self.command(["run-shell", &kill]),
        };
        match self.run("run-shell", cmd, None).await? {
            // tmux in a container of its own that is gone took every process it started with it.
            Err(stderr) if !self.start_server && no_server(&stderr) => Ok(()),
            Err(stderr) => Err(TmuxError::Failed { command: "run-shell", stderr }),
            Ok(_) => Ok(()),
        }
    }

    async fn last_lines(&self, session: &str, lines: usize) -> Result<String, TmuxError> {
        let cmd = self.command(["capture-pane", "-p", "-J", "-S", "-500", "-t", &pane_target(session)]);
        let out = self
            .run("capture-pane", cmd, None)
            .await?
            .map_err(|stderr| TmuxError::Failed { command: "capture-pane", stderr })?;
        let kept: Vec<&str> =
            out.lines().map(str::trim_end).filter(|l| !l.is_empty() && !l.starts_with("Pane is dead")).collect();
        Ok(kept[kept.len().saturating_sub(lines)..].join("\n"))
    }

    async fn screen(&self, session: &str) -> Result<String, TmuxError> {
        let cmd = self.command(["capture-pane", "-p", "-t", &pane_target(session)]);
        self.run("capture-pane", cmd, None)
            .await?
            .map_err(|stderr| TmuxError::Failed { command: "capture-pane", stderr })
    }

    async fn submit(&self, session: &str) -> Result<(), TmuxError> {
        parsed_word("send-keys", "session", session)?;
        let target = pane_target(session);
        // Checked inside the server, as a paste is: keys sent to a pane that died meanwhile would crash tmux 3.3a.
        let enter = format!("send-keys -t {target} Enter");
        let args = ["if-shell", "-F", "-t", &target, "#{pane_dead}", "", &enter];
        self.run("send-keys", self.command(args), None)
            .await?
            .map_err(|stderr| TmuxError::Failed { command: "send-keys", stderr })
            .map(drop)
    }

    async fn paste(&self, session: &str, text: &str, key: &str) -> Result<(), TmuxError> {
        parsed_word("paste-buffer", "key", key)?;
        parsed_word("paste-buffer", "session", session)?;
        let buffer = format!("worksession-{}", uuid::Uuid::new_v4().simple());
        let target = pane_target(session);
        // The text goes through stdin (no argv size limit, no parsing); -p brackets it if the harness asked for it.
        // The pane's liveness is checked inside the server, in the same command sequence as the paste: pasting into
        // a pane that died meanwhile crashes tmux 3.3a's server. The strings tmux parses here hold only our own
        // buffer and session names, never the text.
        // The key (a WorkEvent's UID, or `initialPrompt`; checked above to be a plain word) is tagged in the same
        // sequence, so an agent stopped before recording the paste finds it done rather than pasting it again.
        // The Enter comes a moment after the paste: Gemini CLI 0.61.0 takes an Enter read together with a paste as
        // part of it and leaves the prompt unsent in its input box (measured); Claude Code and the others take it
        // either way. The server sends it (`run-shell -b -C`: a tmux command of the server's, after the delay), so a
        // client that goes away meanwhile leaves no paste without its Enter; the tag is set with the paste; and the
        // call waits out the delay (a tmux command, not a shell), so the next paste cannot come before this Enter.
        let paste = format!(
            "paste-buffer -d -p -b {buffer} -t {target} ; set-option -t {target} {PASTE_TAG} {key} ; \
             run-shell -b -C -d {SUBMIT_DELAY} 'send-keys -t {target} Enter' ; \
             run-shell -C -d {WAIT_DELAY} 'set-option -t {target} {PASTE_TAG} {key}'"
        );
        let dead = format!("delete-buffer -b {buffer} ; display-message -p {PANE_DEAD}");
        let args =
            ["load-buffer", "-b", &buffer, "-", ";", "if-shell", "-F", "-t", &target, "#{pane_dead}", &dead, &paste];
        let out = self.run("paste-buffer", self.command(args), Some(text)).await?;
        match out {
            Ok(stdout) if stdout.contains(PANE_DEAD) => {
                Err(TmuxError::Failed { command: "paste-buffer", stderr: format!("the pane of {session} is dead") })
            }
            Ok(_) => Ok(()),
            Err(stderr) => Err(TmuxError::Failed { command: "paste-buffer", stderr }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Observation {
        /// An observation from tab-separated lines, marked as [`TmuxRunner::observe`] marks them.
        pub(crate) fn from_lines(lines: &str) -> Self {
            let marked: String = lines
                .lines()
                .map(|line| {
                    let mut fields: Vec<&str> = line.split('\t').collect();
                    fields.resize(OBSERVED.len(), "");
                    format!("nR{}nE\n", fields.join("nF"))
                })
                .collect();
            Self::parse(&marked, "n")
        }
    }

    /// A tag value (which a harness on the same server can set) holding tabs, newlines or a record of its
    /// own cannot forge another session's record, nor its own owner.
    #[test]
    fn a_tag_value_cannot_forge_an_observation() {
        let nonce = "0f1e2d3c";
        let forged = "x\nloop-victim\t0\t1\t\t\tvictim-uid\tns/victim";
        let output = format!(
            "{nonce}Rloop-attacker{nonce}F0{nonce}F5{nonce}F{nonce}F{nonce}F{forged}{nonce}F{nonce}E\nnRloop-victim2nF0nF1nFnFnFvictim-uidnFns/vnFnE\n"
        );
        let obs = Observation::parse(&output, nonce);
        assert_eq!(obs.len(), 1, "only the attacker's own record");
        assert_eq!(obs.session("loop-attacker").map(|v| v.owner.as_str()), Some(forged));
        assert_eq!(obs.liveness("loop-victim"), Liveness::Absent);
        assert_eq!(obs.liveness("loop-victim2"), Liveness::Absent, "marks of another nonce are text");
        let cut = format!("{nonce}Rloop-cut{nonce}F0{nonce}E\n");
        assert!(Observation::parse(&cut, nonce).is_empty(), "a record without its seven fields is dropped");
        assert!(!SessionView::default().belongs_to(""), "an untagged session is nobody's");
        assert!(!SessionView::default().belongs_to("uid-1"), "and never adopted");
    }

    #[test]
    fn observation_aggregates_panes_per_session() {
        let obs = Observation::from_lines(
            "loop-a\t0\t1700000000\tspawn-1\te1\nloop-b\t1\t\t\t\nloop-c\t1\t5\t\t\nloop-c\t0\t7\t\t\nloop-d\t\t\t\t\nloop-e\t0\n",
        );
        assert_eq!(obs.liveness("loop-a"), Liveness::Alive);
        let a = obs.session("loop-a").unwrap();
        assert_eq!((a.spawn.as_str(), a.pasted.as_str(), a.activity), ("spawn-1", "e1", 1_700_000_000));
        assert_eq!(obs.session("loop-c").map(|v| v.activity), Some(7), "the latest of its windows");
        assert_eq!(obs.session("loop-b").map(|v| v.activity), Some(0), "unknown");
        assert_eq!(obs.liveness("loop-b"), Liveness::Dead);
        assert_eq!(obs.liveness("loop-c"), Liveness::Alive, "one live pane is enough");
        assert_eq!(obs.liveness("loop-d"), Liveness::Alive, "unreadable pane_dead counts as live");
        assert_eq!(obs.session("loop-e").map(|v| v.spawn.as_str()), Some(""), "an older tmux line without tags");
        assert_eq!(obs.liveness("loop-z"), Liveness::Absent);
        assert_eq!(obs.len(), 5);
    }

    #[test]
    fn trailing_semicolons_stay_literal() {
        assert_eq!(literal("fix this;"), "fix this\\;");
        assert_eq!(literal("a\\;"), "a\\\\;");
        assert_eq!(literal(";"), "\\;");
        assert_eq!(literal("a;b"), "a;b");
    }
}
