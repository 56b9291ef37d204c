//! The status comment, beside the pipeline: for a route that asks (`statusComment: true`), one comment on the issue a
//! work item came from says what its agent is doing (working, waiting for a person and their question, idle,
//! archived), its pull request and CI, and when it last took a prompt. Edited in place as the session's status
//! changes, never one per change; written with the bridge's credentials, never by a harness. What it says is decided
//! from the session alone ([`render`]); the driver ([`run`]) watches the routes' sessions, edits at most every
//! [`MIN_INTERVAL`], and records the comment it edits on the session, so a restart edits the same one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hyper::Method;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use super::config::{BridgeConfig, ROUTE_LABEL};
use crate::api::{Phase, WorkSession};
use crate::core::ConditionType;
use crate::github::{Github, GithubError};

/// The issue a session the bridge made came from (`owner/name#number`): where its status comment goes.
pub const ISSUE_ANNOTATION: &str = "worksession.dev/issue";
/// The status comment and what it last said (`<comment id> <hash of its text>`).
pub const COMMENT_ANNOTATION: &str = "worksession.dev/status-comment";
/// The shortest time between two edits of one session's comment: an agent that turns from working to idle and back
/// within it is told once, with what holds at the end.
pub const MIN_INTERVAL: Duration = Duration::from_secs(30);
/// How long after a failed call the comment is tried again.
pub const RETRY: Duration = Duration::from_secs(30);
/// The longest question of a waiting harness the comment repeats, in characters.
const QUESTION_CHARS: usize = 300;

/// The marker that finds a session's comment among the issue's (a bridge that made it and stopped before it recorded
/// it).
fn marker(ws: &WorkSession) -> String {
    format!("<!-- worksession-status:{}/{} -->", ws.namespace().unwrap_or_default(), ws.name_any())
}

/// What the comment says of `ws`: Markdown, its text escaped (a harness's words are shown, never rendered).
pub fn render(ws: &WorkSession) -> String {
    let st = ws.status.clone().unwrap_or_default();
    let activity = st.conditions.iter().find(|c| c.type_ == ConditionType::Activity.as_str());
    // Parked with its harness running on, or stopped: the `Ready` condition says so either way.
    let ready = st.conditions.iter().find(|c| c.type_ == ConditionType::Ready.as_str());
    let parked = ready.is_some_and(|c| c.reason == "UsageLimited");
    let doing = match (st.phase, activity.map(|c| c.reason.as_str())) {
        (Some(Phase::Archived), _) => "archived (the work item is closed; a comment wakes it)".to_string(),
        (_, Some("WaitingForInput")) => {
            let question: String =
                activity.map(|c| c.message.as_str()).unwrap_or_default().chars().take(QUESTION_CHARS).collect();
            format!("waiting for a person: {}", code(&question))
        }
        (Some(Phase::Running), Some("Working")) => "working".to_string(),
        (Some(Phase::Running), Some("Idle")) => "idle, waiting for the next prompt".to_string(),
        (Some(Phase::Idle), _) => "stopped while idle (the next prompt resumes it)".to_string(),
        (Some(Phase::Paused), _) => {
            "paused: it reached its budget or its namespace's (prompts wait; raising that budget resumes it)"
                .to_string()
        }
        _ if parked => {
            let wake = st.usage.as_ref().and_then(|u| u.limit.as_ref()).and_then(|l| l.wake_time.as_ref());
            let until = wake.map(|t| format!(" until {}", t.0.strftime("%Y-%m-%d %H:%M UTC"))).unwrap_or_default();
            format!("parked{until}: the model's usage limit was reached (prompts wait until it is waited out)")
        }
        (Some(phase), _) => phase.to_string().to_lowercase(),
        (None, _) => "not started yet".to_string(),
    };
    let mut lines = vec![format!("**worksession** · the agent on this work item is {doing}.")];
    if let Some(pr) = &st.pull_request {
        let checks = pr.checks.map(|c| format!(", CI {c}")).unwrap_or_default();
        lines.push(format!("- Pull request: #{} ({}{checks})", pr.number, pr.state));
    }
    if let Some(at) = &st.last_prompt_time {
        lines.push(format!("- Last prompt taken: {}", at.0.strftime("%Y-%m-%d %H:%M UTC")));
    }
    lines.push(marker(ws));
    lines.join("\n")
}

