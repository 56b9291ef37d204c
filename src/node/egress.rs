//! The rooms' way out: an HTTP `CONNECT` proxy on loopback, in the agent's process, the only TCP port a harness in a
//! room may connect to ([`crate::node::room::enter`] holds it there with Landlock). It opens a tunnel only to a host
//! of the room's [`Lists`] (the node's `rooms.egress.hosts`, its session's namespace's, its session's own), and only
//! to an address outside the node's and the cluster's own ranges (a name that resolves to the API server, the
//! instance metadata address or another room's listener is refused, however it is spelt), unless the platform listed
//! that address itself. Every refusal is logged with the host and counted. The same port serves the key gateways
//! ([`gateway`]).

pub mod gateway;
pub mod lists;
pub mod reset;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::config::rooms::{EgressConfig, RoomsConfig};
use gateway::{Forwarded, Upstreams};
pub use lists::Holding;
use lists::{Lists, Reach, internal};

/// How long a client may take to send its request, and a tunnel's connection to open.
pub(super) const TIMEOUT: Duration = Duration::from_secs(10);
/// The most a request's head may hold.
const HEAD_LIMIT: usize = 8 << 10;

/// Why a connection was refused (a tunnel not opened, a gateway's request not forwarded).
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No whole request within the time and size allowed.
    Incomplete,
    /// Not a `CONNECT host:port` request.
    NotConnect,
    /// The host is not on the list.
    NotAllowed,
    /// The name resolves only to the node's or the cluster's own addresses.
    Internal,
    /// The name does not resolve, or no address of it answered.
    Unreachable,
    /// A gateway's request names no gateway of the config.
    NoGateway,
    /// A gateway's request from a socket no room owns.
    NotARoom,
    /// A gateway's key file is missing or empty.
    NoKey,
    /// The room holds as many connections as one may.
    TooMany,
    /// A gateway's path the gateway does not serve (`paths`).
    PathNotAllowed,
}

impl Refusal {
    pub(super) fn status(&self) -> &'static str {
        match self {
            Refusal::Incomplete => "408 Request Timeout",
            Refusal::NotConnect => "405 Method Not Allowed",
            Refusal::NotAllowed | Refusal::Internal | Refusal::NotARoom | Refusal::PathNotAllowed => "403 Forbidden",
            Refusal::NoGateway => "404 Not Found",
            Refusal::Unreachable | Refusal::NoKey => "502 Bad Gateway",
            Refusal::TooMany => "429 Too Many Requests",
        }
    }

    /// A short stable word for logs and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Refusal::Incomplete => "incomplete_request",
            Refusal::NotConnect => "not_connect",
            Refusal::NotAllowed => "not_allowed",
            Refusal::Internal => "internal_address",
            Refusal::Unreachable => "unreachable",
            Refusal::NoGateway => "no_gateway",
            Refusal::NotARoom => "not_a_room",
            Refusal::NoKey => "no_key",
            Refusal::TooMany => "too_many",
            Refusal::PathNotAllowed => "path_not_allowed",
        }
    }
}

