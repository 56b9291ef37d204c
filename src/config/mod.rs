//! The agent's config file (YAML): tmux socket and session prefix, resume defaults, harness profiles.
//!
//! Every key is optional. A file that does not parse, or a profile whose templates are malformed, is refused with a
//! message naming the key. [`Reloader`] picks up a changed file without a restart and keeps the last good config
//! when an edit is bad.

pub mod placement;
pub mod prices;
pub mod rooms;
pub mod workspaces;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::watch;

use crate::harness::{self, Profile};
pub use placement::PlacementConfig;
pub use prices::{Price, Prices};
pub use workspaces::WorkspacesConfig;

/// The tmux session prefix when the config names none.
pub const DEFAULT_SESSION_PREFIX: &str = "loop-";

/// The agent's configuration, validated.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the tmux server is.
    pub tmux: TmuxConfig,
    /// Defaults for what a WorkSession leaves unset.
    pub defaults: Defaults,
    /// Harness profiles by name: the built-ins, added to or overridden by the file.
    pub harnesses: BTreeMap<String, Profile>,
    /// How long a delivered (or failed) WorkEvent is kept before the agent deletes it; `None`: kept.
    pub event_retention: Option<std::time::Duration>,
    /// How long a prompt waits for its pane to show the profile's `readyPattern` before it fails.
    pub ready_timeout: Duration,
    /// How long a sent prompt waits for the harness's word (its hooks, its transcript) before it is sent once more,
    /// and after a second attempt, fails (`delivery.confirmTimeoutSeconds`).
    pub confirm_timeout: Duration,
    /// How long a session whose turn its model's API refused for a usage limit is parked before its refused prompt
    /// is sent again (`delivery.usageLimitWaitSeconds`): the records the harnesses write carry no reset time.
    pub usage_limit_wait: Duration,
    /// How far apart a namespace's sessions of one harness parked together wake (`delivery.usageLimitSpreadSeconds`),
    /// so the account's new allowance is not spent by all at once.
    pub usage_limit_spread: Duration,
    /// The harnesses' `HOME`, the `{home}` of a profile's `conversationPath` (`harnessHome`; default: the agent's
    /// own `HOME`).
    pub harness_home: Option<PathBuf>,
    /// Where work items' checkouts come from (`workspaces`).
    pub workspaces: WorkspacesConfig,
    /// A Unix user of its own for each session's harness (`rooms`); `None`: all share the tmux server's.
    pub rooms: Option<rooms::RoomsConfig>,
    /// The `worksession` binary a hook-backed harness runs as its hooks' receiver, where the tmux server runs
    /// (`hookReceiver`, used without rooms; with rooms `rooms.helper` is; default: this executable when it is
    /// `worksession`); `None`: no harness is given hooks. It must be root's and writable by no harness.
    pub hook_receiver: Option<PathBuf>,
    /// What this agent offers the placement, and its Lease (`placement`).
    pub placement: PlacementConfig,
    /// The price of each model's tokens, for a session's estimated cost (`prices`).
    pub prices: Prices,
}

impl Config {
    /// The receiver of a hook-backed harness's hooks: with rooms their helper, else [`Config::hook_receiver`].
    pub fn hook_receiver(&self) -> Option<&Path> {
        // With rooms, the helper: the path where the tmux server runs, which the rooms already trust.
        self.rooms.as_ref().map(|r| r.helper.as_path()).or(self.hook_receiver.as_deref())
    }

    /// Whether the agent sees `workdir` as the harness does, so it may say the directory is missing: where it
    /// starts the tmux server itself (one filesystem, as in local mode), or inside the volume its clones live on
    /// (`workspaces.mirrors`' folder, which the chart mounts in both containers). A path only the tmux container
    /// mounts (`agent.extraVolumeMounts`, its `/tmp`) is not the agent's to judge.
    pub fn sees_workdir(&self, workdir: &Path) -> bool {
        // A folder of clones at the root (`/repos`) names no volume: nothing outside it is judged then.
        let shared = self.workspaces.mirrors.as_deref().and_then(Path::parent).filter(|p| p.parent().is_some());
        self.tmux.start_server || shared.is_some_and(|volume| workdir.starts_with(volume))
    }
}

/// The default `delivery.readyTimeoutSeconds`.
pub const DEFAULT_READY_TIMEOUT_SECONDS: u64 = 120;
/// The default `delivery.confirmTimeoutSeconds`: a harness's hook or transcript says so within a second or two, even
/// while it is busy (a prompt pasted into a busy Claude Code is queued and reported at once, measured).
pub const DEFAULT_CONFIRM_TIMEOUT_SECONDS: u64 = 300;

