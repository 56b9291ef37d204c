//! The bridge config's settings of the loops beside the webhooks (below [`super`]): CI results on work items' pull
//! requests (`github.ci`) and the redelivery of what the bridge did not take (`github.redeliver`), each parsed and
//! checked with its key named.

use std::path::Path;

use serde::Deserialize;

use crate::config::ConfigError;

/// Which webhooks' failed deliveries the bridge has GitHub redeliver, and how often it looks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redeliver {
    /// The webhooks.
    pub hooks: Vec<Hook>,
    /// How often each is looked at.
    pub interval: std::time::Duration,
    /// How far back its deliveries are read.
    pub lookback: std::time::Duration,
    /// How old a failed attempt must be before it is asked again (a redelivery asked a moment ago may not be listed
    /// yet).
    pub settle: std::time::Duration,
}

/// A webhook that sends to the bridge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hook {
    /// A repository's webhook: `owner/name` and the hook's id (`X-GitHub-Hook-ID`).
    Repository {
        /// `owner/name`.
        repository: String,
        /// The hook's id.
        id: u64,
    },
    /// The GitHub App's own webhook (read with the App's JWT).
    App,
}

/// The default `github.redeliver.intervalSeconds`.
pub const DEFAULT_REDELIVER_INTERVAL_SECONDS: u64 = 60;
/// The default `github.redeliver.settleSeconds`.
pub const DEFAULT_REDELIVER_SETTLE_SECONDS: u64 = 30;
/// The default `github.redeliver.lookbackSeconds`: GitHub keeps a hook's deliveries for three days.
pub const DEFAULT_REDELIVER_LOOKBACK_SECONDS: u64 = 3 * 3600;

/// How CI results reach a work item's conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CiConfig {
    /// The apps (`app.slug`) that may speak for CI; a `workflow_run` is `github-actions`'s.
    pub apps: Vec<String>,
    /// How long a failed commit's prompt waits for the commit's other failing checks to join it.
    pub quiet: std::time::Duration,
    /// The most CI prompts a session gets without a person prompting it in between; past it, failures are not sent
    /// and the session's Events say why.
    pub max_prompts: u32,
}

/// The default `github.ci.apps`.
pub const DEFAULT_CI_APPS: &[&str] = &["github-actions"];
/// The default `github.ci.quietSeconds`.
pub const DEFAULT_CI_QUIET_SECONDS: u64 = 30;
/// The default `github.ci.maxPrompts`.
pub const DEFAULT_CI_MAX_PROMPTS: u32 = 3;

impl Default for CiConfig {
    fn default() -> Self {
        Self {
            apps: DEFAULT_CI_APPS.iter().map(|a| a.to_string()).collect(),
            quiet: std::time::Duration::from_secs(DEFAULT_CI_QUIET_SECONDS),
            max_prompts: DEFAULT_CI_MAX_PROMPTS,
        }
    }
}

/// Where GitHub's REST API is and how the bridge proves who it is there.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RedeliverFile {
    hooks: Vec<HookFile>,
    interval_seconds: Option<u64>,
    lookback_seconds: Option<u64>,
    settle_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct HookFile {
    repository: Option<String>,
    id: Option<u64>,
    #[serde(default)]
    app: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct CiFile {
    apps: Option<Vec<String>>,
    quiet_seconds: Option<u64>,
    max_prompts: Option<u32>,
}

/// The CI settings over their defaults.
pub(super) fn ci(path: &Path, file: Option<CiFile>) -> Result<CiConfig, ConfigError> {
    let d = CiConfig::default();
    let Some(f) = file else { return Ok(d) };
    let quiet = f.quiet_seconds.map_or(d.quiet, std::time::Duration::from_secs);
    if quiet > std::time::Duration::from_secs(600) {
        let problem = "at most 600: a prompt waits this long for the other checks of its commit".into();
        return Err(ConfigError::Invalid { path: path.into(), key: "github.ci.quietSeconds".into(), problem });
    }
    Ok(CiConfig { apps: f.apps.unwrap_or(d.apps), quiet, max_prompts: f.max_prompts.unwrap_or(d.max_prompts) })
}

/// The redelivery settings: each hook a repository's (`owner/name` and its id) or the App's own (`app: true`, only
/// with App credentials); `api_app` says which credentials `github.api` gives (`None`: none).
pub(super) fn redeliver(path: &Path, r: RedeliverFile, api_app: Option<bool>) -> Result<Redeliver, ConfigError> {
    let invalid = |key: String, problem: &str| ConfigError::Invalid { path: path.into(), key, problem: problem.into() };
    let Some(app_credentials) = api_app else {
        return Err(invalid("github.redeliver".into(), "asking GitHub for failed deliveries needs github.api"));
    };
    let mut hooks = Vec::new();
    for (i, h) in r.hooks.into_iter().enumerate() {
        let key = format!("github.redeliver.hooks[{i}]");
        hooks.push(match (h.repository, h.id, h.app) {
            (Some(repository), Some(id), false) if repository.matches('/').count() == 1 => {
                Hook::Repository { repository, id }
            }
            (None, None, true) if app_credentials => Hook::App,
            (None, None, true) => return Err(invalid(key, "the App's own webhook needs github.api.app credentials")),
            _ => return Err(invalid(key, "either repository (owner/name) and id, or app: true")),
        });
    }
    let secs = |s: Option<u64>, d: u64| std::time::Duration::from_secs(s.unwrap_or(d).max(1));
    Ok(Redeliver {
        hooks,
        interval: secs(r.interval_seconds, DEFAULT_REDELIVER_INTERVAL_SECONDS),
        lookback: secs(r.lookback_seconds, DEFAULT_REDELIVER_LOOKBACK_SECONDS),
        settle: secs(r.settle_seconds, DEFAULT_REDELIVER_SETTLE_SECONDS),
    })
}
