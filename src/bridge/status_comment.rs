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
    let doing = match (st.phase, activity.map(|c| c.reason.as_str())) {
        (Some(Phase::Archived), _) => "archived (the work item is closed; a comment wakes it)".to_string(),
        (_, Some("WaitingForInput")) => {
            let question: String =
                activity.map(|c| c.message.as_str()).unwrap_or_default().chars().take(QUESTION_CHARS).collect();
            format!("waiting for a person: {}", escaped(&question))
        }
        (Some(Phase::Running), Some("Working")) => "working".to_string(),
        (Some(Phase::Running), Some("Idle")) => "idle, waiting for the next prompt".to_string(),
        (Some(Phase::Idle), _) => "stopped while idle (the next prompt resumes it)".to_string(),
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

/// `text` on one line, with what Markdown would read as markup, a mention or a link shown as it is.
fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            c if c.is_control() => out.push(' '),
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '@' | '#' | '!' | '|' | '~' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

fn digest(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))[..16].to_string()
}

/// The issue of `ws` whose comment its route asks for, under `config`: only a route's own session (its namespace),
/// and only an issue of a repository that route routes, so a label written by hand points the bridge's credentials
/// at no other repository.
pub fn issue_of(config: &BridgeConfig, ws: &WorkSession) -> Option<(String, u64)> {
    let route = ws.labels().get(ROUTE_LABEL)?;
    let route = config.routes.iter().find(|r| &r.id == route && r.status_comment)?;
    if ws.namespace().as_deref() != Some(route.namespace.as_str()) {
        return None;
    }
    let (repository, number) = ws.annotations().get(ISSUE_ANNOTATION)?.rsplit_once('#')?;
    let number = number.parse().ok()?;
    let owner_name =
        repository.split_once('/').is_some_and(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'));
    let routed = config.route(repository).is_some_and(|first| first.id == route.id);
    (owner_name && routed).then(|| (repository.to_string(), number))
}

struct Ctx {
    client: Client,
    github: Arc<Github>,
    config: watch::Receiver<Arc<BridgeConfig>>,
    /// The shortest time between two edits of one comment ([`MIN_INTERVAL`]).
    interval: Duration,
    /// When each session's comment was last written.
    written: Mutex<HashMap<String, Instant>>,
}

/// Edits the status comments of the routes that ask for one, each at most every `interval` ([`MIN_INTERVAL`]),
/// until the process is asked to stop.
pub async fn run(client: Client, github: Arc<Github>, config: watch::Receiver<Arc<BridgeConfig>>, interval: Duration) {
    let sessions: Api<WorkSession> = Api::all(client.clone());
    let ctx = Arc::new(Ctx { client, github, config, interval, written: Mutex::default() });
    tracing::info!(event = "status_comment.started", "keeping the routes' status comments");
    Controller::new(sessions, watcher::Config::default().labels(ROUTE_LABEL))
        .shutdown_on_signal()
        .run(reconcile, on_error, ctx)
        .for_each(|_| async {})
        .await;
}

async fn reconcile(ws: Arc<WorkSession>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let Some((repository, number)) = issue_of(&ctx.config.borrow(), &ws) else { return Ok(Action::await_change()) };
    let text = render(&ws);
    let recorded = ws.annotations().get(COMMENT_ANNOTATION).cloned().unwrap_or_default();
    let (id, said) = recorded.split_once(' ').unwrap_or(("", ""));
    if said == digest(&text) {
        return Ok(Action::await_change());
    }
    let key = format!("{}/{}", ws.namespace().unwrap_or_default(), ws.name_any());
    let last = ctx.written.lock().unwrap_or_else(|p| p.into_inner()).get(&key).copied();
    if let Some(left) = last.and_then(|t| ctx.interval.checked_sub(t.elapsed())) {
        return Ok(Action::requeue(left));
    }
    match write(&ctx.github, &repository, number, id.parse().ok(), &marker(&ws), &text).await {
        Ok(id) => {
            ctx.written.lock().unwrap_or_else(|p| p.into_inner()).insert(key, Instant::now());
            let api: Api<WorkSession> = Api::namespaced(ctx.client.clone(), &ws.namespace().unwrap_or_default());
            let value = format!("{id} {}", digest(&text));
            let patch = json!({"metadata": {"annotations": {COMMENT_ANNOTATION: value}}});
            let params = PatchParams { field_manager: Some("worksession-bridge".into()), ..Default::default() };
            match api.patch(&ws.name_any(), &params, &Patch::Merge(&patch)).await {
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                result => drop(result?),
            }
            Ok(Action::await_change())
        }
        Err(e) => {
            tracing::warn!(event = "status_comment.failed", session = key, error = %e, "the status comment could not be written; trying again");
            Ok(Action::requeue(RETRY))
        }
    }
}

/// Edits comment `id` (or the issue's comment carrying `marker`, or a new one) to `text`; its id.
async fn write(
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
            // Made by a bridge that stopped before it recorded it: found by its marker, never made twice.
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

fn on_error(ws: Arc<WorkSession>, error: &kube::Error, _ctx: Arc<Ctx>) -> Action {
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
    }

    #[test]
    fn a_harness_question_is_shown_never_rendered() {
        let hostile = "Allow `rm -rf /`? @octo-org/admins [click](https://evil) <img src=x>\n![x](y)";
        let said = render(&session(Phase::Running, Some(("WaitingForInput", hostile))));
        let line = said.lines().next().unwrap();
        assert!(line.contains("waiting for a person: Allow \\`rm -rf /\\`? \\@octo-org/admins \\[click\\]"), "{line}");
        let bytes = line.as_bytes();
        let unescaped = (1..bytes.len()).filter(|&i| b"<[@!`".contains(&bytes[i]) && bytes[i - 1] != b'\\').count();
        assert_eq!(unescaped, 0, "every markup character escaped: {line}");
        assert_eq!(said.lines().count(), 4, "one line for the question");
    }
}
