//! The key gateway, served on the egress proxy's port ([`super`]): a room's harness sends its model API
//! requests in plain HTTP to `http://127.0.0.1:<port>/gateway/<name>/...` holding a placeholder key; the agent
//! forwards each to the gateway's upstream with the real key, read from a file in the agent's container alone. No
//! harness holds a key it could carry off or spend elsewhere, and each request is told by the room (so the tenant)
//! that sent it: the kernel's record of the connecting socket's owner, not anything the harness says.
//!
//! The head is checked as the proxy read it (method, target, gateway, room, key); hyper then parses the request and
//! sends it on as a request of its own (its body re-framed: no framing the room chose reaches the upstream), one per
//! connection, its answer streamed back as it comes.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::{Either, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::{MAX_TUNNEL_LIFE, Refusal};
use crate::config::rooms::{EgressConfig, GatewayConfig, RoomsConfig};

/// The path every gateway's requests start with.
pub const PREFIX: &str = "/gateway/";

/// The methods a model API takes. TRACE (whose answer is the request, key included) and the rest are refused.
const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"];

/// The client of the upstreams: TLS with the system's roots (as the GitHub client's), or plain HTTP to an upstream
/// given as `http://`; HTTP/1.1, each request's body streamed.
#[derive(Clone)]
pub struct Upstreams(Client<hyper_rustls::HttpsConnector<HttpConnector>, Incoming>);

impl Upstreams {
    /// The client, with the system's trusted roots.
    pub fn new() -> std::io::Result<Self> {
        let mut http = HttpConnector::new();
        // A dead upstream holds a room's connections for this long, not the system's SYN timeout.
        http.set_connect_timeout(Some(super::TIMEOUT));
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(rustls::crypto::ring::default_provider())?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        // Idle connections to the upstreams are reused, a few: they are descriptors beside the proxy's budget.
        Ok(Self(Client::builder(TokioExecutor::new()).pool_max_idle_per_host(8).build(https)))
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
    /// When the upstream's limit resets, where it refused the request for one (HTTP 429) and said when.
    pub reset: Option<k8s_openapi::jiff::Timestamp>,
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

/// Whether `rest` (what follows the gateway's name) may be put after the upstream's base path: printable ASCII, no
/// empty or dot segment (plain or percent-encoded), no encoded slash or backslash: nothing that leaves the base path
/// or that an upstream which is itself a proxy could read as another host (`//host/...`).
fn plain_path(rest: &str) -> bool {
    let (path, _query) = rest.split_once('?').unwrap_or((rest, ""));
    let lower = path.to_ascii_lowercase();
    // `;` carries a segment's parameters (`..;` is `..` to some servers); `%25` a second round of encoding.
    let printable = rest.bytes().all(|b| (0x21..0x7f).contains(&b) && !b"\\#;".contains(&b));
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    // A trailing slash is an empty last segment, and harmless.
    let last = segments.len().saturating_sub(1);
    let plain_segments =
        segments.iter().enumerate().all(|(i, s)| !matches!(*s, "." | "..") && (!s.is_empty() || i == last));
    printable && plain_segments && !["%2e", "%2f", "%5c", "%25"].iter().any(|encoded| lower.contains(encoded))
}

/// Forwards the request whose `head` was read from `client`, sent by the room `uid` (given to `owner`), or answers
/// why not.
pub async fn forward(
    client: TcpStream,
    head: &str,
    (uid, owner): (u32, Option<String>),
    config: &EgressConfig,
    upstreams: &Upstreams,
) -> Result<Forwarded, (Refusal, String)> {
    let (gateway, target, key) = match check(head, config).await {
        Ok(checked) => checked,
        Err((refusal, what)) => return super::refuse(client, refusal, what).await,
    };
    // hyper reads the request from its start again: the head the proxy read, then the rest as it comes.
    let io = TokioIo::new(Replayed { head: head.as_bytes().to_vec(), at: 0, inner: client });
    let (upstreams, credential, name) = (upstreams.clone(), credential(&gateway.header, &key), gateway.name.clone());
    let gateway = gateway.clone();
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reset = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (told, said) = (answered.clone(), reset.clone());
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let (gateway, target, credential, upstreams, told, said) =
            (gateway.clone(), target.clone(), credential.clone(), upstreams.clone(), told.clone(), said.clone());
        async move {
            let answer = relay(request, &gateway, &target, &credential, &upstreams, &told).await;
            if answer.status() == StatusCode::TOO_MANY_REQUESTS {
                let at = super::reset::reset_of(answer.headers(), k8s_openapi::jiff::Timestamp::now());
                *said.lock().unwrap_or_else(|e| e.into_inner()) = at;
            }
            Ok::<_, Infallible>(answer)
        }
    });
    let served = hyper::server::conn::http1::Builder::new().keep_alive(false).serve_connection(io, service);
    let _ = tokio::time::timeout(MAX_TUNNEL_LIFE, served).await;
    if !answered.load(std::sync::atomic::Ordering::Relaxed) {
        // hyper refused the request as malformed (and answered 400), or the upstream did not answer (502).
        return Err((Refusal::Unreachable, format!("gateway {name}")));
    }
    let session = owner.as_deref().unwrap_or("");
    tracing::info!(event = "gateway.forwarded", gateway = %name, uid, session, "a room's model request forwarded with the key");
    let reset = *reset.lock().unwrap_or_else(|e| e.into_inner());
    Ok(Forwarded { gateway: name, uid, owner, reset })
}