/// `text` on one line as a code span: GitHub renders no markup, mention, issue reference or link inside one (a
/// backslash would not stop a mention: GitHub finds those after Markdown is rendered). Fenced by one backtick more
/// than the longest run in `text`.
pub(super) fn code(text: &str) -> String {
    let text: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    format!("{fence} {text} {fence}")
}

/// A seal of `what` with the webhook's secret: a value only the bridge can have written. Anyone who may patch a
/// WorkSession can write its annotations, and a forged comment id would have the bridge overwrite any comment of a
/// routed repository with its credentials.
pub(super) fn seal(secret: &[u8], what: &str) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(b"worksession status comment\n");
    mac.update(what.as_bytes());
    hex::encode(mac.finalize().into_bytes())[..32].to_string()
}

/// The [`ISSUE_ANNOTATION`] of a session the bridge makes in `namespace/name` for issue `number` of `repository`.
pub fn issue_annotation(secret: &[u8], namespace: &str, name: &str, repository: &str, number: u64) -> String {
    let issue = format!("{repository}#{number}");
    format!("{issue} {}", seal(secret, &format!("{namespace}/{name} {issue}")))
}

pub(super) fn digest(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))[..16].to_string()
}

/// The issue of `ws` whose comment its route asks for, under `config`: only a route's own session (its namespace),
/// only an issue the bridge recorded (its seal), and only of a repository that route routes, so an annotation or a
/// label written by hand points the bridge's credentials at no other issue.
pub fn issue_of(config: &BridgeConfig, ws: &WorkSession) -> Option<(String, u64)> {
    let route = ws.labels().get(ROUTE_LABEL)?;
    config.routes.iter().find(|r| &r.id == route && r.status_comment)?;
    sealed_issue(config, ws)
}

/// The issue the bridge recorded for `ws` (its seal), when `ws` is its route's own session (its namespace) and the
/// issue's repository is one that route routes.
pub fn sealed_issue(config: &BridgeConfig, ws: &WorkSession) -> Option<(String, u64)> {
    let secret = &config.github.as_ref()?.secret;
    let route = ws.labels().get(ROUTE_LABEL)?;
    let route = config.routes.iter().find(|r| &r.id == route)?;
    let namespace = ws.namespace().unwrap_or_default();
    if namespace != route.namespace {
        return None;
    }
    let (issue, sealed) = ws.annotations().get(ISSUE_ANNOTATION)?.split_once(' ')?;
    if sealed != seal(secret, &format!("{namespace}/{} {issue}", ws.name_any())) {
        return None;
    }
    let (repository, number) = issue.rsplit_once('#')?;
    let number = number.parse().ok()?;
    let owner_name =
        repository.split_once('/').is_some_and(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'));
    let routed = config.route(repository).is_some_and(|first| first.id == route.id);
    (owner_name && routed).then(|| (repository.to_string(), number))
}

/// What every pass of the status commenter shares.
struct Commenter {
    client: Client,
    github: Arc<Github>,
    config: watch::Receiver<Arc<BridgeConfig>>,
    /// The shortest time between two edits of one comment ([`MIN_INTERVAL`]).
    interval: Duration,
    /// When each session's comment was last written.
    written: Mutex<HashMap<String, Instant>>,
    /// Failed tries in a row, by session: the wait before the next doubles from [`RETRY`] up to [`RETRY_MAX`].
    failures: Mutex<HashMap<String, u32>>,
}

/// The longest wait after failed tries (a locked issue, a missing permission, a rate limit).
pub const RETRY_MAX: Duration = Duration::from_secs(600);

/// Edits the status comments of the routes that ask for one, each at most every `interval` ([`MIN_INTERVAL`]),
/// until the process is asked to stop.
pub async fn run(client: Client, github: Arc<Github>, config: watch::Receiver<Arc<BridgeConfig>>, interval: Duration) {
    let sessions: Api<WorkSession> = Api::all(client.clone());
    let (written, failures) = (Mutex::default(), Mutex::default());
    let ctx = Arc::new(Commenter { client, github, config, interval, written, failures });
    tracing::info!(event = "status_comment.started", "keeping the routes' status comments");
    Controller::new(sessions, watcher::Config::default().labels(ROUTE_LABEL))
        .shutdown_on_signal()
        .run(reconcile, on_error, ctx)
        .for_each(|_| async {})
        .await;
}

async fn reconcile(ws: Arc<WorkSession>, ctx: Arc<Commenter>) -> Result<Action, kube::Error> {
    let config = ctx.config.borrow().clone();
    let Some((repository, number)) = issue_of(&config, &ws) else { return Ok(Action::await_change()) };
    let secret = config.github.as_ref().map(|g| g.secret.clone()).unwrap_or_default();
    let key = format!("{}/{}", ws.namespace().unwrap_or_default(), ws.name_any());
    let text = render(&ws);
    // The comment recorded, when its seal says the bridge recorded it, for this session and this issue.
    let recorded = ws.annotations().get(COMMENT_ANNOTATION).cloned().unwrap_or_default();
    let (id, said) = match recorded.split(' ').collect::<Vec<_>>()[..] {
        [id, said, sealed] if sealed == seal(&secret, &format!("{key} {repository}#{number} {id} {said}")) => {
            (id.parse::<u64>().ok(), said)
        }
        _ => (None, ""),
    };
    if said == digest(&text) {
        return Ok(Action::await_change());
    }
    let last = {
        let mut written = ctx.written.lock().unwrap_or_else(|p| p.into_inner());
        written.retain(|_, at| at.elapsed() < ctx.interval);
        written.get(&key).copied()
    };
    if let Some(left) = last.and_then(|t| ctx.interval.checked_sub(t.elapsed())) {
        return Ok(Action::requeue(left));
    }
    match write(&ctx.github, &repository, number, id, &marker(&ws), &text).await {
        Ok(id) => {
            ctx.written.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), Instant::now());
            ctx.failures.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            let api: Api<WorkSession> = Api::namespaced(ctx.client.clone(), &ws.namespace().unwrap_or_default());
            let said = digest(&text);
            let value = format!("{id} {said} {}", seal(&secret, &format!("{key} {repository}#{number} {id} {said}")));
            let patch = json!({"metadata": {"annotations": {COMMENT_ANNOTATION: value}}});
            let params = PatchParams { field_manager: Some("worksession-bridge".into()), ..Default::default() };
            match api.patch(&ws.name_any(), &params, &Patch::Merge(&patch)).await {
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                result => drop(result?),
            }
            Ok(Action::await_change())
        }
        Err(e) => {
            let tries = {
                let mut failures = ctx.failures.lock().unwrap_or_else(|p| p.into_inner());
                let n = failures.entry(key.clone()).or_insert(0);
                *n += 1;
                *n
            };
            let wait = RETRY.saturating_mul(1 << (tries - 1).min(8)).min(RETRY_MAX);
            tracing::warn!(event = "status_comment.failed", session = key, error = %e, tries, "the status comment could not be written; trying again in {}s", wait.as_secs());
            Ok(Action::requeue(wait))
        }
    }
}

