//! The key gateway, served on the egress proxy's port ([`crate::node::egress`]): a room's harness sends its model API
//! requests in plain HTTP to `http://127.0.0.1:<port>/gateway/<name>/...` holding a placeholder key; the agent
//! forwards each to the gateway's upstream with the real key, read from a file in the agent's container alone. No
//! harness holds a key it could carry off or spend elsewhere, and each request is told by the room (so the tenant)
//! that sent it: the kernel's record of the connecting socket's owner, not anything the harness says.
//!
//! One request per connection (`Connection: close` both ways): the head is rewritten, the body and the answer pass
//! through as they come, streamed answers included.

use std::net::SocketAddr;
use std::path::Path;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tower_service::Service;

use super::egress::{MAX_TUNNEL_LIFE, Refusal, TIMEOUT};
use crate::config::rooms::{EgressConfig, GatewayConfig, RoomsConfig};

/// The path every gateway's requests start with.
pub const PREFIX: &str = "/gateway/";

/// The connections the gateway opens to its upstreams: TLS with the system's roots (as the GitHub client's), or
/// plain HTTP to an upstream given as `http://`.
#[derive(Clone)]
pub struct Upstreams(hyper_rustls::HttpsConnector<HttpConnector>);

impl Upstreams {
    /// The connector, with the system's trusted roots.
    pub fn new() -> std::io::Result<Self> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(rustls::crypto::ring::default_provider())?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self(https))
    }
}

/// A request the gateway forwarded: which gateway, for which room.
#[derive(Debug, PartialEq, Eq)]
pub struct Forwarded {
    /// The gateway's name.
    pub gateway: String,
    /// The room's uid, as the kernel records the connecting socket's owner.
    pub uid: u32,
    /// The WorkSession (`namespace/name`) the room is given to, from its owner file.
    pub owner: Option<String>,
}

/// Whether `head` is a request to a gateway rather than a `CONNECT`: its target is under [`PREFIX`], as a path or as
/// an absolute URL naming this proxy (a client that sends every plain request to its proxy).
pub fn addressed(head: &str, port: u16) -> bool {
    let target = head.lines().next().and_then(|line| line.split(' ').nth(1)).unwrap_or("");
    path_of(target, port).is_some()
}

/// The path of `target` when it is this proxy's: `/gateway/...` as it is, or `http://127.0.0.1:<port>/gateway/...`
/// (or `localhost`) without its scheme and authority.
fn path_of(target: &str, port: u16) -> Option<&str> {
    let path = match target.strip_prefix("http://") {
        None => target,
        Some(rest) => {
            let (authority, path) = rest.split_at(rest.find('/')?);
            let (host, p) = authority.rsplit_once(':')?;
            if !matches!(host, "127.0.0.1" | "localhost") || p.parse::<u16>().ok()? != port {
                return None;
            }
            path
        }
    };
    path.starts_with(PREFIX).then_some(path)
}

/// Forwards the request whose `head` was read from `client` (from `peer`, to the proxy at `local`), or answers why
/// not. Only a room's harness may use a gateway: the peer's socket must belong to a uid of `rooms`.
pub async fn forward(
    mut client: TcpStream,
    head: &str,
    (local, peer): (SocketAddr, SocketAddr),
    config: &EgressConfig,
    rooms: &RoomsConfig,
    upstreams: &Upstreams,
) -> Result<Forwarded, (Refusal, String)> {
    let outcome = prepare(head, (local, peer), config, rooms).await;
    let (gateway, request, uid) = match outcome {
        Ok(prepared) => prepared,
        Err((refusal, what)) => {
            let answer = format!("HTTP/1.1 {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", refusal.status());
            client.write_all(answer.as_bytes()).await.ok();
            return Err((refusal, what));
        }
    };
    let name = gateway.name.clone();
    let mut upstream = match connect(&gateway.upstream, upstreams).await {
        Some(upstream) => upstream,
        None => {
            let answer = "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            client.write_all(answer.as_bytes()).await.ok();
            return Err((Refusal::Unreachable, format!("gateway {name}")));
        }
    };
    upstream.write_all(request.as_bytes()).await.ok();
    let owner = tokio::fs::read_to_string(super::room::owner_file(rooms, uid)).await.ok();
    let owner = owner.and_then(|o| o.lines().next().map(String::from));
    tracing::info!(event = "gateway.forwarded", gateway = %name, uid, session = owner.as_deref().unwrap_or(""), "a room's model request forwarded with the key");
    let _ = tokio::time::timeout(MAX_TUNNEL_LIFE, tokio::io::copy_bidirectional(&mut client, &mut upstream)).await;
    Ok(Forwarded { gateway: name, uid, owner })
}