/// The gateway `head` is for, the upstream URL it goes to, and the key; or the refusal.
async fn check<'a>(
    head: &str,
    config: &'a EgressConfig,
) -> Result<(&'a GatewayConfig, String, String), (Refusal, String)> {
    let mut words = head.lines().next().unwrap_or("").split(' ');
    let (method, target, version) = (words.next(), words.next(), words.next());
    let (Some(method), Some(path), Some("HTTP/1.1"), None) =
        (method, target.and_then(|t| path_of(t, config.port)), version, words.next())
    else {
        return Err((Refusal::NotConnect, String::new()));
    };
    let named = &path[PREFIX.len()..];
    let (name, rest) = named.split_at(named.find(['/', '?']).unwrap_or(named.len()));
    let Some(gateway) = config.gateways.iter().find(|g| g.name == name) else {
        // The room's words, bounded and plain, as they go to the log and an Event.
        let shown: String = name.chars().take(63).filter(|c| c.is_ascii_graphic()).collect();
        return Err((Refusal::NoGateway, format!("gateway {shown}")));
    };
    if !METHODS.contains(&method) || !plain_path(rest) {
        return Err((Refusal::NotConnect, format!("gateway {name}")));
    }
    let rest = if rest.starts_with('/') { rest.to_string() } else { format!("/{rest}") };
    let asked = rest.split_once('?').map_or(rest.as_str(), |(path, _)| path);
    if !gateway.allows(asked) {
        return Err((Refusal::PathNotAllowed, format!("gateway {name}{asked}")));
    }
    let key = key(&gateway.key_file).await.ok_or((Refusal::NoKey, format!("gateway {name}")))?;
    Ok((gateway, format!("{}{rest}", gateway.upstream.trim_end_matches('/')), key))
}

/// The request sent upstream for `request`: its method and body, its headers but [`dropped`] ones, the key in the
/// gateway's header; the upstream's answer as it comes, or 502.
async fn relay(
    request: Request<Incoming>,
    gateway: &GatewayConfig,
    target: &str,
    credential: &str,
    upstreams: &Upstreams,
    answered: &std::sync::atomic::AtomicBool,
) -> Response<Either<Incoming, Empty<Bytes>>> {
    let (parts, body) = request.into_parts();
    let mut out = Request::builder().method(parts.method).uri(target);
    for (name, value) in &parts.headers {
        if !dropped(name.as_str(), gateway) {
            out = out.header(name, value);
        }
    }
    let sent = match out.header(gateway.header.as_str(), credential).body(body) {
        Ok(request) => upstreams.0.request(request).await.ok(),
        Err(_) => None,
    };
    match sent {
        Some(mut answer) => {
            // Which organisation and project the key is: not a tenant's to learn.
            for name in ["anthropic-organization-id", "openai-organization", "openai-project"] {
                answer.headers_mut().remove(name);
            }
            answered.store(true, std::sync::atomic::Ordering::Relaxed);
            answer.map(Either::Left)
        }
        None => {
            tracing::warn!(event = "gateway.unreachable", gateway = %gateway.name, "the gateway's upstream did not answer");
            let mut answer = Response::new(Either::Right(Empty::new()));
            *answer.status_mut() = StatusCode::BAD_GATEWAY;
            answer
        }
    }
}

