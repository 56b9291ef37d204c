//! `worksession move`: a move asked for in the session's annotation; the agent and the controller do the rest.

use crate::api::{ANY_NODE, MOVE_REQUEST_ANNOTATION, WorkSession};

/// Asks for the move of the WorkSession `namespace/name` to the node `to` (default: any the controller chooses);
/// what was asked, or why not.
pub async fn move_session(
    client: kube::Client,
    namespace: &str,
    name: &str,
    to: Option<String>,
) -> Result<String, String> {
    let api: kube::Api<WorkSession> = kube::Api::namespaced(client, namespace);
    let ws = api.get(name).await.map_err(|e| e.to_string())?;
    if ws.spec.node_name.is_none() {
        return Err(format!("{name} is not placed yet: set spec.nodeName instead"));
    }
    if to.is_some() && to == ws.spec.node_name {
        return Err(format!("{name} is on {} already", to.unwrap_or_default()));
    }
    let target = to.clone().unwrap_or_else(|| ANY_NODE.to_string());
    let patch = serde_json::json!({"metadata": {"annotations": {MOVE_REQUEST_ANNOTATION: target}}});
    let params = kube::api::PatchParams { field_manager: Some("worksession-move".into()), ..Default::default() };
    api.patch(name, &params, &kube::api::Patch::Merge(&patch)).await.map_err(|e| e.to_string())?;
    let whither = to.map_or("a node the controller chooses".to_string(), |n| format!("node {n}"));
    Ok(format!(
        "worksession/{name}: a move to {whither} asked for; it moves once the node fits and no prompt is being \
         delivered (its Placed condition says why while it cannot)"
    ))
}
