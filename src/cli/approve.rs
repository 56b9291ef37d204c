//! `worksession approve` and `worksession deny`: a person's answer to a session's permission request, made as a
//! WorkEvent carrying `spec.answer` (who may make one is who may create WorkEvents, by RBAC; in local mode, whoever
//! may write the folder). The agent takes it only for the request it names while that one waits.

use crate::api::{Answer, Decision, WorkEvent, WorkEventSpec, WorkSession, answer_name};
use crate::store::Sink;

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
    let ws: WorkSession = sink
        .session(namespace, name, None)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("WorkSession {namespace}/{name} not found"))?;
    let approval = ws.status.as_ref().and_then(|s| s.approval.as_ref());
    let id = match (id, approval) {
        (Some(id), _) => id,
        (None, Some(a)) if a.waiting() => a.id.clone(),
        (None, Some(a)) => return Err(format!("{name}: no request waits (the last, {}, was answered)", a.id)),
        (None, None) => return Err(format!("{name}: its harness has asked for no permission")),
    };
    let what = match approval.filter(|a| a.id == id) {
        Some(a) if !a.waiting() => return Err(format!("{name}: request {id} was answered already ({:?})", a.by)),
        Some(a) => a.request.clone(),
        None => "a request not shown in the session's status".to_string(),
    };
    let mut event = WorkEvent::new(
        &answer_name(name, &id),
        WorkEventSpec {
            session: name.to_string(),
            answer: Some(Answer { request: id.clone(), decision, reason, by }),
            ..WorkEventSpec::default()
        },
    );
    event.metadata.namespace = Some(namespace.to_string());
    if let Some(problem) = event.spec.problem() {
        return Err(problem);
    }
    match sink.create_event(namespace, &event).await {
        Ok(true) => {
            let how = if decision == Decision::Allow { "approved" } else { "denied" };
            Ok(format!(
                "worksession/{name}: request {id} {how} ({what}); its status.approval says when the harness has it"
            ))
        }
        Ok(false) => {
            Err(format!("{name}: request {id} was answered already (WorkEvent {})", event.metadata.name.unwrap()))
        }
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
