//! `rooms` in the agent config: how the agent gives each session a room of its own ([`crate::node::room`]).

use std::path::PathBuf;

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
}

/// `rooms.egress` in the agent config file.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EgressFile {
    port: Option<u16>,
    #[serde(default)]
    hosts: Vec<String>,
}

/// Whether `entry` is an allowed host's shape: a lowercase name or address, `*.` before a name, `:port` after.
pub fn valid_host(entry: &str) -> bool {
    let (host, port) = match entry.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host, Some(port)),
        _ => (entry, None),
    };
    let name = host.strip_prefix("*.").unwrap_or(host);
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    let name_ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        });
    name_ok && port_ok
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
                if let Some(bad) = e.hosts.iter().find(|h| !valid_host(h)) {
                    let problem = format!("{bad:?} is not a host, host:port or *.domain (lowercase)");
                    return Err(invalid("rooms.egress.hosts".into(), problem));
                }
                let port = e.port.unwrap_or(DEFAULT_EGRESS_PORT);
                if !(1..32768).contains(&port) {
                    // An ephemeral port could be any room's: Landlock holds bind, not an unbound socket's listen.
                    let problem = format!("{port}: 1-32767, below the ephemeral ports");
                    return Err(invalid("rooms.egress.port".into(), problem));
                }
                Some(EgressConfig { port, hosts: e.hosts })
            }
        };
        Ok(RoomsConfig { root: self.root, first_uid, count, helper, egress })
    }
}
