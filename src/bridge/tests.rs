//! Router tests without a network: every status code, through `tower::ServiceExt::oneshot`, against a recording
//! sink (the end-to-end tests use the real API server). Plus a bounded fuzz of the GitHub handler.

use std::collections::BTreeMap;
use std::sync::Mutex;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::*;
use crate::api::WorkSessionSpec;
use crate::store::Archived;
use kube::ResourceExt;

#[path = "../../tests/fixtures/github.rs"]
mod fixture;

/// Records what would be written; can be told the API server is down.
#[derive(Default)]
struct Recorder {
    sessions: Mutex<BTreeMap<String, WorkSession>>,
    events: Mutex<Vec<WorkEvent>>,
    notes: Mutex<Vec<String>>,
    down: AtomicBool,
}

impl Sink for Arc<Recorder> {
    async fn session(
        &self,
        namespace: &str,
        name: &str,
        create: Option<WorkSession>,
    ) -> Result<Option<WorkSession>, SinkError> {
        if self.down.load(Ordering::Relaxed) {
            return Err(SinkError::Unavailable("connection refused".into()));
        }
        let mut sessions = self.sessions.lock().unwrap();
        let key = format!("{namespace}/{name}");
        if let Some(ws) = sessions.get(&key) {
            return Ok(Some(ws.clone()));
        }
        Ok(create.inspect(|ws| {
            sessions.insert(key, ws.clone());
        }))
    }

    async fn count_sessions(&self, namespace: &str, (key, value): (&str, &str)) -> Result<usize, SinkError> {
        let sessions = self.sessions.lock().unwrap();
        let labelled =
            |ws: &&WorkSession| ws.metadata.labels.as_ref().is_some_and(|l| l.get(key).is_some_and(|v| v == value));
        Ok(sessions
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{namespace}/")))
            .map(|(_, ws)| ws)
            .filter(labelled)
            .count())
    }

    async fn create_event(&self, _namespace: &str, event: &WorkEvent) -> Result<bool, SinkError> {
        if self.down.load(Ordering::Relaxed) {
            return Err(SinkError::Unavailable("connection refused".into()));
        }
        let mut events = self.events.lock().unwrap();
        if events.iter().any(|e| e.metadata.name == event.metadata.name) {
            return Ok(false);
        }
        events.push(event.clone());
        Ok(true)
    }

    async fn archive(
        &self,
        namespace: &str,
        name: &str,
        archived: bool,
        delete_at: Option<k8s_openapi::jiff::Timestamp>,
        at: Option<k8s_openapi::jiff::Timestamp>,
    ) -> Result<Archived, SinkError> {
        let mut sessions = self.sessions.lock().unwrap();
        let Some(ws) = sessions.get_mut(&format!("{namespace}/{name}")) else { return Ok(Archived::Missing) };
        if crate::store::outdated(ws, at) {
            return Ok(Archived::Outdated);
        }
        ws.spec.archived = archived;
        let delete = delete_at.filter(|_| archived).map(|t| t.to_string());
        let annotations = ws.metadata.annotations.get_or_insert_with(Default::default);
        match delete {
            Some(v) => annotations.insert(crate::api::DELETE_AT_ANNOTATION.into(), v),
            None => annotations.remove(crate::api::DELETE_AT_ANNOTATION),
        };
        if let Some(at) = at {
            annotations.insert(crate::api::LIFECYCLE_AT_ANNOTATION.into(), at.to_string());
        }
        Ok(Archived::Written)
    }

    async fn find_session(
        &self,
        namespace: &str,
        (key, value): (&str, &str),
    ) -> Result<Option<WorkSession>, SinkError> {
        let sessions = self.sessions.lock().unwrap();
        let labelled = |ws: &&WorkSession| ws.labels().get(key).is_some_and(|v| v == value);
        Ok(sessions
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{namespace}/")))
            .map(|(_, ws)| ws)
            .find(labelled)
            .cloned())
    }

