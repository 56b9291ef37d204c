//! `workspaces` in the agent config: where and how the agent prepares `spec.workspace` checkouts
//! ([`crate::node::workspace`]), and which repositories a namespace may check out.

use std::path::PathBuf;
use std::time::Duration;

/// The transports git may use by default: `file://` (any repository on the node) and plain `http` are refused.
pub const DEFAULT_PROTOCOLS: &[&str] = &["https", "ssh"];
/// Where the token goes by default.
pub const DEFAULT_TOKEN_HOSTS: &[&str] = &["github.com"];

/// How long one git command may run by default.
pub const DEFAULT_GIT_TIMEOUT: Duration = Duration::from_secs(600);

/// How the agent prepares `spec.workspace` checkouts (`workspaces`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspacesConfig {
    /// Where the one clone per repository lives (`workspaces.mirrors`; default: `<harnessHome or HOME>/.cache/
    /// worksession/repos`).
    pub mirrors: Option<PathBuf>,
    /// A file holding a token for https remotes (`workspaces.credentials.tokenFile`); used when it exists.
    pub token_file: Option<PathBuf>,
    /// The user name sent with the token (`workspaces.credentials.username`, default `x-access-token`).
    pub username: String,
    /// An SSH private key for ssh remotes (`workspaces.credentials.sshKeyFile`); used when it exists.
    pub ssh_key_file: Option<PathBuf>,
    /// The known hosts the SSH key may talk to (`workspaces.credentials.knownHostsFile`); with it, unknown host
    /// keys are refused.
    pub known_hosts_file: Option<PathBuf>,
    /// How long one git command may run (`workspaces.gitTimeoutSeconds`, default 600).
    pub git_timeout: Duration,
    /// The hosts (`host` or `host:port`) the token is sent to (`workspaces.credentials.hosts`, default `github.com`),
    /// over https (and http where `protocols` allows it).
    pub hosts: Vec<String>,
    /// The transports git may use (`workspaces.protocols`, default `https` and `ssh`; `http`, `file` and `git` only
    /// where the config allows them).
    pub protocols: Vec<String>,
    /// Which repositories each namespace may check out (`workspaces.repositories`): namespace to URL globs (`*`
    /// matches any characters, `?` one), the key `*` for namespaces not listed; `None`: any repository anywhere.
    pub repositories: Option<std::collections::BTreeMap<String, Vec<String>>>,
    /// How a running harness gets a short-lived token to push its branch and open its pull request
    /// (`workspaces.push`); `None`: it gets none.
    pub push: Option<PushConfig>,
}

/// `workspaces.push`: a GitHub App whose installation tokens, each for one session's repository with only
/// [`PUSH_PERMISSIONS`], the agent hands to that session's harness and renews before they expire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushConfig {
    /// GitHub's API (`apiUrl`, default `https://api.github.com`; `https://HOST/api/v3` for GitHub Enterprise Server).
    pub api_url: String,
    /// The git host its tokens are for (`host`; default the API's: `github.com` for `api.github.com`, else the API
    /// URL's host): only a checkout of it gets one, and the token is sent to it alone.
    pub host: String,
    /// The App's id (`app.id`).
    pub app_id: u64,
    /// Its private key (PEM), read from `app.privateKeyFile` when the config is loaded.
    pub private_key: Vec<u8>,
    /// The installation (`app.installationId`); `None`: looked up per repository owner.
    pub installation_id: Option<u64>,
}

/// What a push token may do: write the repository's contents (push a branch) and its pull requests (open one).
pub const PUSH_PERMISSIONS: &[(&str, &str)] = &[("contents", "write"), ("pull_requests", "write")];

