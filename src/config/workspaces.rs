//! `workspaces` in the agent config: where and how the agent prepares `spec.workspace` checkouts
//! ([`crate::workspace`]), and which repositories a namespace may check out.

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
}

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
        let WorkspacesFile { mirrors, credentials: c, git_timeout_seconds, protocols, repositories } = self;
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
        Ok(workspaces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