/// The value of the gateway's header for `key`: `Bearer <key>` in `authorization`, the key itself elsewhere.
fn credential(header: &str, key: &str) -> String {
    if header == "authorization" { format!("Bearer {key}") } else { key.to_string() }
}

/// Whether a request's header `name` stays behind: the connection's own; every header a credential may travel in
/// (the gateway's own included: the harness's placeholder among them); and those that move a request elsewhere or
/// change its method on an upstream that heeds them.
fn dropped(name: &str, gateway: &GatewayConfig) -> bool {
    const DROPPED: &[&str] = &[
        "host",
        "connection",
        "proxy-connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "transfer-encoding",
        "content-length",
        "proxy-authorization",
        "authorization",
        "x-api-key",
        "x-goog-api-key",
        "api-key",
        "cookie",
        "forwarded",
        "x-original-url",
        "x-rewrite-url",
        "x-http-method",
        "x-http-method-override",
        "x-method-override",
        // Which organisation or project of the key's a request spends and reads: the gateway's to choose, not a room's.
        "openai-organization",
        "openai-project",
        "x-goog-user-project",
    ];
    DROPPED.contains(&name) || name.starts_with("x-forwarded-") || name == gateway.header
}

/// The key in `file` (its first line), if there is one.
async fn key(file: &Path) -> Option<String> {
    let text = tokio::fs::read_to_string(file).await.ok()?;
    let key = text.lines().next()?.trim();
    (!key.is_empty() && key.bytes().all(|b| b.is_ascii_graphic())).then(|| key.to_string())
}

/// A connection whose first bytes, already read, are given again.
struct Replayed {
    head: Vec<u8>,
    at: usize,
    inner: TcpStream,
}

impl AsyncRead for Replayed {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if self.at < self.head.len() {
            let n = buf.remaining().min(self.head.len() - self.at);
            buf.put_slice(&self.head[self.at..self.at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Replayed {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The room whose socket connected from `peer` to `local`: its uid, and the WorkSession (`namespace/name`) it is
/// given to; `None` when no room's uid owns the socket.
pub async fn room_of(local: SocketAddr, peer: SocketAddr, rooms: &RoomsConfig) -> Option<(u32, Option<String>)> {
    let uid = peer_uid(local, peer).await?;
    let room_uids = rooms.first_uid..rooms.first_uid.saturating_add(rooms.count);
    if !room_uids.contains(&uid) {
        return None;
    }
    Some((uid, owner_of(rooms, uid).await))
}

/// The WorkSession (`namespace/name`) `uid` is given to, from its owner file.
async fn owner_of(rooms: &RoomsConfig, uid: u32) -> Option<String> {
    let owner = tokio::fs::read_to_string(crate::node::room::owner_file(rooms, uid)).await.ok()?;
    owner.lines().next().map(String::from)
}

/// The owner of the TCP socket connected from `peer` to `local`, as the kernel lists it (`/proc/net/tcp`, a socket's
/// uid is its creator's): both ends are in the network namespace the rooms share with the agent.
pub async fn peer_uid(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    let (SocketAddr::V4(local), SocketAddr::V4(peer)) = (local, peer) else { return None };
    let hex = |a: std::net::SocketAddrV4| format!("{:08X}:{:04X}", u32::from_ne_bytes(a.ip().octets()), a.port());
    let (from, to) = (hex(peer), hex(local));
    // Line by line, to the one that matches: a room can make the table long (connections in TIME_WAIT).
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(tokio::fs::File::open("/proc/net/tcp").await.ok()?).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut fields = line.split_whitespace().skip(1);
        if fields.next() == Some(from.as_str()) && fields.next() == Some(to.as_str()) {
            return fields.nth(4)?.parse().ok();
        }
    }
    None
}

#[cfg(test)]
mod tests;