/// What the proxy tells its owner of each connection it decided.
#[derive(Debug)]
pub enum Seen<'a> {
    /// Refused: why, what was asked for (`host:port`, a gateway's name, or empty), and the WorkSession
    /// (`namespace/name`) whose room asked, when a room's socket did.
    Refused { refusal: &'a Refusal, host: &'a str, owner: Option<&'a str> },
    /// A room's request forwarded by a gateway with its key.
    Forwarded(&'a Forwarded),
}

/// How many tunnels may be open at once: each holds two sockets of the agent's process.
const MAX_TUNNELS: usize = 512;
/// How long a tunnel may stay open (a model's longest streamed answer is minutes).
pub(super) const MAX_TUNNEL_LIFE: Duration = Duration::from_secs(3600);

/// Where the proxy learns a session's [`Holding`], by its `namespace/name`.
pub type Sessions = Box<dyn Fn(&str) -> Holding + Send + Sync>;

/// The proxy as the agent config describes it: its hosts, its gateways, and the rooms whose harnesses may use them.
pub struct Proxy {
    config: EgressConfig,
    rooms: RoomsConfig,
    upstreams: Option<Upstreams>,
    sessions: Sessions,
    /// Connections open, by the room (uid) whose socket opened them (`None`: no room's).
    open: std::sync::Mutex<std::collections::HashMap<Option<u32>, usize>>,
}

/// How many connections one room may hold open at once: the rest of [`MAX_TUNNELS`] stays for the others.
const MAX_PER_ROOM: usize = 64;

impl Proxy {
    /// The proxy of `rooms.egress`; an error when a gateway is configured and the system has no trusted roots.
    pub fn new(config: EgressConfig, rooms: RoomsConfig) -> std::io::Result<Self> {
        let upstreams = if config.gateways.is_empty() { None } else { Some(Upstreams::new()?) };
        let sessions: Sessions = Box::new(|_| Holding::NotYetKnown);
        Ok(Self { config, rooms, upstreams, sessions, open: Default::default() })
    }

    /// Where the proxy learns whether a room's session is here, and its own hosts; not known until told.
    pub fn with_sessions(mut self, sessions: Sessions) -> Self {
        self.sessions = sessions;
        self
    }

    /// Binds the proxy's port: an error (the port taken) ends the agent's start, so no room is held to a port
    /// something else serves (a harness started before egress was turned on could have taken it).
    pub async fn bind(&self) -> std::io::Result<TcpListener> {
        let port = self.config.port;
        TcpListener::bind(("127.0.0.1", port)).await.map_err(|e| {
            std::io::Error::new(e.kind(), format!("the egress proxy cannot listen on 127.0.0.1:{port}: {e}"))
        })
    }

    /// Serves on `listener` until the process ends; `seen` is told each refusal and each forwarded request. At most
    /// [`MAX_TUNNELS`] connections at once (a client beyond them waits to be accepted), [`MAX_PER_ROOM`] of one room.
    pub async fn serve(self, listener: TcpListener, seen: impl Fn(Seen<'_>) + Send + Sync + 'static) {
        let (proxy, seen) = (Arc::new(self), Arc::new(seen));
        let Ok(local) = listener.local_addr() else { return };
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_TUNNELS));
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else { return };
            let (client, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, say: not a loop that spins.
                    tracing::warn!(event = "egress.accept_failed", error = %e, "the egress proxy cannot accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (proxy, seen) = (proxy.clone(), seen.clone());
            tokio::spawn(async move {
                let _slot = slot;
                // Whose socket it is, as the kernel lists it: counted against that room, told with its refusals.
                let room = gateway::room_of(local, peer, &proxy.rooms).await;
                let (uid, owner) = (room.as_ref().map(|r| r.0), room.as_ref().and_then(|r| r.1.clone()));
                let outcome = match proxy.take(uid) {
                    Some(_held) => proxy.handle(client, room).await,
                    None => refuse(client, Refusal::TooMany, String::new()).await,
                };
                match outcome {
                    Ok(Some(forwarded)) => seen(Seen::Forwarded(&forwarded)),
                    Ok(None) => {}
                    Err((refusal, host)) => {
                        let session = owner.as_deref().unwrap_or("");
                        tracing::warn!(event = "egress.refused", %peer, host, reason = refusal.as_str(), session, "a harness's connection refused");
                        seen(Seen::Refused { refusal: &refusal, host: &host, owner: owner.as_deref() });
                    }
                }
            });
        }
    }

    /// One more connection of `uid`'s, held until the guard drops; `None` when it holds [`MAX_PER_ROOM`].
    fn take(self: &Arc<Self>, uid: Option<u32>) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(uid).or_default();
        if *count >= MAX_PER_ROOM {
            return None;
        }
        *count += 1;
        Some(Slot { proxy: self.clone(), uid })
    }

    /// Reads one request and decides: a `CONNECT` is spliced to its host or refused; a room's request to a gateway
    /// is forwarded with its key (also when it comes inside a `CONNECT` to this proxy itself, as clients that tunnel
    /// every request through their proxy send it).
    async fn handle(
        &self,
        mut client: TcpStream,
        room: Option<(u32, Option<String>)>,
    ) -> Result<Option<Forwarded>, (Refusal, String)> {
        let mut head = match tokio::time::timeout(TIMEOUT, read_head(&mut client)).await {
            Ok(Some(head)) => head,
            _ => return Err((Refusal::Incomplete, String::new())),
        };
        let target = target(&head);
        let to_itself = target.as_ref().is_some_and(|(host, port)| {
            *port == self.config.port && matches!(host.as_str(), "127.0.0.1" | "localhost")
        });
        if to_itself && self.upstreams.is_some() {
            client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.ok();
            head = match tokio::time::timeout(TIMEOUT, read_head(&mut client)).await {
                Ok(Some(head)) if gateway::addressed(&head, self.config.port) => head,
                _ => return refuse(client, Refusal::NotConnect, "the proxy itself".into()).await,
            };
        }
        if let Some(upstreams) = self.upstreams.as_ref().filter(|_| gateway::addressed(&head, self.config.port)) {
            let Some(room) = room else { return refuse(client, Refusal::NotARoom, "a gateway".into()).await };
            return gateway::forward(client, &head, room, &self.config, upstreams).await.map(Some);
        }
        let owner = room.as_ref().and_then(|(_, owner)| owner.as_deref());
        let holding = owner.map_or(Holding::NotHere, |owner| (self.sessions)(owner));
        tunnel(client, target, &Lists::of(&self.config, owner, &holding)).await.map(|()| None)
    }
}

