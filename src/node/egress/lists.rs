//! What a room may reach through the egress proxy ([`super`]): the lists (the node's, its session's namespace's, its
//! session's own) and the ranges that are the node's or the cluster's own, which only an address the platform listed
//! itself opens. Pure: the proxy asks, and resolves and connects as the answer allows.

use std::net::IpAddr;

use crate::config::rooms::EgressConfig;

/// Whether this node's agent holds the session a room's owner file names, as its view of its sessions shows it.
#[derive(Debug, PartialEq, Eq)]
pub enum Holding {
    /// It does: the session's own hosts (`spec.egress.hosts`).
    Here(Vec<String>),
    /// It does not: a process left behind by the room's former session.
    NotHere,
    /// The view is not filled yet (the agent's first moments).
    NotYetKnown,
}

/// The hosts one room may reach: the platform's (the node's list and the one of its session's namespace), whose
/// listed addresses are reachable even in the internal ranges, and its session's own, which reach public addresses
/// only (a tenant lists what it likes there, the metadata address included).
#[derive(Debug, Clone, Copy)]
pub struct Lists<'a> {
    /// `rooms.egress.hosts`.
    pub node: &'a [String],
    /// `rooms.egress.namespaces` of the session's namespace.
    pub namespace: &'a [String],
    /// The session's `spec.egress.hosts`.
    pub session: &'a [String],
}

/// How far the lists let a tunnel go.
#[derive(Debug, PartialEq, Eq)]
pub enum Reach {
    /// Not listed.
    Unlisted,
    /// Listed: to the addresses outside the internal ranges that the name resolves to.
    Public,
    /// An address the platform listed itself: to it, whatever its range.
    Address,
}

impl<'a> Lists<'a> {
    /// The lists of a connection from the room whose owner file names `owner` (`namespace/name`), while this node
    /// holds that session: a socket no room owns, or one of a room whose session is not here (a process its former
    /// session left behind), has the node's alone. In the agent's first moments, before its view is filled, the owner
    /// file's namespace is taken at its word (harnesses that outlived a restart keep their namespace's hosts), and no
    /// session's own list is read; nor is one without `sessionHosts`.
    pub fn of(config: &'a EgressConfig, owner: Option<&str>, holding: &'a Holding) -> Self {
        let session = match holding {
            Holding::Here(hosts) if config.session_hosts => hosts.as_slice(),
            _ => &[],
        };
        let namespace = owner
            .filter(|_| *holding != Holding::NotHere)
            .and_then(|owner| config.namespaces.get(owner.split_once('/')?.0));
        Lists { node: &config.hosts, namespace: namespace.map_or(&[], Vec::as_slice), session }
    }

    /// How far a tunnel to `host:port` may go.
    pub fn reach(&self, host: &str, port: u16) -> Reach {
        let by_platform = allowed(self.node, host, port) || allowed(self.namespace, host, port);
        if by_platform && host.parse::<IpAddr>().is_ok() {
            Reach::Address
        } else if by_platform || allowed(self.session, host, port) {
            Reach::Public
        } else {
            Reach::Unlisted
        }
    }
}

/// Whether `hosts` lets a tunnel go to `host:port`: an entry `host` (port 443), `host:port`, or `*.domain` (a name
/// below it, port 443).
pub fn allowed(hosts: &[String], host: &str, port: u16) -> bool {
    hosts.iter().any(|entry| {
        let (name, entry_port) = match entry.rsplit_once(':') {
            Some((name, p)) if !name.contains(':') => (name, p.parse().unwrap_or(0)),
            _ => (entry.as_str(), 443),
        };
        let matches = match name.strip_prefix("*.") {
            Some(domain) => host.strip_suffix(domain).is_some_and(|below| below.len() > 1 && below.ends_with('.')),
            None => host == name,
        };
        matches && entry_port == port
    })
}

