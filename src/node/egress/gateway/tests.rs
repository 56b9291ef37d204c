//! The tests of [`super`].

use super::super::{Proxy, Seen};
use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
fn credentials_the_connections_headers_and_routing_headers_never_pass() {
    let mut gateway = gateway_to("http://127.0.0.1:1".into(), Path::new("/k"));
    gateway.header = "openai-key".into();
    assert!(!dropped("content-type", &gateway) && !dropped("anthropic-version", &gateway));
    for name in [
        "x-api-key",
        "authorization",
        "openai-key",
        "host",
        "connection",
        "transfer-encoding",
        "content-length",
        "x-forwarded-host",
        "forwarded",
        "x-http-method-override",
    ] {
        assert!(dropped(name, &gateway), "{name}");
    }
}

#[test]
fn a_path_stays_below_the_upstreams_base() {
    for plain in ["/v1/messages", "/v1/messages?beta=true", "", "?key=v", "/v1/models/", "/v1/a%20b"] {
        assert!(plain_path(plain), "{plain}");
    }
    for escaping in ["/../x", "/v1/../../x", "/./x", "//evil.example/x", "/v1//x", "/%2e%2e/x", "/a%2Fb", "/a\\b"] {
        assert!(!plain_path(escaping), "{escaping}");
    }
    assert!(!plain_path("/a\tb") && !plain_path("/a b") && !plain_path("/é"), "printable ASCII only");
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
                        let length = text
                            .lines()
                            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(String::from));
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

fn gateway_to(upstream: String, dir: &Path) -> GatewayConfig {
    GatewayConfig {
        name: "model".into(),
        upstream,
        key_file: dir.join("key"),
        header: "x-api-key".into(),
        base_url_env: None,
        key_env: None,
        placeholder: "sk-placeholder".into(),
        paths: vec!["/v1/messages".into(), "/v1".into()],
    }
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
    // A base path with a trailing slash, as a person may write it: never a `//` before the path.
    let gateway = gateway_to(format!("http://{upstream}/base/"), dir);
    let config = EgressConfig::serving(port, vec![gateway]);
    let rooms = RoomsConfig {
        root: dir.into(),
        first_uid,
        count: 1,
        helper: "/bin/false".into(),
        egress: None,
        shared: false,
        namespace_keys: None,
    };
    let (tell, seen) = tokio::sync::mpsc::unbounded_channel();
    let report = move |s: Seen<'_>| {
        let said = match s {
            Seen::Refused { refusal, .. } => refusal.as_str().to_string(),
            Seen::Forwarded(f) => {
                let reset = f.reset.map(|at| format!(" resets {}", at.as_second())).unwrap_or_default();
                format!("{} {} {:?}{reset}", f.gateway, f.uid, f.owner)
            }
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
    let headers = "x-api-key: sk-placeholder\r\nAuthorization: Bearer sk-placeholder\r\nOpenAI-Organization: org-other\r\n\
                       Content-Length: 5\r\n\r\nhello";
    for target in [
        "/gateway/model/v1/messages?beta=true".to_string(),
        format!("http://127.0.0.1:{port}/gateway/model/v1/messages?beta=true"),
    ] {
        let answer = ask(port, &format!("POST {target} HTTP/1.1\r\nHost: x\r\n{headers}")).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.contains("\r\n\r\nPOST /base/v1/messages?beta=true HTTP/1.1\r\n"), "{answer}");
        assert!(answer.contains(&format!("\r\nhost: {upstream}\r\n")), "{answer}");
        assert!(answer.contains("\r\nx-api-key: sk-real-key\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nhello"), "the body whole: {answer}");
        assert!(!answer.contains("placeholder") && !answer.contains("Host: x"), "{answer}");
        assert!(
            !answer.to_ascii_lowercase().contains("org-other"),
            "the key's organisation is the gateway's: {answer}"
        );
        assert_eq!(seen.recv().await.unwrap(), format!("model {uid} Some(\"team-a/ws-1\")"));
    }
    let tunnelled =
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nPOST /gateway/model/v1/messages HTTP/1.1\r\n{headers}");
    let answer = ask(port, &tunnelled).await;
    assert!(answer.starts_with("HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK"), "{answer}");
    assert!(answer.contains("\r\nx-api-key: sk-real-key\r\n") && !answer.contains("placeholder"), "{answer}");
    assert_eq!(seen.recv().await.unwrap(), format!("model {uid} Some(\"team-a/ws-1\")"));
}