    async fn mark_session(
        &self,
        namespace: &str,
        name: &str,
        labels: &[(&str, Option<&str>)],
        annotations: &[(&str, Option<&str>)],
    ) -> Result<bool, SinkError> {
        let mut sessions = self.sessions.lock().unwrap();
        let Some(ws) = sessions.get_mut(&format!("{namespace}/{name}")) else { return Ok(false) };
        let set = |map: &mut BTreeMap<String, String>, pairs: &[(&str, Option<&str>)]| {
            for (k, v) in pairs {
                match v {
                    Some(v) => map.insert(k.to_string(), v.to_string()),
                    None => map.remove(*k),
                };
            }
        };
        set(ws.metadata.labels.get_or_insert_with(Default::default), labels);
        set(ws.metadata.annotations.get_or_insert_with(Default::default), annotations);
        Ok(true)
    }

    async fn update_annotation<F>(&self, namespace: &str, name: &str, key: &str, change: F) -> Result<bool, SinkError>
    where
        F: Fn(Option<&str>) -> Option<String> + Send + Sync,
    {
        let mut sessions = self.sessions.lock().unwrap();
        let Some(ws) = sessions.get_mut(&format!("{namespace}/{name}")) else { return Ok(false) };
        let annotations = ws.metadata.annotations.get_or_insert_with(Default::default);
        let Some(new) = change(annotations.get(key).map(String::as_str)) else { return Ok(false) };
        annotations.insert(key.into(), new);
        Ok(true)
    }

    async fn event(&self, _namespace: &str, name: &str) -> Result<Option<WorkEvent>, SinkError> {
        Ok(self.events.lock().unwrap().iter().find(|e| e.metadata.name.as_deref() == Some(name)).cloned())
    }

    async fn set_prompt(&self, event: &WorkEvent, prompt: &str) -> Result<bool, SinkError> {
        let mut events = self.events.lock().unwrap();
        let Some(stored) = events.iter_mut().find(|e| e.metadata.name == event.metadata.name) else { return Ok(false) };
        let begun = stored.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p != crate::api::PromptPhase::Pending);
        if stored.spec != event.spec || begun {
            return Ok(false);
        }
        stored.spec.prompt = prompt.into();
        Ok(true)
    }

    async fn note(&self, namespace: &str, name: &str, reason: &str, message: &str) {
        self.notes.lock().unwrap().push(format!("{namespace}/{name} {reason}: {message}"));
    }

    async fn delete_due(&self, _now: k8s_openapi::jiff::Timestamp) -> Result<Vec<String>, SinkError> {
        Ok(Vec::new())
    }

    async fn ready(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }
}

const SECRET: &[u8] = b"webhook-secret";
const TOKEN: &str = "generic-token";

fn config() -> BridgeConfig {
    BridgeConfig {
        max_body_bytes: 64 * 1024,
        github: Some(config::GithubConfig {
            secret: SECRET.to_vec(),
            ignore_senders: vec!["agents-bot".into()],
            events: config::default_github_events(),
            allowed_author_associations: config::DEFAULT_AUTHOR_ASSOCIATIONS.iter().map(|a| a.to_string()).collect(),
            api: None,
            feedback: config::Feedback::Off,
            ci: config::CiConfig::default(),
            bot_reviewers: vec!["reviewer-bot[bot]".into()],
            redeliver: None,
            approvers: None,
        }),
        generic: Some(config::GenericConfig {
            token: TOKEN.into(),
            namespace: "default".into(),
            namespaces: vec!["team-b".into()],
        }),
        routes: vec![config::Route {
            repository: regex::Regex::new("^octo-org/.*$").unwrap(),
            pattern: "octo-org/*".into(),
            namespace: "agents".into(),
            node_name: Some("node-a".into()),
            harness: "claude".into(),
            workdir: "/srv/work/{owner}/{repo}".into(),
            work_item: "{repo}-{number}".into(),
            workspace: Some(crate::api::WorkspaceSpec {
                url: "https://github.com/{owner}/{repo}.git".into(),
                r#ref: None,
            }),
            egress: Some(crate::api::EgressSpec { hosts: vec!["pypi.org".into(), "*.pythonhosted.org".into()] }),
            budget: Some(crate::api::BudgetSpec { tokens: None, cost: Some("20".into()) }),
            allowed_author_associations: None,
            max_sessions: None,
            id: config::slug("octo-org/*"),
            feedback: config::Feedback::Off,
            on_close: config::OnClose::Archive,
            delete_after: std::time::Duration::from_secs(config::DEFAULT_DELETE_AFTER_SECONDS),
            ci_on_success: false,
            status_comment: false,
            approval: None,
            approval_comments: config::ApprovalComments::Full,
        }],
        prompt_template: config::DEFAULT_PROMPT_TEMPLATE.into(),
    }
}

