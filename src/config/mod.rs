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
mod tests;
