//! A GitHub delivery through the bridge: authenticated, parsed ([`super::github::parse`]), routed to its work item
//! (the route's template, or the branch `worksession/<workItem>` its pull request carries, or the link recorded for
//! a comment's pull request), then written: a WorkEvent, a closing or reopening, a link, a CI result ([`super::ci`]).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::config::{self, ROUTE_LABEL, render};
use super::github::{self, Ask, Parsed, Subject, Target};
use super::{
    API_TIMEOUT, ApiError, Bridge, Cap, answer, belongs, ci, event_name, header, metrics, read_body, work_event,
};
use crate::api::{
    ChecksState, EventSource, LINKED, PULL_REQUEST_STATE_ANNOTATION, PullRequestState, PullRequestStatus,
    REPOSITORY_LABEL, SourceType, WorkSession, WorkSessionSpec, WorkspaceSpec, pull_request_label, repository_label,
};
use crate::store::{Archived, Sink};

pub(super) async fn github_handler<S: Sink>(State(bridge): State<Arc<Bridge<S>>>, request: Request) -> Response {
    // One budget for the whole delivery, within GitHub's 10 s: what it has not written by then it answers 503 for,
    // and GitHub (or the redelivery sweep) tries again.
    let response = match tokio::time::timeout(API_TIMEOUT, github(&bridge, request)).await {
        Ok(result) => result.unwrap_or_else(IntoResponse::into_response),
        Err(_) => {
            let why = format!("the API server did not answer within {}s", API_TIMEOUT.as_secs());
            ApiError::Unavailable(why).into_response()
        }
    };
    bridge.count("github", &response);
    response
}