/// The default `delivery.usageLimitWaitSeconds`: a per-minute rate limit is over by then; a subscription's hours-long
/// one costs one refused request per parked session per wait.
pub const DEFAULT_USAGE_LIMIT_WAIT_SECONDS: u64 = 300;
/// The default `delivery.usageLimitSpreadSeconds`.
pub const DEFAULT_USAGE_LIMIT_SPREAD_SECONDS: u64 = 10;

/// The default `delivery.retentionSeconds`: one hour, as Kubernetes keeps its Events. At 1,000 nodes with 50 sessions
/// each and 10 events per session per day, a day of events would fill most of etcd's default 2 GiB quota; an hour
/// holds about 65 MB (docs/scale.md).
pub const DEFAULT_EVENT_RETENTION_SECONDS: u64 = 3_600;

/// Where the tmux server is and how sessions are named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TmuxConfig {
    /// Passed as `tmux -S`; `None`: tmux's own default server.
    pub socket: Option<PathBuf>,
    /// The tmux session of a work item is `<sessionPrefix><workItem>`.
    pub session_prefix: String,
    /// Whether the agent may start the tmux server (`tmux.startServer`; false where tmux has a container of its
    /// own, as in the chart: a missing server is then `TmuxUnavailable`, never replaced).
    pub start_server: bool,
}

/// Resume defaults (`resumeOnRespawn`, `resumeProbeSeconds` and the settle window).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defaults {
    /// Resume the recorded conversation on respawn.
    pub resume_on_respawn: bool,
    /// Seconds to wait before checking that a respawned pane survived (0 = do not wait).
    pub resume_probe_seconds: u32,
    /// Seconds after a resume during which a pane death counts as a failed resume.
    pub resume_settle_seconds: u32,
    /// Seconds of quiet after which a harness is stopped as idle (`None`: never, unless a session asks).
    pub idle_suspend_after_seconds: Option<u32>,
    /// The longest quiet before the harness of an archived session (`spec.archived`, its work item closed) is stopped.
    pub archive_quiet_seconds: u32,
}

/// The default longest quiet before the harness of an archived session (`spec.archived`) is stopped
/// (`defaults.archiveQuietSeconds`): one that closed its work item is usually long quiet, one woken by a comment on
/// the closed item works on it first.
pub const DEFAULT_ARCHIVE_QUIET_SECONDS: u32 = 60;

impl Default for Config {
    fn default() -> Self {
        Self {
            tmux: TmuxConfig { socket: None, session_prefix: DEFAULT_SESSION_PREFIX.into(), start_server: true },
            defaults: Defaults {
                resume_on_respawn: true,
                resume_probe_seconds: 2,
                resume_settle_seconds: 60,
                idle_suspend_after_seconds: None,
                archive_quiet_seconds: DEFAULT_ARCHIVE_QUIET_SECONDS,
            },
            harnesses: harness::builtin(),
            event_retention: Some(Duration::from_secs(DEFAULT_EVENT_RETENTION_SECONDS)),
            ready_timeout: Duration::from_secs(DEFAULT_READY_TIMEOUT_SECONDS),
            confirm_timeout: Duration::from_secs(DEFAULT_CONFIRM_TIMEOUT_SECONDS),
            usage_limit_wait: Duration::from_secs(DEFAULT_USAGE_LIMIT_WAIT_SECONDS),
            usage_limit_spread: Duration::from_secs(DEFAULT_USAGE_LIMIT_SPREAD_SECONDS),
            harness_home: std::env::var_os("HOME").map(PathBuf::from),
            workspaces: WorkspacesConfig::default(),
            rooms: None,
            // A test or a bench binary is no receiver: it names one in its config.
            hook_receiver: std::env::current_exe().ok().filter(|p| p.file_name().is_some_and(|n| n == "worksession")),
            placement: PlacementConfig::default(),
            prices: Prices::default(),
        }
    }
}

