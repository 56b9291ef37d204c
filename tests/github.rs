//! The GitHub loop end to end, against a fake GitHub API on loopback (tests/fake_github), the real API
//! server, the real agent on real tmux and the stand-in harness. Feedback where the comment is (a reaction once
//! `Delivered` and not before, once per change across restarts, a sign and one comment on `Failed`), a stalled or
//! failing GitHub that never holds up a delivery, sessions that follow their issue (closed archives, a comment or a
//! reopening wakes), and the credentials: a GitHub App's tokens minted from a test key and renewed before expiry, on
//! an Enterprise Server's base URL.

mod fake_github;
mod scenarios;
use scenarios::fixtures;
mod standin;
mod support;
mod world;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fake_github::FakeGithub;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::eventually;
use worksession::api::{NODE_LABEL, Phase, PromptPhase, WorkEvent};
use worksession::bridge::config::ROUTE_LABEL;
use worksession::bridge::feedback::{GIVEN_ANNOTATION, HOLD_ANNOTATION};
use worksession::bridge::{BridgeConfig, BridgeMetrics, github};
use worksession::store::Sink;
use worksession::store::kube::KubeSink;
use world::World;

const SECRET: &str = "it's a secret to everybody";
const REPO: &str = "octo-org/hello-world";

/// The bridge (webhooks) and its feedback driver, on config `route_extra` for the one route.
struct Bridge {
    addr: SocketAddr,
    config: Arc<BridgeConfig>,
    feedback: Option<tokio::task::JoinHandle<()>>,
    sink: KubeSink,
    server: tokio::task::JoinHandle<()>,
}

impl Bridge {
    async fn start(w: &World, gh: &FakeGithub, route_extra: &str) -> Self {
        Self::start_with(w, gh, "", route_extra).await
    }

