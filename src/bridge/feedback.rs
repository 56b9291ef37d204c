//! Feedback where the comment is, after status: a WorkEvent the bridge made from a GitHub comment that becomes
//! `Delivered` gets an `eyes` reaction; one that becomes `Failed` a `confused` one and, with `feedback: Comments`, one
//! short comment saying why (never the prompt). What is owed is decided here from the event alone ([`owed`]); the
//! driver ([`run`]) watches the bridge's events, holds each change before calling (an annotation written with the
//! object's resourceVersion, so one bridge replica acts), calls GitHub, and records the change as given (another
//! annotation), so a restart never repeats it. Failed calls are retried with back-off, beside delivery, never in
//! its way: a stalled GitHub delays only this.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use hyper::Method;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::config::{BridgeConfig, Feedback, ROUTE_LABEL};
use super::metrics::{BridgeMetrics, GithubLabels};
use crate::api::{PromptPhase, SourceType, WorkEvent};
use crate::github::{Github, GithubError};

/// The phase whose feedback was given (`Delivered` or `Failed`): set once the calls succeeded (or were refused for
/// good), it is never given again.
pub const GIVEN_ANNOTATION: &str = "worksession.dev/github-feedback";
/// Who is giving the feedback of which phase since when (`<phase> <holder> <time>`): written before the calls.
pub const HOLD_ANNOTATION: &str = "worksession.dev/github-feedback-hold";
/// How long a hold holds without being renewed: a bridge that stopped mid-call is taken over after it (and its
/// comment looked for before it is made again).
pub const HOLD_TTL: Duration = Duration::from_secs(120);
/// The longest wait between tries of a failing call.
/// Under [`HOLD_TTL`]: a holder that keeps trying keeps its hold (it renews it at each try).
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// The longest failure reason a comment repeats.
const REASON_CHARS: usize = 200;

/// What a reaction is given to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reactable {
    /// An issue's (or pull request's) comment.
    IssueComment(u64),
    /// A pull request's review comment.
    ReviewComment(u64),
    /// The issue or pull request itself (an `issues: opened`, a review: GitHub has no reactions on reviews).
    Issue(u64),
}

impl Reactable {
    /// The API path of its reactions.
    pub fn reactions(self, repository: &str) -> String {
        match self {
            Reactable::IssueComment(id) => format!("/repos/{repository}/issues/comments/{id}/reactions"),
            Reactable::ReviewComment(id) => format!("/repos/{repository}/pulls/comments/{id}/reactions"),
            Reactable::Issue(number) => format!("/repos/{repository}/issues/{number}/reactions"),
        }
    }
}

/// The feedback a WorkEvent is owed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owed {
    /// The phase it tells.
    pub phase: PromptPhase,
    /// `owner/name`.
    pub repository: String,
    /// The issue or pull request.
    pub number: u64,
    /// The reaction, and where.
    pub reaction: (Reactable, &'static str),
    /// A comment on the issue or pull request (a failure, with `feedback: Comments`).
    pub comment: Option<String>,
}

/// What `ev` is owed under `mode`: nothing unless it came from GitHub, reached `Delivered` or `Failed`, and that
/// phase was not given yet.
pub fn owed(ev: &WorkEvent, mode: Feedback) -> Option<Owed> {
    let source = ev.spec.source.as_ref().filter(|s| s.type_ == SourceType::Github)?;
    let phase = ev.status.as_ref()?.phase.filter(|p| matches!(p, PromptPhase::Delivered | PromptPhase::Failed))?;
    if mode == Feedback::Off || given(ev) == Some(phase) {
        return None;
    }
    let (repository, number) = (source.repository.clone().filter(|r| repository_shaped(r))?, source.number?);
    let target = match (source.event.as_deref(), source.comment_id) {
        (Some("issue_comment"), Some(id)) => Reactable::IssueComment(id),
        (Some("pull_request_review_comment"), Some(id)) => Reactable::ReviewComment(id),
        _ => Reactable::Issue(number),
    };
    let failed = phase == PromptPhase::Failed;
    let reaction = (target, if failed { "confused" } else { "eyes" });
    let comment = (failed && mode == Feedback::Comments).then(|| failure_comment(ev));
    Some(Owed { phase, repository, number, reaction, comment })
}

/// Whether `repository` is `owner/name` as GitHub spells them (no `.` or `..` name, nothing a URL path would read
/// otherwise): it goes into the API paths.
pub fn repository_shaped(repository: &str) -> bool {
    let Some((owner, name)) = repository.split_once('/') else { return false };
    let owner_ok = !owner.is_empty() && owner.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let name_ok = !name.is_empty()
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    owner_ok && name_ok
}

