//! The console's routes against an in-memory source (the browser tests in `tests/console.rs` use the real ones):
//! what each answers, only for its own `Host`, `GET` but for the answer (only from its own page), with its security
//! headers; rows in the status's words.

use std::sync::Mutex;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::*;
use crate::api::{EventSource, SourceType, WorkEventSpec, WorkSessionSpec, WorkSessionStatus};
use crate::cli::read::KubeEvent;

type Answers = Arc<Mutex<Vec<(String, String, crate::api::Decision, Option<String>)>>>;

#[derive(Default)]
struct Memory {
    sessions: Mutex<Vec<WorkSession>>,
    events: Vec<WorkEvent>,
    /// The answers given: session, request, decision, reason.
    answers: Answers,
}

impl Source for Arc<Memory> {
    async fn sessions(&self) -> Result<Vec<WorkSession>, String> {
        Ok(self.sessions.lock().unwrap().clone())
    }
    async fn work_events(&self) -> Result<Vec<WorkEvent>, String> {
        Ok(self.events.clone())
    }
    fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        tokio::sync::watch::channel(0).1
    }
    async fn kube_events(&self, _namespace: &str, _session: &str) -> Result<Vec<KubeEvent>, String> {
        Ok(Vec::new())
    }
    async fn screen(&self, _ws: &WorkSession, _lines: usize, _colours: bool) -> Result<String, String> {
        Ok("\u{1b}[32mready>\u{1b}[0m <b>hi</b>\n".into())
    }
    async fn answer(
        &self,
        namespace: &str,
        name: &str,
        id: String,
        decision: crate::api::Decision,
        reason: Option<String>,
    ) -> Result<String, String> {
        self.answers.lock().unwrap().push((format!("{namespace}/{name}"), id, decision, reason));
        Ok("answered".into())
    }
}

fn session(name: &str, ready: (&str, &str, &str)) -> WorkSession {
    let mut ws = WorkSession::new(name, WorkSessionSpec { harness: "claude".into(), ..Default::default() });
    ws.metadata.namespace = Some("agents".into());
    let condition = |t: &str, (status, reason, message): (&str, &str, &str)| {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: t.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    };
    ws.status = Some(WorkSessionStatus {
        phase: Some(crate::api::Phase::Running),
        harness_session_id: Some("abc".into()),
        conditions: vec![condition("Ready", ready)],
        ..Default::default()
    });
    ws
}

const HOST: &str = "127.0.0.1:7000";
const TOKEN: &str = "0123456789abcdef";

async fn get(app: &Router, path: &str, host: &str) -> (StatusCode, axum::http::HeaderMap, String) {
    let cookie = format!("{COOKIE}={TOKEN}");
    let request = Request::get(path).header("host", host).header("cookie", cookie).body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    (parts.status, parts.headers, String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap())
}

fn app() -> Router {
    app_recording(Answers::default(), false)
}

/// The console over the sessions below, `fine`'s request `0123456789ab` waiting.
fn app_waiting(answers: Answers) -> Router {
    app_recording(answers, true)
}

/// The console over the sessions below, recording the answers it is given into `answers`.
fn app_recording(answers: Answers, waiting: bool) -> Router {
    let mut memory = Memory { answers, ..Memory::default() };
    let mut fine = session("fine", ("True", "Running", "the harness is running"));
    let usage =
        crate::api::Usage { tokens: 4200, turns: 4, estimated_cost: Some("0.0276".into()), ..Default::default() };
    fine.status.as_mut().unwrap().usage = Some(usage);
    if waiting {
        let at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH);
        fine.status.as_mut().unwrap().approval = Some(crate::api::ApprovalStatus {
            id: "0123456789ab".into(),
            tool: "Bash".into(),
            request: "Bash: make".into(),
            asked_time: at.clone(),
            deadline: at,
            decision: None,
            by: None,
            reason: None,
            decided_time: None,
            digest: None,
        });
    }
    memory.sessions.lock().unwrap().push(fine);
    memory.sessions.lock().unwrap().push(session("broken", ("False", "SpawnFailed", "tmux said no")));
    memory.events.push(WorkEvent::new(
        "fine-1",
        WorkEventSpec {
            session: "fine".into(),
            prompt: "p".into(),
            source: Some(EventSource {
                type_: SourceType::Github,
                url: Some("javascript:alert(1)".into()),
                ..Default::default()
            }),
            command: false,
            not_before: None,
            answer: None,
        },
    ));
    router(Arc::new(memory), hosts_for(HOST.parse().unwrap()), TOKEN.into())
}

#[tokio::test]
async fn rows_say_phase_and_the_last_failure_in_the_status_words() {
    let (status, headers, body) = get(&app(), "/api/sessions", HOST).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap().contains("script-src 'self'"));
    let v: Value = serde_json::from_str(&body).unwrap();
    let rows = v["sessions"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["name"].as_str().unwrap()).collect::<Vec<_>>(), ["broken", "fine"], "sorted");
    assert_eq!(rows[0]["failure"], "SpawnFailed: tmux said no");
    assert_eq!((rows[1]["failure"].as_str(), rows[1]["phase"].as_str()), (Some(""), Some("Running")));
    assert_eq!(
        (rows[0]["spent"].as_str(), rows[1]["spent"].as_str()),
        (Some(""), Some("4200 tokens in 4 turns, $0.0276"))
    );
}

