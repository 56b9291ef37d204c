//! The approval comment, beside the pipeline: a harness's permission request (`status.approval`) is posted on the
//! issue its work item came from, with how to answer it (`/approve <id>`, `/deny <id> [reason]`), and the same
//! comment is edited to say who answered once it was. Written with the bridge's credentials, one comment per request;
//! what it says is decided from the session alone ([`render`]). The comment it edits is recorded on the session,
//! sealed, so a restart edits the same one.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use super::config::{BridgeConfig, ROUTE_LABEL};
use super::status_comment::{code, digest, seal, sealed_issue, write};
use crate::api::{ApprovalStatus, Decision, WorkSession};
use crate::github::Github;

/// The latest request's comment and what it last said (`<request> <comment id> <hash of its text> <seal>`).
pub const APPROVAL_COMMENT_ANNOTATION: &str = "worksession.dev/approval-comment";
/// How long after a failed call the comment is tried again.
pub const RETRY: Duration = Duration::from_secs(10);

/// The marker that finds a request's comment among the issue's.
fn marker(ws: &WorkSession, id: &str) -> String {
    format!("<!-- worksession-approval:{}/{}/{id} -->", ws.namespace().unwrap_or_default(), ws.name_any())
}

/// What the comment says of the request `a` of `ws`: Markdown, its text in code spans (a harness's words are shown,
/// never rendered: no mention, link or markup of theirs works).
pub fn render(ws: &WorkSession, a: &ApprovalStatus) -> String {
    let time = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| t.0.strftime("%Y-%m-%d %H:%M:%S UTC");
    let head = format!("**worksession** · the agent asks for permission to use {}", code(&a.request));
    let mut lines = vec![head, String::new()];
    match (&a.decided_time, a.decision) {
        (None, _) => {
            lines.push(format!(
                "Request `{id}`. A person who may prompt this agent answers with a comment `/approve {id}` or \
                 `/deny {id} <reason>`. Unanswered, it is denied at {}.",
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
            let by = a.by.as_deref().unwrap_or("nobody named");
            let why = a.reason.as_deref().map(|r| format!(": {}", code(r))).unwrap_or_default();
            lines.push(format!("Request `{}`: {how} by {} at {}{why}.", a.id, code(by), time(at)));
        }
    }
    lines.push(marker(ws, &a.id));
    lines.join("\n")
}

/// What every pass of the approval commenter shares.
struct Commenter {
    client: Client,
    github: Arc<Github>,
    config: watch::Receiver<Arc<BridgeConfig>>,
}

/// Posts and edits the routes' sessions' approval comments until the process is asked to stop.
pub async fn run(client: Client, github: Arc<Github>, config: watch::Receiver<Arc<BridgeConfig>>) {
    let sessions: Api<WorkSession> = Api::all(client.clone());
    let ctx = Arc::new(Commenter { client, github, config });
    tracing::info!(event = "approval_comment.started", "posting the routes' permission requests");
    Controller::new(sessions, watcher::Config::default().labels(ROUTE_LABEL))
        .shutdown_on_signal()
        .run(reconcile, on_error, ctx)
        .for_each(|_| async {})
        .await;
}

async fn reconcile(ws: Arc<WorkSession>, ctx: Arc<Commenter>) -> Result<Action, kube::Error> {
    let Some(a) = ws.status.as_ref().and_then(|s| s.approval.clone()) else { return Ok(Action::await_change()) };
    if !crate::harness::hooks::is_request_id(&a.id) {
        return Ok(Action::await_change());
    }
    let config = ctx.config.borrow().clone();
    let Some((repository, number)) = sealed_issue(&config, &ws) else { return Ok(Action::await_change()) };
    let secret = config.github.as_ref().map(|g| g.secret.clone()).unwrap_or_default();
    let key = format!("{}/{}", ws.namespace().unwrap_or_default(), ws.name_any());
    let text = render(&ws, &a);
    let sealed =
        |id: &str, said: &str| seal(&secret, &format!("approval {key} {repository}#{number} {} {id} {said}", a.id));
    // The comment recorded for this very request, when its seal says the bridge recorded it.
    let recorded = ws.annotations().get(APPROVAL_COMMENT_ANNOTATION).cloned().unwrap_or_default();
    let (id, said) = match recorded.split(' ').collect::<Vec<_>>()[..] {
        [request, id, said, mark] if request == a.id && mark == sealed(id, said) => (id.parse::<u64>().ok(), said),
        _ => (None, ""),
    };
    if said == digest(&text) {
        return Ok(Action::await_change());
    }
    match write(&ctx.github, &repository, number, id, &marker(&ws, &a.id), &text).await {
        Ok(id) => {
            let said = digest(&text);
            let value = format!("{} {id} {said} {}", a.id, sealed(&id.to_string(), &said));
            let api: Api<WorkSession> = Api::namespaced(ctx.client.clone(), &ws.namespace().unwrap_or_default());
            let patch = json!({"metadata": {"annotations": {APPROVAL_COMMENT_ANNOTATION: value}}});
            let params = PatchParams { field_manager: Some("worksession-bridge".into()), ..Default::default() };
            match api.patch(&ws.name_any(), &params, &Patch::Merge(&patch)).await {
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                result => drop(result?),
            }
            Ok(Action::await_change())
        }
        Err(e) => {
            tracing::warn!(event = "approval_comment.failed", session = key, error = %e, "the request could not be posted; trying again");
            Ok(Action::requeue(RETRY))
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
        let said = render(&ws, &a);
        assert!(said.contains("`` Bash: echo `@octocat` [x](https://evil) ``"), "{said}");
        assert!(said.contains("`/approve 0123456789ab`"), "{said}");
        assert!(said.contains("denied at 2026-12-05 10:10:00 UTC"), "{said}");
        assert!(said.ends_with("<!-- worksession-approval:agents/hello-12/0123456789ab -->"));
        let (ws, a) = request(Some((Decision::Allow, "github:mona")));
        let said = render(&ws, &a);
        assert!(said.contains("**Allowed** by ` github:mona `"), "{said}");
        assert!(!said.contains("/approve"), "{said}");
    }
}