/// Why a config was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The YAML does not parse into the config's shape.
    #[error("config {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, naming the key and position.
        message: String,
    },
    /// A value parses but cannot work.
    #[error("config {path}: {key}: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key, for example `defaults.resumeProbeSeconds`.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    tmux: TmuxFile,
    #[serde(default)]
    defaults: DefaultsFile,
    #[serde(default)]
    harnesses: BTreeMap<String, harness::ProfileFile>,
    #[serde(default)]
    delivery: DeliveryFile,
    harness_home: Option<PathBuf>,
    hook_receiver: Option<PathBuf>,
    #[serde(default)]
    workspaces: workspaces::WorkspacesFile,
    rooms: Option<rooms::RoomsFile>,
    #[serde(default)]
    placement: placement::PlacementFile,
    #[serde(default)]
    prices: BTreeMap<String, Option<Price>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DeliveryFile {
    /// 0: keep delivered events.
    retention_seconds: Option<u64>,
    ready_timeout_seconds: Option<u64>,
    confirm_timeout_seconds: Option<u64>,
    usage_limit_wait_seconds: Option<u64>,
    usage_limit_spread_seconds: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TmuxFile {
    socket: Option<PathBuf>,
    session_prefix: Option<String>,
    start_server: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DefaultsFile {
    resume_on_respawn: Option<bool>,
    resume_probe_seconds: Option<u32>,
    resume_settle_seconds: Option<u32>,
    idle_suspend_after_seconds: Option<u32>,
    archive_quiet_seconds: Option<u32>,
}

impl Config {
    /// Parses and validates config YAML; `path` only names the source in errors.
    pub fn parse(yaml: &str, path: &Path) -> Result<Self, ConfigError> {
        let invalid = |key: String, problem: String| ConfigError::Invalid { path: path.into(), key, problem };
        let file: ConfigFile = if yaml.trim().is_empty() {
            ConfigFile::default()
        } else {
            serde_yaml_ng::from_str(yaml)
                .map_err(|e| ConfigError::Parse { path: path.into(), message: e.to_string() })?
        };
        let mut config = Config::default();
        config.tmux.socket = file.tmux.socket;
        config.tmux.start_server = file.tmux.start_server.unwrap_or(true);
        if let Some(prefix) = file.tmux.session_prefix {
            if !prefix.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return Err(invalid(
                    "tmux.sessionPrefix".into(),
                    format!("{prefix:?} may hold only letters, digits, '-' and '_' (tmux names)"),
                ));
            }
            config.tmux.session_prefix = prefix;
        }
        let d = &mut config.defaults;
        d.resume_on_respawn = file.defaults.resume_on_respawn.unwrap_or(d.resume_on_respawn);
        d.resume_probe_seconds = file.defaults.resume_probe_seconds.unwrap_or(d.resume_probe_seconds);
        d.resume_settle_seconds = file.defaults.resume_settle_seconds.unwrap_or(d.resume_settle_seconds);
        // 0 says "off" as explicitly as leaving it out.
        d.idle_suspend_after_seconds = file.defaults.idle_suspend_after_seconds.filter(|s| *s > 0);
        d.archive_quiet_seconds = file.defaults.archive_quiet_seconds.unwrap_or(d.archive_quiet_seconds);
        if d.archive_quiet_seconds > 86_400 {
            return Err(invalid("defaults.archiveQuietSeconds".into(), "must be between 0 and 86400".into()));
        }
        if d.resume_probe_seconds > 300 {
            return Err(invalid("defaults.resumeProbeSeconds".into(), "must be between 0 and 300".into()));
        }
        if d.resume_settle_seconds > 3600 {
            return Err(invalid("defaults.resumeSettleSeconds".into(), "must be between 0 and 3600".into()));
        }
        if let Some(secs) = file.delivery.retention_seconds {
            config.event_retention = (secs > 0).then(|| Duration::from_secs(secs));
        }
        if let Some(secs) = file.delivery.ready_timeout_seconds {
            if !(1..=3600).contains(&secs) {
                return Err(invalid("delivery.readyTimeoutSeconds".into(), "must be between 1 and 3600".into()));
            }
            config.ready_timeout = Duration::from_secs(secs);
        }
        if let Some(secs) = file.delivery.confirm_timeout_seconds {
            if !(1..=3600).contains(&secs) {
                return Err(invalid("delivery.confirmTimeoutSeconds".into(), "must be between 1 and 3600".into()));
            }
            config.confirm_timeout = Duration::from_secs(secs);
        }
        if let Some(secs) = file.delivery.usage_limit_wait_seconds {
            if !(1..=86_400).contains(&secs) {
                return Err(invalid("delivery.usageLimitWaitSeconds".into(), "must be between 1 and 86400".into()));
            }
            config.usage_limit_wait = Duration::from_secs(secs);
        }
        if let Some(secs) = file.delivery.usage_limit_spread_seconds {
            if secs > 3600 {
                return Err(invalid("delivery.usageLimitSpreadSeconds".into(), "must be between 0 and 3600".into()));
            }
            config.usage_limit_spread = Duration::from_secs(secs);
        }
        if let Some(home) = file.harness_home {
            if !home.is_absolute() {
                return Err(invalid("harnessHome".into(), format!("{} is not an absolute path", home.display())));
            }
            config.harness_home = Some(home);
        }
        if let Some(receiver) = file.hook_receiver {
            if !receiver.is_absolute() {
                let problem = format!("{} is not an absolute path", receiver.display());
                return Err(invalid("hookReceiver".into(), problem));
            }
            config.hook_receiver = Some(receiver);
        }
        config.workspaces = file.workspaces.into_config(&invalid)?;
        config.rooms = file.rooms.map(|r| r.into_config(&invalid)).transpose()?;
        config.placement = file.placement.into_config(&invalid)?;
        config.prices = Prices::with(file.prices).map_err(|(key, problem)| invalid(key, problem))?;
        for (name, p) in file.harnesses {
            let base = config.harnesses.remove(&name);
            let profile = p.into_profile(&name, base).map_err(|e| invalid(e.key, e.problem))?;
            config.harnesses.insert(name, profile);
        }
        Ok(config)
    }

    /// Reads, parses and validates the config file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let yaml = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Self::parse(&yaml, path)
    }

    /// The tmux session of the WorkSession `namespace/name`: `<prefix><namespace>_<name>`. Its namespace is part of
    /// it, so no two WorkSessions share one, whatever order they reconcile in (`_` is in no namespace or name).
    pub fn tmux_session(&self, identity: &str) -> String {
        format!("{}{}", self.tmux.session_prefix, identity.replacen('/', "_", 1))
    }
}

