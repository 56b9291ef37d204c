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

/// What the paste command prints when the pane turned out dead.
const PANE_DEAD: &str = "worksession:pane-dead";

/// How long one tmux call may take before it counts as failed.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a tmux session's harness is running, as one observation saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// The session exists and a pane is not dead (an unreadable `pane_dead` counts as live).
    Alive,
    /// The session exists and every pane is dead (kept by `remain-on-exit`).
    Dead,
    /// There is no such session (or no tmux server).
    Absent,
}

/// Liveness of every tmux session, from one `list-panes -a` call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    alive: HashMap<String, bool>,
}

impl Observation {
    /// Parses `list-panes -a -F '#{session_name}\t#{pane_dead}'` output.
    pub fn parse(output: &str) -> Self {
        let mut alive = HashMap::new();
        for line in output.lines() {
            let (session, dead) = line.rsplit_once('\t').unwrap_or((line, ""));
            if session.is_empty() {
                continue;
            }
            let pane_alive = dead.trim() != "1"; // "0", or unreadable: live (the seed's degrade-to-live)
            *alive.entry(session.to_string()).or_insert(false) |= pane_alive;
        }
        Self { alive }
    }

    /// The liveness of the session named `session`.
    pub fn liveness(&self, session: &str) -> Liveness {
        match self.alive.get(session) {
            Some(true) => Liveness::Alive,
            Some(false) => Liveness::Dead,
            None => Liveness::Absent,
        }
    }

    /// How many sessions were seen.
    pub fn len(&self) -> usize {
        self.alive.len()
    }

    /// Whether no session was seen.
    pub fn is_empty(&self) -> bool {
        self.alive.is_empty()
    }
}

/// A harness to start in a new tmux session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spawn {
    /// The tmux session name.
    pub session: String,
    /// Working directory of the harness.
    pub workdir: PathBuf,
    /// The harness executable.
    pub binary: String,
    /// Its arguments, each one word.
    pub argv: Vec<String>,
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
    pub fn category(&self) -> &'static str {
        match self {
            TmuxError::Exec(_) => "tmux_exec",
            TmuxError::Timeout(_) => "tmux_timeout",
            TmuxError::Failed { .. } => "tmux_failed",
            TmuxError::Workdir(_) => "workdir",
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
    fn stop(&self, session: &str) -> impl Future<Output = Result<(), TmuxError>> + Send;
    /// The last `lines` non-empty lines the session's pane printed (dead or alive).
    fn last_lines(&self, session: &str, lines: usize) -> impl Future<Output = Result<String, TmuxError>> + Send;
    /// Pastes `text` into the session's pane as one bracketed paste, then presses Enter.
    fn paste(&self, session: &str, text: &str) -> impl Future<Output = Result<(), TmuxError>> + Send;
}

/// Runs the `tmux` binary, on a socket of its own (`-S`) or tmux's default server.
#[derive(Clone, Debug)]
pub struct TmuxRunner {
    binary: PathBuf,
    socket: Option<PathBuf>,
}

/// An exact-match target for a session's active pane.
fn pane_target(session: &str) -> String {
    format!("={session}:")
}

/// tmux splits a command line at any argument ending in `;`; `\;` at the end keeps it literal.
fn literal(arg: &str) -> String {
    match arg.strip_suffix(';') {
        Some(head) => format!("{head}\\;"),
        None => arg.to_string(),
    }
}

fn no_server(stderr: &str) -> bool {
    stderr.contains("no server running")
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
        Self { binary: "tmux".into(), socket }
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
        if let Some(socket) = &self.socket {
            cmd.arg("-S").arg(socket);
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
        let cmd = self.command(["list-panes", "-a", "-F", "#{session_name}\t#{pane_dead}"]);
        match self.run("list-panes", cmd, None).await? {
            Ok(out) => Ok(Observation::parse(&out)),
            Err(stderr) if no_session(&stderr) => Ok(Observation::default()), // no server, or no sessions
            Err(stderr) => Err(TmuxError::Failed { command: "list-panes", stderr }),
        }
    }

    async fn spawn(&self, spawn: &Spawn) -> Result<(), TmuxError> {
        if !spawn.workdir.is_dir() {
            return Err(TmuxError::Workdir(spawn.workdir.clone()));
        }
        let mut args: Vec<std::ffi::OsString> =
            ["new-session", "-d", "-s", &spawn.session, "-c"].map(Into::into).to_vec();
        args.push(spawn.workdir.clone().into_os_string());
        args.push("--".into());
        // tmux runs a single-word command through `sh -c`: give it two words so it execs without a shell.
        if spawn.argv.is_empty() {
            args.extend(["env".into(), "--".into()]);
        }
        args.push(literal(&spawn.binary).into());
        args.extend(spawn.argv.iter().map(|a| literal(a).into()));
        // One tmux call, so remain-on-exit is on before the server can notice a harness that exits at once.
        args.extend(
            [";", "set-option", "-w", "-t", &pane_target(&spawn.session), "remain-on-exit", "on"].map(Into::into),
        );
        // Clearing the last session makes the server exit, and a new-session racing that exit is told so: retry.
        // (Clearing in the same tmux call as new-session crashed tmux 3.3a's server, taking every session along.)
        self.stop(&spawn.session).await?;
        let mut attempts = 0;
        loop {
            match self.run("new-session", self.command(&args), None).await? {
                Ok(_) => return Ok(()),
                Err(stderr) if attempts < 3 && stderr.contains("server exited unexpectedly") => attempts += 1,
                Err(stderr) => return Err(TmuxError::Failed { command: "new-session", stderr }),
            }
        }
    }

    async fn stop(&self, session: &str) -> Result<(), TmuxError> {
        let cmd = self.command(["kill-session", "-t", &format!("={session}")]);
        match self.run("kill-session", cmd, None).await? {
            Err(stderr) if !no_session(&stderr) => Err(TmuxError::Failed { command: "kill-session", stderr }),
            _ => Ok(()),
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

    async fn paste(&self, session: &str, text: &str) -> Result<(), TmuxError> {
        let buffer = format!("worksession-{}", uuid::Uuid::new_v4().simple());
        let target = pane_target(session);
        // The text goes through stdin (no argv size limit, no parsing); -p brackets it if the harness asked for it.
        // The pane's liveness is checked inside the server, in the same command sequence as the paste: pasting into
        // a pane that died meanwhile crashes tmux 3.3a's server. The strings tmux parses here hold only our own
        // buffer and session names, never the text.
        let paste = format!("paste-buffer -d -p -b {buffer} -t {target} ; send-keys -t {target} Enter");
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

    #[test]
    fn observation_aggregates_panes_per_session() {
        let obs = Observation::parse("loop-a\t0\nloop-b\t1\nloop-c\t1\nloop-c\t0\nloop-d\t\nweird\tname\t1\n");
        assert_eq!(obs.liveness("loop-a"), Liveness::Alive);
        assert_eq!(obs.liveness("loop-b"), Liveness::Dead);
        assert_eq!(obs.liveness("loop-c"), Liveness::Alive, "one live pane is enough");
        assert_eq!(obs.liveness("loop-d"), Liveness::Alive, "unreadable pane_dead counts as live");
        assert_eq!(obs.liveness("weird\tname"), Liveness::Dead);
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
