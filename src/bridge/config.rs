//! The bridge's config file (YAML): body limit, GitHub secret and filters, generic token, routing rules, prompt
//! template. Secrets are read when the config is loaded; a secret that cannot be read refuses the config.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use regex::Regex;
use serde::Deserialize;

pub use crate::api::slug;
pub use loops::{
    CiConfig, DEFAULT_CI_APPS, DEFAULT_CI_MAX_PROMPTS, DEFAULT_CI_QUIET_SECONDS, DEFAULT_REDELIVER_INTERVAL_SECONDS,
    DEFAULT_REDELIVER_LOOKBACK_SECONDS, DEFAULT_REDELIVER_SETTLE_SECONDS, Hook, Redeliver,
};
use loops::{CiFile, RedeliverFile, ci, redeliver};

mod loops;
mod session;
use crate::config::ConfigError;
use session::{ApprovalFile, BudgetFile, EgressFile};

/// The default `maxBodyBytes`: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// The default prompt: who, where, what, link, body.
pub const DEFAULT_PROMPT_TEMPLATE: &str =
    "{sender} {event} ({action}) on {repository}#{number}: {title}\n{url}\n\n{body}";

/// The bridge's configuration, validated, secrets resolved.
#[derive(Clone, Debug)]
pub struct BridgeConfig {
    /// Larger bodies are refused with 413.
    pub max_body_bytes: usize,
    /// GitHub webhooks; `None`: `/webhooks/github` answers 404.
    pub github: Option<GithubConfig>,
    /// The generic webhook; `None`: `/webhooks/generic` answers 404.
    pub generic: Option<GenericConfig>,
    /// Routing rules, first match wins.
    pub routes: Vec<Route>,
    /// How an event becomes a prompt.
    pub prompt_template: String,
}

/// GitHub settings.
#[derive(Clone)]
pub struct GithubConfig {
    /// The webhook secret (HMAC-SHA256 key).
    pub secret: Vec<u8>,
    /// Senders whose events are ignored (the agents' own bot: no feedback loops).
    pub ignore_senders: Vec<String>,
    /// Event type to accepted actions.
    pub events: BTreeMap<String, Vec<String>>,
    /// The roles (`author_association`) whose comments, issues and reviews may prompt an agent; a route may say
    /// otherwise ([`Route::allowed_author_associations`]).
    pub allowed_author_associations: Vec<String>,
    /// GitHub's REST API, for the feedback on comments; `None`: no feedback (the bridge holds no credentials).
    pub api: Option<ApiConfig>,
    /// The feedback of a route that names none: `Reactions` with `api`, else `Off`.
    pub feedback: Feedback,
    /// CI results on work items' pull requests.
    pub ci: CiConfig,
    /// Bot logins whose reviews and review comments prompt (bots have no role the person rule could check); empty
    /// by default.
    pub bot_reviewers: Vec<String>,
    /// The hooks whose failed deliveries are asked of GitHub again (needs `api`); `None`: none are.
    pub redeliver: Option<Redeliver>,
    /// The roles whose `/approve` and `/deny` comments answer a harness's permission request, among those that may
    /// prompt by the route (`None`: every role that may prompt).
    pub approvers: Option<Vec<String>>,
}

#[derive(Clone)]
pub struct ApiConfig {
    /// `https://api.github.com`, or `https://HOST/api/v3` for GitHub Enterprise Server.
    pub base_url: String,
    /// The credentials.
    pub auth: ApiAuth,
}

/// The bridge's GitHub credentials (mounted from a Secret; the agent and the harnesses never see them).
#[derive(Clone)]
pub enum ApiAuth {
    /// A token, read from this file at each use.
    TokenFile(PathBuf),
    /// A GitHub App: its id, its private key (PEM, read when the config is loaded), and optionally the installation.
    App {
        /// The App's id.
        id: u64,
        /// The private key, PEM.
        private_key: Vec<u8>,
        /// The installation to use; `None`: looked up per account.
        installation_id: Option<u64>,
    },
}