/// Keeps a config current with its file: a changed file is picked up, a bad edit keeps the last good config.
///
/// The file is re-read every `interval` and compared by content, which also sees a ConfigMap volume's symlink
/// swap (inotify on the file itself would not). Used for the agent's [`Config`] and the bridge's config alike.
pub struct Reloader<T = Config> {
    config: watch::Receiver<Arc<T>>,
    last_error: watch::Receiver<Option<String>>,
    task: tokio::task::JoinHandle<()>,
}

/// Parses a config file's text; the path only names the source in errors.
pub type Parse<T> = fn(&str, &Path) -> Result<T, ConfigError>;

impl Reloader<Config> {
    /// Loads the agent config at `path` (refusing a bad file at start) and watches it for changes.
    pub fn start(path: PathBuf, interval: Duration) -> Result<Self, ConfigError> {
        Self::start_with(path, interval, Config::parse)
    }
}

impl<T: Send + Sync + 'static> Reloader<T> {
    /// Loads `path` with `parse` (refusing a bad file at start) and watches it for changes.
    pub fn start_with(path: PathBuf, interval: Duration, parse: Parse<T>) -> Result<Self, ConfigError> {
        let mut seen = std::fs::read(&path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
        let initial = parse(&String::from_utf8_lossy(&seen), &path)?;
        let (config_tx, config) = watch::channel(Arc::new(initial));
        let (error_tx, last_error) = watch::channel(None);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Ok(bytes) = tokio::fs::read(&path).await else { continue }; // mid-swap: try again next tick
                if bytes == seen {
                    continue;
                }
                seen = bytes;
                match parse(&String::from_utf8_lossy(&seen), &path) {
                    Ok(c) => {
                        tracing::info!(event = "config.reloaded", path = %path.display(), "config reloaded");
                        config_tx.send_replace(Arc::new(c));
                        error_tx.send_if_modified(|e| e.take().is_some());
                    }
                    Err(e) => {
                        tracing::error!(event = "config.reload_failed", error = %e, "config change refused; keeping the last good config");
                        error_tx.send_replace(Some(e.to_string()));
                    }
                }
            }
        });
        Ok(Self { config, last_error, task })
    }

    /// The current config; `changed()` on it wakes on each good reload.
    pub fn config(&self) -> watch::Receiver<Arc<T>> {
        self.config.clone()
    }

    /// Why the last change was refused, `None` after a good one.
    pub fn last_error(&self) -> watch::Receiver<Option<String>> {
        self.last_error.clone()
    }
}

impl<T> Drop for Reloader<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// GitHub.com's API.
pub const DEFAULT_GITHUB_API: &str = "https://api.github.com";