async fn github<S: Sink>(bridge: &Bridge<S>, request: Request) -> Result<Response, ApiError> {
    let config = bridge.config.borrow().clone();
    let Some(gh) = &config.github else { return Err(ApiError::NotFound("GitHub webhooks are not configured".into())) };
    let (headers, body) = read_body(request, config.max_body_bytes).await?;
    if !github::signature_valid(&gh.secret, &body, header(&headers, "x-hub-signature-256")) {
        bridge.metrics.signature_failures.inc();
        return Err(ApiError::Unauthorized("missing or wrong X-Hub-Signature-256"));
    }
    let delivery = header(&headers, "x-github-delivery").filter(|d| !d.is_empty());
    let delivery = delivery.ok_or_else(|| ApiError::BadRequest("missing X-GitHub-Delivery".into()))?.to_string();
    let kind = header(&headers, "x-github-event").unwrap_or_default().to_string();
    let payload: Value =
        serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("malformed JSON: {e}")))?;
    if kind == "ping" {
        return Ok(answer(StatusCode::OK, "pong", json!({})));
    }
    let action = payload.get("action").and_then(Value::as_str).unwrap_or_default().to_string();
    let accepted = gh.events.get(&kind).is_some_and(|actions| actions.iter().any(|a| a == &action));
    // Issues and pull requests are read whatever the accepted events say: their closing, reopening and (for a work
    // item's pull request) its link and pushes are the work item's life, never a prompt a route opted into.
    if !accepted && !matches!(kind.as_str(), "issues" | "pull_request") {
        return Ok(bridge.ignored("event", format!("event {kind:?} with action {action:?} is not accepted")));
    }
    let Parsed { subject, target, ask } = match github::parse(&kind, &payload) {
        Ok(p) => p,
        Err(why) => return Ok(bridge.ignored("subject", why.into())),
    };
    if !accepted && matches!(ask, Ask::Prompt | Ask::Ci(_) | Ask::Answer(_)) {
        return Ok(bridge.ignored("event", format!("event {kind:?} with action {action:?} is not accepted")));
    }
    let Some(route) = config.route(&subject.repository) else {
        return Ok(bridge.ignored("unrouted", format!("no rule routes {}", subject.repository)));
    };
    let number = subject.number.to_string();
    let vars = [
        ("owner", subject.owner.as_str()),
        ("repo", subject.repo.as_str()),
        ("repository", subject.repository.as_str()),
        ("number", number.as_str()),
        ("sender", subject.sender.as_str()),
        ("event", kind.as_str()),
        ("action", action.as_str()),
        ("title", subject.title.as_str()),
        ("url", subject.url.as_str()),
        ("body", subject.body.as_str()),
    ];
    let namespace = route.namespace.as_str();
    let link = pull_request_label(&subject.repository, subject.number);
    // Which work item: the one whose branch the pull request carries, the one a comment's pull request was linked
    // to, or the route's rendering (an issue, or a pull request that is no work item's). Only a rendering creates.
    let (work_item, creates) = match &target {
        Target::Branch(item) => {
            let Some(ws) = bridge.sink.session(namespace, item, None).await? else {
                let why = format!(
                    "{}#{} is work item {item}'s, which has no WorkSession in {namespace}",
                    subject.repository, subject.number
                );
                return Ok(bridge.ignored("no_session", why));
            };
            if !belongs(&ws, &subject.repository) {
                let why = format!(
                    "{}#{} carries the branch of work item {item}, whose WorkSession is not {}'s",
                    subject.repository, subject.number, subject.repository
                );
                return Ok(bridge.ignored("not_its_branch", why));
            }
            // The link a later comment in the pull request's conversation is routed by, and the pull request's state
            // the session shows: recorded from the pull request's own events (its author's side), never from a
            // review or a CI result.
            if kind == "pull_request" {
                if ws.labels().get(&link).is_none_or(|v| v != LINKED) {
                    bridge.sink.mark_session(namespace, item, &[(&link, Some(LINKED))], &[]).await?;
                }
                // Read fresh and written over the version read: a CI result at the same moment is not undone.
                let change = |recorded: Option<&str>| pull_request_state(recorded, &subject, &ask);
                bridge.sink.update_annotation(namespace, item, PULL_REQUEST_STATE_ANNOTATION, change).await?;
            }
            (item.clone(), false)
        }
        Target::Linked => match bridge.sink.find_session(namespace, (&link, LINKED)).await? {
            Some(ws) => (ws.name_any(), false),
            None => (work_item_of(route, &vars).unwrap_or_default(), true),
        },
        Target::Rendered => (work_item_of(route, &vars).unwrap_or_default(), true),
    };
    if work_item.is_empty() {
        return Ok(bridge.ignored("empty_work_item", format!("rule {} renders an empty work item", route.pattern)));
    }
    let source = EventSource {
        type_: SourceType::Github,
        delivery_id: Some(delivery.clone()),
        event: Some(kind.clone()),
        action: Some(action.clone()),
        url: (!subject.url.is_empty()).then_some(subject.url.clone()),
        repository: Some(subject.repository.clone()),
        number: Some(subject.number),
        comment_id: subject.comment_id,
    };
    let ignored_sender = gh.ignore_senders.iter().any(|s| s == &subject.sender);
    let branch = matches!(target, Target::Branch(_));
    let (prompt, by_person) = match ask {
        Ask::Lifecycle(closed) => return lifecycle(bridge, route, &subject, &work_item, closed).await,
        Ask::Link => {
            let outcome = json!({"workSession": work_item, "namespace": namespace});
            return Ok(answer(StatusCode::OK, "linked", outcome));
        }
        Ask::Ci(check) => return ci::deliver(bridge, route, &subject, &work_item, check, source).await,
        _ if ignored_sender => {
            return Ok(bridge.ignored("sender", format!("sender {} is on the ignore list", subject.sender)));
        }
        Ask::Answer(answering) => {
            return super::answers::take(bridge, route, &subject, &work_item, answering, source).await;
        }
        // Closing a pull request and pushing to a branch of the repository both take write access to it; neither
        // is a person's word on the work, so neither starts the CI count again.
        Ask::ClosedUnmerged => {
            let words = format!(
                "{} closed pull request {}#{} without merging it: {}\n{}",
                subject.sender, subject.repository, subject.number, subject.title, subject.url
            );
            (words, false)
        }
        Ask::Pushed { before, after } => {
            // A bot that pushes (an autofix app, a workflow's token) answered by the agent, answered by the bot:
            // its pushes count against the same bound as CI results.
            let what = format!("{}'s push to {}#{}", subject.sender, subject.repository, subject.number);
            if subject.sender_bot
                && let Err(why) = ci::count_one(bridge, namespace, &work_item, &what).await?
            {
                return Ok(bridge.ignored("ci_bound", why));
            }
            let words = format!(
                "{} pushed to your branch {}{work_item} of {} (pull request #{}): {}..{}. Fetch it and build on it \
                 before you push again.",
                subject.sender,
                github::BRANCH_PREFIX,
                subject.repository,
                subject.number,
                short(&before),
                short(&after),
            );
            (words, false)
        }
        Ask::Prompt => {
            // Who may prompt: the role of the person behind the comment, review or issue (see docs/bridge.md's table
            // of checks); a bot on the reviewers' list for its reviews of a work item's pull request.
            let allowed = route.allowed_author_associations.as_ref().unwrap_or(&gh.allowed_author_associations);
            let association = subject.association.as_deref().unwrap_or("NONE");
            let bot_review =
                branch && kind.starts_with("pull_request_review") && gh.bot_reviewers.contains(&subject.sender);
            if !bot_review && !allowed.iter().any(|a| a == association) {
                let why = format!(
                    "{} is {association} of {}; only {} may prompt an agent",
                    subject.sender,
                    subject.repository,
                    allowed.join(", ")
                );
                return Ok(bridge.ignored("author_association", why));
            }
            (render(&config.prompt_template, &vars), !bot_review && !subject.sender_bot)
        }
    };
    let create = creates.then(|| {
        let mut ws = WorkSession::new(
            &work_item,
            WorkSessionSpec {
                work_item: work_item.clone(),
                node_name: route.node_name.clone(),
                harness: route.harness.clone(),
                workdir: render(&route.workdir, &vars),
                workspace: route.workspace.as_ref().map(|w| WorkspaceSpec {
                    url: render(&w.url, &vars),
                    r#ref: w.r#ref.as_ref().map(|r| render(r, &vars)),
                }),
                egress: route.egress.clone(),
                budget: route.budget.clone(),
                approval: route.approval.clone(),
                ..Default::default()
            },
        );
        ws.metadata.labels = Some(
            [
                (ROUTE_LABEL.to_string(), route.id.clone()),
                (REPOSITORY_LABEL.to_string(), repository_label(&subject.repository)),
            ]
            .into(),
        );
        // Where its status comment goes, for a route that asks for one: sealed, so only the bridge can say it.
        let issue = super::status_comment::issue_annotation(
            &gh.secret,
            &route.namespace,
            &work_item,
            &subject.repository,
            subject.number,
        );
        ws.metadata.annotations = Some([(super::status_comment::ISSUE_ANNOTATION.to_string(), issue)].into());
        (ws, route.max_sessions.map(|max| Cap { route: &route.id, max }))
    });
    let mut event = work_event(event_name("gh", &delivery), &work_item, prompt, source);
    // The route it came by: its feedback setting applies (bridge/feedback.rs watches events with this label).
    event.metadata.labels = Some([(ROUTE_LABEL.to_string(), route.id.clone())].into());
    let response = bridge.deliver(namespace, &work_item, create, event).await?;
    if by_person && response.status().is_success() {
        ci::person_prompted(bridge, namespace, &work_item).await?;
    }
    Ok(response)
}