/// A connection counted against its room until it drops.
struct Slot {
    proxy: Arc<Proxy>,
    uid: Option<u32>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.proxy.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.uid) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.uid);
            }
        }
    }
}

/// Answers `refusal` and closes.
async fn refuse<T>(mut client: TcpStream, refusal: Refusal, what: String) -> Result<T, (Refusal, String)> {
    let answer = format!("HTTP/1.1 {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", refusal.status());
    client.write_all(answer.as_bytes()).await.ok();
    Err((refusal, what))
}

/// Splices the client to the `CONNECT`'s host, or answers with the refusal.
async fn tunnel(
    mut client: TcpStream,
    target: Option<(String, u16)>,
    lists: &Lists<'_>,
) -> Result<(), (Refusal, String)> {
    let outcome = match target {
        None => Err((Refusal::NotConnect, String::new())),
        Some((host, port)) => {
            open(&host, port, lists.reach(&host, port)).await.map_err(|r| (r, format!("{host}:{port}")))
        }
    };
    match outcome {
        Ok(mut upstream) => {
            client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.ok();
            let _ =
                tokio::time::timeout(MAX_TUNNEL_LIFE, tokio::io::copy_bidirectional(&mut client, &mut upstream)).await;
            Ok(())
        }
        Err((refusal, host)) => refuse(client, refusal, host).await,
    }
}

/// The request's head (up to the blank line), if it comes whole within [`HEAD_LIMIT`].
async fn read_head(client: &mut TcpStream) -> Option<String> {
    let mut head = Vec::with_capacity(512);
    let mut byte = [0u8; 1];
    // A byte at a time: nothing after the head is read (the tunnel's first bytes are the client's TLS).
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= HEAD_LIMIT || client.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    String::from_utf8(head).ok()
}

/// The host (lowercase, without a trailing dot) and port of a `CONNECT host:port HTTP/1.x` request: a name of
/// letters, digits, `-` and `.`, or an address (a resolver reads escapes in a name, which a list's `*.domain` would
/// not see).
fn target(head: &str) -> Option<(String, u16)> {
    let mut words = head.lines().next()?.split(' ');
    let (method, authority, version) = (words.next()?, words.next()?, words.next()?);
    if method != "CONNECT" || !version.starts_with("HTTP/1.") || words.next().is_some() {
        return None;
    }
    let (host, port) = authority.rsplit_once(':')?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let name = !host.is_empty()
        && host.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    (name || host.parse::<IpAddr>().is_ok()).then_some(())?;
    Some((host, port.parse().ok()?))
}