/// The phase whose feedback was given.
fn given(ev: &WorkEvent) -> Option<PromptPhase> {
    ev.annotations().get(GIVEN_ANNOTATION).and_then(|p| PromptPhase::from_name(p))
}

/// The comment on a failure: the event's reason in a line, without the prompt (the comment is public where the
/// prompt may not be), and a marker by which a bridge that took over finds it made already.
pub fn failure_comment(ev: &WorkEvent) -> String {
    let message = ev.status.as_ref().and_then(|s| s.message.as_deref()).unwrap_or("no reason was recorded");
    // One line: nothing after a line break of any kind, and no control character at all (a lone `\r` ends a
    // paragraph in GitHub's markdown).
    let first = message.split(['\n', '\r']).next().unwrap_or_default();
    let mut reason: String = first.chars().filter(|c| !c.is_control()).collect();
    let prompt = ev.spec.prompt.trim();
    if prompt.len() >= 8 {
        reason = reason.replace(prompt, "(the prompt)");
    }
    if reason.chars().count() > REASON_CHARS {
        reason = reason.chars().take(REASON_CHARS).collect::<String>() + "…";
    }
    // Nothing in it is read as markup or a mention: backticks around, and none inside.
    let reason = reason.replace('`', "'");
    format!("worksession could not deliver this to its agent: `{reason}`\n\n{}", marker(ev))
}

/// The hidden line that names the event a comment is for.
fn marker(ev: &WorkEvent) -> String {
    format!("<!-- worksession:{}/{} -->", ev.namespace().unwrap_or_default(), ev.name_any())
}

/// A hold on an event's feedback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The phase being told.
    pub phase: PromptPhase,
    /// The bridge process that holds it.
    pub holder: String,
    /// When it was made or last renewed.
    pub time: Timestamp,
}

impl Hold {
    fn parse(value: &str) -> Option<Self> {
        let mut parts = value.split(' ');
        let (phase, holder, time) =
            (PromptPhase::from_name(parts.next()?)?, parts.next()?, parts.next()?.parse().ok()?);
        Some(Hold { phase, holder: holder.to_string(), time })
    }

    fn value(&self) -> String {
        format!("{} {} {}", self.phase, self.holder, self.time)
    }
}

/// Whether `holder` may give the feedback of `phase` now, given the event's hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permit {
    /// Yes; `taken_over` when another holder's hold lapsed (it may have made the calls already).
    Ours {
        /// Since when a lapsed hold was held (its comment may exist from then on).
        taken_over: Option<Timestamp>,
    },
    /// Another holder's live hold: look again after this.
    Wait(Duration),
}

/// The rule of holds: no hold, one of ours, or one for another phase is ours; another holder's lapses after
/// [`HOLD_TTL`].
pub fn permit(hold: Option<&Hold>, phase: PromptPhase, holder: &str, now: Timestamp) -> Permit {
    let Some(hold) = hold.filter(|c| c.phase == phase) else { return Permit::Ours { taken_over: None } };
    if hold.holder == holder {
        return Permit::Ours { taken_over: None };
    }
    let age = Duration::try_from(now.duration_since(hold.time)).unwrap_or(Duration::ZERO);
    match HOLD_TTL.checked_sub(age) {
        Some(left) if !left.is_zero() => Permit::Wait(left),
        _ => Permit::Ours { taken_over: Some(hold.time) },
    }
}

/// The wait before try `attempt + 1` of a failing call: 1 s doubling, at most [`BACKOFF_MAX`].
pub fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.min(16)).min(BACKOFF_MAX)
}

/// The GitHub client `api` describes.
pub fn github_of(api: &super::config::ApiConfig) -> std::io::Result<Github> {
    use super::config::ApiAuth;
    let auth = match &api.auth {
        ApiAuth::TokenFile(path) => crate::github::Auth::TokenFile(path.clone()),
        ApiAuth::App { id, private_key, installation_id } => crate::github::Auth::App(Box::new(
            crate::github::app::App::new(*id, private_key, *installation_id).map_err(std::io::Error::other)?,
        )),
    };
    Github::new(&api.base_url, auth)
}

/// What every pass of the feedback giver shares.
struct Giver {
    client: Client,
    github: Arc<Github>,
    config: watch::Receiver<Arc<BridgeConfig>>,
    metrics: BridgeMetrics,
    recorder: Recorder,
    holder: String,
    /// Failed tries so far and when the next may run, by event (`namespace/name`): the hold's own write wakes the
    /// watch, and a requeue cannot hold back a reconcile the watch already asked for, so the back-off is kept here.
    failures: Mutex<HashMap<String, (u32, Timestamp)>>,
}

