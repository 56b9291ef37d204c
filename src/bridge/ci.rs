//! CI results on a work item's pull request, for the GitHub handler: one prompt per failing head commit, the checks
//! that fail within a quiet window joined into it, and a bound on how many a session gets without a person prompting
//! it in between (an agent that cannot fix the build does not loop for ever).

use axum::http::StatusCode;
use axum::response::Response;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use serde_json::json;

use super::github::{BRANCH_PREFIX, Check, Subject};
use super::{ApiError, Bridge, answer, config, event_name, work_event};
use crate::api::{CI_PROMPTS_ANNOTATION, EventPhase, EventSource, WorkSession};
use crate::store::Sink;

/// How long before a batch's `notBefore` the bridge stops adding to it, at most: an agent's clock a little ahead of
/// the bridge's may begin the delivery then, and a check added after that would be lost. A shorter quiet window keeps
/// its first half open.
pub const BATCH_MARGIN: SignedDuration = SignedDuration::from_secs(5);

/// The Event reason on a session whose CI failure was not sent, its bound reached.
pub const BOUND_REASON: &str = "CIPromptsBounded";

/// The CI prompts `ws` got since a person last prompted it.
fn sent(ws: &WorkSession) -> u32 {
    ws.annotations().get(CI_PROMPTS_ANNOTATION).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// The first line of a commit's CI prompt.
fn heading(subject: &Subject, work_item: &str, sha: &str) -> String {
    format!(
        "CI on pull request {}#{} (branch {BRANCH_PREFIX}{work_item}, commit {}):",
        subject.repository,
        subject.number,
        sha.get(..12).unwrap_or(sha)
    )
}

/// Writes a CI result of the work item's pull request: joined to its commit's prompt while that waits, else a new
/// prompt within the bound; nothing for a passing result unless the route asks for it.
pub async fn deliver<S: Sink>(
    bridge: &Bridge<S>,
    route: &config::Route,
    subject: &Subject,
    work_item: &str,
    check: Check,
    source: EventSource,
) -> Result<Response, ApiError> {
    let ci = bridge.config.borrow().github.as_ref().map(|g| g.ci.clone()).unwrap_or_default();
    if !ci.apps.contains(&check.app) {
        let why = format!("app {} may not speak for CI (github.ci.apps: {})", check.app, ci.apps.join(", "));
        return Ok(bridge.ignored("ci_app", why));
    }
    if !check.failed && !route.ci_on_success {
        return Ok(bridge.ignored("ci_passed", format!("{} passed on {}", check.line, check.sha)));
    }
    let namespace = route.namespace.as_str();
    let name = event_name("ci", &format!("{}@{}", subject.repository, check.sha));
    // One CI write at a time: the batch and the session's count are read, then written.
    let _one = bridge.creating.lock().await;
    let found = bridge.sink.event(namespace, &name).await?;
    if let Some(batch) = found {
        let now = Timestamp::now();
        let margin = SignedDuration::try_from(ci.quiet / 2).unwrap_or_default().min(BATCH_MARGIN);
        let open = batch.spec.not_before.as_ref().is_some_and(|t| now.checked_add(margin).is_ok_and(|m| m < t.0));
        let begun = batch.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p != EventPhase::Pending);
        let detail = json!({"workEvent": name, "namespace": namespace});
        if batch.spec.prompt.contains(&check.line) || !open || begun {
            // The commit's prompt holds this result already, or went: a later run of the same commit adds nothing.
            bridge.metrics.duplicates.inc();
            return Ok(answer(StatusCode::OK, "duplicate", detail));
        }
        let prompt = format!("{}\n{}", batch.spec.prompt, check.line);
        if bridge.sink.set_prompt(&batch, &prompt).await? {
            tracing::info!(
                event = "bridge.ci_joined",
                namespace,
                session = work_item,
                work_event = name,
                "{}",
                check.line
            );
            return Ok(answer(StatusCode::OK, "joined", detail));
        }
        bridge.metrics.duplicates.inc();
        return Ok(answer(StatusCode::OK, "duplicate", detail));
    }
    let Some(ws) = bridge.sink.session(namespace, work_item, None).await? else {
        return Ok(bridge.ignored("no_session", format!("work item {work_item} has no WorkSession in {namespace}")));
    };
    let count = sent(&ws);
    if count >= ci.max_prompts {
        let why = format!(
            "CI on {} (commit {}) was not sent: {count} CI prompts since a person last prompted this session \
             (github.ci.maxPrompts: {}); a comment on the pull request sends the next",
            subject.repository, check.sha, ci.max_prompts
        );
        bridge.sink.note(namespace, work_item, BOUND_REASON, &why).await;
        return Ok(bridge.ignored("ci_bound", why));
    }
    let quiet = SignedDuration::try_from(ci.quiet).unwrap_or_default();
    let not_before = Timestamp::now().checked_add(quiet).unwrap_or(Timestamp::MAX);
    let prompt = format!("{}\n{}", heading(subject, work_item, &check.sha), check.line);
    let mut event = work_event(name, work_item, prompt, source);
    event.spec.not_before = Some(Time(not_before));
    event.metadata.labels = Some([(config::ROUTE_LABEL.to_string(), route.id.clone())].into());
    let response = bridge.deliver(namespace, work_item, None, event).await?;
    if response.status() == StatusCode::CREATED {
        let next = (count + 1).to_string();
        bridge.sink.mark_session(namespace, work_item, &[], &[(CI_PROMPTS_ANNOTATION, Some(&next))]).await?;
    }
    Ok(response)
}

/// A person prompted the session: its CI prompts count from zero again.
pub async fn person_prompted<S: Sink>(bridge: &Bridge<S>, namespace: &str, work_item: &str) -> Result<(), ApiError> {
    let Some(ws) = bridge.sink.session(namespace, work_item, None).await? else { return Ok(()) };
    if sent(&ws) > 0 {
        bridge.sink.mark_session(namespace, work_item, &[], &[(CI_PROMPTS_ANNOTATION, None)]).await?;
    }
    Ok(())
}