/// Whether `url` may be given a token: `https://`, or plain `http://` to a loopback address (a test's server).
pub fn base_url_allowed(url: &str) -> Result<(), String> {
    if url.starts_with("https://") {
        return Ok(());
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(format!("{url:?} is not an https:// URL"));
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = host.rsplit_once(':').filter(|(h, port)| !h.is_empty() && port.bytes().all(|b| b.is_ascii_digit()));
    let host = host.map_or(rest.split('/').next().unwrap_or_default(), |(h, _)| h);
    if matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
        Ok(())
    } else {
        Err(format!("{url:?}: plain http:// only to a loopback address (a token would cross the network in clear)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Config, ConfigError> {
        Config::parse(yaml, Path::new("agent.yaml"))
    }

    /// The agent judges a workdir where it shares the harness's filesystem: all of it when it starts tmux itself,
    /// else only the volume its clones live on.
    #[test]
    fn a_workdir_is_judged_only_where_the_agent_sees_it_as_the_harness_does() {
        let local = parse("").unwrap();
        assert!(local.sees_workdir(Path::new("/anywhere/work")));
        let cluster = parse("tmux: {startServer: false}\nworkspaces: {mirrors: /workspace/.repos}\n").unwrap();
        assert!(cluster.sees_workdir(Path::new("/workspace/repo-12")));
        assert!(!cluster.sees_workdir(Path::new("/data/repo-12")), "a volume only the tmux container mounts");
        assert!(!cluster.sees_workdir(Path::new("/workspaces/repo-12")), "a path, not a string prefix");
        let rooted = parse("tmux: {startServer: false}\nworkspaces: {mirrors: /repos}\n").unwrap();
        assert!(!rooted.sees_workdir(Path::new("/data/repo-12")), "clones at the root name no volume");
    }

    #[test]
    fn empty_file_gives_the_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.tmux, TmuxConfig { socket: None, session_prefix: "loop-".into(), start_server: true });
        assert_eq!(
            c.defaults,
            Defaults {
                resume_on_respawn: true,
                resume_probe_seconds: 2,
                resume_settle_seconds: 60,
                idle_suspend_after_seconds: None,
                archive_quiet_seconds: 60,
            }
        );
        assert_eq!(
            c.harnesses.keys().collect::<Vec<_>>(),
            ["claude", "codex", "copilot", "cursor", "gemini", "opencode"]
        );
        assert_eq!(c.harnesses["copilot"].store_path.as_deref(), Some("{home}/.copilot/session-state/{sessionId}"));
        assert_eq!(c.tmux_session("agents/repo-12"), "loop-agents_repo-12");
        assert_eq!(c.event_retention, Some(Duration::from_secs(3_600)));
        assert_eq!(parse("delivery:\n  retentionSeconds: 0\n").unwrap().event_retention, None);
    }

    #[test]
    fn every_key() {
        let c = parse(
            r#"
tmux:
  socket: /run/worksession/tmux.sock
  sessionPrefix: ws-
  startServer: false
defaults:
  resumeOnRespawn: false
  resumeProbeSeconds: 0
  resumeSettleSeconds: 120
  idleSuspendAfterSeconds: 3600
harnesses:
  myharness:
    binary: /usr/local/bin/myharness
    extraArgs: ["--flag"]
    interactive: ["--session-id", "{sessionId}", "{extraArgs}", "{prompt}"]
    resume: ["--resume", "{sessionId}", "{extraArgs}", "{prompt}"]
    resumeFailedPattern: "No conversation found"
    readyPattern: "^> "
    conversationPath: "{home}/.myharness/{cwdSlug}/{sessionId}.jsonl"
  claude:
    binary: /opt/claude/bin/claude
  blind:
    binary: claude
    interactive: ["--session-id", "{sessionId}"]
    readyPattern: ""
    conversationPath: ""
delivery:
  retentionSeconds: 3600
  readyTimeoutSeconds: 30
  confirmTimeoutSeconds: 45
  usageLimitWaitSeconds: 60
  usageLimitSpreadSeconds: 0
harnessHome: /srv/home
"#,
        )
        .unwrap();
        assert_eq!(c.tmux.socket.as_deref(), Some(Path::new("/run/worksession/tmux.sock")));
        assert_eq!(c.tmux_session("default/a"), "ws-default_a");
        assert!(!c.tmux.start_server);
        assert_eq!(c.event_retention, Some(Duration::from_secs(3600)));
        assert_eq!(
            c.defaults,
            Defaults {
                resume_on_respawn: false,
                resume_probe_seconds: 0,
                resume_settle_seconds: 120,
                idle_suspend_after_seconds: Some(3600),
                archive_quiet_seconds: 60,
            }
        );
        let mine = &c.harnesses["myharness"];
        assert_eq!(
            mine.argv("myharness", harness::Mode::Resume, "id", Some("p")).unwrap(),
            ["--resume", "id", "--flag", "p"]
        );
        assert!(mine.resume_failed("No conversation found with session ID: id"));
        assert!(mine.ready(Some("> ")) && !mine.ready(Some("booting")));
        assert_eq!(mine.conversation_path.as_deref(), Some("{home}/.myharness/{cwdSlug}/{sessionId}.jsonl"));
        assert_eq!(c.confirm_timeout, Duration::from_secs(45));
        assert_eq!((c.usage_limit_wait, c.usage_limit_spread), (Duration::from_secs(60), Duration::ZERO));
        assert_eq!(
            (c.ready_timeout, c.harness_home.as_deref()),
            (Duration::from_secs(30), Some(Path::new("/srv/home")))
        );
        let blind = &c.harnesses["blind"];
        assert!(blind.ready_pattern.is_none() && blind.conversation_path.is_none(), "empty turns them off");
        // Overriding one field of a built-in keeps the rest of it.
        let claude = &c.harnesses["claude"];
        assert_eq!(claude.binary, "/opt/claude/bin/claude");
        assert!(claude.resume.is_some() && claude.resume_failed_pattern.is_some());
        assert!(claude.ready_pattern.is_some() && claude.conversation_path.is_some());
        assert!(c.harnesses["cursor"].interactive.is_none());
    }

    fn refused(yaml: &str) -> String {
        parse(yaml).expect_err("refused").to_string()
    }

    /// A namespace's keys: the Secret's name and the variables it may set, none that changes how the room runs or
    /// what the room helper does as root.
    #[test]
    fn namespace_keys_name_a_secret_and_variables_that_change_nothing_of_the_room() {
        let keys = |body: &str| format!("rooms:\n  root: /r\n  namespaceKeys: {{{body}}}\n");
        let c = parse(&keys("secretName: tenant-keys, variables: [COPILOT_GITHUB_TOKEN, GH_TOKEN, OPENAI_API_KEY]"));
        let k = c.unwrap().rooms.unwrap().namespace_keys.unwrap();
        assert_eq!(k.secret_name, "tenant-keys");
        let refused_names = ["LD_PRELOAD", "PATH", "HOME", "HTTPS_PROXY", "GLIBC_TUNABLES", "MALLOC_ARENA_MAX"];
        for bad in refused_names.into_iter().chain(["WORKSESSION_LOG_JSON", "lower", "1X", "A-B"]) {
            let e = refused(&keys(&format!("secretName: k, variables: [{bad}]")));
            assert!(e.contains("rooms.namespaceKeys.variables"), "{bad}: {e}");
        }
        assert!(refused(&keys("secretName: 'Not A Name', variables: []")).contains("rooms.namespaceKeys.secretName"));
    }

    /// Prices over the built-in ones, and where a profile's record states usage.
    #[test]
    fn prices_and_a_profiles_usage_record() {
        let c = parse(
            "prices:\n  my-model: {input: 1, output: 4, cacheWrite: 1, cacheRead: 0.1}\n  gpt-5: null\n\
             harnesses:\n  mine:\n    binary: m\n    interactive: ['{prompt}']\n    usage: {format: copilot, path: '{home}/s/*/{sessionId}/e.jsonl'}\n  claude:\n    usage: {format: ''}\n",
        )
        .unwrap();
        assert_eq!(c.prices.of("my-model-20261201").map(|p| p.output), Some(4.0));
        assert_eq!(c.prices.of("gpt-5"), None);
        let usage = c.harnesses["mine"].usage.clone().unwrap();
        assert_eq!(usage.format, crate::harness::usage::UsageFormat::Copilot);
        assert_eq!(c.harnesses["claude"].usage, None, "turned off");
        assert_eq!(
            c.harnesses["codex"].usage.as_ref().map(|u| u.format),
            Some(crate::harness::usage::UsageFormat::Codex)
        );
        // A built-in told not to look at its conversation before resuming still counts what it spends.
        for name in ["claude", "copilot", "codex"] {
            let c = parse(&format!("harnesses:\n  {name}:\n    conversationPath: ''\n")).unwrap();
            assert!(c.harnesses[name].usage.as_ref().is_some_and(|u| u.path.is_some()), "{name}");
        }
        assert!(refused("prices:\n  m: {input: -1, output: 1, cacheWrite: 1, cacheRead: 1}\n").contains("prices.m"));
        assert!(refused("prices:\n  m: {input: 1}\n").contains("prices"));
        let usage =
            |u: &str| format!("harnesses:\n  x:\n    binary: x\n    interactive: ['{{prompt}}']\n    usage: {u}\n");
        assert!(refused(&usage("{format: gemini}")).contains("harnesses.x.usage.format"));
        assert!(refused(&usage("{format: claude}")).contains("harnesses.x.usage.path"), "no path and no transcript");
        assert!(refused(&usage("{format: claude, path: 'rel/{sessionId}'}")).contains("harnesses.x.usage.path"));
        assert!(refused(&usage("{format: claude, path: '/s/{id}'}")).contains("harnesses.x.usage.path"));
    }

    #[test]
    fn malformed_files_are_refused_naming_the_key() {
        assert!(refused("tmux: [").contains("agent.yaml"));
        assert!(refused("tmux:\n  sockett: /x\n").contains("sockett"));
        assert!(refused("defaults:\n  resumeProbeSeconds: soon\n").contains("resumeProbeSeconds"));
        assert!(refused("defaults:\n  resumeProbeSeconds: 301\n").contains("defaults.resumeProbeSeconds"));
        assert!(refused("defaults:\n  resumeSettleSeconds: 3601\n").contains("defaults.resumeSettleSeconds"));
        assert!(refused("tmux:\n  sessionPrefix: 'a:b'\n").contains("tmux.sessionPrefix"));
        assert!(refused("harnesses:\n  x:\n    interactive: ['{prompt}']\n").contains("harnesses.x.binary"));
        assert!(
            refused("harnesses:\n  x:\n    binary: x\n    resumeFailedPattern: '('\n")
                .contains("harnesses.x.resumeFailedPattern")
        );
        assert!(
            refused("harnesses:\n  x:\n    binary: x\n    readyPattern: '['\n").contains("harnesses.x.readyPattern")
        );
        assert!(refused("delivery:\n  readyTimeoutSeconds: 0\n").contains("delivery.readyTimeoutSeconds"));
        assert!(refused("delivery:\n  confirmTimeoutSeconds: 0\n").contains("delivery.confirmTimeoutSeconds"));
        assert!(refused("delivery:\n  usageLimitWaitSeconds: 0\n").contains("delivery.usageLimitWaitSeconds"));
        assert!(refused("delivery:\n  usageLimitSpreadSeconds: 3601\n").contains("delivery.usageLimitSpreadSeconds"));
        assert!(refused("harnessHome: relative/home\n").contains("harnessHome"));
        assert!(refused("workspaces:\n  protocols: [https, ftp]\n").contains("workspaces.protocols"));
        assert!(refused("workspaces:\n  credentials: {hosts: ['*']}\n").contains("workspaces.credentials.hosts"));
        let c = parse("workspaces:\n  protocols: [file]\n  credentials: {hosts: ['git.example.com:8443']}\n").unwrap();
        assert_eq!(
            (c.workspaces.protocols, c.workspaces.hosts),
            (vec!["file".into()], vec!["git.example.com:8443".into()])
        );
        let defaults = parse("").unwrap().workspaces;
        assert_eq!(
            (defaults.protocols, defaults.hosts),
            (vec!["https".into(), "ssh".into()], vec!["github.com".into()])
        );
        let rooms = "rooms:\n  root: /r\n  egress:\n    hosts: ";
        assert!(refused(&format!("{rooms}['API.example.com']\n")).contains("rooms.egress.hosts"));
        assert!(refused(&format!("{rooms}['a.com:0']\n")).contains("rooms.egress.hosts"));
        assert!(refused(&format!("{rooms}['a com']\n")).contains("rooms.egress.hosts"));
        assert!(refused("rooms:\n  root: /r\n  egress:\n    port: 0\n").contains("rooms.egress.port"));
        assert!(refused("rooms:\n  root: /r\n  egress:\n    port: 443\n").contains("rooms.egress.port"));
        assert!(refused("rooms:\n  root: /r\n  egress:\n    port: 40000\n").contains("rooms.egress.port"));
        let c = parse(&format!("{rooms}['api.example.com', '*.example.org', 'git.example.com:8443']\n")).unwrap();
        let egress = c.rooms.unwrap().egress.unwrap();
        assert_eq!(egress.port, rooms::DEFAULT_EGRESS_PORT);
        assert_eq!(egress.hosts, ["api.example.com", "*.example.org", "git.example.com:8443"]);
        assert!(egress.gateways.is_empty());
        assert!(!egress.session_hosts && egress.namespaces.is_empty(), "no session's hosts, no namespace's list");
        let namespaces = "rooms:\n  root: /r\n  egress:\n    sessionHosts: true\n    namespaces:\n      ";
        let c = parse(&format!("{namespaces}team-a: [pypi.org, '*.pythonhosted.org']\n")).unwrap();
        let egress = c.rooms.unwrap().egress.unwrap();
        assert!(egress.session_hosts);
        assert_eq!(egress.namespaces["team-a"], ["pypi.org", "*.pythonhosted.org"]);
        assert!(refused(&format!("{namespaces}Team_A: [pypi.org]\n")).contains("rooms.egress.namespaces"));
        assert!(
            refused(&format!("{namespaces}team-a: ['pypi.org:99999']\n")).contains("rooms.egress.namespaces.team-a")
        );

        let gateway = |fields: &str| format!("rooms:\n  root: /r\n  egress:\n    gateways:\n      - {{{fields}}}\n");
        let good = "name: a, upstream: 'https://api.a.com/', keyFile: /k";
        let c = parse(&gateway(&format!("{good}, baseUrlEnv: A_BASE_URL, keyEnv: A_KEY"))).unwrap();
        let g = &c.rooms.unwrap().egress.unwrap().gateways[0];
        assert_eq!(
            (g.header.as_str(), g.placeholder.as_str()),
            (rooms::DEFAULT_GATEWAY_HEADER, rooms::DEFAULT_PLACEHOLDER)
        );
        assert!(g.allows("/v1/messages") && g.allows("/v1/messages/count_tokens") && !g.allows("/v1/files"));
        assert_eq!(g.upstream, "https://api.a.com", "no trailing slash kept");
        assert_eq!(
            g.env(3129),
            [
                ("A_BASE_URL".to_string(), "http://127.0.0.1:3129/gateway/a".to_string()),
                ("A_KEY".to_string(), rooms::DEFAULT_PLACEHOLDER.to_string())
            ]
        );
        for (fields, key) in [
            ("name: 'A b', upstream: 'https://a.com', keyFile: /k", "name"),
            ("name: a-, upstream: 'https://a.com', keyFile: /k", "name"),
            ("name: a, upstream: 'ftp://a.com', keyFile: /k", "upstream"),
            ("name: a, upstream: 'https://user:pw@a.com', keyFile: /k", "upstream"),
            ("name: a, upstream: 'https://a.com/?k=v', keyFile: /k", "upstream"),
            ("name: a, upstream: 'https://a.com', keyFile: k", "keyFile"),
            (&format!("{good}, header: 'X-Api-Key'"), "header"),
            (&format!("{good}, keyEnv: 'lower'"), "keyEnv"),
            (&format!("{good}, baseUrlEnv: '1A'"), "baseUrlEnv"),
            (&format!("{good}, placeholder: 'a b'"), "placeholder"),
            (&format!("{good}, paths: ['v1/messages']"), "paths"),
            (&format!("{good}, paths: ['/v1/messages?x=1']"), "paths"),
            (&format!("{good}, paths: ['v1/messages']"), "paths"),
            (&format!("{good}, paths: ['/v1/messages?x=1']"), "paths"),
        ] {
            let e = refused(&gateway(fields));
            assert!(e.contains(&format!("rooms.egress.gateways[0].{key}")), "{fields}: {e}");
        }
        let twice = "rooms:\n  root: /r\n  egress:\n    gateways:\n      - {name: a, upstream: 'https://a.com', keyFile: /k}\n      - {name: a, upstream: 'https://b.com', keyFile: /k}\n";
        assert!(refused(twice).contains("rooms.egress.gateways[1].name"));
    }

    #[test]
    fn malformed_templates_are_refused_naming_the_key() {
        let e = refused("harnesses:\n  x:\n    binary: x\n    interactive: ['--id', '{session}', '{prompt}']\n");
        assert!(e.contains("harnesses.x.interactive") && e.contains("{session}"), "{e}");
        let e = refused("harnesses:\n  claude:\n    resume: ['--continue', '{prompt}']\n");
        assert!(e.contains("harnesses.claude.resume"), "{e}");
    }

    /// Awaits a watch change, failing the test instead of hanging.
    async fn changed<T>(rx: &mut watch::Receiver<T>) {
        tokio::time::timeout(Duration::from_secs(10), rx.changed()).await.expect("a change in time").unwrap();
    }

    #[tokio::test]
    async fn reload_and_bad_reload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.yaml");
        std::fs::write(&path, "defaults:\n  resumeProbeSeconds: 5\n").unwrap();
        assert!(Reloader::start(dir.path().join("missing.yaml"), Duration::from_millis(20)).is_err());
        let reloader = Reloader::start(path.clone(), Duration::from_millis(20)).unwrap();
        let mut config = reloader.config();
        let mut errors = reloader.last_error();
        assert_eq!(config.borrow().defaults.resume_probe_seconds, 5);

        std::fs::write(&path, "defaults:\n  resumeProbeSeconds: 7\n").unwrap();
        changed(&mut config).await;
        assert_eq!(config.borrow_and_update().defaults.resume_probe_seconds, 7);

        std::fs::write(&path, "defaults:\n  resumeProbeSeconds: [\n").unwrap();
        changed(&mut errors).await;
        assert!(errors.borrow_and_update().as_deref().unwrap().contains("agent.yaml"));
        assert_eq!(config.borrow().defaults.resume_probe_seconds, 7, "the last good config stays");
        assert!(!config.has_changed().unwrap());

        // A ConfigMap-style swap: the path is replaced, not written in place.
        let next = dir.path().join("agent.yaml.new");
        std::fs::write(&next, "defaults:\n  resumeProbeSeconds: 9\n").unwrap();
        std::fs::rename(&next, &path).unwrap();
        changed(&mut config).await;
        assert_eq!(config.borrow().defaults.resume_probe_seconds, 9);
        assert_eq!(*errors.borrow(), None);
    }
}
