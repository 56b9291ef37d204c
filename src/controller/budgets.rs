//! The namespaces' budgets summed, beside the pipeline: each WorkBudget's status is what the WorkSessions of its
//! namespace spent (their `status.usage` summed by [`crate::api::spent`]), which every agent's decisions about those
//! sessions weigh. Woken by a budget's change and by any change of a session in a namespace that has one; written
//! only when the sum changed, and only from a complete cache of the sessions: a sum of half of them would let paused
//! sessions go on.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::api::{WorkBudget, WorkSession, spent_in};

/// The field manager of a WorkBudget's status.
pub const FIELD_MANAGER: &str = "worksession-budgets";
/// Requeue after a failed write.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(5);

/// What every pass shares: the client and every WorkSession as last seen.
struct Summer {
    client: Client,
    sessions: reflector::Store<WorkSession>,
}

/// Keeps the sum of every WorkBudget (of `namespace` alone, if one is given) until the process is asked to stop.
pub async fn run(client: Client, namespace: Option<String>) {
    let (sessions, writer) = reflector::store();
    let (session_api, budget_api): (Api<WorkSession>, Api<WorkBudget>) = match &namespace {
        Some(ns) => (Api::namespaced(client.clone(), ns), Api::namespaced(client.clone(), ns)),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let watched = watcher(session_api, watcher::Config::default());
    let changes = reflector(writer, watched.modify(crate::api::slim)).default_backoff().touched_objects();
    let controller = Controller::new(budget_api, watcher::Config::default());
    let budgets = controller.store();
    // A session's change concerns the budgets of its namespace, and none where there is none.
    let controller = controller.watches_stream(changes, move |ws: WorkSession| {
        let namespace = ws.namespace();
        let of_it = budgets.state().into_iter().filter(|b| b.namespace() == namespace);
        of_it.map(|b| ObjectRef::from_obj(b.as_ref())).collect::<Vec<_>>()
    });
    // The sessions' watch is driven by the controller's stream: `sum` waits for its first listing.
    let summer = Arc::new(Summer { client, sessions });
    tracing::info!(event = "budgets.started", "summing what each namespace with a WorkBudget spent");
    controller.shutdown_on_signal().run(sum, error_policy, summer).for_each(|_| async {}).await;
}

async fn sum(budget: Arc<WorkBudget>, ctx: Arc<Summer>) -> Result<Action, kube::Error> {
    // Until every session was listed once: a partial sum must never be written.
    if ctx.sessions.wait_until_ready().await.is_err() {
        return Ok(Action::requeue(ERROR_REQUEUE));
    }
    let namespace = budget.namespace();
    let sum = spent_in(namespace.as_deref(), ctx.sessions.state().iter().map(AsRef::as_ref));
    if budget.status.as_ref() == Some(&sum) {
        return Ok(Action::await_change());
    }
    let api: Api<WorkBudget> = Api::namespaced(ctx.client.clone(), namespace.as_deref().unwrap_or_default());
    let patch = json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkBudget", "status": sum});
    api.patch_status(&budget.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)).await?;
    Ok(Action::await_change())
}

fn error_policy(budget: Arc<WorkBudget>, error: &kube::Error, _: Arc<Summer>) -> Action {
    tracing::warn!(event = "budgets.write_failed", budget = %crate::api::identity(budget.as_ref()), error = %error,
        "cannot write what the namespace spent");
    Action::requeue(ERROR_REQUEUE)
}