/// Connects to `host:port` as far as the lists reach: to an address outside the internal ranges unless the platform
/// listed the address itself.
async fn open(host: &str, port: u16, reach: Reach) -> Result<TcpStream, Refusal> {
    if reach == Reach::Unlisted {
        return Err(Refusal::NotAllowed);
    }
    // A name as it is, never tried below the pod's search domains (`models.dev` is not `models.dev.<ns>.svc...`,
    // a Service a tenant could make).
    let name = if host.parse::<IpAddr>().is_ok() { host.to_string() } else { format!("{host}.") };
    let addresses: Vec<SocketAddr> = match tokio::time::timeout(TIMEOUT, tokio::net::lookup_host((name, port))).await {
        Ok(Ok(found)) => found.collect(),
        _ => return Err(Refusal::Unreachable),
    };
    let outside: Vec<SocketAddr> =
        addresses.into_iter().filter(|a| reach == Reach::Address || !internal(a.ip())).collect();
    if outside.is_empty() {
        return Err(Refusal::Internal);
    }
    for address in outside {
        if let Ok(Ok(stream)) = tokio::time::timeout(TIMEOUT, TcpStream::connect(address)).await {
            return Ok(stream);
        }
    }
    Err(Refusal::Unreachable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connect_names_a_target() {
        assert_eq!(
            target("CONNECT API.Anthropic.com.:443 HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(("api.anthropic.com".into(), 443))
        );
        assert_eq!(target("CONNECT [::1]:22 HTTP/1.1\r\n\r\n"), Some(("::1".into(), 22)));
        assert_eq!(target("GET http://example.com/ HTTP/1.1\r\n\r\n"), None);
        assert_eq!(target("CONNECT example.com HTTP/1.1\r\n\r\n"), None);
        assert_eq!(target("CONNECT example.com:443 HTTP/1.1 x\r\n\r\n"), None);
        // A name a resolver would read otherwise than the list does: an escape, a space, a NUL, an empty name.
        for host in ["x\\.pythonhosted.org", "a%2eb.org", "a_b.org", "a\0.org", ":", "[::g]"] {
            assert_eq!(target(&format!("CONNECT {host}:443 HTTP/1.1\r\n\r\n")), None, "{host}");
        }
    }

    /// A proxy for `hosts` on a free port (no gateway, no room of the test's uid), and the refusals it tells.
    async fn start(hosts: Vec<String>) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<&'static str>) {
        let config = EgressConfig { hosts, ..egress() };
        start_with(config, rooms_of("/nonexistent".as_ref(), 200_000), Box::new(|_| Holding::NotHere)).await
    }

    fn egress() -> EgressConfig {
        let (hosts, namespaces, gateways) = (Vec::new(), Default::default(), Vec::new());
        EgressConfig { port: 0, hosts, namespaces, session_hosts: true, gateways }
    }

    /// The rooms `first_uid..+1` whose owner files are in `root`.
    fn rooms_of(root: &std::path::Path, first_uid: u32) -> RoomsConfig {
        let (helper, egress) = ("/bin/false".into(), None);
        RoomsConfig { root: root.into(), first_uid, count: 1, helper, egress, shared: false, namespace_keys: None }
    }

    async fn start_with(
        mut config: EgressConfig,
        rooms: RoomsConfig,
        sessions: Sessions,
    ) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<&'static str>) {
        let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = proxy.local_addr().unwrap();
        config.port = at.port();
        let (seen, refusals) = tokio::sync::mpsc::unbounded_channel();
        let report = move |s: Seen<'_>| {
            if let Seen::Refused { refusal, .. } = s {
                seen.send(refusal.as_str()).unwrap()
            }
        };
        let proxy_of = Proxy::new(config, rooms).unwrap().with_sessions(sessions);
        tokio::spawn(proxy_of.serve(proxy, report));
        (at, refusals)
    }

    /// The answer to one request.
    async fn ask(at: SocketAddr, request: String) -> String {
        let mut conn = TcpStream::connect(at).await.unwrap();
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.unwrap();
        answer
    }

    /// A listener that greets each connection.
    async fn greeter() -> SocketAddr {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = upstream.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = upstream.accept().await {
                conn.write_all(b"hello from upstream\n").await.unwrap();
            }
        });
        up
    }

    /// A room's connection is held to its session's lists: its namespace's (the platform's, which may open an
    /// address of its own ranges) and its session's own (which opens none); another uid's gets the node's alone, and
    /// with `sessionHosts` off the session's own list is not read.
    #[tokio::test]
    async fn a_rooms_namespace_and_session_widen_its_list() {
        let (up, other) = (greeter().await, greeter().await);
        let dir = tempfile::tempdir().unwrap();
        let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap());
        std::fs::create_dir(dir.path().join(".owners")).unwrap();
        std::fs::write(dir.path().join(format!(".owners/{uid}")), "team-a/ws-1\n/work/ws-1\n").unwrap();
        let namespaces = [("team-a".to_string(), vec![format!("127.0.0.1:{}", up.port())])].into();
        let config = EgressConfig { namespaces, ..egress() };
        let own = format!("127.0.0.1:{}", other.port());
        let sessions = |own: String| -> Sessions {
            Box::new(move |owner| match owner == "team-a/ws-1" {
                true => Holding::Here(vec![own.clone()]),
                false => Holding::NotHere,
            })
        };
        let connect = |to: SocketAddr| format!("CONNECT {to} HTTP/1.1\r\n\r\n");

        let (at, mut refusals) = start_with(config.clone(), rooms_of(dir.path(), uid), sessions(own.clone())).await;
        let through = ask(at, connect(up)).await;
        assert_eq!(through, "HTTP/1.1 200 Connection established\r\n\r\nhello from upstream\n");
        let listed_by_the_session = ask(at, connect(other)).await;
        assert!(listed_by_the_session.starts_with("HTTP/1.1 403"), "{listed_by_the_session}");
        assert_eq!(refusals.recv().await.unwrap(), "internal_address", "listed, but not to open an address of ours");

        let off = EgressConfig { session_hosts: false, ..config.clone() };
        let (at, mut refusals) = start_with(off, rooms_of(dir.path(), uid), sessions(own.clone())).await;
        assert!(ask(at, connect(other)).await.starts_with("HTTP/1.1 403"));
        assert_eq!(refusals.recv().await.unwrap(), "not_allowed", "the session's list unread");

        let stranger = rooms_of(dir.path(), uid.wrapping_add(1));
        let (at, mut refusals) = start_with(config.clone(), stranger, sessions(own.clone())).await;
        assert!(ask(at, connect(up)).await.starts_with("HTTP/1.1 403"));
        assert_eq!(refusals.recv().await.unwrap(), "not_allowed", "no room's socket: the node's list alone");

        // A room whose owner file names a session this node does not hold (a process its former session left
        // behind, the uid given to another tenant since): not that tenant's namespace's list either.
        let (at, mut refusals) =
            start_with(config.clone(), rooms_of(dir.path(), uid), Box::new(|_| Holding::NotHere)).await;
        assert!(ask(at, connect(up)).await.starts_with("HTTP/1.1 403"));
        assert_eq!(refusals.recv().await.unwrap(), "not_allowed", "a session not held here: the node's list alone");

        // Before the agent's view is filled: the owner file's namespace is taken at its word, no session's own list.
        let (at, mut refusals) =
            start_with(config, rooms_of(dir.path(), uid), Box::new(|_| Holding::NotYetKnown)).await;
        let through = ask(at, connect(up)).await;
        assert_eq!(through, "HTTP/1.1 200 Connection established\r\n\r\nhello from upstream\n");
        assert!(ask(at, connect(other)).await.starts_with("HTTP/1.1 403"));
        assert_eq!(refusals.recv().await.unwrap(), "not_allowed", "no session's own list before the view");
    }

    /// The proxy itself: a listed address gets a tunnel that carries bytes both ways; an unlisted host, a name of an
    /// internal address and anything but a `CONNECT` get their refusal, each counted.
    #[tokio::test]
    async fn a_tunnel_opens_only_to_what_the_list_allows() {
        let up = greeter().await;
        let hosts = vec![format!("127.0.0.1:{}", up.port()), format!("localhost:{}", up.port())];
        let (at, mut refusals) = start(hosts).await;
        let ask = |request: String| ask(at, request);
        let through = ask(format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\nHost: x\r\n\r\n", up.port())).await;
        assert_eq!(through, "HTTP/1.1 200 Connection established\r\n\r\nhello from upstream\n");
        let unlisted = ask("CONNECT example.com:443 HTTP/1.1\r\n\r\n".into()).await;
        assert!(unlisted.starts_with("HTTP/1.1 403"), "{unlisted}");
        let by_name = ask(format!("CONNECT localhost:{} HTTP/1.1\r\n\r\n", up.port())).await;
        // Refused either way: as an internal address where the resolver answers for `localhost.`, as unresolvable
        // where it does not (a name is looked up as fully qualified, never below the pod's search domains).
        assert!(by_name.starts_with("HTTP/1.1 403") || by_name.starts_with("HTTP/1.1 502"), "{by_name}");
        let plain = ask("GET http://example.com/ HTTP/1.1\r\n\r\n".into()).await;
        assert!(plain.starts_with("HTTP/1.1 405"), "{plain}");
        let mut counted = Vec::new();
        for _ in 0..3 {
            counted.push(refusals.recv().await.unwrap());
        }
        counted.sort();
        counted.retain(|r| !matches!(*r, "internal_address" | "unreachable"));
        assert_eq!(counted, ["not_allowed", "not_connect"], "and the name's refusal counted");
    }
    /// One room holds at most its share of connections: past it, the next one is refused at once (429) while the
    /// ones it holds wait for their requests.
    #[tokio::test]
    async fn a_room_holds_at_most_its_share_of_connections() {
        let (at, mut refusals) = start(Vec::new()).await;
        let mut held = Vec::new();
        for _ in 0..=MAX_PER_ROOM {
            held.push(TcpStream::connect(at).await.unwrap());
        }
        // The first answer any of them gets: the held ones get none until their request's time is up.
        let mut answers: futures::stream::FuturesUnordered<_> = held
            .iter_mut()
            .map(|conn| async move {
                let mut answer = vec![0u8; 64];
                let n = conn.read(&mut answer).await.unwrap();
                String::from_utf8_lossy(&answer[..n]).to_string()
            })
            .collect();
        let first = futures::StreamExt::next(&mut answers).await.unwrap();
        assert!(first.starts_with("HTTP/1.1 429"), "{first}");
        assert_eq!(refusals.recv().await.unwrap(), "too_many");
    }
}