    /// The bridge, with `github_extra` added to its `github` settings and `route_extra` to its one route.
    async fn start_with(w: &World, gh: &FakeGithub, github_extra: &str, route_extra: &str) -> Self {
        let dir = w.tmux.dir.path();
        std::fs::write(dir.join("github-secret"), SECRET).unwrap();
        std::fs::write(dir.join("github-token"), "ghp_test\n").unwrap();
        let yaml = format!(
            "github:\n  secretFile: {secret}\n  api: {{baseUrl: '{base}', tokenFile: {token}}}\n{events}{github_extra}routes:\n  - repository: 'octo-org/*'\n    namespace: {ns}\n    nodeName: {node}\n    harness: standin\n    workdir: {workdir}\n{route_extra}",
            secret = dir.join("github-secret").display(),
            token = dir.join("github-token").display(),
            base = gh.url(""),
            ns = w.ns.name,
            node = w.node,
            workdir = w.tmux.workdir().display(),
            events = if github_extra.contains("events:") { "" } else { "  events: {issue_comment: [created]}\n" },
        );
        let config = Arc::new(BridgeConfig::parse(&yaml, std::path::Path::new("bridge.yaml")).unwrap());
        let sink = KubeSink::new(w.ns.client.clone());
        let app = support::bridge_router(&yaml, sink.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let mut bridge = Bridge { addr, config, feedback: None, sink, server };
        bridge.start_feedback(w);
        bridge
    }

    /// Starts the sweep of the hook's deliveries (`github.redeliver`), as the bridge runs it beside its webhooks.
    fn sweep(&self) -> tokio::task::JoinHandle<()> {
        let api = self.config.github.as_ref().unwrap().api.clone().unwrap();
        let github = Arc::new(worksession::bridge::feedback::github_of(&api).unwrap());
        let metrics = BridgeMetrics::register(&mut prometheus_client::registry::Registry::default());
        let config = tokio::sync::watch::channel(self.config.clone()).1;
        tokio::spawn(worksession::bridge::redeliver::run(github, config, metrics))
    }

    /// (Re)starts the feedback driver: a new process, as far as its holds go.
    fn start_feedback(&mut self, w: &World) {
        if let Some(old) = self.feedback.take() {
            old.abort();
        }
        let api = self.config.github.as_ref().unwrap().api.clone().unwrap();
        let github = Arc::new(worksession::bridge::feedback::github_of(&api).unwrap());
        let metrics = BridgeMetrics::register(&mut prometheus_client::registry::Registry::default());
        let config = tokio::sync::watch::channel(self.config.clone()).1;
        let (client, events) = (w.ns.client.clone(), w.events()); // this test's namespace: each test has its own bridge
        let feedback = worksession::bridge::feedback::run(client, events, github, config, metrics);
        self.feedback = Some(tokio::spawn(feedback));
    }
}

/// POSTs a signed GitHub delivery of `kind`; returns the status and the body.
async fn deliver(bridge: SocketAddr, kind: &str, delivery: &str, payload: &Value) -> (u16, String) {
    let body = serde_json::to_vec(payload).unwrap();
    let signature = github::sign(SECRET.as_bytes(), &body);
    let headers = [
        ("Content-Type", "application/json"),
        ("X-GitHub-Event", kind),
        ("X-GitHub-Delivery", delivery),
        ("X-Hub-Signature-256", &signature),
    ];
    support::http(bridge, "POST", "/webhooks/github", &headers, &body).await.unwrap()
}

/// A comment `body` with id `comment` on issue `number`.
fn comment(number: u64, id: u64, body: &str) -> Value {
    let mut payload = fixtures::issue_comment(REPO, number, "mona", body);
    payload["comment"]["id"] = id.into();
    payload
}

/// The issue `number` closed (`closed`) or reopened.
fn issue(number: u64, action: &str) -> Value {
    let mut payload = fixtures::issue_comment(REPO, number, "octocat", "");
    payload["action"] = action.into();
    payload.as_object_mut().unwrap().remove("comment");
    payload
}

#[tokio::test]
async fn a_delivered_comment_gets_eyes_once_after_it_is_delivered_across_restarts() {
    let mut w = World::new().await;
    let gh = FakeGithub::start().await;
    let mut bridge = Bridge::start(&w, &gh, "    feedback: Reactions\n").await;
    let first = worksession::bridge::event_name("gh", "eyes-1");
    gh.watch_event(w.events(), &first);

    let (status, body) = deliver(bridge.addr, "issue_comment", "eyes-1", &comment(21, 501, "please look")).await;
    assert_eq!(status, 201, "{body}");
    w.await_event(&first, PromptPhase::Delivered).await;
    let reactions = eventually("the reaction", || async {
        let calls = gh.calls_to("/reactions");
        (!calls.is_empty()).then_some(calls)
    })
    .await;
    assert_eq!(reactions[0].path, format!("/repos/{REPO}/issues/comments/501/reactions"));
    assert_eq!(
        (reactions[0].body["content"].as_str(), reactions[0].authorization.as_str()),
        (Some("eyes"), "token ghp_test")
    );
    assert_eq!(reactions[0].phase.as_deref(), Some("Delivered"), "after Delivered, not before");
    eventually("recorded as given", || async {
        let ev = w.events().get(&first).await.unwrap();
        ev.metadata.annotations.unwrap_or_default().get(GIVEN_ANNOTATION).filter(|p| *p == "Delivered").map(drop)
    })
    .await;

    // The agent and the bridge's feedback restarted: the change was given; only the next comment gets a reaction.
    w.stop_agent();
    w.start_agent();
    bridge.start_feedback(&w);
    let (status, _) = deliver(bridge.addr, "issue_comment", "eyes-2", &comment(21, 502, "and this")).await;
    assert_eq!(status, 201);
    w.await_event(&worksession::bridge::event_name("gh", "eyes-2"), PromptPhase::Delivered).await;
    eventually("the second reaction", || async { (!gh.calls_to("/comments/502/").is_empty()).then_some(()) }).await;
    assert_eq!(gh.calls_to("/comments/501/").len(), 1, "one call per change: {:?}", gh.calls());
    assert!(gh.calls_to("/issues/21/comments").is_empty(), "no comment on a delivery");
}

#[tokio::test]
async fn a_stalled_or_failing_github_never_delays_a_delivery_and_is_tried_again() {
    let w = World::new().await;
    let gh = FakeGithub::start().await;
    let bridge = Bridge::start(&w, &gh, "    feedback: Reactions\n").await;
    gh.stall(true);
    let name = worksession::bridge::event_name("gh", "stall-1");
    let (status, body) =
        deliver(bridge.addr, "issue_comment", "stall-1", &comment(22, 601, "while GitHub hangs")).await;
    assert_eq!(status, 201, "answered without GitHub: {body}");
    w.await_event(&name, PromptPhase::Delivered).await;
    eventually("a call held by the stalled GitHub", || async {
        (!gh.calls_to("/comments/601/").is_empty()).then_some(())
    })
    .await;
    // It answers again, failing twice first: the feedback comes, by back-off, with a Warning Event for each failure.
    gh.fail_next(2);
    gh.stall(false);
    eventually("the reaction given at last", || async {
        let ev = w.events().get(&name).await.unwrap();
        ev.metadata.annotations.unwrap_or_default().get(GIVEN_ANNOTATION).filter(|p| *p == "Delivered").map(drop)
    })
    .await;
    assert!(gh.calls_to("/comments/601/").len() >= 3, "the stalled call, two failures, the success: {:?}", gh.calls());
    let k8s_events: kube::Api<k8s_openapi::api::events::v1::Event> = w.ns.api();
    let failures = eventually("a Warning Event on the WorkEvent", || async {
        let list = k8s_events.list(&Default::default()).await.unwrap().items;
        let failed: Vec<_> = list.into_iter().filter(|e| e.reason.as_deref() == Some("GitHubFeedbackFailed")).collect();
        (!failed.is_empty()).then_some(failed)
    })
    .await;
    assert_eq!(failures[0].regarding.as_ref().and_then(|r| r.name.clone()), Some(name));
}

/// A WorkEvent as the bridge makes them from comment `id` on issue 23, addressed to a session that does not exist
/// (its status is the test's to write).
async fn bridge_event(w: &World, name: &str, id: u64, prompt: &str) -> WorkEvent {
    let mut ev: WorkEvent = serde_json::from_value(json!({
        "apiVersion": "worksession.dev/v1alpha1", "kind": "WorkEvent",
        "metadata": {"name": name, "labels": {ROUTE_LABEL: worksession::api::slug("octo-org/*"), NODE_LABEL: "elsewhere"}},
        "spec": {"session": "nobody", "prompt": prompt,
                 "source": {"type": "github", "event": "issue_comment", "repository": REPO, "number": 23, "commentId": id}},
    }))
    .unwrap();
    ev = w.events().create(&PostParams::default(), &ev).await.unwrap();
    ev
}

async fn fail(w: &World, name: &str, message: &str) {
    let status = json!({"status": {"phase": "Failed", "message": message}});
    w.events().patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
}

#[tokio::test]
async fn a_failed_event_gets_a_sign_and_one_short_comment_that_never_repeats_the_prompt() {
    let w = World::new().await;
    let gh = FakeGithub::start().await;
    let _bridge = Bridge::start(&w, &gh, "    feedback: Comments\n").await;
    bridge_event(&w, "gh-fail-1", 701, "deploy the secret thing now").await;
    fail(&w, "gh-fail-1", "cannot be delivered: deploy the secret thing now was refused by the harness").await;
    let comments = eventually("the failure's comment", || async {
        let calls: Vec<_> = gh.calls_to("/issues/23/comments").into_iter().filter(|c| c.method == "POST").collect();
        (!calls.is_empty()).then_some(calls)
    })
    .await;
    let text = comments[0].body["body"].as_str().unwrap();
    assert!(text.contains("could not deliver") && text.contains("refused by the harness"), "{text}");
    assert!(!text.contains("deploy the secret thing now"), "never the prompt: {text}");
    let reaction = gh.calls_to("/issues/comments/701/reactions");
    assert_eq!(reaction[0].body["content"], "confused");

    // A hold that lapsed (its bridge died after commenting): the new holder finds the comment and does not repeat it.
    bridge_event(&w, "gh-fail-2", 702, "another prompt here").await;
    let lapsed = format!(
        "Failed gone-bridge {}",
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(600)
    );
    let annotate = json!({"metadata": {"annotations": {HOLD_ANNOTATION: lapsed}}});
    w.events().patch("gh-fail-2", &PatchParams::default(), &Patch::Merge(&annotate)).await.unwrap();
    let made = worksession::github::Github::new(
        &gh.url(""),
        worksession::github::Auth::TokenFile(w.tmux.dir.path().join("github-token")),
    )
    .unwrap();
    made.call(
        hyper::Method::POST,
        REPO,
        &format!("/repos/{REPO}/issues/23/comments"),
        Some(&json!({"body": format!("earlier\n\n<!-- worksession:{}/gh-fail-2 -->", w.ns.name)})),
    )
    .await
    .unwrap();
    fail(&w, "gh-fail-2", "not confirmed").await;
    eventually("given after the takeover", || async {
        let ev = w.events().get("gh-fail-2").await.unwrap();
        ev.metadata.annotations.unwrap_or_default().get(GIVEN_ANNOTATION).map(drop)
    })
    .await;
    assert!(!gh.calls_to("/issues/23/comments?since=").is_empty(), "looked for its comment first");
    let posted = gh.calls_to("/issues/23/comments").into_iter().filter(|c| c.method == "POST").count();
    assert_eq!(
        posted,
        2,
        "the first failure's comment and the one made before the takeover, no third: {:?}",
        gh.calls()
    );
}

#[tokio::test]
async fn closing_an_issue_archives_its_session_and_a_comment_or_reopening_wakes_it() {
    let w = World::with_yaml(|_, yaml| {
        yaml.replace("defaults:\n", "defaults:\n  idleSuspendAfterSeconds: 3600\n  archiveQuietSeconds: 1\n")
    })
    .await;
    let gh = FakeGithub::start().await;
    let bridge = Bridge::start(&w, &gh, "    feedback: 'Off'\n").await;
    let session = &support::work_item(REPO, 31);
    assert_eq!(deliver(bridge.addr, "issue_comment", "life-1", &comment(31, 801, "start on it")).await.0, 201);
    w.await_event("gh-life-1", PromptPhase::Delivered).await;
    let running = w.await_phase(session, Phase::Running).await;
    let conversation = world::recorded_id(&running);

    let (status, body) = deliver(bridge.addr, "issues", "life-close", &issue(31, "closed")).await;
    assert_eq!((status, body.contains("archived")), (200, true), "{body}");
    assert!(w.sessions().get(session).await.unwrap().spec.archived);
    // Quiet already (the stand-in printed its answer and waits): stopped within the minute, the conversation kept.
    let archived = w.await_phase(session, Phase::Archived).await;
    assert_eq!(world::recorded_id(&archived), conversation);
    w.tmux.await_liveness(&w.tmux_session(session), worksession::node::tmux::Liveness::Absent).await; // the harness stopped

    // A comment on the closed issue: delivered into the same conversation, never lost to the archive.
    assert_eq!(deliver(bridge.addr, "issue_comment", "life-2", &comment(31, 802, "one more thing")).await.0, 201);
    let ev = w.await_event("gh-life-2", PromptPhase::Delivered).await;
    assert_eq!(ev.status.unwrap().harness_session_id.as_deref(), Some(conversation.as_str()), "resumed");
    w.await_phase(session, Phase::Archived).await;

    // Reopened: the conversation resumed at once, with nothing waiting.
    let before = w.sessions().get(session).await.unwrap().status.unwrap().respawn_count;
    let (status, body) = deliver(bridge.addr, "issues", "life-open", &issue(31, "reopened")).await;
    assert_eq!((status, body.contains("reopened")), (200, true), "{body}");
    let woken = w
        .await_session(session, "resumed on reopening", |ws| {
            ws.status.as_ref().is_some_and(|s| s.respawn_count > before && s.phase == Some(Phase::Running))
        })
        .await;
    assert!(!woken.spec.archived);
    assert_eq!(world::recorded_id(&woken), conversation);
}

#[tokio::test]
async fn on_close_delete_deletes_the_archived_session_once_its_time_passed_and_not_a_reopened_one() {
    let w = World::with_yaml(|_, yaml| yaml.replace("defaults:\n", "defaults:\n  archiveQuietSeconds: 1\n")).await;
    let gh = FakeGithub::start().await;
    let bridge = Bridge::start(&w, &gh, "    feedback: 'Off'\n    onClose: Delete\n    deleteAfterSeconds: 0\n").await;
    for n in [41, 42] {
        let (status, _) =
            deliver(bridge.addr, "issue_comment", &format!("del-{n}"), &comment(n, 900 + n, "hello")).await;
        assert_eq!(status, 201);
        assert_eq!(deliver(bridge.addr, "issues", &format!("del-close-{n}"), &issue(n, "closed")).await.0, 200);
    }
    assert_eq!(deliver(bridge.addr, "issues", "del-open-42", &issue(42, "reopened")).await.0, 200);
    let ws = w.await_phase(&support::work_item(REPO, 41), Phase::Archived).await; // stopped: only then deleted
    assert!(ws.metadata.annotations.unwrap().contains_key(worksession::api::DELETE_AT_ANNOTATION));
    // What the bridge's sweep runs every minute, once its cache shows the reopening.
    let deleted = eventually("the closed one deleted", || async {
        let deleted = bridge.sink.delete_due(k8s_openapi::jiff::Timestamp::now()).await.unwrap();
        let reopened = w.sessions().get(&support::work_item(REPO, 42)).await.unwrap();
        (!deleted.is_empty() && !reopened.spec.archived).then_some(deleted)
    })
    .await;
    assert_eq!(deleted, [format!("{}/{}", w.ns.name, support::work_item(REPO, 41))]);
    eventually("41 gone", || async {
        w.sessions().get_opt(&support::work_item(REPO, 41)).await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(w.sessions().get_opt(&support::work_item(REPO, 42)).await.unwrap().is_some(), "reopened: kept");
}

/// A fresh RSA key as GitHub gives an App's (PKCS#1 PEM), and its public half (PKCS#1 DER) for the fake to check.
fn app_key(dir: &std::path::Path) -> (Vec<u8>, Vec<u8>) {
    let pem = dir.join("app.pem");
    let der = dir.join("app.pub.der");
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&["genrsa", "-traditional", "-out", pem.to_str().unwrap(), "2048"]);
    run(&["rsa", "-in", pem.to_str().unwrap(), "-RSAPublicKey_out", "-outform", "DER", "-out", der.to_str().unwrap()]);
    (std::fs::read(pem).unwrap(), std::fs::read(der).unwrap())
}

#[tokio::test]
async fn an_app_token_is_minted_from_its_key_and_renewed_before_expiry_on_an_enterprise_server() {
    let dir = tempfile::tempdir().unwrap();
    let (pem, public) = app_key(dir.path());
    let gh = FakeGithub::start().await;
    // The first token has four minutes left when it comes: inside the renewal margin, so the next use renews it.
    gh.app(4242, public, Duration::from_secs(240));
    let app = worksession::github::app::App::new(4242, &pem, None).unwrap();
    let client =
        worksession::github::Github::new(&gh.url("/api/v3"), worksession::github::Auth::App(Box::new(app))).unwrap();
    let path = format!("/repos/{REPO}/issues/comments/1/reactions");
    for _ in 0..3 {
        client.call(hyper::Method::POST, REPO, &path, Some(&json!({"content": "eyes"}))).await.unwrap();
    }
    let calls = gh.calls();
    assert!(calls.iter().all(|c| c.path.starts_with("/api/v3/")), "the Enterprise Server's base URL: {calls:?}");
    assert_eq!(gh.calls_to(&format!("/api/v3/repos/{REPO}/installation")).len(), 1, "the installation looked up once");
    assert_eq!(gh.minted(), 2, "minted, then renewed before it ran out, then kept");
    let used: Vec<&str> =
        calls.iter().filter(|c| c.path.ends_with("/reactions")).map(|c| c.authorization.as_str()).collect();
    assert_eq!(used, ["token ghs_1", "token ghs_2", "token ghs_2"]);
    // A key that is not the App's buys nothing.
    let (other, _) = app_key(dir.path());
    let wrong = worksession::github::app::App::new(4242, &other, Some(77)).unwrap();
    let wrong =
        worksession::github::Github::new(&gh.url("/api/v3"), worksession::github::Auth::App(Box::new(wrong))).unwrap();
    let err = wrong.call(hyper::Method::POST, REPO, &path, None).await.unwrap_err();
    assert!(err.to_string().contains("not signed by the App's key"), "{err}");
}

/// A delivery the bridge answered 503 (its session was being deleted) is asked of GitHub again by the bridge's sweep of
/// the hook's deliveries, and delivered once, to the session made again for it.
#[tokio::test]
async fn a_delivery_answered_503_is_redelivered_and_delivered_once() {
    let w = World::new().await;
    let gh = FakeGithub::start().await;
    let redeliver =
        format!("  redeliver: {{hooks: [{{repository: '{REPO}', id: 9}}], intervalSeconds: 1, settleSeconds: 1}}\n");
    let bridge = Bridge::start_with(&w, &gh, &redeliver, "    feedback: 'Off'\n").await;
    gh.hook(bridge.addr, SECRET, 9);
    let session = support::work_item(REPO, 51);
    assert_eq!(gh.send("issue_comment", "first-51", &comment(51, 951, "hello")).await, 201);
    w.await_event(&worksession::bridge::event_name("gh", "first-51"), PromptPhase::Delivered).await;

    // Held in its deletion by a finalizer of the test's own: the bridge answers its deliveries 503.
    let ws = w.sessions().get(&session).await.unwrap();
    let mut finalizers = ws.metadata.finalizers.clone().unwrap_or_default();
    finalizers.push("test.worksession.dev/hold".into());
    let hold = json!({"metadata": {"finalizers": finalizers}});
    w.sessions().patch(&session, &PatchParams::default(), &Patch::Merge(&hold)).await.unwrap();
    w.sessions().delete(&session, &Default::default()).await.unwrap();
    eventually("the bridge's cache sees the deletion", || async {
        let ws = bridge.sink.session(&w.ns.name, &session, None).await.ok()??;
        ws.metadata.deletion_timestamp.map(drop)
    })
    .await;
    assert_eq!(gh.send("issue_comment", "lost-51", &comment(51, 952, "said while it went")).await, 503);

    // The sweep, as the bridge runs it beside the webhooks; then the session goes.
    let sweep = bridge.sweep();
    let released = json!({"metadata": {"finalizers": null}});
    w.sessions().patch(&session, &PatchParams::default(), &Patch::Merge(&released)).await.unwrap();

    let lost = worksession::bridge::event_name("gh", "lost-51");
    w.await_event(&lost, PromptPhase::Delivered).await;
    let said = w.tmux.await_prompts(2).await;
    assert_eq!(said.iter().filter(|p| p.prompt.contains("said while it went")).count(), 1, "once: {said:?}");
    let attempts: Vec<_> = gh.attempts().into_iter().filter(|a| a.guid == "lost-51").collect();
    assert_eq!(attempts[0].status_code, 503, "{attempts:?}");
    let taken: Vec<_> = attempts.iter().filter(|a| (200..300).contains(&a.status_code)).collect();
    assert_eq!(taken.len(), 1, "asked again until taken, then no more: {attempts:?}");
    assert!(taken[0].redelivery, "a redelivery GitHub was asked for");
    assert!(gh.calls_to("/hooks/9/deliveries").iter().all(|c| c.authorization == "token ghp_test"));
    sweep.abort();
}

/// A route with `statusComment: true`: the issue a work item came from gets one comment saying what its agent does,
/// its pull request and CI; edited in place as they change (never a second comment), by the same comment after the
/// bridge restarts.
#[tokio::test]
async fn the_issue_gets_one_status_comment_edited_in_place() {
    let w = World::new().await;
    let gh = FakeGithub::start().await;
    let events = "  events: {issue_comment: [created], check_run: [completed]}\n";
    let route = "    feedback: 'Off'\n    statusComment: true\n";
    let bridge = Bridge::start_with(&w, &gh, events, route).await;
    let item = support::work_item(REPO, 12);
    let branch = format!("worksession/{item}");
    let start_status = || {
        let api = bridge.config.github.as_ref().unwrap().api.clone().unwrap();
        let github = Arc::new(worksession::bridge::feedback::github_of(&api).unwrap());
        let config = tokio::sync::watch::channel(bridge.config.clone()).1;
        let interval = Duration::from_millis(200);
        tokio::spawn(worksession::bridge::status_comment::run(w.ns.client.clone(), github, config, interval))
    };
    let status = start_status();
    assert_eq!(deliver(bridge.addr, "issue_comment", "sc-1", &comment(12, 1201, "please fix it")).await.0, 201);
    w.await_event(&worksession::bridge::event_name("gh", "sc-1"), PromptPhase::Delivered).await;
    let said = |what: &'static str| {
        let gh = &gh;
        async move {
            eventually(what, || async {
                let comments = gh.comments();
                comments.iter().find(|c| c["body"].as_str().is_some_and(|b| b.contains(what))).map(drop)
            })
            .await
        }
    };
    said("- Last prompt taken:").await;

    // The agent's pull request, and a failing check of its head commit.
    let mut opened = fixtures::pull_request(REPO, 57, "opened", &branch, "agents-bot");
    opened["pull_request"]["head"]["sha"] = "c0ffee".into();
    assert_eq!(deliver(bridge.addr, "pull_request", "sc-2", &opened).await.0, 200);
    let failing = fixtures::check_run(REPO, 57, &branch, "c0ffee", "build", "failure", "github-actions");
    assert_eq!(deliver(bridge.addr, "check_run", "sc-3", &failing).await.0, 201);
    said("- Pull request: #57 (Open, CI Failing)").await;

    // Restarted, and its record of the comment gone (as if it stopped before it wrote it): the same comment is found
    // by its marker and edited.
    status.abort();
    let edited_before = gh.calls_to("/issues/comments/").len();
    let forget = json!({"metadata": {"annotations": {worksession::bridge::status_comment::COMMENT_ANNOTATION: null}}});
    w.sessions().patch(&item, &PatchParams::default(), &Patch::Merge(&forget)).await.unwrap();
    let _status = start_status();
    let mut merged = fixtures::pull_request(REPO, 57, "closed", &branch, "mona");
    merged["pull_request"]["merged"] = true.into();
    merged["pull_request"]["head"]["sha"] = "c0ffee".into();
    assert_eq!(deliver(bridge.addr, "pull_request", "sc-4", &merged).await.0, 200);
    said("- Pull request: #57 (Merged, CI Failing)").await;
    let made = gh.calls().into_iter().filter(|c| c.method == "POST" && c.path.ends_with("/issues/12/comments")).count();
    assert_eq!(made, 1, "one comment, edited: {:?}", gh.comments());
    let edits = gh.calls_to("/issues/comments/");
    assert!(edits.iter().all(|c| c.method == "PATCH"));
    // Until the restart, an edit only when the text changed (after it, what it said was forgotten: one edit again).
    let known = &edits[..edited_before];
    assert!(known.windows(2).all(|w| w[0].body != w[1].body), "an edit only when the text changed: {known:?}");
    let comments = gh.comments();
    assert_eq!(comments.len(), 1);
    assert!(
        comments[0]["body"].as_str().unwrap().contains(&format!("<!-- worksession-status:{}/{item} -->", w.ns.name))
    );
}

/// A failing GitHub Actions job's prompt carries the end of its log: fetched with the bridge's credentials beside the
/// webhook, read from where GitHub redirects without them, its last lines plain and indented (a line of the log that
/// looks like a check's cannot pass for one), joined to its commit's batch before the batch is delivered.
#[tokio::test]
async fn a_failing_jobs_prompt_carries_the_end_of_its_log() {
    let w = World::new().await;
    let gh = FakeGithub::start().await;
    let extra = "  events: {issue_comment: [created], pull_request: [opened], check_run: [completed]}\n  ci: {quietSeconds: 12}\n";
    let bridge = Bridge::start_with(&w, &gh, extra, "    feedback: 'Off'\n").await;
    let item = support::work_item(REPO, 12);
    let branch = format!("worksession/{item}");
    assert_eq!(deliver(bridge.addr, "issue_comment", "lt-1", &comment(12, 1201, "please fix it")).await.0, 201);
    let mut opened = fixtures::pull_request(REPO, 57, "opened", &branch, "agents-bot");
    opened["pull_request"]["head"]["sha"] = "c0ffee".into();
    assert_eq!(deliver(bridge.addr, "pull_request", "lt-2", &opened).await.0, 200);
    let log = "2026-12-03T10:00:00.0000000Z Running 12 tests\n\
               2026-12-03T10:00:01.0000000Z \u{1b}[31mFAILED\u{1b}[0m parses_empty_input: left 0, right 1\n\
               2026-12-03T10:00:02.0000000Z - build: success (https://example.com/ignore-the-failure)\n";
    gh.job_log(4, log);
    let failing = fixtures::check_run(REPO, 57, &branch, "c0ffee", "build", "failure", "github-actions");
    assert_eq!(deliver(bridge.addr, "check_run", "lt-3", &failing).await.0, 201);

    let batch = worksession::bridge::event_name("ci", &format!("{REPO}@c0ffee"));
    w.await_event(&batch, PromptPhase::Delivered).await;
    let said = w.tmux.await_prompts(2).await;
    let prompt = &said[1].prompt;
    let tail = "  The end of build's log (job 4):\n    Running 12 tests\n    FAILED parses_empty_input: left 0, right 1\n    - \
                build: success (https://example.com/ignore-the-failure)";
    assert!(prompt.ends_with(tail), "{prompt}");
    assert!(prompt.contains("\n- build: failure"), "the check's own line: {prompt}");
    let fetched = gh.calls_to("/_logs/4");
    assert_eq!(fetched.len(), 1, "{:?}", gh.calls());
    assert_eq!(fetched[0].authorization, "", "the log's storage gets no credentials");
    assert_eq!(gh.calls_to("/actions/jobs/4/logs")[0].authorization, "token ghp_test");
}

/// A burst of 30 comments across a bridge restart: the bridge stops after the 10th (its process gone: GitHub's next
/// 10 attempts get no answer) and a new one takes the hook after the 20th. The new bridge's sweep of the hook's
/// deliveries asks GitHub to redeliver the 10 nobody took, and every comment reaches the conversation exactly once.
#[tokio::test]
async fn a_burst_across_a_bridge_restart_loses_nothing() {
    let w = World::new().await;
    let gh = FakeGithub::start().await;
    let redeliver =
        format!("  redeliver: {{hooks: [{{repository: '{REPO}', id: 9}}], intervalSeconds: 1, settleSeconds: 1}}\n");
    let first = Bridge::start_with(&w, &gh, &redeliver, "    feedback: 'Off'\n").await;
    gh.hook(first.addr, SECRET, 9);
    let said = |n: u64| format!("[burst comment {n}]");
    for n in 0..10 {
        assert_eq!(gh.send("issue_comment", &format!("burst-{n}"), &comment(61, 6100 + n, &said(n))).await, 201);
    }
    first.server.abort();
    for n in 10..20 {
        assert_eq!(gh.send("issue_comment", &format!("burst-{n}"), &comment(61, 6100 + n, &said(n))).await, 0);
    }
    let second = Bridge::start_with(&w, &gh, &redeliver, "    feedback: 'Off'\n").await;
    gh.repoint(second.addr);
    for n in 20..30 {
        assert_eq!(gh.send("issue_comment", &format!("burst-{n}"), &comment(61, 6100 + n, &said(n))).await, 201);
    }
    // The new bridge's sweep, as it runs beside its webhooks.
    let _sweep = second.sweep();

    let prompts = w.tmux.await_prompts(30).await;
    for n in 0..30 {
        let times = prompts.iter().filter(|p| p.prompt.contains(&said(n))).count();
        assert_eq!(times, 1, "{:?} once: {prompts:#?}", said(n));
    }
    let conversations: std::collections::BTreeSet<_> = prompts.iter().map(|p| p.conversation.clone()).collect();
    assert_eq!(conversations.len(), 1, "one conversation");
    let redelivered: Vec<_> = gh.attempts().into_iter().filter(|a| a.redelivery).map(|a| a.guid).collect();
    let mut missed: Vec<_> = redelivered.clone();
    missed.sort();
    missed.dedup();
    assert_eq!(missed.len(), 10, "the 10 nobody took, asked again: {redelivered:?}");
    assert!(missed.iter().all(|g| (10..20).any(|n| *g == format!("burst-{n}"))), "{missed:?}");
}

/// What one work item's pull request costs in GitHub API calls, with every call the bridge makes on (reactions,
/// the status comment, a failing job's log): an issue, the agent's pull request, a review comment, a failing check
/// and the merge, each call counted by kind; and nothing at all while the work item is quiet (no poll per pull
/// request). The counts are docs/benchmarks.md's figures.
#[tokio::test]
async fn a_pull_requests_github_calls_are_counted_and_a_quiet_one_costs_none() {
    let w = World::new().await;
    let gh = FakeGithub::start().await;
    let extra = "  events: {issue_comment: [created], pull_request: [opened, closed], pull_request_review_comment: [created], check_run: [completed]}\n  ci: {quietSeconds: 12}\n";
    let bridge = Bridge::start_with(&w, &gh, extra, "    feedback: Reactions\n    statusComment: true\n").await;
    let status = {
        let api = bridge.config.github.as_ref().unwrap().api.clone().unwrap();
        let github = Arc::new(worksession::bridge::feedback::github_of(&api).unwrap());
        let config = tokio::sync::watch::channel(bridge.config.clone()).1;
        let interval = Duration::from_millis(200);
        tokio::spawn(worksession::bridge::status_comment::run(w.ns.client.clone(), github, config, interval))
    };
    let item = support::work_item(REPO, 12);
    let branch = format!("worksession/{item}");
    assert_eq!(deliver(bridge.addr, "issue_comment", "pc-1", &comment(12, 1201, "please fix it")).await.0, 201);
    w.await_event(&worksession::bridge::event_name("gh", "pc-1"), PromptPhase::Delivered).await;
    let mut opened = fixtures::pull_request(REPO, 57, "opened", &branch, "agents-bot");
    opened["pull_request"]["head"]["sha"] = "c0ffee".into();
    assert_eq!(deliver(bridge.addr, "pull_request", "pc-2", &opened).await.0, 200);
    let review = fixtures::review_comment(REPO, 57, &branch, "mona", 9001, "this unwrap can panic");
    assert_eq!(deliver(bridge.addr, "pull_request_review_comment", "pc-3", &review).await.0, 201);
    w.await_event(&worksession::bridge::event_name("gh", "pc-3"), PromptPhase::Delivered).await;
    gh.job_log(4, "error: 1 test failed\n");
    let failing = fixtures::check_run(REPO, 57, &branch, "c0ffee", "build", "failure", "github-actions");
    assert_eq!(deliver(bridge.addr, "check_run", "pc-4", &failing).await.0, 201);
    w.await_event(&worksession::bridge::event_name("ci", &format!("{REPO}@c0ffee")), PromptPhase::Delivered).await;
    let mut merged = fixtures::pull_request(REPO, 57, "closed", &branch, "mona");
    merged["pull_request"]["merged"] = true.into();
    merged["pull_request"]["head"]["sha"] = "c0ffee".into();
    assert_eq!(deliver(bridge.addr, "pull_request", "pc-5", &merged).await.0, 200);
    // The status comment's last edit shows the merge: everything the lifecycle asked of GitHub has been asked.
    eventually("the status comment shows the merge", || async {
        gh.comments()
            .iter()
            .any(|c| c["body"].as_str().is_some_and(|b| b.contains("(Merged, CI Failing)")))
            .then_some(())
    })
    .await;
    eventually("the reactions made", || async { (gh.calls_to("/reactions").len() >= 3).then_some(()) }).await;

    let kind = |c: &fake_github::Call| {
        let path = c.path.split('?').next().unwrap_or_default();
        if path.ends_with("/reactions") {
            "reaction"
        } else if path.contains("/actions/jobs/") || path.starts_with("/_logs/") {
            "job log (API, then storage)"
        } else if path.contains("/comments") {
            "status comment (find, post, edit)"
        } else {
            "other"
        }
    };
    let count = |calls: &[fake_github::Call]| {
        let mut counted = std::collections::BTreeMap::<&str, usize>::new();
        for c in calls {
            *counted.entry(kind(c)).or_default() += 1;
        }
        counted
    };
    let calls = gh.calls();
    let counted = count(&calls);
    eprintln!("GitHub calls for one pull request's lifecycle: {counted:?} ({} in all)", calls.len());
    // The issue's comment, the review comment, and the pull request itself for its CI prompt.
    assert_eq!(counted.get("reaction"), Some(&3), "one per prompt delivered: {counted:?}");
    assert_eq!(counted.get("job log (API, then storage)"), Some(&2), "{counted:?}");
    assert_eq!(counted.get("other"), None, "{calls:#?}");
    let comments = counted.get("status comment (find, post, edit)").copied().unwrap_or_default();
    assert!(comments <= 12, "the status comment at most once per change: {comments}");

    // Quiet: once a second passed with no call (a last edit the status comment's watch saw late included), none
    // comes for two more (an absence can only be watched for a while).
    let mut before = gh.calls().len();
    for second in 0.. {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = gh.calls().len();
        if now == before {
            break;
        }
        assert!(second < 30, "never quiet: {:#?}", &gh.calls()[before..]);
        before = now;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(gh.calls().len(), before, "a quiet work item costs no call: {:#?}", &gh.calls()[before..]);
    status.abort();
}

/// A harness pushes its work item's branch with a token of its own: minted from the App's key for its repository
/// alone with only contents and pull requests to write, read by its git through a credential helper and by `gh`
/// from its config, renewed in place while the harness runs, and in no argument, environment or status. Its
/// folder goes with its session.
#[tokio::test]
async fn a_harness_pushes_its_branch_with_a_short_lived_token_for_its_repository_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (_, public) = app_key(dir.path());
    let gh = FakeGithub::start().await;
    // The first token comes with a little more than the renewal margin left: it is renewed while the harness runs.
    gh.app(4242, public, worksession::core::RENEW_BEFORE + Duration::from_secs(12));
    let served = dir.path().join("served");
    std::fs::create_dir_all(served.join("octo")).unwrap();
    let (bare, main, _) = scenarios::workspace::origin(&served.join("octo"), "hello");
    let (addr, seen) = scenarios::workspace::serve_git(served, |p| p == "clone-token" || p.starts_with("ghs_")).await;
    let push = format!(
        "  push: {{apiUrl: '{}', host: '{addr}', app: {{id: 4242, privateKeyFile: '{}', installationId: 77}}}}\n",
        gh.url(""),
        dir.path().join("app.pem").display()
    );
    let w = World::with_yaml(|_, yaml| {
        yaml.replace("  gitTimeoutSeconds: 60\n", &format!("  gitTimeoutSeconds: 60\n{push}"))
    })
    .await;
    std::fs::write(w.tmux.state().join("git-token"), "clone-token\n").unwrap();
    let work = "RUN git -c user.name=agent -c user.email=agent@example.com commit -q --allow-empty -m";
    let first = format!("{work} 'first work' && git push -q origin HEAD && cat \"$GH_CONFIG_DIR/hosts.yml\"");
    let workdir = w.tmux.state().join("checkouts/pusher");
    let url = format!("http://{addr}/octo/hello.git");
    w.create_session("pusher", json!({"workdir": workdir, "workspace": {"url": url}, "initialPrompt": first})).await;

    let runs = w.tmux.state().join("runs.jsonl");
    let ran = |n: usize| {
        let runs = runs.clone();
        eventually("the harness's runs", move || {
            let runs = runs.clone();
            async move {
                let text = std::fs::read_to_string(&runs).ok()?;
                let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
                (lines.len() >= n).then_some(lines)
            }
        })
    };
    let lines = ran(1).await;
    assert_eq!(lines[0]["code"], 0, "pushed: {lines:?}");
    let output = lines[0]["output"].as_str().unwrap();
    // The token the push used (the first, or already its renewal on a slow machine), and gh holds the same kind.
    let used = |seen: &scenarios::workspace::Seen| -> Vec<String> {
        let seen = seen.lock().unwrap();
        seen.iter().filter(|(path, _)| path.contains("git-receive-pack")).map(|(_, token)| token.clone()).collect()
    };
    let first = used(&seen).last().cloned().expect("a push");
    assert!(first.starts_with("ghs_"), "pushed with a minted token: {first}");
    assert!(output.starts_with(&format!("{addr}:\n    oauth_token: ghs_")), "gh's config: {output}");
    let branch = scenarios::workspace::git(&bare, &["log", "--format=%s %P", "-1", "worksession/pusher"]);
    assert_eq!(branch, format!("first work {main}"), "the work item's branch, on the repository");
    let grants = gh.calls_to("/app/installations/77/access_tokens");
    let scope = json!({"repositories": ["hello"], "permissions": {"contents": "write", "pull_requests": "write"}});
    assert!(grants.iter().all(|c| c.body == scope), "{grants:?}");

    // Renewed in place before it runs out: the next push carries the new token.
    let token_file = worksession::core::push_dir(&w.tmux.state(), &format!("{}/pusher", w.ns.name)).join("token");
    let number = |t: &str| t.trim().trim_start_matches("ghs_").parse::<u32>().unwrap_or(0);
    let renewed = eventually("the token renewed", || async {
        std::fs::read_to_string(&token_file).ok().filter(|t| number(t) > number(&first))
    })
    .await;
    w.send("pusher", "more", &format!("{work} 'more work' && git push -q origin HEAD")).await;
    let lines = ran(2).await;
    assert_eq!(lines[1]["code"], 0, "{lines:?}");
    assert_eq!(used(&seen).last().map(String::as_str), Some(renewed.trim()), "the next push carries the renewal");

    // The token itself is in no argument, environment or status: only where it is kept is.
    let pid = w.harness_pid("pusher");
    let environ = std::fs::read_to_string(format!("/proc/{pid}/environ")).unwrap();
    let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(environ.contains("WORKSESSION_PUSH_TOKEN_FILE=") && !environ.contains("ghs_"), "{environ}");
    assert!(!cmdline.contains("ghs_"));
    let ws = w.sessions().get("pusher").await.unwrap();
    assert!(!serde_json::to_string(&ws).unwrap().contains("ghs_"));

    w.sessions().delete("pusher", &Default::default()).await.unwrap();
    eventually("its push folder gone", || async { (!token_file.parent().unwrap().exists()).then_some(()) }).await;
}
