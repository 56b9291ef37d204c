//! The approval comment, beside the pipeline: a harness's permission request (`status.approval`) is posted on the
//! issue its work item came from, with how to answer it (`/approve <id>`, `/deny <id> [reason]`), and the same
//! comment is edited to say who answered once it was; a harness waiting for a person with no such request is posted
//! the same way ([`super::waiting_comment`]), for someone to attach. Written with the bridge's credentials, one comment per request;
//! what it says is decided from the session alone ([`render`]). The comment it edits is recorded on the session,
//! sealed, so a restart edits the same one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use super::config::{ApprovalComments, BridgeConfig, ROUTE_LABEL};
use super::status_comment::{code, digest, seal, sealed_issue, write};
use crate::api::{ApprovalStatus, Decision, WorkSession};
use crate::github::Github;

/// The latest request's comment and what it last said (`<request> <comment id> <hash of its text> <seal>`).
pub const APPROVAL_COMMENT_ANNOTATION: &str = "worksession.dev/approval-comment";
/// The latest waiting notice's comment (`<episode> <comment id> <hash of its text> <seal>`).
pub const WAITING_COMMENT_ANNOTATION: &str = "worksession.dev/waiting-comment";
/// The shortest time between two new comments of one session (requests and waits each): a harness that asks again
/// and again within it has its last comment edited instead.
pub const SPACING: Duration = Duration::from_secs(60);
/// How long after a failed call the comment is tried again, doubling up to [`RETRY_MAX`].
pub const RETRY: Duration = Duration::from_secs(10);
/// The longest wait after failed tries (a locked issue, a missing permission, a rate limit).
pub const RETRY_MAX: Duration = Duration::from_secs(600);

/// The marker that finds a comment of `ws` among its issue's: `kind`, its episode, and a seal no one but the bridge
/// can make (a comment someone else wrote with the marker is never taken for the bridge's).
pub(super) fn marker(secret: &[u8], ws: &WorkSession, kind: &str, episode: &str) -> String {
    let key = format!("{}/{}/{episode}", ws.namespace().unwrap_or_default(), ws.name_any());
    format!("<!-- worksession-{kind}:{key} {} -->", seal(secret, &format!("{kind} marker {key}")))
}

/// Who answered, as the issue is told: a GitHub login as the answer names it; anyone else, a person of the cluster
/// (a cluster user's name is not the issue's to read).
fn who(by: Option<&str>) -> String {
    match by {
        Some(by) if by.starts_with("github:") || matches!(by, "policy" | "deadline" | "terminal" | "exit") => {
            by.to_string()
        }
        Some("superseded") => "a newer request".to_string(),
        _ => "a person of the cluster".to_string(),
    }
}

/// What the comment says of the request `a` of `ws` (`brief`: without what it asks): Markdown, its text in code
/// spans (a harness's words are shown, never rendered: no mention, link or markup of theirs works).
pub fn render(ws: &WorkSession, a: &ApprovalStatus, brief: bool, marker: &str) -> String {
    let time = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| t.0.strftime("%Y-%m-%d %H:%M:%S UTC");
    let head = match brief {
        false => format!("**worksession** · the agent asks for permission to use {}", code(&a.request)),
        true => format!(
            "**worksession** · the agent asks for permission to use {} (what it asks: `worksession get ws {} -o yaml`, \
             or the console)",
            code(&a.tool),
            ws.name_any()
        ),
    };
    let mut lines = vec![head, String::new()];
    match (&a.decided_time, a.decision) {
        (None, _) => {
            lines.push(format!(
                "Request `{id}`. A person allowed to answer comments `/approve {id}` or `/deny {id} <reason>`. \
                 Unanswered, it is denied at {}.",
                time(&a.deadline),
                id = a.id
            ));
        }
        (Some(at), decision) => {
            let how = match decision {
                Some(Decision::Allow) => "**Allowed**",
                Some(Decision::Deny) => "**Denied**",
                None => "**Ended**",
            };
            let by = who(a.by.as_deref());
            lines.push(format!("Request `{}`: {how} by {} at {}.", a.id, code(&by), time(at)));
        }
    }
    lines.push(marker.to_string());
    lines.join("\n")
}

/// What every pass of the approval commenter shares.
struct Commenter {
    client: Client,
    github: Arc<Github>,
    config: watch::Receiver<Arc<BridgeConfig>>,
    /// When each session's last new comment of each kind was made.
    made: Mutex<HashMap<String, Instant>>,
    /// Failed tries in a row, by session.
    failures: Mutex<HashMap<String, u32>>,
}

