//! `rooms` in the agent config: how the agent gives each session a room of its own ([`crate::node::room`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::api::is_egress_host;

/// The lowest uid a room may have: below it are the system's and the image's accounts.
pub const MIN_UID: u32 = 10_000;

/// How the agent gives each session a room (`rooms` in the agent config); `None` there: every harness runs as the
/// tmux server's user, sharing its `HOME` (`harnessHome`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoomsConfig {
    /// Where the rooms' homes and owner files live (`rooms.root`): a directory the agent owns, on the workspace.
    pub root: PathBuf,
    /// The first uid given out (`rooms.firstUid`, default 200000).
    pub first_uid: u32,
    /// How many rooms a node holds (`rooms.count`, default 1000): one per WorkSession of the node.
    pub count: u32,
    /// The `worksession` binary in the tmux server's container, which enters the room (`rooms.helper`; default: the
    /// agent's own executable path, the same image's).
    pub helper: PathBuf,
    /// Where each room's harness may connect (`rooms.egress`); `None`: anywhere the node's network reaches.
    pub egress: Option<EgressConfig>,
    /// The root is on storage every node mounts (`rooms.shared`): a session's room is the same on every node (its
    /// uid given out once for the cluster, by an owner file made only where none is), and a session that moves keeps
    /// it.
    pub shared: bool,
    /// Keys a namespace gives its own sessions' harnesses (`rooms.namespaceKeys`).
    pub namespace_keys: Option<NamespaceKeysConfig>,
}

/// Keys a namespace gives its own sessions' harnesses (`rooms.namespaceKeys`), for a harness that cannot take a key
/// gateway: read at each spawn from one Secret of the session's own namespace (the agent may read that Secret where a
/// Role lets it, one the chart makes in each namespace it is given, and no other) and put in the harness's
/// environment, which only its room's uid can read. Each tenant's harness spends its tenant's key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceKeysConfig {
    /// The Secret's name in each namespace (`secretName`).
    pub secret_name: String,
    /// The variables it may set (`variables`): a key of the Secret by any other name is not given.
    pub variables: Vec<String>,
}

impl EgressConfig {
    /// The proxy on `port` serving `gateways`, with no host listed and no namespace's or session's lists.
    pub fn serving(port: u16, gateways: Vec<GatewayConfig>) -> Self {
        let (hosts, namespaces) = (Vec::new(), BTreeMap::new());
        Self { port, hosts, namespaces, session_hosts: false, gateways }
    }
}

/// A room's way out (`rooms.egress`): its harness's TCP connects are held to the agent's egress proxy on loopback,
/// which opens a tunnel only to an allowed host ([`crate::node::egress`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressConfig {
    /// The proxy's port on 127.0.0.1, in the network the rooms share (`rooms.egress.port`, default 3129).
    pub port: u16,
    /// The hosts a harness may reach (`rooms.egress.hosts`): `host` (port 443), `host:port`, `*.domain` (any name
    /// below it, port 443); lowercase. A name that resolves only to internal addresses (loopback, private,
    /// link-local, the cluster's) is refused unless it is listed as an address itself.
    pub hosts: Vec<String>,
    /// More hosts for the sessions of a namespace (`rooms.egress.namespaces`, by namespace): the platform's list for
    /// one tenant, trusted as the node's is (an address listed here is reachable even in the internal ranges).
    pub namespaces: BTreeMap<String, Vec<String>>,
    /// Whether a session's own `spec.egress.hosts` widens its room's list (`rooms.egress.sessionHosts`, default
    /// false: the platform opts in); a session's hosts never open an internal address, but any public one, the nodes'
    /// own public addresses included.
    pub session_hosts: bool,
    /// The key gateways (`rooms.egress.gateways`): model APIs whose key the agent adds to a harness's requests.
    pub gateways: Vec<GatewayConfig>,
}

