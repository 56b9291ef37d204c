//! The pull request loop through the bridge, in both modes: an issue by a member starts the session; the agent's pull
//! request opens (no second session); a review, a review comment, a comment in the pull request's conversation and a
//! failed check run each reach the conversation that took the issue, in order; a second failing check of the commit
//! joins the same prompt, a rerun adds nothing, a passing run is silent, a failure past the bound is not sent; the
//! merge archives the work item.

use axum::Router;
use serde_json::Value;
use tower::ServiceExt;
use worksession::api::{ChecksState, PromptPhase, PullRequestState};

use super::fixtures;
use super::{Rig, await_delivered, await_value};

const SECRET: &str = "pull-request-secret";
pub const REPO: &str = "octo-org/hello";
/// The work item of issue 12 under the route's `{repo}-{number}`, and so its branch.
pub const ITEM: &str = "hello-12";
pub const BRANCH: &str = "worksession/hello-12";

/// A bridge of one route for `octo-org/*` to `harness`, whose work item is `{repo}-{number}` and whose agent's own
/// login is `agents-bot`.
pub fn bridge_of(rig: &impl Rig, harness: &str) -> Router {
    let secret = rig.tmux().dir.path().join("github-secret");
    std::fs::write(&secret, SECRET).unwrap();
    let yaml = format!(
        "github:\n  secretFile: {}\n  ignoreSenders: [agents-bot]\n  ci: {{quietSeconds: 10, maxPrompts: 2}}\nroutes:\n  - {{repository: 'octo-org/*', namespace: {}, nodeName: {}, harness: {harness}, workdir: {}, workItem: '{{repo}}-{{number}}'}}\n",
        secret.display(),
        rig.namespace(),
        rig.node(),
        rig.tmux().workdir().display()
    );
    rig.bridge(&yaml)
}