impl WorkspacesConfig {
    /// Whether a WorkSession of `namespace` may check out `url`.
    pub fn allows(&self, namespace: &str, url: &str) -> bool {
        let Some(repositories) = &self.repositories else { return true };
        let globs = repositories.get(namespace).or_else(|| repositories.get("*"));
        globs.is_some_and(|globs| globs.iter().any(|g| glob_match(g, url)))
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any characters and `?` for one.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            (pi, ti) = (pi + 1, ti + 1);
        } else if pi < p.len() && p[pi] == '*' {
            (star, mark, pi) = (Some(pi), ti, pi + 1);
        } else if let Some(s) = star {
            (pi, mark) = (s + 1, mark + 1);
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

impl Default for WorkspacesConfig {
    fn default() -> Self {
        Self {
            mirrors: None,
            token_file: None,
            username: "x-access-token".into(),
            ssh_key_file: None,
            known_hosts_file: None,
            git_timeout: DEFAULT_GIT_TIMEOUT,
            hosts: DEFAULT_TOKEN_HOSTS.iter().map(|h| h.to_string()).collect(),
            protocols: DEFAULT_PROTOCOLS.iter().map(|p| p.to_string()).collect(),
            repositories: None,
            push: None,
        }
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
/// `workspaces` of the agent config file, as written.
pub(crate) struct WorkspacesFile {
    mirrors: Option<PathBuf>,
    #[serde(default)]
    credentials: CredentialsFile,
    git_timeout_seconds: Option<u64>,
    protocols: Option<Vec<String>>,
    repositories: Option<std::collections::BTreeMap<String, Vec<String>>>,
    push: Option<PushFile>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PushFile {
    api_url: Option<String>,
    host: Option<String>,
    app: AppFile,
}

/// A GitHub App's credentials as a config file writes them (`app:` here and in the bridge's `github:`).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct AppFile {
    pub(crate) id: u64,
    pub(crate) private_key_file: PathBuf,
    pub(crate) installation_id: Option<u64>,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CredentialsFile {
    token_file: Option<PathBuf>,
    username: Option<String>,
    ssh_key_file: Option<PathBuf>,
    known_hosts_file: Option<PathBuf>,
    hosts: Option<Vec<String>>,
}

impl WorkspacesFile {
    /// The validated config; `invalid(key, problem)` makes the error naming the key.
    pub(crate) fn into_config<E>(self, invalid: &dyn Fn(String, String) -> E) -> Result<WorkspacesConfig, E> {
        let WorkspacesFile { mirrors, credentials: c, git_timeout_seconds, protocols, repositories, push } = self;
        let mut workspaces = WorkspacesConfig { repositories, ..Default::default() };
        if let Some(protocols) = protocols {
            if let Some(bad) = protocols.iter().find(|p| !["https", "ssh", "http", "file", "git"].contains(&p.as_str()))
            {
                return Err(invalid(
                    "workspaces.protocols".into(),
                    format!("{bad:?} is not https, ssh, http, file or git"),
                ));
            }
            workspaces.protocols = protocols;
        }
        if let Some(hosts) = c.hosts {
            let host = regex::Regex::new(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$").unwrap();
            if let Some(bad) = hosts.iter().find(|h| !host.is_match(h)) {
                return Err(invalid(
                    "workspaces.credentials.hosts".into(),
                    format!("{bad:?} is not a host or host:port"),
                ));
            }
            workspaces.hosts = hosts;
        }
        for (key, path) in [
            ("workspaces.mirrors", &mirrors),
            ("workspaces.credentials.tokenFile", &c.token_file),
            ("workspaces.credentials.sshKeyFile", &c.ssh_key_file),
            ("workspaces.credentials.knownHostsFile", &c.known_hosts_file),
        ] {
            if path.as_ref().is_some_and(|p| !p.is_absolute()) {
                return Err(invalid(key.into(), "must be an absolute path".into()));
            }
        }
        if let Some(secs) = git_timeout_seconds {
            if !(1..=86_400).contains(&secs) {
                return Err(invalid("workspaces.gitTimeoutSeconds".into(), "must be between 1 and 86400".into()));
            }
            workspaces.git_timeout = Duration::from_secs(secs);
        }
        workspaces.mirrors = mirrors;
        workspaces.token_file = c.token_file;
        workspaces.ssh_key_file = c.ssh_key_file;
        workspaces.known_hosts_file = c.known_hosts_file;
        if let Some(user) = c.username {
            workspaces.username = user;
        }
        if let Some(push) = push {
            let api_url = push.api_url.unwrap_or_else(|| super::DEFAULT_GITHUB_API.into());
            super::base_url_allowed(&api_url).map_err(|why| invalid("workspaces.push.apiUrl".into(), why))?;
            if workspaces.repositories.is_none() {
                // Else any tenant's session could name any repository the App is installed on and push to it.
                let problem = "needs workspaces.repositories: the repositories each namespace may check out (and push)";
                return Err(invalid("workspaces.push".into(), problem.into()));
            }
            let host = push.host.unwrap_or_else(|| git_host_of(&api_url));
            let hosts = regex::Regex::new(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$").unwrap();
            if !hosts.is_match(&host) {
                return Err(invalid("workspaces.push.host".into(), format!("{host:?} is not a host or host:port")));
            }
            let key = "workspaces.push.app.privateKeyFile";
            let file = &push.app.private_key_file;
            if !file.is_absolute() {
                return Err(invalid(key.into(), "must be an absolute path".into()));
            }
            let pem =
                std::fs::read(file).map_err(|e| invalid(key.into(), format!("cannot read {}: {e}", file.display())))?;
            // The key itself is parsed where it signs (the agent says so at its first grant).
            if !String::from_utf8_lossy(&pem).contains("PRIVATE KEY-----") {
                return Err(invalid(key.into(), format!("{} holds no PEM private key", file.display())));
            }
            workspaces.push = Some(PushConfig {
                api_url,
                host,
                app_id: push.app.id,
                private_key: pem,
                installation_id: push.app.installation_id,
            });
        }
        Ok(workspaces)
    }
}

/// The git host of a GitHub API: `github.com` for `api.github.com`, `SUB.ghe.com` for `api.SUB.ghe.com`, the URL's
/// host (and port) otherwise (an Enterprise Server's `https://HOST/api/v3`).
fn git_host_of(api_url: &str) -> String {
    let host = api_url.split_once("://").map_or(api_url, |(_, rest)| rest).split('/').next().unwrap_or_default();
    host.strip_prefix("api.").unwrap_or(host).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_tokens_are_for_the_apis_own_git_host() {
        assert_eq!(git_host_of("https://api.github.com"), "github.com");
        assert_eq!(git_host_of("https://ghe.example.com/api/v3"), "ghe.example.com");
        assert_eq!(git_host_of("http://127.0.0.1:8080"), "127.0.0.1:8080");
        assert_eq!(git_host_of("https://api.octo.ghe.com"), "octo.ghe.com");
    }

    #[test]
    fn a_namespace_checks_out_only_what_its_globs_allow() {
        assert!(glob_match("https://github.com/octo/*", "https://github.com/octo/api.git"));
        assert!(!glob_match("https://github.com/octo/*", "https://github.com/octopus/api.git"));
        assert!(glob_match("*", "") && glob_match("a?c", "abc") && !glob_match("a?c", "ac"));
        assert!(glob_match("*.git", "x.y.git") && !glob_match("*.git", "x.git/"));
        let open = WorkspacesConfig::default();
        assert!(open.allows("team-a", "file:///anything"), "no list: any repository");
        let repositories = [
            ("team-a".to_string(), vec!["https://github.com/octo/*".to_string()]),
            ("*".to_string(), vec!["https://github.com/public/*".to_string()]),
        ];
        let listed = WorkspacesConfig { repositories: Some(repositories.into()), ..Default::default() };
        assert!(listed.allows("team-a", "https://github.com/octo/api.git"));
        assert!(!listed.allows("team-a", "https://github.com/public/x.git"), "its own list only");
        assert!(listed.allows("team-b", "https://github.com/public/x.git"), "the others': *");
        assert!(!listed.allows("team-b", "https://github.com/octo/api.git"));
    }
}