/// A key gateway (`rooms.egress.gateways[]`): a harness sends its model API requests in plain HTTP to
/// `http://127.0.0.1:<port>/gateway/<name>/...` with a placeholder key; the agent forwards each to `upstream` with
/// the real key, read from `key_file` (in the agent's container alone), in `header`. The harness never holds the key.
#[derive(Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// The gateway's path segment (`name`: lowercase letters, digits, `-`).
    pub name: String,
    /// Where requests go (`upstream`): `https://host[:port][/base]`, or `http://` for a gateway of the cluster's own.
    pub upstream: String,
    /// The file holding the key (`keyFile`), read at each request so a rotated Secret takes effect at once.
    pub key_file: PathBuf,
    /// The header carrying the key (`header`, lowercase; default `x-api-key`); `authorization` carries `Bearer <key>`.
    pub header: String,
    /// The variable naming the gateway's URL in each room's environment (`baseUrlEnv`, e.g. `ANTHROPIC_BASE_URL`).
    pub base_url_env: Option<String>,
    /// The variable holding the placeholder key in each room's environment (`keyEnv`, e.g. `ANTHROPIC_API_KEY`).
    pub key_env: Option<String>,
    /// What the harness holds instead of the key (`placeholder`).
    pub placeholder: String,
    /// The paths below the upstream's base a room may ask for (`paths`, exact, the query aside; `["*"]`: any). One key
    /// serves every tenant: a path that lists or fetches what is stored under the key (files, batches, stored
    /// answers) would show one tenant's data to another.
    pub paths: Vec<String>,
}

impl std::fmt::Debug for GatewayConfig {
    // The key is in a file, never here; the upstream may carry a userinfo a log should not.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig").field("name", &self.name).field("key_file", &self.key_file).finish()
    }
}

/// The default header a gateway's key goes in (Anthropic's).
pub const DEFAULT_GATEWAY_HEADER: &str = "x-api-key";
/// The default paths: Anthropic's Messages API and its token count, what Claude Code asks for a turn.
pub const DEFAULT_PATHS: [&str; 2] = ["/v1/messages", "/v1/messages/count_tokens"];
/// The default placeholder key, of the shape Anthropic's clients expect.
pub const DEFAULT_PLACEHOLDER: &str = "sk-ant-api03-worksession-gateway-placeholder-key-00000000000";

impl GatewayConfig {
    /// Whether a room may ask for `path` (below the upstream's base, its query aside).
    pub fn allows(&self, path: &str) -> bool {
        self.paths.iter().any(|allowed| allowed == "*" || allowed == path)
    }

    /// The URL a room's harness is given (`<baseUrlEnv>`).
    pub fn url(&self, port: u16) -> String {
        format!("http://127.0.0.1:{port}/gateway/{}", self.name)
    }

    /// The variables a room's harness is given for this gateway.
    pub fn env(&self, port: u16) -> Vec<(String, String)> {
        let url = self.base_url_env.as_ref().map(|name| (name.clone(), self.url(port)));
        let key = self.key_env.as_ref().map(|name| (name.clone(), self.placeholder.clone()));
        url.into_iter().chain(key).collect()
    }
}

/// The default port of the egress proxy.
pub const DEFAULT_EGRESS_PORT: u16 = 3129;

/// The default first uid: far above any account an image or a node has.
pub const DEFAULT_FIRST_UID: u32 = 200_000;
/// The default number of rooms per node.
pub const DEFAULT_COUNT: u32 = 1000;

/// `rooms` in the agent config file.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RoomsFile {
    root: PathBuf,
    first_uid: Option<u32>,
    count: Option<u32>,
    helper: Option<PathBuf>,
    egress: Option<EgressFile>,
    #[serde(default)]
    shared: bool,
    namespace_keys: Option<NamespaceKeysFile>,
}

/// `rooms.namespaceKeys` in the agent config file.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NamespaceKeysFile {
    secret_name: String,
    variables: Vec<String>,
}

/// `rooms.egress` in the agent config file.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EgressFile {
    port: Option<u16>,
    #[serde(default)]
    hosts: Vec<String>,
    #[serde(default)]
    namespaces: BTreeMap<String, Vec<String>>,
    session_hosts: Option<bool>,
    #[serde(default)]
    gateways: Vec<GatewayFile>,
}

/// `rooms.egress.gateways[]` in the agent config file.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GatewayFile {
    name: String,
    upstream: String,
    key_file: PathBuf,
    header: Option<String>,
    base_url_env: Option<String>,
    key_env: Option<String>,
    placeholder: Option<String>,
    paths: Option<Vec<String>>,
}