/// POSTs a signed GitHub delivery; returns the status and the answer.
pub async fn deliver(app: &Router, kind: &str, delivery: &str, payload: &Value) -> (u16, Value) {
    let body = serde_json::to_vec(payload).unwrap();
    let request = axum::http::Request::post("/webhooks/github")
        .header("x-github-event", kind)
        .header("x-github-delivery", delivery)
        .header("x-hub-signature-256", worksession::bridge::github::sign(SECRET.as_bytes(), &body))
        .body(axum::body::Body::from(body))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Awaits the stand-in having taken a prompt that contains `text`; returns every prompt it took so far.
async fn taken(rig: &impl Rig, text: &str) -> Vec<String> {
    let prompts = || async { rig.tmux().prompts().into_iter().map(|p| p.prompt).collect::<Vec<_>>() };
    await_value(&format!("a prompt with {text:?}"), prompts, |all| all.iter().any(|p| p.contains(text))).await
}

pub async fn a_pull_request_and_its_ci_reach_the_conversation_that_took_the_issue(rig: &impl Rig) {
    let app = bridge_of(rig, "standin");

    let issue = fixtures::issue_comment(REPO, 12, "mona", "please fix the parser");
    assert_eq!(deliver(&app, "issue_comment", "d1-issue", &issue).await.0, 201);
    taken(rig, "please fix the parser").await;
    let conversation = super::id(&super::await_phase(rig, ITEM, worksession::api::Phase::Running).await);

    let mut opened = fixtures::pull_request(REPO, 57, "opened", BRANCH, "agents-bot");
    opened["pull_request"]["head"]["sha"] = "aaaa111".into();
    let (status, answer) = deliver(&app, "pull_request", "d2-opened", &opened).await;
    assert_eq!((status, answer["status"].as_str(), answer["workSession"].as_str()), (200, Some("linked"), Some(ITEM)));

    let said = [
        ("pull_request_review", "d3-review", fixtures::review(REPO, 57, BRANCH, "mona", "MEMBER", "rename parse_all")),
        (
            "pull_request_review_comment",
            "d4-review-comment",
            fixtures::review_comment(REPO, 57, BRANCH, "mona", 9001, "this unwrap can panic"),
        ),
        (
            "issue_comment",
            "d5-conversation",
            fixtures::pull_request_comment(REPO, 57, "mona", "also update the README"),
        ),
    ];
    for (kind, delivery, payload) in &said {
        let (status, answer) = deliver(&app, kind, delivery, payload).await;
        assert_eq!(status, 201, "{kind}: {answer}");
    }
    await_delivered(rig, &worksession::bridge::event_name("gh", "d5-conversation")).await;

    let check = |sha: &str, name: &str, conclusion: &str| {
        fixtures::check_run(REPO, 57, BRANCH, sha, name, conclusion, "github-actions")
    };
    assert_eq!(deliver(&app, "check_run", "d6-build", &check("aaaa111", "build", "failure")).await.0, 201);
    assert_eq!(deliver(&app, "check_run", "d7-lint", &check("aaaa111", "lint", "failure")).await.1["status"], "joined");
    assert_eq!(
        deliver(&app, "check_run", "d8-rerun", &check("aaaa111", "build", "failure")).await.1["status"],
        "duplicate"
    );
    assert_eq!(deliver(&app, "check_run", "d9-pass", &check("aaaa111", "test", "success")).await.0, 202);
    let batch = worksession::bridge::event_name("ci", &format!("{REPO}@aaaa111"));
    await_delivered(rig, &batch).await;
    // The bound is two: the next commit's failure is sent, the one after is not.
    assert_eq!(deliver(&app, "check_run", "d10-b", &check("bbbb222", "build", "failure")).await.0, 201);
    let (status, answer) = deliver(&app, "check_run", "d11-c", &check("cccc333", "build", "failure")).await;
    assert_eq!(status, 202, "{answer}");
    assert!(answer["reason"].as_str().unwrap().contains("2 CI prompts since a person last prompted"), "{answer}");
    let second = worksession::bridge::event_name("ci", &format!("{REPO}@bbbb222"));
    await_delivered(rig, &second).await;
    // The session shows its pull request and what CI said of its head commit (aaaa111; bbbb222 is not its head).
    let shown = |s: &worksession::api::WorkSessionStatus| {
        s.pull_request.as_ref().map(|p| (p.number, p.state, p.checks, p.head_sha.clone()))
    };
    let failing = (57, PullRequestState::Open, Some(ChecksState::Failing), Some("aaaa111".to_string()));
    await_value(
        "the pull request shown, CI failing",
        || rig.session_status(ITEM),
        |s| shown(s) == Some(failing.clone()),
    )
    .await;

    // The conversation that took the issue took everything, in the order it was said, each once.
    let prompts: Vec<_> = rig.tmux().prompts().into_iter().filter(|p| p.conversation == conversation).collect();
    let texts: Vec<&str> = prompts.iter().map(|p| p.prompt.as_str()).collect();
    let order = [
        "please fix the parser",
        "rename parse_all",
        "this unwrap can panic",
        "also update the README",
        "commit aaaa111",
        "commit bbbb222",
    ];
    let at: Vec<usize> = order
        .iter()
        .map(|said| {
            let found: Vec<usize> =
                texts.iter().enumerate().filter(|(_, t)| t.contains(said)).map(|(i, _)| i).collect();
            assert_eq!(found.len(), 1, "{said:?} once in {texts:#?}");
            found[0]
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "in order: {texts:#?}");
    assert_eq!(prompts.len(), order.len(), "nothing else: {texts:#?}");
    let ci = texts[at[4]];
    assert!(ci.contains("- build: failure") && ci.contains("- lint: failure") && !ci.contains("- test"), "{ci}");
    assert!(!texts.iter().any(|t| t.contains("cccc333")), "past the bound: not sent");

    // The merge archives the work item's session, not one of the pull request's own number.
    let mut merged = fixtures::pull_request(REPO, 57, "closed", BRANCH, "mona");
    merged["pull_request"]["merged"] = true.into();
    merged["pull_request"]["updated_at"] = "2026-12-01T12:00:00Z".into();
    let (status, answer) = deliver(&app, "pull_request", "d12-merged", &merged).await;
    assert_eq!(
        (status, answer["status"].as_str(), answer["workSession"].as_str()),
        (200, Some("archived"), Some(ITEM))
    );
    assert!(rig.session_gone("hello-57").await, "the pull request's number made no session");
    let merged = |s: &worksession::api::WorkSessionStatus| {
        s.pull_request.as_ref().is_some_and(|p| p.state == PullRequestState::Merged)
    };
    await_value("the pull request shown merged", || rig.session_status(ITEM), merged).await;
    let event = rig.event_status(&batch).await;
    assert_eq!(event.phase, Some(PromptPhase::Delivered));
}
