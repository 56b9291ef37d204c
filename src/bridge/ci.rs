//! CI results on a work item's pull request, for the GitHub handler: one prompt per failing head commit, the checks
//! that fail within a quiet window joined into it, and a bound on how many a session gets without a person prompting
//! it in between (an agent that cannot fix the build does not loop for ever).

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use serde_json::json;

use super::github::{BRANCH_PREFIX, Check, Subject};
use super::{ApiError, Bridge, answer, config, event_name, work_event};
use crate::api::{
    CI_PROMPTS_ANNOTATION, ChecksState, EventSource, PULL_REQUEST_STATE_ANNOTATION, PromptPhase, PullRequestStatus,
    WorkEvent,
};
use crate::store::Sink;

/// How long before a batch's `notBefore` the bridge stops adding to it, at most: an agent's clock a little ahead of
/// the bridge's may begin the delivery then, and a check added after that would be lost. A shorter quiet window keeps
/// its first half open.
pub const BATCH_MARGIN: SignedDuration = SignedDuration::from_secs(5);

/// The prompts one commit's results may make: the first batch, and those for results that came after a batch was
/// sent (tests that finish long after the lint). Past them a result of the commit is ignored (`ci_late`).
pub const BATCHES_PER_COMMIT: u32 = 3;

/// The Event reason on a session whose CI failure was not sent, its bound reached.
pub const BOUND_REASON: &str = "CIPromptsBounded";

/// The first line of a commit's CI prompt.
fn heading(subject: &Subject, work_item: &str, sha: &str) -> String {
    format!(
        "CI on pull request {}#{} (branch {BRANCH_PREFIX}{work_item}, commit {}):",
        subject.repository,
        subject.number,
        sha.get(..12).unwrap_or(sha)
    )
}

/// What one CI result does to its commit's batches.
#[derive(Debug, PartialEq, Eq)]
pub enum Batching {
    /// A batch holds the result already: a rerun, or a redelivery.
    Held,
    /// Join the open batch, the `n`th (its prompt gets the line).
    Join(u32),
    /// Start the `n`th batch.
    Start(u32),
    /// Every batch of the commit was used.
    Late,
}

/// Whether `batch` may still be joined at `now`: not yet begun, and its `notBefore` more than the margin ahead.
pub(super) fn open(batch: &WorkEvent, now: Timestamp, quiet: Duration) -> bool {
    let margin = SignedDuration::try_from(quiet / 2).unwrap_or_default().min(BATCH_MARGIN);
    let begun = batch.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p != PromptPhase::Pending);
    let ahead = batch.spec.not_before.as_ref().is_some_and(|t| now.checked_add(margin).is_ok_and(|m| m < t.0));
    ahead && !begun
}

/// The rule, from the commit's batches as found (`None` for one not made), oldest first.
pub fn batching(batches: &[Option<WorkEvent>], line: &str, now: Timestamp, quiet: Duration) -> Batching {
    let made = || batches.iter().flatten();
    if made().any(|b| b.spec.prompt.lines().any(|l| l == line)) {
        return Batching::Held;
    }
    for (n, batch) in (1..).zip(batches) {
        match batch {
            None => return Batching::Start(n),
            Some(b) if open(b, now, quiet) => return Batching::Join(n),
            Some(_) => {}
        }
    }
    Batching::Late
}

/// The name of the `n`th batch of a commit's results (failing ones apart from passing ones).
fn batch_name(subject: &Subject, check: &Check, n: u32) -> String {
    let kind = if check.failed { "" } else { ":passed" };
    let suffix = if n == 1 { String::new() } else { format!("#{n}") };
    event_name("ci", &format!("{}@{}{kind}{suffix}", subject.repository, check.sha))
}