impl GatewayFile {
    /// The validated gateway, or the problem with the key it names (under `rooms.egress.gateways[i]`).
    fn into_config(self) -> Result<GatewayConfig, (&'static str, String)> {
        let word = |s: &str, extra: fn(u8) -> bool| !s.is_empty() && s.len() <= 63 && s.bytes().all(extra);
        let label = word(&self.name, |b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !self.name.starts_with('-')
            && !self.name.ends_with('-');
        if !label {
            let problem = format!("{:?}: lowercase letters, digits and '-' (not first or last), at most 63", self.name);
            return Err(("name", problem));
        }
        if !valid_upstream(&self.upstream) {
            let problem = format!("{:?}: http(s)://host[:port][/path], no userinfo, query or fragment", self.upstream);
            return Err(("upstream", problem));
        }
        if !self.key_file.is_absolute() {
            return Err(("keyFile", format!("{} is not an absolute path", self.key_file.display())));
        }
        let header = self.header.unwrap_or_else(|| DEFAULT_GATEWAY_HEADER.into());
        if !word(&header, |b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
            return Err(("header", format!("{header:?}: a lowercase header name")));
        }
        let env_name = |b: u8| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_';
        for (key, name) in [("baseUrlEnv", &self.base_url_env), ("keyEnv", &self.key_env)] {
            if let Some(name) = name.as_deref().filter(|n| !word(n, env_name) || n.as_bytes()[0].is_ascii_digit()) {
                return Err((key, format!("{name:?}: an environment variable's name (A-Z, 0-9, _)")));
            }
        }
        let placeholder = self.placeholder.unwrap_or_else(|| DEFAULT_PLACEHOLDER.into());
        if placeholder.is_empty() || !placeholder.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(("placeholder", "printable ASCII, no spaces".into()));
        }
        let paths = self.paths.unwrap_or_else(|| DEFAULT_PATHS.map(String::from).to_vec());
        let path_ok = |p: &String| p == "*" || (p.starts_with('/') && !p.contains(['?', '#', ' ']) && p.len() <= 256);
        if let Some(bad) = paths.iter().find(|p| !path_ok(p)) {
            return Err(("paths", format!("{bad:?}: an absolute path without a query, or \"*\"")));
        }
        let (name, upstream, key_file) = (self.name, self.upstream.trim_end_matches('/').to_string(), self.key_file);
        let (base_url_env, key_env) = (self.base_url_env, self.key_env);
        Ok(GatewayConfig { name, upstream, key_file, header, base_url_env, key_env, placeholder, paths })
    }
}

/// Whether `url` is a gateway's upstream: `http` or `https`, a host, an optional port and path, nothing else.
pub fn valid_upstream(url: &str) -> bool {
    let Ok(uri) = url.parse::<hyper::Uri>() else { return false };
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or("");
    matches!(uri.scheme_str(), Some("http" | "https"))
        && uri.host().is_some_and(|h| !h.is_empty())
        && !authority.contains('@')
        && uri.query().is_none()
        && !url.contains('#')
}

/// Whether `name` may carry a namespace's key: an environment variable's name that changes nothing of how the room
/// runs (its `HOME`, `PATH`, `TMPDIR`, its proxy) or of the room helper, which reads its environment as root before it
/// becomes the room's uid (the loader's and the C library's variables, the helper's own).
pub fn is_key_variable(name: &str) -> bool {
    // What the room, tmux or the helper sets for the harness.
    const ROOM_SETS: &[&str] = &[
        "HOME",
        "PATH",
        "TMPDIR",
        "USER",
        "LOGNAME",
        "SHELL",
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "TMUX",
        "TERM",
    ];
    // glibc's list of variables it ignores in a privileged program, with its tunables: the helper reads them as root.
    const READ_AS_ROOT: &[&str] = &[
        "GCONV_PATH",
        "GETCONF_DIR",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "LOCPATH",
        "NIS_PATH",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "RES_OPTIONS",
        "TZDIR",
        "TZ",
        "LANGUAGE",
    ];
    let shape = !name.is_empty()
        && name.len() <= 128
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    let prefixed = ["LD_", "MALLOC_", "LC_", "WORKSESSION_", "RUST_"].iter().any(|p| name.starts_with(p));
    shape && !prefixed && !ROOM_SETS.contains(&name) && !READ_AS_ROOT.contains(&name)
}