impl std::fmt::Debug for ApiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = match &self.auth {
            ApiAuth::TokenFile(path) => format!("token file {}", path.display()),
            ApiAuth::App { id, installation_id, .. } => format!("App {id} (installation {installation_id:?})"),
        };
        f.debug_struct("ApiConfig").field("base_url", &self.base_url).field("auth", &auth).finish()
    }
}

/// What the bridge tells a GitHub comment about its WorkEvent.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum Feedback {
    /// Nothing.
    #[default]
    Off,
    /// A reaction: `eyes` once `Delivered`, `confused` once `Failed`.
    Reactions,
    /// The reactions, and on `Failed` one short comment with the reason.
    Comments,
}

/// What the bridge posts on a work item's issue of its harness's permission requests and waits for a person.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum ApprovalComments {
    /// Each request with what it asks (as status shows it: cut, one line, credential shapes redacted), and each wait
    /// with the harness's words.
    #[default]
    Full,
    /// Each request's tool, id and deadline, and that a harness waits, without what it asks or says: a harness that
    /// read untrusted text may put anything it can read into a request, and the issue may be public.
    Brief,
    /// Nothing.
    Off,
}

/// What closing an issue or pull request (`issues: closed`, `pull_request: closed`, merged or not) does to its
/// WorkSession; `reopened` undoes it.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum OnClose {
    /// `spec.archived`: the harness stopped once quiet, the conversation kept; an event or a reopening resumes it.
    #[default]
    Archive,
    /// Archived, then deleted `deleteAfterSeconds` later unless reopened meanwhile.
    Delete,
    /// Nothing.
    Nothing,
}

/// Every `author_association` GitHub sends.
pub const AUTHOR_ASSOCIATIONS: &[&str] =
    &["OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "MANNEQUIN", "NONE"];

/// Who may prompt an agent unless the config says otherwise: people with a role in the repository.
pub const DEFAULT_AUTHOR_ASSOCIATIONS: &[&str] = &["OWNER", "MEMBER", "COLLABORATOR"];

impl std::fmt::Debug for GithubConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubConfig")
            .field("secret", &"<redacted>")
            .field("ignore_senders", &self.ignore_senders)
            .field("allowed_author_associations", &self.allowed_author_associations)
            .field("api", &self.api)
            .field("feedback", &self.feedback)
            .field("ci", &self.ci)
            .field("bot_reviewers", &self.bot_reviewers)
            .field("approvers", &self.approvers)
            .field("redeliver", &self.redeliver)
            .finish()
    }
}

/// Generic webhook settings.
#[derive(Clone)]
pub struct GenericConfig {
    /// The bearer token.
    pub token: String,
    /// Namespace of a request that names none.
    pub namespace: String,
    /// Other namespaces a request may name (the token is trusted with these and `namespace` only).
    pub namespaces: Vec<String>,
}

impl GenericConfig {
    /// Whether a request with this token may write to `namespace`.
    pub fn allows(&self, namespace: &str) -> bool {
        namespace == self.namespace || self.namespaces.iter().any(|n| n == namespace)
    }
}

impl std::fmt::Debug for GenericConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenericConfig")
            .field("token", &"<redacted>")
            .field("namespace", &self.namespace)
            .field("namespaces", &self.namespaces)
            .finish()
    }
}