/// Posts and edits the routes' sessions' approval comments until the process is asked to stop.
pub async fn run(client: Client, github: Arc<Github>, config: watch::Receiver<Arc<BridgeConfig>>) {
    let sessions: Api<WorkSession> = Api::all(client.clone());
    let (made, failures) = (Mutex::default(), Mutex::default());
    let ctx = Arc::new(Commenter { client, github, config, made, failures });
    tracing::info!(event = "approval_comment.started", "posting the routes' permission requests");
    Controller::new(sessions, watcher::Config::default().labels(ROUTE_LABEL))
        .shutdown_on_signal()
        .run(reconcile, on_error, ctx)
        .for_each(|_| async {})
        .await;
}

async fn reconcile(ws: Arc<WorkSession>, ctx: Arc<Commenter>) -> Result<Action, kube::Error> {
    let config = ctx.config.borrow().clone();
    let route = ws.labels().get(ROUTE_LABEL).and_then(|id| config.routes.iter().find(|r| &r.id == id));
    let mode = route.map_or(ApprovalComments::Off, |r| r.approval_comments);
    let Some(issue) = sealed_issue(&config, &ws).filter(|_| mode != ApprovalComments::Off) else {
        return Ok(Action::await_change());
    };
    let brief = mode == ApprovalComments::Brief;
    let secret = config.github.as_ref().map(|g| g.secret.clone()).unwrap_or_default();
    let approval = ws.status.as_ref().and_then(|s| s.approval.clone());
    if let Some(a) = approval.filter(|a| crate::harness::hooks::is_request_id(&a.id)) {
        let marker = marker(&secret, &ws, "approval", &a.id);
        let text = render(&ws, &a, brief, &marker);
        let post = Post { annotation: APPROVAL_COMMENT_ANNOTATION, episode: a.id.clone(), marker, new: a.waiting() };
        if let Some(again) = post.write(&ctx, &ws, &issue, &secret, &text).await? {
            return Ok(again);
        }
    }
    // A harness waiting for a person with no request of its own (a harness without a permission hook, a question):
    // that it waits (and, in full, its words), and that a person answers in its terminal.
    let waiting = super::waiting_comment::episode(&ws);
    let recorded = ws.annotations().get(WAITING_COMMENT_ANNOTATION).and_then(|v| v.split(' ').next()).map(String::from);
    let (episode, new) = match (&waiting, recorded) {
        (Some((episode, _)), _) => (episode.clone(), true),
        (None, Some(episode)) => (episode, false),
        (None, None) => return Ok(Action::await_change()),
    };
    let marker = marker(&secret, &ws, "waiting", &episode);
    let text = match &waiting {
        Some((_, words)) => super::waiting_comment::render(&ws, (!brief).then_some(words.as_str()), &marker),
        None => super::waiting_comment::ended(&marker),
    };
    let post = Post { annotation: WAITING_COMMENT_ANNOTATION, episode, marker, new };
    Ok(post.write(&ctx, &ws, &issue, &secret, &text).await?.unwrap_or_else(Action::await_change))
}

/// One comment kept for a session: its annotation, what it is about (a request's id, a wait's start), its marker,
/// and whether it may be a new comment (a request or wait still on; else only one made before is edited).
struct Post {
    annotation: &'static str,
    episode: String,
    marker: String,
    new: bool,
}