/// Whether `ip` is one of the node's or the cluster's own, or not a public address at all: loopback, private,
/// link-local (the instance metadata address), shared (carrier-grade NAT, often a cluster's), the IETF's and the
/// benchmarks' blocks, reserved (240/4, which some clusters use for pods), unspecified, multicast; IPv6's
/// unique-local and link-local; and an IPv4 address carried in IPv6 (mapped, NAT64, 6to4) as that address. A
/// cluster whose own ranges are other public addresses is not told apart (docs/security.md).
pub fn internal(ip: IpAddr) -> bool {
    let v4 = |hi: u16, lo: u16| IpAddr::V4(std::net::Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)));
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && c == 0)
                || (a == 198 && (b == 18 || b == 19))
        }
        IpAddr::V6(v6) => match v6.segments() {
            // Mapped, NAT64's well-known prefix and its local-use one: the IPv4 address in the last 32 bits.
            [0, 0, 0, 0, 0, 0xffff, hi, lo]
            | [0x64, 0xff9b, 0, 0, 0, 0, hi, lo]
            | [0x64, 0xff9b, 1, _, _, _, hi, lo] => internal(v4(hi, lo)),
            // 6to4: the IPv4 address in bits 16-48.
            [0x2002, hi, lo, ..] => internal(v4(hi, lo)),
            [first, ..] => {
                v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    || first & 0xfe00 == 0xfc00
                    || first & 0xffc0 == 0xfe80
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_allowed_by_name_port_or_domain() {
        let hosts: Vec<String> =
            ["api.anthropic.com", "git.example.com:8443", "*.githubusercontent.com"].map(String::from).to_vec();
        let table = [
            ("api.anthropic.com", 443, true),
            ("api.anthropic.com", 80, false),
            ("evil-api.anthropic.com", 443, false),
            ("git.example.com", 8443, true),
            ("git.example.com", 443, false),
            ("raw.githubusercontent.com", 443, true),
            ("githubusercontent.com", 443, false),
            ("xgithubusercontent.com", 443, false),
            ("10.0.0.1", 443, false),
        ];
        for (host, port, expected) in table {
            assert_eq!(allowed(&hosts, host, port), expected, "{host}:{port}");
        }
    }

    #[test]
    fn the_nodes_and_the_clusters_addresses_are_internal() {
        for ip in [
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "127.0.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
            "192.0.0.8",
            "198.18.0.1",
            "240.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::a00:1",
            "2002:a00:1::1",
        ] {
            assert!(internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["160.79.104.10", "140.82.112.3", "2606:4700::1", "100.128.0.1", "172.32.0.1", "64:ff9b::8c52:7003"] {
            assert!(!internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn the_platforms_lists_reach_an_address_a_sessions_list_only_public_ones() {
        let strings = |list: &[&str]| list.iter().map(|h| h.to_string()).collect::<Vec<_>>();
        let (node, namespace) = (strings(&["api.anthropic.com", "10.0.0.5:8080"]), strings(&["pypi.org", "10.0.0.6"]));
        let session = strings(&["*.example.com", "169.254.169.254:80", "10.0.0.7"]);
        let lists = Lists { node: &node, namespace: &namespace, session: &session };
        let table = [
            ("api.anthropic.com", 443, Reach::Public),
            ("10.0.0.5", 8080, Reach::Address),
            ("pypi.org", 443, Reach::Public),
            ("10.0.0.6", 443, Reach::Address),
            ("docs.example.com", 443, Reach::Public),
            // A tenant's own list names the metadata address or a cluster address: listed, yet public only.
            ("169.254.169.254", 80, Reach::Public),
            ("10.0.0.7", 443, Reach::Public),
            ("example.com", 443, Reach::Unlisted),
            ("pypi.org", 80, Reach::Unlisted),
        ];
        for (host, port, expected) in table {
            assert_eq!(lists.reach(host, port), expected, "{host}:{port}");
        }
    }
}