/// Writes a CI result of the work item's pull request: joined to its commit's batch while that waits, else a new
/// batch within the bound; nothing for a passing result unless the route asks for it, nor for an archived work item.
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
    let namespace = route.namespace.as_str();
    // One CI write at a time: the batches and the session's count are read, then written.
    let _one = bridge.ci.lock().await;
    let Some(ws) = bridge.sink.session(namespace, work_item, None).await? else {
        return Ok(bridge.ignored("no_session", format!("work item {work_item} has no WorkSession in {namespace}")));
    };
    // Read fresh and written over the version read: a merge or a push at the same moment is not undone.
    let change = |recorded: Option<&str>| checks_state(recorded?, subject, &check);
    bridge.sink.update_annotation(namespace, work_item, PULL_REQUEST_STATE_ANNOTATION, change).await?;
    if !check.failed && !route.ci_on_success {
        return Ok(bridge.ignored("ci_passed", format!("{} passed on {}", check.line, check.sha)));
    }
    if ws.spec.archived {
        // Checks that finish after the merge: the work is over; a person's comment still wakes it.
        return Ok(bridge.ignored("archived", format!("work item {work_item} is archived: {}", check.line)));
    }
    let mut batches = Vec::new();
    for n in 1..=BATCHES_PER_COMMIT {
        batches.push(bridge.sink.event(namespace, &batch_name(subject, &check, n)).await?);
    }
    let now = Timestamp::now();
    match batching(&batches, &check.line, now, ci.quiet) {
        Batching::Held => {
            bridge.metrics.duplicates.inc();
            let detail = json!({"namespace": namespace, "workSession": work_item});
            Ok(answer(StatusCode::OK, "duplicate", detail))
        }
        Batching::Late => {
            Ok(bridge.ignored("ci_late", format!("{} on {}: every batch of the commit went", check.line, check.sha)))
        }
        Batching::Join(n) => {
            let batch = batches[n as usize - 1].as_ref().expect("a batch to join was found");
            let prompt = format!("{}\n{}", batch.spec.prompt, check.line);
            let name = batch.name_any();
            let detail = json!({"workEvent": name, "namespace": namespace});
            if bridge.sink.set_prompt(batch, &prompt).await? {
                bridge.ask_tail(namespace, &name, subject, &check);
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
            // Its delivery began (or it changed) between the read and the write: GitHub tries again, and the retry
            // starts the next batch.
            Err(ApiError::Unavailable(format!("{name} changed while {} joined it; retry", check.line)))
        }
        Batching::Start(n) => {
            let what = format!("CI on {} (commit {})", subject.repository, check.sha);
            if let Err(why) = count_one(bridge, namespace, work_item, &what).await? {
                return Ok(bridge.ignored("ci_bound", why));
            }
            let quiet = SignedDuration::try_from(ci.quiet).unwrap_or_default();
            let prompt = format!("{}\n{}", heading(subject, work_item, &check.sha), check.line);
            let mut event = work_event(batch_name(subject, &check, n), work_item, prompt, source);
            event.spec.not_before = Some(Time(now.checked_add(quiet).unwrap_or(Timestamp::MAX)));
            event.metadata.labels = Some([(config::ROUTE_LABEL.to_string(), route.id.clone())].into());
            let name = event.name_any();
            let delivered = bridge.deliver(namespace, work_item, None, event).await?;
            if delivered.status() == StatusCode::CREATED {
                bridge.ask_tail(namespace, &name, subject, &check);
            }
            Ok(delivered)
        }
    }
}

/// The pull request's state with what `check` says of its head commit, when it changes the one `recorded`: a failure
/// makes it `Failing`, a pass `Passing` unless a check of the commit failed. A result of another commit, or of a pull
/// request the session does not record, changes nothing.
fn checks_state(recorded: &str, subject: &Subject, check: &Check) -> Option<String> {
    let mut state = PullRequestStatus::from_annotation(recorded)?;
    if state.number != subject.number || state.head_sha.as_deref() != Some(check.sha.as_str()) {
        return None;
    }
    let checks = match (check.failed, state.checks) {
        (true, _) => ChecksState::Failing,
        (false, Some(ChecksState::Failing)) => ChecksState::Failing,
        (false, _) => ChecksState::Passing,
    };
    (state.checks != Some(checks)).then(|| {
        state.checks = Some(checks);
        state.to_annotation()
    })
}

/// Counts one more CI prompt (or bot push), `what`, on the session, within `github.ci.maxPrompts`; `Err(why)` when
/// the bound is reached: then nothing is counted, and the session's Events say why. Counted before the prompt is
/// written, so a write that fails after it counts rather than slips past the bound.
pub async fn count_one<S: Sink>(
    bridge: &Bridge<S>,
    namespace: &str,
    work_item: &str,
    what: &str,
) -> Result<Result<(), String>, ApiError> {
    let max = bridge.config.borrow().github.as_ref().map_or(0, |g| g.ci.max_prompts);
    // Over the version read: no two deliveries (nor two bridges) count the same one.
    let counted = |recorded: Option<&str>| {
        let n: u32 = recorded.and_then(|n| n.parse().ok()).unwrap_or(0);
        (n < max).then(|| (n + 1).to_string())
    };
    if bridge.sink.update_annotation(namespace, work_item, CI_PROMPTS_ANNOTATION, counted).await? {
        return Ok(Ok(()));
    }
    let why = format!(
        "{what} was not sent: {max} CI prompts since a person last prompted this session (github.ci.maxPrompts); a \
         comment on the pull request sends the next"
    );
    // Told beside the answer, never in its way.
    let (sink, namespace, work_item, note) =
        (bridge.sink.clone(), namespace.to_string(), work_item.to_string(), why.clone());
    tokio::spawn(async move { sink.note(&namespace, &work_item, BOUND_REASON, &note).await });
    Ok(Err(why))
}

/// A person prompted the session: its CI prompts count from zero again.
pub async fn person_prompted<S: Sink>(bridge: &Bridge<S>, namespace: &str, work_item: &str) -> Result<(), ApiError> {
    let Some(ws) = bridge.sink.session(namespace, work_item, None).await? else { return Ok(()) };
    // From the cache: one it has not seen counted yet is reset at the next person's prompt (the bound errs low).
    if ws.annotations().contains_key(CI_PROMPTS_ANNOTATION) {
        bridge.sink.mark_session(namespace, work_item, &[], &[(CI_PROMPTS_ANNOTATION, None)]).await?;
    }
    Ok(())
}
