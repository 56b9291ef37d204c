//! `worksession approve` and `worksession deny` (and the console's buttons): a person's answer to a session's
//! permission request, made as a WorkEvent carrying `spec.answer` (who may make one is who may create WorkEvents, by
//! RBAC; in local mode, whoever may write the folder). The agent takes it only for the request it names while that one
//! waits.

use crate::api::{Answer, Decision, WorkEvent, WorkEventSpec, WorkSession, answer_name};
use crate::store::Sink;

/// The answer WorkEvent to the request `id` (default: the one waiting) of `ws`, given by `by`, with what it answers
/// (for a person to read back), or why there is none to give.
pub fn answer_event(
    ws: &WorkSession,
    id: Option<String>,
    decision: Decision,
    reason: Option<String>,
    by: Option<String>,
) -> Result<(WorkEvent, String), String> {
    let name = ws.metadata.name.clone().unwrap_or_default();
    let approval = ws.status.as_ref().and_then(|s| s.approval.as_ref());
    let id = match (id, approval) {
        (Some(id), _) => id,
        (None, Some(a)) if a.waiting() => a.id.clone(),
        (None, Some(a)) => return Err(format!("{name}: no request waits (the last, {}, was answered)", a.id)),
        (None, None) => return Err(format!("{name}: its harness has asked for no permission")),
    };
    let what = match approval.filter(|a| a.id == id) {
        Some(a) if !a.waiting() => {
            return Err(format!("{name}: request {id} was answered already (by {})", a.by.as_deref().unwrap_or("?")));
        }
        Some(a) => a.request.clone(),
        None => "a request not shown in the session's status".to_string(),
    };
    let answer = Some(Answer { request: id.clone(), decision, reason, by });
    let mut event = WorkEvent::new(
        &answer_name(&name, &id),
        WorkEventSpec { session: name.clone(), answer, ..WorkEventSpec::default() },
    );
    event.metadata.namespace = ws.metadata.namespace.clone();
    if let Some(problem) = event.spec.problem() {
        return Err(problem);
    }
    Ok((event, what))
}

/// What a person is told of an answer made.
pub fn said(event: &WorkEvent, what: &str) -> String {
    let answer = event.spec.answer.as_ref().expect("an answer");
    let how = if answer.decision == Decision::Allow { "approved" } else { "denied" };
    format!(
        "worksession/{}: request {} {how} ({what}); its status.approval says when the harness has it",
        event.spec.session, answer.request
    )
}

/// What a person is told when the answer's WorkEvent was made before: the request is answered once.
pub fn made_before(event: &WorkEvent) -> String {
    let request = event.spec.answer.as_ref().map(|a| a.request.as_str()).unwrap_or_default();
    let name = event.metadata.name.as_deref().unwrap_or_default();
    format!("{}: request {request} was answered already (WorkEvent {name})", event.spec.session)
}

/// Answers the permission request `id` (default: the one waiting) of the WorkSession `namespace/name` with
/// `decision`, given by `by`; what was answered, or why nothing was.
pub async fn answer(
    sink: &impl Sink,
    (namespace, name): (&str, &str),
    id: Option<String>,
    decision: Decision,
    reason: Option<String>,
    by: Option<String>,
) -> Result<String, String> {
    let mut ws: WorkSession = sink
        .session(namespace, name, None)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("WorkSession {namespace}/{name} not found"))?;
    ws.metadata.namespace = Some(namespace.to_string());
    let (event, what) = answer_event(&ws, id, decision, reason, by)?;
    match sink.create_event(namespace, &event).await {
        Ok(true) => Ok(said(&event, &what)),
        Ok(false) => Err(made_before(&event)),
        Err(e) => Err(e.to_string()),
    }
}

/// The user the API server knows `client` as (a SelfSubjectReview), if it says.
pub async fn who_am_i(client: &kube::Client) -> Option<String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: kube::Api<SelfSubjectReview> = kube::Api::all(client.clone());
    let review = api.create(&kube::api::PostParams::default(), &SelfSubjectReview::default()).await.ok()?;
    review.status?.user_info?.username
}