/// The gateway `head` is for, the head to send upstream (the key in it), and the room's uid; or the refusal.
async fn prepare<'a>(
    head: &str,
    (local, peer): (SocketAddr, SocketAddr),
    config: &'a EgressConfig,
    rooms: &RoomsConfig,
) -> Result<(&'a GatewayConfig, String, u32), (Refusal, String)> {
    let mut lines = head.strip_suffix("\r\n\r\n").unwrap_or(head).split("\r\n");
    let mut words = lines.next().unwrap_or("").split(' ');
    let (method, target, version) = (words.next(), words.next(), words.next());
    let (Some(method), Some(path), Some("HTTP/1.1" | "HTTP/1.0"), None) =
        (method, target.and_then(|t| path_of(t, config.port)), version, words.next())
    else {
        return Err((Refusal::NotConnect, String::new()));
    };
    let (name, rest) =
        path[PREFIX.len()..].split_at(path[PREFIX.len()..].find(['/', '?']).unwrap_or(path.len() - PREFIX.len()));
    let Some(gateway) = config.gateways.iter().find(|g| g.name == name) else {
        return Err((Refusal::NoGateway, format!("gateway {name}")));
    };
    let uid = peer_uid(local, peer).await;
    let room_uids = rooms.first_uid..rooms.first_uid.saturating_add(rooms.count);
    let Some(uid) = uid.filter(|uid| room_uids.contains(uid)) else {
        return Err((Refusal::NotARoom, format!("gateway {name}")));
    };
    let Some(headers) = lines.map(kept).collect::<Option<Vec<_>>>() else {
        return Err((Refusal::NotConnect, format!("gateway {name}")));
    };
    let key = key(&gateway.key_file).await.ok_or((Refusal::NoKey, format!("gateway {name}")))?;
    let Ok(upstream) = gateway.upstream.parse::<hyper::Uri>() else {
        return Err((Refusal::Unreachable, format!("gateway {name}")));
    };
    let authority = upstream.authority().map(|a| a.as_str()).unwrap_or_default();
    let base = upstream.path().trim_end_matches('/');
    let rest = if rest.is_empty() { "/" } else { rest };
    let credential = if gateway.header == "authorization" { format!("Bearer {key}") } else { key };
    let mut request = format!("{method} {base}{rest} HTTP/1.1\r\nHost: {authority}\r\n");
    for header in headers.into_iter().flatten() {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str(&format!("{}: {credential}\r\nConnection: close\r\n\r\n", gateway.header));
    Ok((gateway, request, uid))
}

/// The headers that never pass: the connection's own, and every header a credential may travel in (the harness's
/// placeholder among them), whichever the gateway's is.
const DROPPED: &[&str] = &[
    "host",
    "connection",
    "proxy-connection",
    "keep-alive",
    "upgrade",
    "te",
    "proxy-authorization",
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "cookie",
];

/// `line` as it is forwarded: `Some(None)` when it is dropped, `None` when it is no header at all (a request that
/// smuggles a line break or a name that is not a token is refused whole).
fn kept(line: &str) -> Option<Option<&str>> {
    let (name, _) = line.split_once(':')?;
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) || line.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return None;
    }
    Some((!DROPPED.contains(&name.to_ascii_lowercase().as_str())).then_some(line))
}

/// The key in `file` (its first line), if there is one.
async fn key(file: &Path) -> Option<String> {
    let text = tokio::fs::read_to_string(file).await.ok()?;
    let key = text.lines().next()?.trim();
    (!key.is_empty() && key.bytes().all(|b| b.is_ascii_graphic())).then(|| key.to_string())
}

/// A connection to `upstream` (TLS for `https://`), within [`TIMEOUT`].
async fn connect(upstream: &str, upstreams: &Upstreams) -> Option<TokioIo<impl hyper::rt::Read + hyper::rt::Write>> {
    let uri: hyper::Uri = upstream.parse().ok()?;
    let mut connector = upstreams.0.clone();
    let stream = tokio::time::timeout(TIMEOUT, connector.call(uri)).await.ok()?.ok()?;
    Some(TokioIo::new(stream))
}