#[tokio::test]
async fn only_its_own_host_and_only_get() {
    let app = app();
    assert_eq!(get(&app, "/", "evil.example:7000").await.0, StatusCode::MISDIRECTED_REQUEST, "DNS rebinding");
    assert_eq!(get(&app, "/", "localhost:7000").await.0, StatusCode::OK);
    // Another user of the machine reaches the port, not the token; a page of another site gets nothing either.
    let bare = Request::get("/api/sessions").header("host", HOST).body(Body::empty()).unwrap();
    assert_eq!(app.clone().oneshot(bare).await.unwrap().status(), StatusCode::UNAUTHORIZED, "no token");
    let first = Request::get(format!("/?token={TOKEN}")).header("host", HOST).body(Body::empty()).unwrap();
    let answer = app.clone().oneshot(first).await.unwrap();
    let cookie = answer.headers()[header::SET_COOKIE].to_str().unwrap().to_string();
    assert!(
        cookie.starts_with(&format!("{COOKIE}={TOKEN};"))
            && cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict")
    );
    let wrong = Request::get("/?token=guess").header("host", HOST).body(Body::empty()).unwrap();
    assert_eq!(app.clone().oneshot(wrong).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    let cross = Request::get("/api/sessions/agents/fine/screen")
        .header("host", HOST)
        .header("cookie", format!("{COOKIE}={TOKEN}"))
        .header("sec-fetch-site", "cross-site")
        .body(Body::empty())
        .unwrap();
    assert_eq!(app.clone().oneshot(cross).await.unwrap().status(), StatusCode::FORBIDDEN, "another site's <img>");
    let post = Request::post("/api/sessions")
        .header("host", HOST)
        .header("cookie", format!("{COOKIE}={TOKEN}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(app.clone().oneshot(post).await.unwrap().status(), StatusCode::FORBIDDEN, "no write but its page's");
    let (_, headers, page) = get(&app, "/sessions/agents/fine", HOST).await;
    assert!(page.contains("<h2 id=\"screen-h\">Screen</h2>"));
    assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY");
}

#[tokio::test]
async fn a_session_page_gets_its_screen_as_runs_and_no_link_that_is_not_a_web_link() {
    let app = app();
    let (_, _, body) = get(&app, "/api/sessions/agents/fine/screen", HOST).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["runs"][0], json!({"text": "ready>", "fg": "#00cd00"}));
    assert_eq!(v["runs"][1]["text"], " <b>hi</b>", "markup is text");
    let (_, _, body) = get(&app, "/api/sessions/agents/fine", HOST).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["events"][0]["url"], Value::Null, "a javascript: URL is no link");
    assert_eq!(get(&app, "/api/sessions/agents/nobody", HOST).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_answer_comes_only_as_json_from_the_consoles_own_page() {
    let answers = Answers::default();
    let app = app_recording(answers.clone(), false);
    let post = |site: Option<&str>, origin: &str, kind: &str| {
        let mut r = Request::post("/api/sessions/agents/fine/answer")
            .header("host", HOST)
            .header("cookie", format!("{COOKIE}={TOKEN}"))
            .header("origin", origin)
            .header("content-type", kind);
        if let Some(site) = site {
            r = r.header("sec-fetch-site", site);
        }
        r.body(Body::from(r#"{"request":"0123456789ab","decision":"Allow","reason":null}"#)).unwrap()
    };
    let own = format!("http://{HOST}");
    for (what, request) in [
        ("no origin", post(None, "", "application/json")),
        ("another site's page", post(Some("cross-site"), &own, "application/json")),
        ("another origin", post(Some("same-origin"), "http://evil.example", "application/json")),
        ("a form's body", post(Some("same-origin"), &own, "application/x-www-form-urlencoded")),
    ] {
        assert_eq!(app.clone().oneshot(request).await.unwrap().status(), StatusCode::FORBIDDEN, "{what}");
    }
    // No request waits: nothing is answered.
    let stale = app.clone().oneshot(post(Some("same-origin"), &own, "application/json")).await.unwrap();
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    assert!(answers.lock().unwrap().is_empty());
    // The request waiting, from its page (or from a browser that says nothing of where, as to a plain-http address
    // other than loopback, with its own origin).
    let app = app_waiting(answers.clone());
    let answered = app.clone().oneshot(post(Some("same-origin"), &own, "application/json")).await.unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    let answered = app.clone().oneshot(post(None, &own, "application/json")).await.unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    let given = answers.lock().unwrap().clone();
    assert_eq!(given.len(), 2);
    assert_eq!(given[0], ("agents/fine".into(), "0123456789ab".into(), crate::api::Decision::Allow, None));
    // No GET changes anything.
    assert_eq!(get(&app, "/api/sessions/agents/fine/answer", HOST).await.0, StatusCode::METHOD_NOT_ALLOWED);
}