impl Post {
    /// Writes `text` as this episode's comment unless it says that already: a new comment (or, within [`SPACING`]
    /// of the session's last new one, that one edited) only where `new` allows; `Some` to come back later.
    async fn write(
        &self,
        ctx: &Commenter,
        ws: &WorkSession,
        (repository, number): &(String, u64),
        secret: &[u8],
        text: &str,
    ) -> Result<Option<Action>, kube::Error> {
        let key = format!("{}/{}", ws.namespace().unwrap_or_default(), ws.name_any());
        let sealed = |episode: &str, id: &str, said: &str| {
            seal(secret, &format!("{} {key} {repository}#{number} {episode} {id} {said}", self.annotation))
        };
        // The comment recorded, when its seal says the bridge recorded it.
        let recorded = ws.annotations().get(self.annotation).cloned().unwrap_or_default();
        let (episode, id, said) = match recorded.split(' ').collect::<Vec<_>>()[..] {
            [episode, id, said, mark] if mark == sealed(episode, id, said) => (episode, id.parse::<u64>().ok(), said),
            _ => ("", None, ""),
        };
        let same = episode == self.episode;
        if same && said == digest(text) {
            return Ok(None);
        }
        let made = format!("{key} {}", self.annotation);
        let last = ctx.made.lock().unwrap_or_else(|p| p.into_inner()).get(&made).copied();
        let id = match (same, last) {
            (true, _) => id,
            (false, _) if !self.new => return Ok(None),
            (false, Some(at)) if at.elapsed() < SPACING => id,
            (false, _) => None,
        };
        match write(&ctx.github, repository, *number, id, &self.marker, text).await {
            Ok(written) => {
                ctx.failures.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                if id.is_none() {
                    ctx.made.lock().unwrap_or_else(|p| p.into_inner()).insert(made, Instant::now());
                }
                let said = digest(text);
                let value =
                    format!("{} {written} {said} {}", self.episode, sealed(&self.episode, &written.to_string(), &said));
                let api: Api<WorkSession> = Api::namespaced(ctx.client.clone(), &ws.namespace().unwrap_or_default());
                let patch = json!({"metadata": {"annotations": {self.annotation: value}}});
                let params = PatchParams { field_manager: Some("worksession-bridge".into()), ..Default::default() };
                match api.patch(&ws.name_any(), &params, &Patch::Merge(&patch)).await {
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    result => drop(result?),
                }
                Ok(None)
            }
            Err(e) => {
                let tries = {
                    let mut failures = ctx.failures.lock().unwrap_or_else(|p| p.into_inner());
                    let n = failures.entry(key.clone()).or_insert(0);
                    *n += 1;
                    *n
                };
                let wait = RETRY.saturating_mul(1 << (tries - 1).min(8)).min(RETRY_MAX);
                tracing::warn!(event = "approval_comment.failed", session = key, error = %e, tries, "the comment could not be written; trying again in {}s", wait.as_secs());
                Ok(Some(Action::requeue(wait)))
            }
        }
    }
}

fn on_error(ws: Arc<WorkSession>, error: &kube::Error, _ctx: Arc<Commenter>) -> Action {
    tracing::warn!(event = "approval_comment.failed", namespace = ws.namespace(), name = ws.name_any(), error = %error, "recording the approval comment failed; retrying");
    Action::requeue(RETRY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::WorkSessionSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn request(decided: Option<(Decision, &str)>) -> (WorkSession, ApprovalStatus) {
        let mut ws = WorkSession::new("hello-12", WorkSessionSpec::default());
        ws.metadata.namespace = Some("agents".into());
        let at = Time("2026-12-05T10:00:00Z".parse().unwrap());
        let a = ApprovalStatus {
            id: "0123456789ab".into(),
            tool: "Bash".into(),
            request: "Bash: echo `@octocat` [x](https://evil)".into(),
            asked_time: at.clone(),
            deadline: Time("2026-12-05T10:10:00Z".parse().unwrap()),
            decision: decided.map(|d| d.0),
            by: decided.map(|d| d.1.to_string()),
            reason: None,
            decided_time: decided.map(|_| at),
            digest: None,
        };
        (ws, a)
    }

    #[test]
    fn a_request_is_shown_in_a_code_span_with_how_to_answer_then_who_answered() {
        let (ws, a) = request(None);
        let mark = marker(b"secret", &ws, "approval", &a.id);
        let said = render(&ws, &a, false, &mark);
        assert!(said.contains("`` Bash: echo `@octocat` [x](https://evil) ``"), "{said}");
        assert!(said.contains("`/approve 0123456789ab`"), "{said}");
        assert!(said.contains("denied at 2026-12-05 10:10:00 UTC"), "{said}");
        assert!(said.ends_with(" -->") && said.contains("<!-- worksession-approval:agents/hello-12/0123456789ab "));
        assert_ne!(mark, marker(b"another secret", &ws, "approval", &a.id), "a marker only the bridge can make");
        let brief = render(&ws, &a, true, &mark);
        assert!(!brief.contains("echo") && brief.contains("` Bash `"), "brief: the tool, not what it asks: {brief}");
        let (ws, a) = request(Some((Decision::Allow, "github:mona")));
        let said = render(&ws, &a, false, &mark);
        assert!(said.contains("**Allowed** by ` github:mona `"), "{said}");
        assert!(!said.contains("/approve"), "{said}");
        let (ws, a) = request(Some((Decision::Allow, "oidc:alice@example.com")));
        let said = render(&ws, &a, false, &mark);
        assert!(said.contains("by ` a person of the cluster `") && !said.contains("alice"), "{said}");
    }
}