/// The owner of the TCP socket connected from `peer` to `local`, as the kernel lists it (`/proc/net/tcp`, a socket's
/// uid is its creator's): both ends are in the network namespace the rooms share with the agent.
pub async fn peer_uid(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    let (SocketAddr::V4(local), SocketAddr::V4(peer)) = (local, peer) else { return None };
    let hex = |a: std::net::SocketAddrV4| format!("{:08X}:{:04X}", u32::from_ne_bytes(a.ip().octets()), a.port());
    let (from, to) = (hex(peer), hex(local));
    let table = tokio::fs::read_to_string("/proc/net/tcp").await.ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&from.as_str()) && fields.get(2) == Some(&to.as_str()))
            .then(|| fields.get(7)?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::egress::{Proxy, Seen};
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    #[test]
    fn a_gateways_path_is_its_own_or_its_proxys_url() {
        assert_eq!(path_of("/gateway/a/v1/messages", 3129), Some("/gateway/a/v1/messages"));
        assert_eq!(path_of("http://127.0.0.1:3129/gateway/a/v1", 3129), Some("/gateway/a/v1"));
        assert_eq!(path_of("http://localhost:3129/gateway/a", 3129), Some("/gateway/a"));
        assert_eq!(path_of("http://127.0.0.1:3130/gateway/a", 3129), None);
        assert_eq!(path_of("http://example.com:3129/gateway/a", 3129), None);
        assert_eq!(path_of("/v1/messages", 3129), None);
        assert_eq!(path_of("example.com:443", 3129), None);
    }

    #[test]
    fn credentials_and_the_connections_headers_never_pass() {
        assert_eq!(kept("Content-Type: application/json"), Some(Some("Content-Type: application/json")));
        for dropped in ["X-Api-Key: sk-placeholder", "authorization: Bearer x", "Host: evil", "Connection: keep-alive"]
        {
            assert_eq!(kept(dropped), Some(None), "{dropped}");
        }
        assert_eq!(kept("X-Smuggled: a\nx-api-key: b"), None, "a bare line break");
        assert_eq!(kept("Bad Name: x"), None);
        assert_eq!(kept("no colon"), None);
    }

    /// An upstream that answers each request with what it received (head and body), then closes.
    async fn echo() -> SocketAddr {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = upstream.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = upstream.accept().await {
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    // The head, then as many bytes as its Content-Length says.
                    loop {
                        let n = conn.read(&mut buf).await.unwrap();
                        got.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&got).to_string();
                        if let Some(end) = text.find("\r\n\r\n") {
                            let length = text.lines().find_map(|l| l.strip_prefix("Content-Length: "));
                            let length: usize = length.map_or(0, |l| l.trim().parse().unwrap());
                            if got.len() >= end + 4 + length || n == 0 {
                                break;
                            }
                        }
                        if n == 0 {
                            break;
                        }
                    }
                    let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", got.len());
                    conn.write_all(answer.as_bytes()).await.unwrap();
                    conn.write_all(&got).await.unwrap();
                });
            }
        });
        at
    }

    fn own_uid() -> u32 {
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap())
    }

    /// A proxy with one gateway `model` to `upstream` whose key is in `dir`, for the rooms `first_uid..+1`; what it
    /// saw goes to the channel.
    async fn proxy(
        upstream: SocketAddr,
        dir: &Path,
        first_uid: u32,
    ) -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let gateway = GatewayConfig {
            name: "model".into(),
            upstream: format!("http://{upstream}/base"),
            key_file: dir.join("key"),
            header: "x-api-key".into(),
            base_url_env: None,
            key_env: None,
            placeholder: "sk-placeholder".into(),
        };
        let config = EgressConfig { port, hosts: Vec::new(), gateways: vec![gateway] };
        let rooms = RoomsConfig { root: dir.into(), first_uid, count: 1, helper: "/bin/false".into(), egress: None };
        let (tell, seen) = tokio::sync::mpsc::unbounded_channel();
        let report = move |s: Seen<'_>| {
            let said = match s {
                Seen::Refused(r) => r.as_str().to_string(),
                Seen::Forwarded(f) => format!("{} {} {:?}", f.gateway, f.uid, f.owner),
            };
            tell.send(said).unwrap();
        };
        tokio::spawn(Proxy::new(config, rooms).unwrap().serve(listener, report));
        (port, seen)
    }

    async fn ask(port: u16, request: &str) -> String {
        let mut conn = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.unwrap();
        answer
    }

    /// A room's request, however its client addresses it (to the gateway's path, to the proxy's URL, inside a
    /// `CONNECT` to the proxy itself), reaches the upstream under its base path with the real key in place of every
    /// credential it carried, its body whole, and is told with the room's uid and its session.
    #[tokio::test]
    async fn a_rooms_request_reaches_the_upstream_with_the_key_and_none_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key"), "sk-real-key\n").unwrap();
        let uid = own_uid();
        std::fs::create_dir(dir.path().join(".owners")).unwrap();
        std::fs::write(dir.path().join(format!(".owners/{uid}")), "team-a/ws-1\n/work/ws-1\n").unwrap();
        let upstream = echo().await;
        let (port, mut seen) = proxy(upstream, dir.path(), uid).await;
        let headers =
            "x-api-key: sk-placeholder\r\nAuthorization: Bearer sk-placeholder\r\nContent-Length: 5\r\n\r\nhello";
        for target in [
            "/gateway/model/v1/messages?beta=true".to_string(),
            format!("http://127.0.0.1:{port}/gateway/model/v1/messages?beta=true"),
        ] {
            let answer = ask(port, &format!("POST {target} HTTP/1.1\r\nHost: x\r\n{headers}")).await;
            assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
            assert!(answer.contains("\r\n\r\nPOST /base/v1/messages?beta=true HTTP/1.1\r\n"), "{answer}");
            assert!(answer.contains(&format!("\r\nHost: {upstream}\r\n")), "{answer}");
            assert!(answer.contains("\r\nx-api-key: sk-real-key\r\n"), "{answer}");
            assert!(answer.ends_with("\r\n\r\nhello"), "the body whole: {answer}");
            assert!(!answer.contains("placeholder") && !answer.contains("Host: x"), "{answer}");
            assert_eq!(seen.recv().await.unwrap(), format!("model {uid} Some(\"team-a/ws-1\")"));
        }
        let tunnelled =
            format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nPOST /gateway/model/v1/messages HTTP/1.1\r\n{headers}");
        let answer = ask(port, &tunnelled).await;
        assert!(answer.starts_with("HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK"), "{answer}");
        assert!(answer.contains("\r\nx-api-key: sk-real-key\r\n") && !answer.contains("placeholder"), "{answer}");
        assert_eq!(seen.recv().await.unwrap(), format!("model {uid} Some(\"team-a/ws-1\")"));
    }

    /// What is not a room's request to a gateway with a key gets its refusal, each told: another gateway's name, a
    /// socket of a uid no room has, a smuggled header, a key file gone.
    #[tokio::test]
    async fn a_stranger_an_unknown_gateway_a_smuggled_header_and_a_missing_key_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key"), "sk-real-key\n").unwrap();
        let upstream = echo().await;
        let (port, mut seen) = proxy(upstream, dir.path(), own_uid()).await;
        let (stranger, mut stranger_seen) = proxy(upstream, dir.path(), own_uid().wrapping_add(1)).await;
        let post = |path: &str| format!("POST {path} HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        let answer = ask(port, &post("/gateway/other/v1/messages")).await;
        assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
        assert_eq!(seen.recv().await.unwrap(), "no_gateway");
        let answer = ask(stranger, &post("/gateway/model/v1/messages")).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert_eq!(stranger_seen.recv().await.unwrap(), "not_a_room");
        let smuggled = "POST /gateway/model/v1 HTTP/1.1\r\nX-A: b\nx-api-key: mine\r\n\r\n";
        let answer = ask(port, smuggled).await;
        assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
        assert_eq!(seen.recv().await.unwrap(), "not_connect");
        std::fs::remove_file(dir.path().join("key")).unwrap();
        let answer = ask(port, &post("/gateway/model/v1/messages")).await;
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        assert_eq!(seen.recv().await.unwrap(), "no_key");
    }
}
