//! A person's answer from GitHub, for the GitHub handler: a comment `/approve <id>` or `/deny <id> [reason]` on the
//! work item's issue or pull request becomes a WorkEvent carrying `spec.answer` (never a prompt), from a person whose
//! role may answer, for the request of that id while it waits; anything else answers nothing.

use axum::response::Response;

use super::github::{Answering, Subject};
use super::{ApiError, Bridge, config};
use crate::api::{Answer, EventSource, WorkEvent, WorkEventSpec, answer_name};
use crate::store::Sink;

/// Writes the answer of `subject`'s comment to the work item's waiting request, or says why it answers nothing.
pub async fn take<S: Sink>(
    bridge: &Bridge<S>,
    route: &config::Route,
    subject: &Subject,
    work_item: &str,
    answering: Result<Answering, &'static str>,
    source: EventSource,
) -> Result<Response, ApiError> {
    let answering = match answering {
        Ok(a) => a,
        Err(why) => return Ok(bridge.ignored("answer", why.into())),
    };
    let Some(gh) = bridge.config.borrow().github.clone() else { return Err(ApiError::NotFound("no GitHub".into())) };
    // A bot has no role to check, and is never a person's answer.
    if subject.sender_bot || subject.sender.ends_with("[bot]") {
        return Ok(bridge.ignored("approver", format!("{} is a bot: only a person answers", subject.sender)));
    }
    let prompters = route.allowed_author_associations.as_ref().unwrap_or(&gh.allowed_author_associations);
    let approvers: Vec<&String> =
        prompters.iter().filter(|role| gh.approvers.as_ref().is_none_or(|a| a.contains(role))).collect();
    let association = subject.association.as_deref().unwrap_or("NONE");
    if !approvers.iter().any(|a| *a == association) {
        let roles: Vec<&str> = approvers.iter().map(|a| a.as_str()).collect();
        let why = format!(
            "{} is {association} of {}; only {} may answer a permission request",
            subject.sender,
            subject.repository,
            if roles.is_empty() { "no role".to_string() } else { roles.join(", ") }
        );
        return Ok(bridge.ignored("approver", why));
    }
    let namespace = route.namespace.as_str();
    let Some(ws) = bridge.sink.session(namespace, work_item, None).await? else {
        return Ok(bridge.ignored("no_session", format!("work item {work_item} has no WorkSession in {namespace}")));
    };
    // A work item of the same name made for another repository routed here: not this repository's to answer.
    if !super::belongs(&ws, &subject.repository) {
        let why = format!("work item {work_item} is not {}'s", subject.repository);
        return Ok(bridge.ignored("not_its_branch", why));
    }
    // Only the request waiting now: an old id (a replayed comment, an answer given already) answers nothing.
    let waiting = ws.status.as_ref().and_then(|s| s.approval.as_ref()).filter(|a| a.waiting());
    if waiting.is_none_or(|a| a.id != answering.request) {
        let now = waiting.map_or("none waits".to_string(), |a| format!("request {} waits", a.id));
        let why = format!("no request {} of {work_item} waits for an answer ({now})", answering.request);
        return Ok(bridge.ignored("answer", why));
    }
    let answer = Answer {
        request: answering.request.clone(),
        decision: answering.decision,
        reason: answering.reason,
        by: Some(format!("github:{}", subject.sender)),
    };
    let spec = WorkEventSpec {
        session: work_item.to_string(),
        answer: Some(answer),
        source: Some(source),
        ..Default::default()
    };
    let mut event = WorkEvent::new(&answer_name(work_item, &answering.request), spec);
    event.metadata.labels = Some([(config::ROUTE_LABEL.to_string(), route.id.clone())].into());
    bridge.deliver(namespace, work_item, None, event).await
}

#[cfg(test)]
mod tests {
    use super::super::github::{Ask, answering, parse};
    use crate::api::Decision;

    #[test]
    fn only_a_comment_whose_first_word_is_approve_or_deny_is_an_answer_and_it_names_its_request() {
        let a = answering("/approve 0123456789ab").unwrap().unwrap();
        assert_eq!((a.request.as_str(), a.decision, a.reason), ("0123456789ab", Decision::Allow, None));
        let d = answering("  /deny 0123456789ab not on\nmain\u{1b}[2J").unwrap().unwrap();
        assert_eq!((d.decision, d.reason.as_deref()), (Decision::Deny, Some("not on main [2J")));
        for not_one in ["please /approve 0123456789ab", "/approved 0123456789ab", "", "approve 0123456789ab"] {
            assert_eq!(answering(not_one), None, "{not_one:?} is a prompt, not an answer");
        }
        for unreadable in ["/approve", "/approve now", "/approve 0123456789AB", "/deny --namespace=x"] {
            assert!(answering(unreadable).unwrap().is_err(), "{unreadable:?} names no request");
        }
    }

    #[test]
    fn an_answer_is_never_a_prompt_whatever_carries_it_and_an_edit_answers_nothing() {
        let payload = |kind: &str, action: &str| {
            let mut p = serde_json::json!({"action": action, "repository": {"full_name": "o/r"},
                "sender": {"login": "mona"}, "issue": {"number": 1}});
            let body = serde_json::json!({"body": "/approve 0123456789ab", "author_association": "MEMBER"});
            p[if kind == "pull_request_review" { "review" } else { "comment" }] = body;
            p
        };
        for (kind, action) in [
            ("issue_comment", "created"),
            ("pull_request_review_comment", "created"),
            ("pull_request_review", "submitted"),
        ] {
            let ask = parse(kind, &payload(kind, action)).unwrap().ask;
            assert!(matches!(ask, Ask::Answer(Ok(_))), "{kind} {action}: {ask:?}");
        }
        let edited = parse("issue_comment", &payload("issue_comment", "edited")).unwrap().ask;
        assert!(matches!(edited, Ask::Answer(Err(_))), "an edit: {edited:?}");
    }
}