/// An upstream that refuses every request for a limit (HTTP 429) that resets in 30 s.
async fn limited() -> SocketAddr {
    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = upstream.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = upstream.accept().await {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf).await;
            let answer = "HTTP/1.1 429 Too Many Requests\r\nretry-after: 30\r\nContent-Length: 0\r\n\r\n";
            conn.write_all(answer.as_bytes()).await.unwrap();
        }
    });
    at
}

/// The upstream's refusal for a limit reaches the room as it came, and its reset is told with the request.
#[tokio::test]
async fn a_refusal_for_a_limit_is_told_with_when_it_resets() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("key"), "sk-real-key\n").unwrap();
    let uid = own_uid();
    let (port, mut seen) = proxy(limited().await, dir.path(), uid).await;
    let before = k8s_openapi::jiff::Timestamp::now().as_second();
    let answer = ask(port, "POST /gateway/model/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").await;
    let after = k8s_openapi::jiff::Timestamp::now().as_second();
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    let said = seen.recv().await.unwrap();
    let resets: i64 = said.rsplit_once(" resets ").expect(&said).1.parse().unwrap();
    assert!((before + 30..=after + 30).contains(&resets), "{said}");
}

/// What is not a room's request to a gateway with a key gets its refusal, each told: another gateway's name, a
/// socket of a uid no room has, TRACE (which would echo the key), a path that leaves the upstream's base or names
/// another host, a path the gateway does not serve, a key file gone; and a request framed two ways reaches the upstream framed one way, nothing
/// smuggled behind it.
#[tokio::test]
async fn a_stranger_an_unknown_gateway_a_trace_an_escaping_path_and_a_missing_key_are_refused() {
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
    for refused in [
        "TRACE /gateway/model/v1 HTTP/1.1\r\n\r\n".to_string(),
        post("/gateway/model//evil.example/v1"),
        post("/gateway/model/../other/v1"),
        post("/gateway/model/%2e%2e/other"),
        post("/gateway/model/..;/other"),
        post("/gateway/model/%252e%252e/other"),
        "POST /gateway/model/v1 HTTP/1.0\r\n\r\n".to_string(),
    ] {
        let answer = ask(port, &refused).await;
        assert!(answer.starts_with("HTTP/1.1 405"), "{refused}: {answer}");
        assert_eq!(seen.recv().await.unwrap(), "not_connect");
    }
    // A path the gateway does not serve (another tenant's stored files, say), whatever the method.
    let answer = ask(port, &post("/gateway/model/v1/files")).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert_eq!(seen.recv().await.unwrap(), "path_not_allowed");
    let two_ways = "POST /gateway/model/v1 HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n\
                        0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n";
    let answer = ask(port, two_ways).await;
    let echoed = answer.split_once("\r\n\r\n").map_or("", |(_, upstream_got)| upstream_got).to_ascii_lowercase();
    let framings = ["\r\ncontent-length:", "\r\ntransfer-encoding:"].iter().filter(|h| echoed.contains(*h)).count();
    assert!(framings <= 1 && !echoed.contains("/smuggled"), "{answer}");
    seen.recv().await.unwrap();
    std::fs::remove_file(dir.path().join("key")).unwrap();
    let answer = ask(port, &post("/gateway/model/v1/messages")).await;
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert_eq!(seen.recv().await.unwrap(), "no_key");
}