/// The pull request's state as `subject` (a `pull_request` delivery asking `ask`) says, when it differs from the one
/// `recorded` and is not older than it (GitHub's `updated_at`): its annotation. CI is `Pending` for a head commit not
/// heard of yet.
fn pull_request_state(recorded: Option<&str>, subject: &Subject, ask: &Ask) -> Option<String> {
    let recorded = recorded.and_then(PullRequestStatus::from_annotation);
    let at = subject.at;
    let older = |r: &PullRequestStatus| {
        r.number == subject.number && matches!((&r.updated_at, at), (Some(was), Some(at)) if at < was.0)
    };
    if recorded.as_ref().is_some_and(older) {
        return None;
    }
    let state = match ask {
        Ask::Lifecycle(true) => PullRequestState::Merged,
        Ask::ClosedUnmerged => PullRequestState::Closed,
        _ => PullRequestState::Open,
    };
    let same_head = |r: &&PullRequestStatus| r.number == subject.number && r.head_sha == subject.head;
    let checks = recorded.as_ref().filter(same_head).and_then(|r| r.checks).or(Some(ChecksState::Pending));
    let now = PullRequestStatus {
        repository: subject.repository.clone(),
        number: subject.number,
        url: subject.url.clone(),
        state,
        head_sha: subject.head.clone(),
        checks,
        updated_at: at.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
    };
    (recorded.as_ref() != Some(&now)).then(|| now.to_annotation())
}