fn app() -> (Router, Arc<Recorder>) {
    let (app, recorder, _) = app_with(config());
    (app, recorder)
}

/// The router over `config`, its sink, and its metrics.
fn app_with(config: BridgeConfig) -> (Router, Arc<Recorder>, BridgeMetrics) {
    let recorder = Arc::new(Recorder::default());
    let mut registry = Registry::default();
    let metrics = BridgeMetrics::register(&mut registry);
    let bridge = Bridge::new(watch::channel(Arc::new(config)).1, recorder.clone(), metrics.clone());
    (bridge.router(), recorder, metrics)
}

fn ignored_count(metrics: &BridgeMetrics, reason: &'static str) -> u64 {
    metrics.ignored.get_or_create(&IgnoredLabels { reason }).get()
}

/// The suite's GitHub fixture, on issue 1347, saying "Me too".
fn issue_comment(repo: &str, sender: &str) -> Value {
    fixture::issue_comment(repo, 1347, sender, "Me too")
}

fn github_request(event: &str, delivery: Option<&str>, body: &[u8], signature: Option<String>) -> Request<Body> {
    let mut r = Request::post("/webhooks/github").header("x-github-event", event);
    if let Some(d) = delivery {
        r = r.header("x-github-delivery", d);
    }
    if let Some(s) = signature {
        r = r.header("x-hub-signature-256", s);
    }
    r.body(Body::from(body.to_vec())).unwrap()
}

fn signed(event: &str, delivery: &str, payload: &Value) -> Request<Body> {
    let body = serde_json::to_vec(payload).unwrap();
    github_request(event, Some(delivery), &body, Some(github::sign(SECRET, &body)))
}

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, Value, Option<String>) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let retry = response.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().to_string());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null), retry)
}