/// A routing rule: which repositories go where, and how their WorkSessions are made.
#[derive(Clone, Debug)]
pub struct Route {
    /// `owner/name` glob (`*` and `?`).
    pub repository: Regex,
    /// The glob as written, for logs.
    pub pattern: String,
    /// Namespace of the WorkSession and its WorkEvents.
    pub namespace: String,
    /// The node that runs it; `None`: the controller places each session.
    pub node_name: Option<String>,
    /// The harness profile.
    pub harness: String,
    /// Working directory template (`{owner}`, `{repo}`, `{number}`).
    pub workdir: String,
    /// Work item template; default [`DEFAULT_WORK_ITEM`].
    pub work_item: String,
    /// The `spec.workspace` of the sessions it creates, as templates (`url`, `ref`), if any.
    pub workspace: Option<crate::api::WorkspaceSpec>,
    /// The `spec.egress` of the sessions it creates (the hosts their harnesses may reach beside their node's).
    pub egress: Option<crate::api::EgressSpec>,
    /// The `spec.budget` of the sessions it creates.
    pub budget: Option<crate::api::BudgetSpec>,
    /// The `spec.approval` of the sessions it creates: how their permission requests are answered without a person.
    pub approval: Option<crate::api::ApprovalSpec>,
    /// Who may prompt through this route, instead of `github.allowedAuthorAssociations`.
    pub allowed_author_associations: Option<Vec<String>>,
    /// The most WorkSessions this route keeps (counted on the store by the [`ROUTE_LABEL`] it puts on them); past it
    /// an event that would create one is ignored.
    pub max_sessions: Option<usize>,
    /// The value of [`ROUTE_LABEL`] on the sessions it creates: the [`slug`] of its pattern.
    pub id: String,
    /// What its GitHub comments are told about their WorkEvents.
    pub feedback: Feedback,
    /// What closing a work item does to its session.
    pub on_close: OnClose,
    /// With [`OnClose::Delete`]: how long after closing the session is deleted.
    pub delete_after: std::time::Duration,
    /// Whether a passing CI result is a prompt too (a failing one always is).
    pub ci_on_success: bool,
    /// Whether the issue each of its sessions came from gets one status comment, edited in place.
    pub status_comment: bool,
    /// What the issue each of its sessions came from is told of its permission requests and waits.
    pub approval_comments: ApprovalComments,
}

/// The default `deleteAfterSeconds`: a week.
pub const DEFAULT_DELETE_AFTER_SECONDS: u64 = 7 * 24 * 3600;