/// Edits comment `id` (or the issue's comment carrying `marker`, or a new one) to `text`; its id.
pub(super) async fn write(
    github: &Github,
    repository: &str,
    number: u64,
    id: Option<u64>,
    marker: &str,
    text: &str,
) -> Result<u64, GithubError> {
    let body = json!({"body": text});
    let id = match id {
        Some(id) => Some(id),
        None => {
            // Made by a bridge that stopped before it recorded it: found by its marker (the oldest comment that
            // carries it: a copy someone made later is not it), never made twice. The first 100 comments are read.
            let path = format!("/repos/{repository}/issues/{number}/comments?per_page=100");
            let (_, listed) = github.call(Method::GET, repository, &path, None).await?;
            let mine = |c: &&Value| c.get("body").and_then(Value::as_str).is_some_and(|b| b.contains(marker));
            listed.as_array().and_then(|all| all.iter().find(mine)).and_then(|c| c.get("id")).and_then(Value::as_u64)
        }
    };
    if let Some(id) = id {
        let path = format!("/repos/{repository}/issues/comments/{id}");
        match github.call(Method::PATCH, repository, &path, Some(&body)).await {
            Ok(_) => return Ok(id),
            // Deleted by a person: a new one.
            Err(GithubError::Refused { status: 404, .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let path = format!("/repos/{repository}/issues/{number}/comments");
    let (_, made) = github.call(Method::POST, repository, &path, Some(&body)).await?;
    made.get("id")
        .and_then(Value::as_u64)
        .ok_or_else(|| GithubError::Refused { status: 0, message: "GitHub's answer named no comment id".into() })
}

fn on_error(ws: Arc<WorkSession>, error: &kube::Error, _ctx: Arc<Commenter>) -> Action {
    tracing::warn!(event = "status_comment.failed", namespace = ws.namespace(), name = ws.name_any(), error = %error, "recording the status comment failed; retrying");
    Action::requeue(RETRY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ChecksState, PullRequestState, PullRequestStatus, WorkSessionSpec, WorkSessionStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn session(phase: Phase, activity: Option<(&str, &str)>) -> WorkSession {
        let mut ws = WorkSession::new("hello-12", WorkSessionSpec::default());
        ws.metadata.namespace = Some("agents".into());
        ws.status = Some(WorkSessionStatus {
            phase: Some(phase),
            conditions: activity
                .map(|(reason, message)| Condition {
                    type_: ConditionType::Activity.as_str().into(),
                    status: "False".into(),
                    reason: reason.into(),
                    message: message.into(),
                    last_transition_time: Time("2026-12-01T10:00:00Z".parse().unwrap()),
                    observed_generation: None,
                })
                .into_iter()
                .collect(),
            pull_request: Some(PullRequestStatus {
                repository: "octo-org/hello".into(),
                number: 57,
                url: String::new(),
                state: PullRequestState::Open,
                head_sha: None,
                checks: Some(ChecksState::Failing),
                updated_at: None,
            }),
            last_prompt_time: Some(Time("2026-12-01T10:05:00Z".parse().unwrap())),
            ..Default::default()
        });
        ws
    }

    #[test]
    fn the_comment_says_what_the_agent_does_its_pull_request_and_its_last_prompt() {
        let said = render(&session(Phase::Running, Some(("Working", ""))));
        assert_eq!(
            said,
            "**worksession** · the agent on this work item is working.\n- Pull request: #57 (Open, CI Failing)\n\
             - Last prompt taken: 2026-12-01 10:05 UTC\n<!-- worksession-status:agents/hello-12 -->"
        );
        assert!(render(&session(Phase::Archived, None)).contains("is archived"));
        assert!(render(&session(Phase::Idle, None)).contains("stopped while idle"));
        assert!(render(&session(Phase::Paused, None)).contains("is paused: it reached its budget or its namespace's"));
        // Parked, its harness running on: the `Ready` condition says so.
        let mut parked = session(Phase::Running, Some(("UsageLimited", "")));
        let conditions = &mut parked.status.as_mut().unwrap().conditions;
        conditions.push(Condition { type_: ConditionType::Ready.as_str().into(), ..conditions[0].clone() });
        assert!(render(&parked).contains("is parked: the model's usage limit was reached"), "{}", render(&parked));
    }

    #[test]
    fn a_harness_question_is_shown_in_a_code_span_never_rendered() {
        let hostile = "Allow ``rm -rf /``? @octo-org/admins #1 https://evil.example [click](x) <img src=x>\n![x](y)";
        let said = render(&session(Phase::Running, Some(("WaitingForInput", hostile))));
        let line = said.lines().next().unwrap();
        let quoted =
            "``` Allow ``rm -rf /``? @octo-org/admins #1 https://evil.example [click](x) <img src=x> ![x](y) ```";
        assert!(line.ends_with(&format!("waiting for a person: {quoted}.")), "{line}");
        assert_eq!(said.lines().count(), 4, "one line for the question");
    }

    #[test]
    fn only_an_issue_the_bridge_sealed_is_commented_on() {
        let yaml = "github: {secretEnv: PATH, api: {tokenFile: /dev/null}}\nroutes:\n  - {repository: 'octo-org/*', \
                    namespace: agents, harness: claude, workdir: /w, statusComment: true}\n";
        let mut config = crate::bridge::config::BridgeConfig::parse(yaml, std::path::Path::new("bridge.yaml")).unwrap();
        config.github.as_mut().unwrap().secret = b"s3cret".to_vec();
        let mut ws = session(Phase::Running, None);
        ws.metadata.labels = Some([(ROUTE_LABEL.to_string(), config.routes[0].id.clone())].into());
        let sealed = issue_annotation(b"s3cret", "agents", "hello-12", "octo-org/hello", 12);
        ws.metadata.annotations = Some([(ISSUE_ANNOTATION.to_string(), sealed.clone())].into());
        assert_eq!(issue_of(&config, &ws), Some(("octo-org/hello".into(), 12)));
        for forged in [sealed.replace("#12", "#13"), "octo-org/hello#13 0000".into(), "octo-org/hello#13".into()] {
            ws.metadata.annotations = Some([(ISSUE_ANNOTATION.to_string(), forged.clone())].into());
            assert_eq!(issue_of(&config, &ws), None, "{forged}");
        }
    }
}