#[tokio::test]
async fn github_accepts_a_signed_comment_once() {
    let (app, rec) = app();
    let payload = issue_comment("octo-org/hello", "mona");
    let (status, body, _) = send(&app, signed("issue_comment", "72d3162e-cc78-11e3-81ab-4c9367dc0958", &payload)).await;
    assert_eq!((status, body["status"].as_str()), (StatusCode::CREATED, Some("created")));
    assert_eq!(body["workEvent"], "gh-72d3162e-cc78-11e3-81ab-4c9367dc0958");
    {
        let sessions = rec.sessions.lock().unwrap();
        let ws = &sessions["agents/hello-1347"];
        assert_eq!(
            (ws.spec.node_name.as_deref().unwrap(), ws.spec.workdir.as_str()),
            ("node-a", "/srv/work/octo-org/hello")
        );
        // A route's workspace makes a session that can start from the webhook alone.
        let workspace = ws.spec.workspace.as_ref().expect("the route's workspace");
        assert_eq!(
            (workspace.url.as_str(), workspace.r#ref.as_deref()),
            ("https://github.com/octo-org/hello.git", None)
        );
        // And the hosts its harness may reach beside its node's.
        assert_eq!(ws.spec.egress.as_ref().unwrap().hosts, ["pypi.org", "*.pythonhosted.org"]);
        // And what its conversations may spend.
        assert_eq!(ws.spec.budget.as_ref().and_then(|b| b.cost.as_deref()), Some("20"));
        let events = rec.events.lock().unwrap();
        let ev = &events[0];
        assert_eq!(ev.spec.session, "hello-1347");
        assert!(
            ev.spec.prompt.contains("mona")
                && ev.spec.prompt.contains("Me too")
                && ev.spec.prompt.contains("issuecomment-1")
        );
        assert_eq!(ev.metadata.labels.as_ref().unwrap()[SESSION_LABEL], "hello-1347");
        assert_eq!(
            ev.spec.source.as_ref().unwrap().delivery_id.as_deref(),
            Some("72d3162e-cc78-11e3-81ab-4c9367dc0958")
        );
    }
    let (status, body, _) = send(&app, signed("issue_comment", "72d3162e-cc78-11e3-81ab-4c9367dc0958", &payload)).await;
    assert_eq!((status, body["status"].as_str()), (StatusCode::OK, Some("duplicate")));
    assert_eq!(rec.events.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn github_status_codes() {
    let (app, rec) = app();
    let payload = issue_comment("octo-org/hello", "mona");
    let body = serde_json::to_vec(&payload).unwrap();
    let cases: Vec<(&str, Request<Body>, StatusCode)> = vec![
        ("no signature", github_request("issue_comment", Some("d1"), &body, None), StatusCode::UNAUTHORIZED),
        (
            "wrong signature",
            github_request("issue_comment", Some("d1"), &body, Some(github::sign(b"nope", &body))),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "over the limit",
            signed("issue_comment", "d1", &json!({"x": "y".repeat(70 * 1024)})),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            "no delivery id",
            github_request("issue_comment", None, &body, Some(github::sign(SECRET, &body))),
            StatusCode::BAD_REQUEST,
        ),
        (
            "malformed JSON",
            github_request("issue_comment", Some("d1"), b"{nope", Some(github::sign(SECRET, b"{nope"))),
            StatusCode::BAD_REQUEST,
        ),
        ("ping", signed("ping", "d1", &json!({"zen": "Keep it logically awesome."})), StatusCode::OK),
        ("event not accepted", signed("push", "d1", &payload), StatusCode::ACCEPTED),
        ("action not accepted", signed("issue_comment", "d1", &json!({"action": "deleted"})), StatusCode::ACCEPTED),
        (
            "ignored sender",
            signed("issue_comment", "d1", &issue_comment("octo-org/hello", "agents-bot")),
            StatusCode::ACCEPTED,
        ),
        (
            "unrouted repository",
            signed("issue_comment", "d1", &issue_comment("someone/else", "mona")),
            StatusCode::ACCEPTED,
        ),
    ];
    for (what, request, want) in cases {
        let (status, body, _) = send(&app, request).await;
        assert_eq!(status, want, "{what}: {body}");
        if want == StatusCode::ACCEPTED {
            assert_eq!(body["status"], "ignored", "{what}");
            assert!(body["reason"].as_str().is_some_and(|r| !r.is_empty()), "{what}: says why");
        }
    }
    assert!(rec.events.lock().unwrap().is_empty() && rec.sessions.lock().unwrap().is_empty(), "nothing written");

    rec.down.store(true, Ordering::Relaxed);
    let (status, _, retry) = send(&app, signed("issue_comment", "d2", &payload)).await;
    assert_eq!((status, retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("5")));
    assert!(rec.events.lock().unwrap().is_empty());
}

fn generic_request(token: Option<&str>, body: Value) -> Request<Body> {
    let mut r = Request::post("/webhooks/generic");
    if let Some(t) = token {
        r = r.header("authorization", format!("Bearer {t}"));
    }
    r.body(Body::from(serde_json::to_vec(&body).unwrap())).unwrap()
}

#[tokio::test]
async fn generic_status_codes() {
    let (app, rec) = app();
    rec.sessions.lock().unwrap().insert(
        "default/repo-7".into(),
        WorkSession::new("repo-7", WorkSessionSpec { node_name: Some("node-a".into()), ..Default::default() }),
    );
    let ok = json!({"workItem": "repo-7", "prompt": "hello", "deliveryId": "abc-1"});
    assert_eq!(send(&app, generic_request(None, ok.clone())).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(send(&app, generic_request(Some("wrong"), ok.clone())).await.0, StatusCode::UNAUTHORIZED);
    for missing in ["workItem", "prompt", "deliveryId"] {
        let mut body = ok.clone();
        body.as_object_mut().unwrap().remove(missing);
        let (status, reply, _) = send(&app, generic_request(Some(TOKEN), body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{missing}");
        assert!(reply["reason"].as_str().unwrap().contains(missing));
    }
    let unknown = json!({"workItem": "nobody-1", "prompt": "hello", "deliveryId": "abc-2"});
    assert_eq!(send(&app, generic_request(Some(TOKEN), unknown)).await.0, StatusCode::NOT_FOUND);
    assert!(rec.events.lock().unwrap().is_empty());

    assert_eq!(send(&app, generic_request(Some(TOKEN), ok.clone())).await.0, StatusCode::CREATED);
    let (status, reply, _) = send(&app, generic_request(Some(TOKEN), ok)).await;
    assert_eq!((status, reply["status"].as_str()), (StatusCode::OK, Some("duplicate")));
    assert_eq!(rec.events.lock().unwrap().len(), 1);

    // A namespace the token is not trusted with: 403, nothing written; one it is trusted with: written.
    let elsewhere = json!({"workItem": "repo-7", "prompt": "hello", "deliveryId": "abc-3", "namespace": "kube-system"});
    let (status, reply, _) = send(&app, generic_request(Some(TOKEN), elsewhere)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{reply}");
    rec.sessions.lock().unwrap().insert(
        "team-b/repo-7".into(),
        WorkSession::new("repo-7", WorkSessionSpec { node_name: Some("node-a".into()), ..Default::default() }),
    );
    let allowed = json!({"workItem": "repo-7", "prompt": "hello", "deliveryId": "abc-4", "namespace": "team-b"});
    assert_eq!(send(&app, generic_request(Some(TOKEN), allowed)).await.0, StatusCode::CREATED);
    assert_eq!(rec.events.lock().unwrap().len(), 2);
}

#[test]
fn event_names_are_dns_safe_and_stable() {
    assert_eq!(event_name("gh", "72d3162e-cc78"), "gh-72d3162e-cc78");
    assert!(event_name("gh", "72D3162E-cc78").starts_with("gh-h"), "capitals are hashed, not folded");
    let hashed = event_name("gen", "Weird id/with spaces");
    assert!(hashed.starts_with("gen-h") && hashed.len() == 45, "{hashed}");
    assert_eq!(hashed, event_name("gen", "Weird id/with spaces"));
    assert_ne!(event_name("gen", "-x"), "gen--x");
    // Generic delivery ids are the sender's: case matters, so `A1` and `a1` are two deliveries.
    assert_ne!(event_name("gen", "A1"), event_name("gen", "a1"));
}

/// A bounded fuzz of the GitHub handler: random bodies, headers, signatures, unicode and numbers. No panic, no 5xx
/// (the sink is up), and nothing written unless the request was a valid, signed, routable delivery.
#[tokio::test]
async fn fuzz_github_handler() {
    let (app, rec) = app();
    let mut seed: u64 = 0x5eed_1234_abcd_ef01;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let pieces: [Value; 12] = [
        json!(null),
        json!(-1),
        json!(1e308),
        json!(u64::MAX),
        json!("💥\u{0}\u{202e}"),
        json!([]),
        json!({}),
        json!("octo-org/hello"),
        json!({"number": 18446744073709551615u64}),
        json!({"full_name": "octo-org/x"}),
        json!("created"),
        json!({"login": "mona"}),
    ];
    let keys = ["action", "issue", "pull_request", "comment", "review", "repository", "sender", "number", "full_name"];
    let mut written_ok = 0;
    for i in 0..2000 {
        let mut payload = issue_comment("octo-org/hello", "mona");
        for _ in 0..(next() % 4) {
            let key = keys[(next() % keys.len() as u64) as usize];
            let value = pieces[(next() % pieces.len() as u64) as usize].clone();
            payload[key] = value;
        }
        let body = match next() % 5 {
            0 => {
                let mut b = serde_json::to_vec(&payload).unwrap();
                let at = (next() as usize) % b.len();
                b[at] = next() as u8;
                b
            }
            _ => serde_json::to_vec(&payload).unwrap(),
        };
        let signature = match next() % 4 {
            0 => None,
            1 => Some(format!("sha256={}", "0".repeat(64))),
            2 => Some("sha256=\u{fe0f}".to_string()),
            _ => Some(github::sign(SECRET, &body)),
        };
        let event = ["issue_comment", "issues", "ping", "", "pull_request_review"][(next() % 5) as usize];
        let delivery = format!("fuzz-{i}");
        let before = rec.events.lock().unwrap().len();
        let (status, _, _) = send(&app, github_request(event, Some(&delivery), &body, signature)).await;
        assert!(!status.is_server_error(), "request {i}: {status}");
        let after = rec.events.lock().unwrap().len();
        assert_eq!(
            after - before,
            usize::from(status == StatusCode::CREATED),
            "request {i}: written only when created"
        );
        written_ok += usize::from(status == StatusCode::CREATED);
    }
    assert!(written_ok > 0, "the fuzz also reached the success path");
}

/// Only people with a role in the repository prompt an agent. The role is the one of the person
/// behind what the event is about: the comment's author (not the issue's), the review's, the opened issue's.
#[tokio::test]
async fn github_accepts_only_the_roles_allowed_to_prompt() {
    let (app, rec, metrics) = app_with(config());
    let as_role = |role: &str, delivery: &str| {
        let mut payload = issue_comment("octo-org/hello", "stranger");
        payload["comment"]["author_association"] = role.into();
        signed("issue_comment", delivery, &payload)
    };
    for (i, role) in ["NONE", "FIRST_TIMER", "FIRST_TIME_CONTRIBUTOR", "CONTRIBUTOR", "MANNEQUIN"].iter().enumerate() {
        let (status, body, _) = send(&app, as_role(role, &format!("r{i}"))).await;
        assert_eq!((status, body["status"].as_str()), (StatusCode::ACCEPTED, Some("ignored")), "{role}");
        let reason = body["reason"].as_str().unwrap();
        assert!(reason.contains(role) && reason.contains("OWNER, MEMBER, COLLABORATOR"), "{role}: {reason}");
    }
    // The issue's author is its OWNER in the fixture: a stranger's comment on it is still a stranger's.
    let mut payload = issue_comment("octo-org/hello", "stranger");
    payload["comment"].as_object_mut().unwrap().remove("author_association");
    let (status, body, _) = send(&app, signed("issue_comment", "r-missing", &payload)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "no role said is no role: {body}");
    let opened = json!({
        "action": "opened",
        "issue": {"number": 9, "title": "run this", "body": "please", "author_association": "NONE"},
        "repository": {"full_name": "octo-org/hello"},
        "sender": {"login": "stranger"}
    });
    let (status, body, _) = send(&app, signed("issues", "r-opened", &opened)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "a stranger's new issue starts no agent: {body}");
    assert!(rec.events.lock().unwrap().is_empty() && rec.sessions.lock().unwrap().is_empty(), "nothing written");
    assert_eq!(ignored_count(&metrics, "author_association"), 7);

    for (i, role) in ["OWNER", "MEMBER", "COLLABORATOR"].iter().enumerate() {
        let (status, body, _) = send(&app, as_role(role, &format!("ok{i}"))).await;
        assert_eq!(status, StatusCode::CREATED, "{role}: {body}");
    }
    let mut opened = opened;
    opened["issue"]["author_association"] = "MEMBER".into();
    assert_eq!(send(&app, signed("issues", "ok-opened", &opened)).await.0, StatusCode::CREATED);

    // A route may widen the list (a project that takes prompts from contributors) or narrow it.
    let mut widened = config();
    widened.routes[0].allowed_author_associations = Some(vec!["CONTRIBUTOR".into(), "OWNER".into()]);
    let (app, rec, _) = app_with(widened);
    assert_eq!(send(&app, as_role("CONTRIBUTOR", "w1")).await.0, StatusCode::CREATED);
    assert_eq!(send(&app, as_role("MEMBER", "w2")).await.0, StatusCode::ACCEPTED, "not in the route's list");
    assert_eq!(rec.events.lock().unwrap().len(), 1);
}

#[test]
fn an_unknown_author_association_refuses_the_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s"), "x").unwrap();
    let yaml = format!(
        "github:\n  secretFile: {}\n  allowedAuthorAssociations: [OWNER, member]\n",
        dir.path().join("s").display()
    );
    let e = BridgeConfig::parse(&yaml, std::path::Path::new("b.yaml")).unwrap_err().to_string();
    assert!(e.contains("github.allowedAuthorAssociations") && e.contains("\"member\""), "{e}");
    let route = format!(
        "github:\n  secretFile: {}\nroutes:\n  - {{repository: 'a/*', namespace: n, nodeName: x, harness: claude, workdir: /w, allowedAuthorAssociations: [EVERYONE]}}\n",
        dir.path().join("s").display()
    );
    let e = BridgeConfig::parse(&route, std::path::Path::new("b.yaml")).unwrap_err().to_string();
    assert!(e.contains("routes[0].allowedAuthorAssociations"), "{e}");
}

/// A route caps the WorkSessions it creates, counted from what the store holds; past it an event
/// that would create one is ignored, and events to existing sessions still flow.
#[tokio::test]
async fn a_route_caps_the_sessions_it_creates_and_existing_ones_still_get_events() {
    let mut capped = config();
    capped.routes[0].max_sessions = Some(2);
    let (app, rec, metrics) = app_with(capped);
    let comment = |number: u64, delivery: &str| {
        signed("issue_comment", delivery, &fixture::issue_comment("octo-org/hello", number, "mona", "hi"))
    };
    assert_eq!(send(&app, comment(1, "c1")).await.0, StatusCode::CREATED);
    assert_eq!(send(&app, comment(2, "c2")).await.0, StatusCode::CREATED);
    let (status, body, _) = send(&app, comment(3, "c3")).await;
    assert_eq!((status, body["status"].as_str()), (StatusCode::ACCEPTED, Some("ignored")), "{body}");
    assert!(body["reason"].as_str().unwrap().contains("maxSessions is 2"), "{body}");
    assert_eq!(ignored_count(&metrics, "max_sessions"), 1);
    assert_eq!(send(&app, comment(1, "c4")).await.0, StatusCode::CREATED, "an existing session still gets events");
    {
        let sessions = rec.sessions.lock().unwrap();
        assert_eq!(sessions.len(), 2);
        assert!(
            sessions
                .values()
                .all(|ws| kube::ResourceExt::labels(ws)[config::ROUTE_LABEL] == config::slug("octo-org/*"))
        );
    }
    // Counted from the store: a session deleted there makes room.
    rec.sessions.lock().unwrap().remove("agents/hello-2");
    assert_eq!(send(&app, comment(3, "c5")).await.0, StatusCode::CREATED);
    assert_eq!(rec.events.lock().unwrap().len(), 4);
}

/// A rule whose work item renders to nothing a name can keep is ignored: a slug of nothing would put every such event
/// into one session.
#[tokio::test]
async fn a_work_item_that_renders_to_nothing_is_ignored() {
    let mut titled = config();
    titled.routes[0].work_item = "{title}".into();
    let (app, rec, metrics) = app_with(titled);
    let mut payload = issue_comment("octo-org/hello", "mona");
    payload["issue"]["title"] = "!!! ???".into();
    let (status, body, _) = send(&app, signed("issue_comment", "t1", &payload)).await;
    assert_eq!((status, body["status"].as_str()), (StatusCode::ACCEPTED, Some("ignored")), "{body}");
    assert_eq!(ignored_count(&metrics, "empty_work_item"), 1);
    payload["issue"]["title"] = "Crash on start".into();
    assert_eq!(send(&app, signed("issue_comment", "t2", &payload)).await.0, StatusCode::CREATED);
    let sessions: Vec<String> = rec.sessions.lock().unwrap().keys().cloned().collect();
    assert_eq!(sessions, [format!("agents/{}", config::slug("Crash on start"))]);
}

mod pull_requests;