impl RoomsFile {
    /// The validated config; `invalid(key, problem)` makes the error naming the key.
    pub(crate) fn into_config<E>(self, invalid: &dyn Fn(String, String) -> E) -> Result<RoomsConfig, E> {
        if !self.root.is_absolute() {
            return Err(invalid("rooms.root".into(), format!("{} is not an absolute path", self.root.display())));
        }
        let first_uid = self.first_uid.unwrap_or(DEFAULT_FIRST_UID);
        let count = self.count.unwrap_or(DEFAULT_COUNT);
        // uid 0..999 are the system's and the image's own (the agent's user is 1000); u32::MAX is "no uid".
        if first_uid < MIN_UID || count == 0 || first_uid.checked_add(count).is_none_or(|end| end == u32::MAX) {
            return Err(invalid(
                "rooms".into(),
                format!("firstUid {first_uid} and count {count}: uids from 10000 on, at least one, below 2^32-1"),
            ));
        }
        let helper = match self.helper {
            Some(h) if h.is_absolute() => h,
            Some(h) => return Err(invalid("rooms.helper".into(), format!("{} is not an absolute path", h.display()))),
            None => std::env::current_exe().unwrap_or_else(|_| "/usr/local/bin/worksession".into()),
        };
        let egress = match self.egress {
            None => None,
            Some(e) => {
                let not_a_host = |bad: &String| format!("{bad:?} is not a host, host:port or *.domain (lowercase)");
                if let Some(bad) = e.hosts.iter().find(|h| !is_egress_host(h)) {
                    return Err(invalid("rooms.egress.hosts".into(), not_a_host(bad)));
                }
                for (namespace, hosts) in &e.namespaces {
                    if !crate::api::is_dns_label(namespace) {
                        let problem = format!("{namespace:?} is not a namespace's name");
                        return Err(invalid("rooms.egress.namespaces".into(), problem));
                    }
                    if let Some(bad) = hosts.iter().find(|h| !is_egress_host(h)) {
                        return Err(invalid(format!("rooms.egress.namespaces.{namespace}"), not_a_host(bad)));
                    }
                }
                let port = e.port.unwrap_or(DEFAULT_EGRESS_PORT);
                if !(1024..32768).contains(&port) {
                    // An ephemeral port could be any room's: Landlock holds bind, not an unbound socket's listen.
                    // A well-known one (53, 443) is a service's on every host: Landlock holds the port, not the
                    // address, so a room would reach the API server's or a resolver's directly.
                    let problem =
                        format!("{port}: 1024-32767, above the well-known ports and below the ephemeral ones");
                    return Err(invalid("rooms.egress.port".into(), problem));
                }
                let mut gateways = Vec::with_capacity(e.gateways.len());
                for (i, gateway) in e.gateways.into_iter().enumerate() {
                    let gateway = gateway
                        .into_config()
                        .map_err(|(key, problem)| invalid(format!("rooms.egress.gateways[{i}].{key}"), problem))?;
                    if gateways.iter().any(|g: &GatewayConfig| g.name == gateway.name) {
                        let problem = format!("{:?} is named twice", gateway.name);
                        return Err(invalid(format!("rooms.egress.gateways[{i}].name"), problem));
                    }
                    gateways.push(gateway);
                }
                let (hosts, namespaces, session_hosts) = (e.hosts, e.namespaces, e.session_hosts.unwrap_or(false));
                Some(EgressConfig { port, hosts, namespaces, session_hosts, gateways })
            }
        };
        let namespace_keys = match self.namespace_keys {
            None => None,
            Some(k) => {
                if !crate::api::is_dns_subdomain(&k.secret_name) {
                    let problem = format!("{:?} is not a Secret's name", k.secret_name);
                    return Err(invalid("rooms.namespaceKeys.secretName".into(), problem));
                }
                if let Some(bad) = k.variables.iter().find(|v| !is_key_variable(v)) {
                    let problem = format!(
                        "{bad:?}: an environment variable's name (A-Z, 0-9, _), none the room itself sets (HOME, \
                         PATH, TMPDIR, the proxy's) nor one its helper reads as root (LD_*, MALLOC_*, GLIBC_TUNABLES, \
                         LC_*, WORKSESSION_*, RUST_*, ...)"
                    );
                    return Err(invalid("rooms.namespaceKeys.variables".into(), problem));
                }
                Some(NamespaceKeysConfig { secret_name: k.secret_name, variables: k.variables })
            }
        };
        let shared = self.shared;
        Ok(RoomsConfig { root: self.root, first_uid, count, helper, egress, shared, namespace_keys })
    }
}