/// The first seven characters of a commit id.
fn short(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}

/// The work item a route makes of an event; `None` when nothing of it is left in a name. Two different lists of
/// values never make one work item ([`crate::api::slug_of_parts`]): `octo-org/hello` and `octo/org-hello` are two.
fn work_item_of(route: &config::Route, vars: &[(&str, &str)]) -> Option<String> {
    let rendered = render(&route.work_item, vars);
    if crate::api::dns_label(&rendered).is_empty() {
        return None;
    }
    let used: Vec<&str> =
        vars.iter().filter(|(k, _)| route.work_item.contains(&format!("{{{k}}}"))).map(|(_, v)| *v).collect();
    Some(crate::api::slug_of_parts(&rendered, &used))
}

/// An issue or pull request closed (`closed`) or reopened: its session archived or woken as the route says.
async fn lifecycle<S: Sink>(
    bridge: &Bridge<S>,
    route: &config::Route,
    subject: &Subject,
    work_item: &str,
    closed: bool,
) -> Result<Response, ApiError> {
    let action = if closed { "closed" } else { "reopened" };
    if route.on_close == config::OnClose::Nothing {
        return Ok(
            bridge.ignored("lifecycle", format!("rule {} does nothing when a work item is {action}", route.pattern))
        );
    }
    let namespace = route.namespace.as_str();
    let delete_at = (closed && route.on_close == config::OnClose::Delete).then(|| {
        let after = k8s_openapi::jiff::SignedDuration::try_from(route.delete_after).unwrap_or_default();
        k8s_openapi::jiff::Timestamp::now().checked_add(after).unwrap_or(k8s_openapi::jiff::Timestamp::MAX)
    });
    match bridge.sink.archive(namespace, work_item, closed, delete_at, subject.at).await? {
        Archived::Missing => {
            let why = format!("{} was {action}; it has no WorkSession {namespace}/{work_item}", subject.repository);
            return Ok(bridge.ignored("lifecycle", why));
        }
        Archived::Outdated => {
            let why = format!(
                "{}#{} was {action} at {}, before the last change recorded on {namespace}/{work_item}",
                subject.repository,
                subject.number,
                subject.at.map_or_else(|| "?".to_string(), |t| t.to_string())
            );
            return Ok(bridge.ignored("lifecycle", why));
        }
        Archived::Written => {}
    }
    let outcome = if closed { "archived" } else { "reopened" };
    bridge.metrics.lifecycle.get_or_create(&metrics::LifecycleLabels { action: outcome }).inc();
    tracing::info!(event = "bridge.lifecycle", namespace, session = work_item, action, delete_at = ?delete_at, "{} #{} {action}", subject.repository, subject.number);
    Ok(answer(StatusCode::OK, outcome, json!({"workSession": work_item, "namespace": namespace})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_a_repositorys_by_its_label_or_its_checkout() {
        let with = |labels: Option<&str>, url: Option<&str>| {
            let mut ws = WorkSession::new("hello-12", WorkSessionSpec::default());
            ws.metadata.labels = labels.map(|r| [(REPOSITORY_LABEL.to_string(), repository_label(r))].into());
            ws.spec.workspace = url.map(|u| WorkspaceSpec { url: u.into(), r#ref: None });
            ws
        };
        assert!(belongs(&with(Some("octo-org/hello"), None), "octo-org/hello"));
        assert!(!belongs(
            &with(Some("octo-org/other"), Some("https://github.com/octo-org/hello.git")),
            "octo-org/hello"
        ));
        assert!(belongs(&with(None, Some("https://github.com/Octo-Org/hello.git")), "octo-org/hello"));
        assert!(belongs(&with(None, Some("git@github.com:octo-org/hello")), "octo-org/hello"));
        assert!(!belongs(&with(None, Some("https://github.com/octo-org/not-hello.git")), "octo-org/hello"));
        assert!(!belongs(&with(None, Some("https://github.com/xocto-org/hello.git")), "octo-org/hello"));
        assert!(!belongs(&with(None, None), "octo-org/hello"), "nothing says whose it is");
    }
}