pub use crate::api::ROUTE_LABEL;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BridgeFile {
    max_body_bytes: Option<usize>,
    github: Option<GithubFile>,
    generic: Option<GenericFile>,
    #[serde(default)]
    routes: Vec<RouteFile>,
    prompt_template: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GithubFile {
    secret_file: Option<PathBuf>,
    secret_env: Option<String>,
    #[serde(default)]
    ignore_senders: Vec<String>,
    events: Option<BTreeMap<String, Vec<String>>>,
    allowed_author_associations: Option<Vec<String>>,
    api: Option<ApiFile>,
    feedback: Option<Feedback>,
    ci: Option<CiFile>,
    #[serde(default)]
    bot_reviewers: Vec<String>,
    redeliver: Option<RedeliverFile>,
    approvers: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ApiFile {
    base_url: Option<String>,
    token_file: Option<PathBuf>,
    app: Option<crate::config::workspaces::AppFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GenericFile {
    token_file: Option<PathBuf>,
    token_env: Option<String>,
    namespace: Option<String>,
    #[serde(default)]
    namespaces: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RouteFile {
    repository: String,
    namespace: String,
    #[serde(default)]
    node_name: Option<String>,
    harness: String,
    workdir: String,
    work_item: Option<String>,
    workspace: Option<crate::api::WorkspaceSpec>,
    egress: Option<EgressFile>,
    budget: Option<BudgetFile>,
    approval: Option<ApprovalFile>,
    allowed_author_associations: Option<Vec<String>>,
    max_sessions: Option<usize>,
    feedback: Option<Feedback>,
    on_close: Option<OnClose>,
    delete_after_seconds: Option<u64>,
    #[serde(default)]
    ci_on_success: bool,
    #[serde(default)]
    status_comment: bool,
    #[serde(default)]
    approval_comments: ApprovalComments,
}

/// `list` when every value is an `author_association` GitHub sends.
fn associations(list: Vec<String>, key: String, path: &Path) -> Result<Vec<String>, ConfigError> {
    match list.iter().find(|a| !AUTHOR_ASSOCIATIONS.contains(&a.as_str())) {
        Some(bad) => Err(ConfigError::Invalid {
            path: path.into(),
            key,
            problem: format!("{bad:?} is not an author_association (known: {})", AUTHOR_ASSOCIATIONS.join(", ")),
        }),
        None => Ok(list),
    }
}

/// The default accepted GitHub events and actions.
pub fn default_github_events() -> BTreeMap<String, Vec<String>> {
    [
        ("issue_comment", "created"),
        ("issues", "opened"),
        ("pull_request_review_comment", "created"),
        ("pull_request_review", "submitted"),
        ("check_run", "completed"),
    ]
    .into_iter()
    .map(|(e, a)| (e.to_string(), vec![a.to_string()]))
    .collect()
}

/// A glob over `owner/name` as an anchored regex (`*` and `?` stay within the owner or the name).
fn glob(pattern: &str) -> Regex {
    let mut re = String::from("^");
    for c in pattern.chars() {
        match c {
            '*' => re.push_str("[^/]*"), // an owner or a name, never across the `/`
            '?' => re.push_str("[^/]"),
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re.push('$');
    Regex::new(&re).expect("an escaped glob is a valid regex")
}

fn secret(path: &Path, key: &str, file: Option<&PathBuf>, env: Option<&String>) -> Result<Vec<u8>, ConfigError> {
    let invalid = |problem: String| ConfigError::Invalid { path: path.into(), key: key.into(), problem };
    let value = match (file, env) {
        (Some(f), None) => std::fs::read(f).map_err(|e| invalid(format!("cannot read {}: {e}", f.display())))?,
        (None, Some(e)) => {
            std::env::var(e).map_err(|_| invalid(format!("environment variable {e} is not set")))?.into_bytes()
        }
        _ => return Err(invalid("set exactly one of the file and the environment variable".into())),
    };
    let trimmed = value.trim_ascii().to_vec();
    if trimmed.is_empty() {
        return Err(invalid("the secret is empty".into()));
    }
    Ok(trimmed)
}

/// The API settings, the private key read and checked.
fn api(path: &Path, a: ApiFile) -> Result<ApiConfig, ConfigError> {
    let invalid = |key: &str, problem: String| ConfigError::Invalid { path: path.into(), key: key.into(), problem };
    let base_url = a.base_url.unwrap_or_else(|| crate::github::DEFAULT_BASE_URL.into());
    crate::github::base_url_allowed(&base_url).map_err(|why| invalid("github.api.baseUrl", why))?;
    let auth = match (a.token_file, a.app) {
        (Some(file), None) => {
            // Read now too, so a missing file refuses the config instead of every call failing later.
            std::fs::metadata(&file)
                .map_err(|e| invalid("github.api.tokenFile", format!("cannot read {}: {e}", file.display())))?;
            ApiAuth::TokenFile(file)
        }
        (None, Some(app)) => {
            let key = "github.api.app.privateKeyFile";
            let pem = std::fs::read(&app.private_key_file)
                .map_err(|e| invalid(key, format!("cannot read {}: {e}", app.private_key_file.display())))?;
            crate::github::app::App::new(app.id, &pem, app.installation_id).map_err(|why| invalid(key, why))?;
            ApiAuth::App { id: app.id, private_key: pem, installation_id: app.installation_id }
        }
        _ => return Err(invalid("github.api", "set exactly one of tokenFile and app".into())),
    };
    Ok(ApiConfig { base_url, auth })
}

impl BridgeConfig {
    /// Parses and validates bridge config YAML, reading the secrets it names.
    pub fn parse(yaml: &str, path: &Path) -> Result<Self, ConfigError> {
        let file: BridgeFile = serde_yaml_ng::from_str(if yaml.trim().is_empty() { "{}" } else { yaml })
            .map_err(|e| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
        let invalid = |key: String, problem: String| ConfigError::Invalid { path: path.into(), key, problem };
        let github = match file.github {
            Some(g) => {
                let api = g.api.map(|a| api(path, a)).transpose()?;
                let api_app = api.as_ref().map(|a| matches!(a.auth, ApiAuth::App { .. }));
                let feedback = g.feedback.unwrap_or(if api.is_some() { Feedback::Reactions } else { Feedback::Off });
                Some(GithubConfig {
                    secret: secret(path, "github.secretFile", g.secret_file.as_ref(), g.secret_env.as_ref())?,
                    ignore_senders: g.ignore_senders,
                    events: g.events.unwrap_or_else(default_github_events),
                    allowed_author_associations: associations(
                        g.allowed_author_associations
                            .unwrap_or_else(|| DEFAULT_AUTHOR_ASSOCIATIONS.iter().map(|a| a.to_string()).collect()),
                        "github.allowedAuthorAssociations".into(),
                        path,
                    )?,
                    api,
                    feedback,
                    ci: ci(path, g.ci)?,
                    bot_reviewers: g.bot_reviewers,
                    redeliver: g.redeliver.map(|r| redeliver(path, r, api_app)).transpose()?,
                    approvers: g.approvers.map(|a| associations(a, "github.approvers".into(), path)).transpose()?,
                })
            }
            None => None,
        };
        let api_set = github.as_ref().is_some_and(|g| g.api.is_some());
        let default_feedback = github.as_ref().map_or(Feedback::Off, |g| g.feedback);
        if default_feedback != Feedback::Off && !api_set {
            return Err(invalid("github.feedback".into(), "feedback needs github.api (credentials)".into()));
        }
        let generic = match file.generic {
            Some(g) => {
                let token = secret(path, "generic.tokenFile", g.token_file.as_ref(), g.token_env.as_ref())?;
                let token = String::from_utf8(token)
                    .map_err(|_| invalid("generic.tokenFile".into(), "the token is not UTF-8".into()))?;
                let namespace = g.namespace.unwrap_or_else(|| "default".into());
                Some(GenericConfig { token, namespace, namespaces: g.namespaces })
            }
            None => None,
        };
        let mut routes = Vec::new();
        for (i, r) in file.routes.into_iter().enumerate() {
            if r.repository.matches('/').count() != 1 {
                // `*` stays within the owner or the name, so a glob without one `/` matches no repository at all.
                let problem = format!("{:?} is not an owner/name glob (every repository: '*/*')", r.repository);
                return Err(invalid(format!("routes[{i}].repository"), problem));
            }
            if !r.workdir.starts_with('/') {
                return Err(invalid(format!("routes[{i}].workdir"), "must be an absolute path template".into()));
            }
            let allowed = r
                .allowed_author_associations
                .map(|list| associations(list, format!("routes[{i}].allowedAuthorAssociations"), path));
            let feedback = r.feedback.unwrap_or(default_feedback);
            if feedback != Feedback::Off && !api_set {
                return Err(invalid(format!("routes[{i}].feedback"), "feedback needs github.api (credentials)".into()));
            }
            let work_item = r.work_item.as_deref().unwrap_or(DEFAULT_WORK_ITEM);
            if r.on_close != Some(OnClose::Nothing) && !work_item.contains("{number}") {
                // One session for many items: whoever closes one of them (its author, a stranger on a public
                // repository) would archive every other's.
                return Err(invalid(
                    format!("routes[{i}].onClose"),
                    "a work item without {number} is shared by many issues: set onClose: Nothing".into(),
                ));
            }
            if r.status_comment && !r.work_item.as_deref().unwrap_or(DEFAULT_WORK_ITEM).contains("{number}") {
                let why =
                    "a work item without {number} is shared by many issues: its comment would be the first's only";
                return Err(invalid(format!("routes[{i}].statusComment"), why.into()));
            }
            if r.status_comment && !api_set {
                return Err(invalid(
                    format!("routes[{i}].statusComment"),
                    "a status comment needs github.api (credentials)".into(),
                ));
            }
            let egress = r.egress.map(EgressFile::into_spec).transpose();
            let egress = egress.map_err(|problem| invalid(format!("routes[{i}].egress.hosts"), problem))?;
            let budget = r.budget.map(BudgetFile::into_spec).transpose();
            let budget = budget.map_err(|(key, problem)| invalid(format!("routes[{i}].{key}"), problem))?;
            let approval = r.approval.map(ApprovalFile::into_spec);
            if let Some((key, problem)) = approval.as_ref().and_then(crate::api::ApprovalSpec::problem) {
                return Err(invalid(format!("routes[{i}].approval.{key}"), problem));
            }
            if r.delete_after_seconds.is_some() && r.on_close != Some(OnClose::Delete) {
                return Err(invalid(format!("routes[{i}].deleteAfterSeconds"), "only with onClose: Delete".into()));
            }
            routes.push(Route {
                feedback,
                on_close: r.on_close.unwrap_or_default(),
                delete_after: std::time::Duration::from_secs(
                    r.delete_after_seconds.unwrap_or(DEFAULT_DELETE_AFTER_SECONDS),
                ),
                repository: glob(&r.repository),
                id: slug(&r.repository),
                allowed_author_associations: allowed.transpose()?,
                max_sessions: r.max_sessions,
                pattern: r.repository,
                namespace: r.namespace,
                node_name: r.node_name,
                harness: r.harness,
                workdir: r.workdir,
                work_item: r.work_item.unwrap_or_else(|| DEFAULT_WORK_ITEM.into()),
                workspace: r.workspace,
                egress,
                budget,
                approval,
                ci_on_success: r.ci_on_success,
                status_comment: r.status_comment,
                approval_comments: r.approval_comments,
            });
        }
        Ok(Self {
            max_body_bytes: file.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES),
            github,
            generic,
            routes,
            prompt_template: file.prompt_template.unwrap_or_else(|| DEFAULT_PROMPT_TEMPLATE.into()),
        })
    }

    /// The first rule routing `owner/name`.
    pub fn route(&self, repository: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.repository.is_match(repository))
    }
}

/// Fills `{key}` placeholders from `vars`; unknown placeholders stay as written.
pub fn render(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = template.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

/// The work item of a route that names none: the owner is part of it, so `octo/api#12` and `acme/api#12` are two
/// sessions.
pub const DEFAULT_WORK_ITEM: &str = "{owner}-{repo}-{number}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_config_with_secrets_from_file_and_env() {
        let dir = tempfile::tempdir().unwrap();
        let secret_file = dir.path().join("secret");
        std::fs::write(&secret_file, "s3cret\n").unwrap();
        let yaml = format!(
            "maxBodyBytes: 2048\ngithub:\n  secretFile: {}\n  ignoreSenders: [bot]\ngeneric:\n  tokenEnv: PATH\nroutes:\n  - repository: 'octo-org/*'\n    namespace: agents\n    nodeName: node-a\n    harness: claude\n    workdir: /srv/{{owner}}/{{repo}}\n    workspace: {{url: 'https://github.com/{{owner}}/{{repo}}.git', ref: main}}\n",
            secret_file.display()
        );
        let c = BridgeConfig::parse(&yaml, Path::new("bridge.yaml")).unwrap();
        assert_eq!(c.max_body_bytes, 2048);
        let gh = c.github.as_ref().unwrap();
        assert_eq!(
            (gh.secret.as_slice(), gh.events["issue_comment"].as_slice()),
            (&b"s3cret"[..], &["created".to_string()][..])
        );
        assert!(!format!("{gh:?}").contains("s3cret"), "secrets never print");
        assert_eq!(c.generic.as_ref().unwrap().namespace, "default");
        assert_eq!(c.route("octo-org/hello").unwrap().work_item, "{owner}-{repo}-{number}");
        let workspace = c.route("octo-org/hello").unwrap().workspace.clone().unwrap();
        assert_eq!(
            (workspace.url.as_str(), workspace.r#ref.as_deref()),
            ("https://github.com/{owner}/{repo}.git", Some("main"))
        );
        assert!(c.route("other/hello").is_none());
        assert!(c.route("octo-orgx/hello").is_none(), "anchored");
        assert!(c.route("octo-org/a-much-longer-name").is_some(), "* spans characters");
        assert!(c.route("octo.org/hello").is_none(), "the dot is literal");
    }

    #[test]
    fn refused_naming_the_key() {
        let e = |yaml: &str| BridgeConfig::parse(yaml, Path::new("bridge.yaml")).unwrap_err().to_string();
        assert!(e("github:\n  secretFile: /nonexistent/secret\n").contains("github.secretFile"));
        assert!(e("github:\n  secretEnv: WORKSESSION_NO_SUCH_VARIABLE\n").contains("WORKSESSION_NO_SUCH_VARIABLE"));
        assert!(e("github: {}\n").contains("exactly one"));
        assert!(e("routes:\n  - repository: x\n").contains("routes"));
        assert!(e("maxBodyBytes: lots\n").contains("maxBodyBytes"));
        assert!(e("nope: 1\n").contains("nope"));
        let route = "routes:\n  - {repository: o/r, namespace: a, harness: claude, workdir: /w, egress: {hosts: [";
        let bad = e(&format!("{route}'API.example.com']}}}}\n"));
        assert!(bad.contains("routes[0].egress.hosts"), "{bad}");
        assert!(e(&format!("{route}'*']}}}}\n")).contains("routes[0].egress.hosts"));
        let misspelt =
            "routes:\n  - {repository: o/r, namespace: a, harness: claude, workdir: /w, egress: {host: [a.com]}}\n";
        assert!(e(misspelt).contains("host"), "{}", e(misspelt));
        let route = "routes:\n  - {repository: o/r, namespace: a, harness: claude, workdir: /w, budget: ";
        assert!(e(&format!("{route}{{cost: '5 dollars'}}}}\n")).contains("routes[0].budget.cost"));
        assert!(e(&format!("{route}{{tokens: 0}}}}\n")).contains("routes[0].budget.tokens"));
        assert!(e(&format!("{route}{{dollars: 5}}}}\n")).contains("dollars"), "a misspelt key is refused");
        let route = "routes:\n  - {repository: o/r, namespace: a, harness: claude, workdir: /w, approval: ";
        assert!(e(&format!("{route}{{waitSeconds: 1}}}}\n")).contains("routes[0].approval.waitSeconds"));
        assert!(
            e(&format!("{route}{{rules: [{{match: 'rm -rf', decision: Allow}}]}}}}\n"))
                .contains("routes[0].approval.rules.match")
        );
        assert!(e(&format!("{route}{{wait: 60}}}}\n")).contains("wait"), "a misspelt key is refused");
    }

    #[test]
    fn templates_and_slugs() {
        assert_eq!(render("{repo}-{number}", &[("repo", "Hello.World"), ("number", "42")]), "Hello.World-42");
        // A slug that lost information carries a hash of the original (see api::shapes' tests).
        assert!(slug("Hello.World-42").starts_with("hello-world-42-"), "{}", slug("Hello.World-42"));
        assert_eq!(slug("hello-world-42"), "hello-world-42");
        assert_eq!(slug(&"a".repeat(80)).len(), 63);
    }

    #[test]
    fn default_work_items_name_the_owner_and_long_slugs_stay_distinct() {
        let render = |repo: &str| {
            slug(&super::render(
                DEFAULT_WORK_ITEM,
                &[
                    ("owner", repo.split('/').next().unwrap()),
                    ("repo", repo.split('/').nth(1).unwrap()),
                    ("number", "12"),
                ],
            ))
        };
        assert_eq!(render("octo/api"), "octo-api-12");
        assert_ne!(render("octo/api"), render("acme/api"));
        let long = |tail: &str| slug(&format!("{}-{tail}", "a-very-long-organisation-name/".repeat(3)));
        let (one, two) = (long("repo-1"), long("repo-2"));
        assert!(one.len() <= 63 && two.len() <= 63, "{one} {two}");
        assert_ne!(one, two, "the same first 63 characters, two sessions");
        assert_eq!(one, long("repo-1"), "stable");
        assert!(one.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') && !one.ends_with('-'));
    }
}
