//! Smoke tests of the test control plane itself: the pinned version, CRDs from kube-rs, watch, and RBAC with a
//! non-admin identity. Everything else in `tests/` stands on these holding.

mod support;

use support::WAIT;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use support::{TestNamespace, eventually};

/// A throwaway resource, so these tests do not depend on the product's own CRDs.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(group = "smoke.worksession.dev", version = "v1", kind = "Gizmo", namespaced)]
struct GizmoSpec {
    size: u32,
}

#[tokio::test]
async fn apiserver_reports_the_pinned_version() {
    let client = support::admin_client().await;
    let pinned = std::process::Command::new(support::repo_root().join("scripts/testenv"))
        .arg("k8s-version")
        .output()
        .expect("scripts/testenv k8s-version");
    let pinned = String::from_utf8(pinned.stdout).unwrap();
    let info = client.apiserver_version().await.expect("GET /version");
    assert_eq!(info.git_version, pinned.trim());
    assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", "36"), "k8s-openapi is built for v1_36");
}

async fn install_gizmo_crd(client: kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let crd = Gizmo::crd();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {} // another test of this binary made it
        Err(e) => panic!("create CRD: {e}"),
    }
    let name = crd.name_any();
    let established = await_condition(crds, &name, conditions::is_crd_established());
    tokio::time::timeout(WAIT, established).await.expect("CRD Established in time").unwrap();
}

#[tokio::test]
async fn crd_from_rust_is_established_and_serves_create_list_watch_delete() {
    let ns = TestNamespace::new().await;
    install_gizmo_crd(ns.client.clone()).await;
    let gizmos: Api<Gizmo> = ns.api();

    // The CRD's endpoint can lag Established by a moment: wait until a list answers.
    let list = eventually("gizmo list to be served", || async { gizmos.list(&ListParams::default()).await.ok() }).await;
    assert!(list.items.is_empty());

    let rv = list.metadata.resource_version.expect("list resourceVersion");
    let mut watch =
        gizmos.watch(&WatchParams::default().timeout(WAIT.as_secs() as u32 + 60), &rv).await.unwrap().boxed();

    let created = gizmos.create(&PostParams::default(), &Gizmo::new("one", GizmoSpec { size: 3 })).await.unwrap();
    assert_eq!(created.spec.size, 3);
    let names: Vec<_> = gizmos.list(&ListParams::default()).await.unwrap().iter().map(|g| g.name_any()).collect();
    assert_eq!(names, ["one"]);

    gizmos.delete("one", &DeleteParams::default()).await.unwrap();

    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = tokio::time::timeout(WAIT, watch.try_next()).await.expect("watch event in time").unwrap();
        match event.expect("watch stream open") {
            WatchEvent::Added(g) => seen.push(format!("added {}", g.name_any())),
            WatchEvent::Deleted(g) => seen.push(format!("deleted {}", g.name_any())),
            WatchEvent::Error(e) => panic!("watch error: {e:?}"),
            _ => {}
        }
    }
    assert_eq!(seen, ["added one", "deleted one"]);
}

#[tokio::test]
async fn non_admin_identity_is_refused_until_rbac_allows_it() {
    let ns = TestNamespace::new().await;
    let user = format!("smoke-{}", ns.name);
    let limited = support::client_for(&support::kubeconfig_for(&user, &["smoke-testers"])).await;
    let limited_cms: Api<ConfigMap> = Api::namespaced(limited, &ns.name);

    match limited_cms.list(&ListParams::default()).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403, "refused without RBAC: {e:?}"),
        other => panic!("expected 403 before RBAC, got {other:?}"),
    }

    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "read-configmaps"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
    }))
    .unwrap();
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "read-configmaps"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-configmaps"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    ns.api::<Role>().create(&PostParams::default(), &role).await.unwrap();
    ns.api::<RoleBinding>().create(&PostParams::default(), &binding).await.unwrap();

    // The RBAC authorizer reads from an informer: the grant takes effect a moment after the write.
    let allowed =
        eventually("RBAC grant to take effect", || async { limited_cms.list(&ListParams::default()).await.ok() }).await;
    assert!(allowed.items.iter().all(|cm| cm.namespace().as_deref() == Some(ns.name.as_str())));

    // Still least privilege: the Role grants reads, not writes.
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "nope"}})).unwrap();
    match limited_cms.create(&PostParams::default(), &cm).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403),
        other => panic!("expected 403 for create, got {other:?}"),
    }
}