/// Gives feedback on the bridge's GitHub WorkEvents (those with [`ROUTE_LABEL`]) that `events` reaches (every
/// namespace, for the bridge; one, for a test) until the process is asked to stop.
pub async fn run(
    client: Client,
    events: Api<WorkEvent>,
    github: Arc<Github>,
    config: watch::Receiver<Arc<BridgeConfig>>,
    metrics: BridgeMetrics,
) {
    let holder = format!(
        "{}-{}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "bridge".into()),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let reporter = Reporter { controller: "worksession-bridge".into(), instance: Some(holder.clone()) };
    let recorder = Recorder::new(client.clone(), reporter);
    let ctx = Arc::new(Giver {
        client: client.clone(),
        github,
        config,
        metrics,
        recorder,
        holder,
        failures: Mutex::default(),
    });
    tracing::info!(event = "feedback.started", "giving GitHub feedback on the bridge's WorkEvents");
    Controller::new(events, watcher::Config::default().labels(ROUTE_LABEL))
        .with_config(kube::runtime::controller::Config::default().concurrency(8))
        .shutdown_on_signal()
        .run(give, on_error, ctx)
        .for_each(|_| async {})
        .await;
}

/// The feedback `ev` is given under `config`: its route's, and only where the route could have made it (the route's
/// namespace, a repository it routes). Anyone who may create WorkEvents in a namespace can label one; the bridge's
/// credentials then reach no repository but those routed to that very namespace.
pub fn mode_of(config: &BridgeConfig, ev: &WorkEvent) -> Feedback {
    let route = ev.labels().get(ROUTE_LABEL).map(String::as_str).unwrap_or_default();
    let repository = ev.spec.source.as_ref().and_then(|s| s.repository.as_deref()).unwrap_or_default();
    let namespace = ev.namespace().unwrap_or_default();
    config
        .routes
        .iter()
        .find(|r| r.id == route)
        .filter(|r| r.namespace == namespace && config.route(repository).is_some_and(|first| first.id == r.id))
        .map_or(Feedback::Off, |r| r.feedback)
}

async fn give(ev: Arc<WorkEvent>, ctx: Arc<Giver>) -> Result<Action, kube::Error> {
    let mode = mode_of(&ctx.config.borrow(), &ev);
    let Some(owed) = owed(&ev, mode) else { return Ok(Action::await_change()) };
    let hold = ev.annotations().get(HOLD_ANNOTATION).and_then(|c| Hold::parse(c));
    let now = Timestamp::now();
    let key = format!("{}/{}", ev.namespace().unwrap_or_default(), ev.name_any());
    let next = ctx.failures.lock().unwrap_or_else(|p| p.into_inner()).get(&key).map(|(_, next)| *next);
    if let Some(next) = next.filter(|next| *next > now) {
        return Ok(Action::requeue(Duration::try_from(next.duration_since(now)).unwrap_or(Duration::ZERO)));
    }
    let taken_over = match permit(hold.as_ref(), owed.phase, &ctx.holder, now) {
        Permit::Wait(left) => return Ok(Action::requeue(left)),
        // A hold of this phase already there (another's that lapsed, or ours from a try that failed, maybe after
        // GitHub made the comment): its comment is looked for before one is made.
        Permit::Ours { taken_over } => taken_over.or(hold.as_ref().filter(|h| h.phase == owed.phase).map(|h| h.time)),
    };
    let api: Api<WorkEvent> = Api::namespaced(ctx.client.clone(), &ev.namespace().unwrap_or_default());
    // The hold, as a compare-and-swap: of two bridges that saw the change, one writes it; the other's write
    // conflicts, and the watch brings it the held version.
    let mine = Hold { phase: owed.phase, holder: ctx.holder.clone(), time: now };
    let patch = json!({"metadata": {"resourceVersion": ev.resource_version(),
        "annotations": {HOLD_ANNOTATION: mine.value()}}});
    match api.patch(&ev.name_any(), &params(), &Patch::Merge(&patch)).await {
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => return Ok(Action::await_change()),
        result => drop(result?),
    }
    match calls(&ctx, &owed, &ev, taken_over).await {
        Ok(()) => {
            ctx.failures.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            given_now(&api, &ev, owed.phase).await?;
            let what = if owed.comment.is_some() { "a reaction and a comment" } else { "a reaction" };
            let note = format!("told GitHub {} ({what} on {}#{})", owed.phase, owed.repository, owed.number);
            publish(&ctx, &ev, EventType::Normal, "GitHubFeedback", note).await;
            Ok(Action::await_change())
        }
        Err(e) if e.retryable() => {
            let (attempt, wait) = {
                let mut failures = ctx.failures.lock().unwrap_or_else(|p| p.into_inner());
                let entry = failures.entry(key).or_insert((0, now));
                entry.0 += 1;
                let wait = backoff(entry.0 - 1);
                let span = k8s_openapi::jiff::SignedDuration::try_from(wait).unwrap_or_default();
                entry.1 = Timestamp::now().checked_add(span).unwrap_or(Timestamp::MAX);
                (entry.0, wait)
            };
            tracing::warn!(event = "feedback.retrying", namespace = ev.namespace(), name = ev.name_any(), error = %e, attempt, "GitHub feedback failed; trying again in {}s", wait.as_secs());
            let note =
                format!("telling GitHub {} failed (try {attempt}, next in {}s): {e}", owed.phase, wait.as_secs());
            publish(&ctx, &ev, EventType::Warning, "GitHubFeedbackFailed", note).await;
            // Renewed at the next try: the hold stays ours while we keep trying.
            Ok(Action::requeue(wait))
        }
        Err(e) => {
            // Refused for good (a deleted comment, missing permissions): trying again changes nothing.
            ctx.failures.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            given_now(&api, &ev, owed.phase).await?;
            tracing::warn!(event = "feedback.refused", namespace = ev.namespace(), name = ev.name_any(), error = %e, "GitHub refused the feedback");
            let note = format!("GitHub refused the feedback for {}: {e}", owed.phase);
            publish(&ctx, &ev, EventType::Warning, "GitHubFeedbackRefused", note).await;
            Ok(Action::await_change())
        }
    }
}

/// The calls of `owed`: the reaction (GitHub keeps one per user and content, so a second one changes nothing),
/// then the comment unless a bridge that held the hold before made it.
async fn calls(ctx: &Giver, owed: &Owed, ev: &WorkEvent, taken_over: Option<Timestamp>) -> Result<(), GithubError> {
    let (target, content) = owed.reaction;
    let path = target.reactions(&owed.repository);
    counted(
        ctx,
        "reaction",
        ctx.github.call(Method::POST, &owed.repository, &path, Some(&json!({"content": content}))),
    )
    .await?;
    let Some(body) = &owed.comment else { return Ok(()) };
    let comments = format!("/repos/{}/issues/{}/comments", owed.repository, owed.number);
    if let Some(since) = taken_over {
        let search = format!("{comments}?since={since}&per_page=100");
        let (_, found) = counted(ctx, "search", ctx.github.call(Method::GET, &owed.repository, &search, None)).await?;
        let mark = marker(ev);
        let made = found.as_array().is_some_and(|list| {
            list.iter().any(|c| c.get("body").and_then(Value::as_str).is_some_and(|b| b.contains(&mark)))
        });
        if made {
            return Ok(());
        }
    }
    counted(ctx, "comment", ctx.github.call(Method::POST, &owed.repository, &comments, Some(&json!({"body": body}))))
        .await?;
    Ok(())
}

/// A call, counted by its outcome.
async fn counted<T>(
    ctx: &Giver,
    call: &'static str,
    result: impl Future<Output = Result<T, GithubError>>,
) -> Result<T, GithubError> {
    let result = result.await;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(e) if e.retryable() => "retried",
        Err(_) => "refused",
    };
    ctx.metrics.github_calls.get_or_create(&GithubLabels { call, outcome }).inc();
    result
}

/// Records `phase` as given and lets go of the hold.
async fn given_now(api: &Api<WorkEvent>, ev: &WorkEvent, phase: PromptPhase) -> Result<(), kube::Error> {
    let patch = json!({"metadata": {"annotations": {GIVEN_ANNOTATION: phase.as_str(), HOLD_ANNOTATION: null}}});
    match api.patch(&ev.name_any(), &params(), &Patch::Merge(&patch)).await {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        result => result.map(drop),
    }
}

fn params() -> PatchParams {
    PatchParams { field_manager: Some("worksession-bridge".into()), ..Default::default() }
}

async fn publish(ctx: &Giver, ev: &WorkEvent, type_: EventType, reason: &str, note: String) {
    let event =
        Event { type_, reason: reason.into(), note: Some(note), action: "GitHubFeedback".into(), secondary: None };
    if let Err(e) = ctx.recorder.publish(&event, &ev.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "could not record a Kubernetes Event");
    }
}

fn on_error(ev: Arc<WorkEvent>, error: &kube::Error, _ctx: Arc<Giver>) -> Action {
    tracing::warn!(event = "feedback.failed", namespace = ev.namespace(), name = ev.name_any(), error = %error, "recording the feedback failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

#[cfg(test)]
mod tests;
