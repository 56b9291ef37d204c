//! The generated CRDs: in sync with `crds/`, accepted by the real API server, and enforcing their schema there.

mod support;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::{TestNamespace, eventually};

fn dynamic<K: kube::Resource<DynamicType = ()>>(ns: &TestNamespace) -> Api<DynamicObject> {
    Api::namespaced_with(ns.client.clone(), &ns.name, &ApiResource::erase::<K>(&()))
}
use worksession::api::{WorkEvent, WorkSession};

#[test]
fn crds_folder_is_the_generated_output() {
    let on_disk = std::fs::read_to_string(support::repo_root().join("crds/worksession.dev.yaml")).unwrap();
    assert!(
        on_disk == worksession::api::crds_yaml(),
        "crds/worksession.dev.yaml is stale: run `cargo run -- crd > crds/worksession.dev.yaml`"
    );
}

/// An untyped WorkSession, so that invalid specs can be sent at all.
fn session(name: &str, spec: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "worksession.dev/v1alpha1", "kind": "WorkSession",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

fn valid_spec() -> serde_json::Value {
    json!({"workItem": "repo-12", "nodeName": "node-a", "harness": "claude", "workdir": "/srv/work/repo"})
}

#[tokio::test]
async fn established_and_served_with_defaults_status_and_selectable_node() {
    let ns = TestNamespace::new().await;
    support::install_crds(ns.client.clone()).await;
    let sessions: Api<WorkSession> = ns.api();
    eventually("worksessions served", || async { sessions.list(&ListParams::default()).await.ok() }).await;

    dynamic::<WorkSession>(&ns).create(&PostParams::default(), &session("a", valid_spec())).await.unwrap();
    let created = sessions.get("a").await.unwrap();
    assert_eq!(created.spec.restart_policy, worksession::api::RestartPolicy::OnEvent, "defaulted");
    assert!(!created.spec.suspend);
    let mut other = valid_spec();
    other["nodeName"] = json!("node-b");
    dynamic::<WorkSession>(&ns).create(&PostParams::default(), &session("b", other)).await.unwrap();

    let mine = sessions.list(&ListParams::default().fields("spec.nodeName=node-a")).await.unwrap();
    assert_eq!(mine.iter().map(|s| s.name_any()).collect::<Vec<_>>(), ["a"]);

    // Status is a subresource: written through /status, ignored on the main resource.
    let status = json!({"status": {"phase": "Running", "harnessSessionId": "abc"}});
    sessions.patch_status("a", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let spec_patch = json!({"status": {"phase": "Failed"}});
    let after = sessions.patch("a", &PatchParams::default(), &Patch::Merge(&spec_patch)).await.unwrap();
    assert_eq!(after.status.unwrap().phase, Some(worksession::api::Phase::Running));

    let crds: Api<CustomResourceDefinition> = Api::all(ns.client.clone());
    let crd = crds.get("worksessions.worksession.dev").await.unwrap();
    assert_eq!(crd.spec.names.short_names, Some(vec!["ws".to_string()]));
    let columns: Vec<String> =
        crd.spec.versions[0].additional_printer_columns.iter().flatten().map(|c| c.name.clone()).collect();
    let want = ["Node", "Harness", "Phase", "Activity", "Resumed", "Session id", "PR", "CI", "Tokens", "Cost", "Age"];
    assert_eq!(columns, want);
}

#[tokio::test]
async fn schema_rejects_what_it_forbids() {
    let ns = TestNamespace::new().await;
    support::install_crds(ns.client.clone()).await;
    let sessions = dynamic::<WorkSession>(&ns);
    eventually("worksessions served", || async { sessions.list(&ListParams::default()).await.ok() }).await;

    let with = |key: &str, value: serde_json::Value| {
        let mut spec = valid_spec();
        spec[key] = value;
        spec
    };
    let mut missing_work_item = valid_spec();
    missing_work_item.as_object_mut().unwrap().remove("workItem");
    let cases = [
        ("dash-led id", with("harnessSessionId", json!("--dangerously-skip-permissions")), "harnessSessionId"),
        ("id too long", with("harnessSessionId", json!("a".repeat(129))), "harnessSessionId"),
        ("missing workItem", missing_work_item, "workItem"),
        ("workItem not a DNS label", with("workItem", json!("Repo_12")), "workItem"),
        ("probe out of range", with("resume", json!({"probeSeconds": 301})), "probeSeconds"),
        ("settle out of range", with("resume", json!({"settleSeconds": -1})), "settleSeconds"),
        ("handoff budget out of range", with("handoff", json!({"maxCharacters": 100})), "maxCharacters"),
        ("relative workdir", with("workdir", json!("srv/work")), "workdir"),
        ("a tmux format in the workdir", with("workdir", json!("/tmp/x/#(touch /tmp/pwned)")), "workdir"),
        // What a prefix check of the workdir sees is what the kernel resolves.
        ("a '..' in the workdir", with("workdir", json!("/srv/work/x/../../run")), "segment"),
        ("unknown restartPolicy", with("restartPolicy", json!("Sometimes")), "restartPolicy"),
        // A credential never rides in a workspace URL.
        ("a token in the URL", with("workspace", json!({"url": "https://ghp_x@github.com/o/r.git"})), "user info"),
        ("a password in an ssh URL", with("workspace", json!({"url": "ssh://git:pw@host/r.git"})), "user info"),
        // An egress host is a lowercase name or address with a port of 1 to 65535, at most 64 of them.
        ("an egress host in capitals", with("egress", json!({"hosts": ["API.example.com"]})), "egress.hosts"),
        ("an egress port past 65535", with("egress", json!({"hosts": ["example.com:65536"]})), "egress.hosts"),
        ("65 egress hosts", with("egress", json!({"hosts": vec!["example.com"; 65]})), "egress.hosts"),
        // A budget is at least one token, and dollars as a decimal.
        ("a budget of no tokens", with("budget", json!({"tokens": 0})), "budget.tokens"),
        ("a budget in words", with("budget", json!({"cost": "5 dollars"})), "budget.cost"),
    ];
    for (i, (what, spec, field)) in cases.into_iter().enumerate() {
        match sessions.create(&PostParams::default(), &session(&format!("bad-{i}"), spec)).await {
            Err(kube::Error::Api(e)) => {
                assert_eq!(e.code, 422, "{what}: {e:?}");
                assert!(e.message.contains(field), "{what}: message names {field}: {}", e.message);
            }
            other => panic!("{what}: expected 422, got {other:?}"),
        }
    }
    // At the limits: accepted.
    let limits = with("harnessSessionId", json!(format!("A{}", "b".repeat(127))));
    let mut limits = limits;
    limits["resume"] = json!({"probeSeconds": 0, "settleSeconds": 3600});
    limits["workItem"] = json!("a".repeat(63));
    limits["egress"] = json!({"hosts": vec!["*.example.com:65535"; 64]});
    limits["budget"] = json!({"tokens": 1, "cost": "123456789.123456"});
    sessions.create(&PostParams::default(), &session("limits", limits)).await.unwrap();
    // Moving a session to another work item would run its conversation twice (its harness runs on while
    // another resumes it): it is fixed at creation. Nor may its workdir move (with rooms it is handed to the
    // session's own user). Its node may change (a move), but once placed it is never unset.
    for (field, value) in [("workItem", "other-item"), ("workdir", "/srv/elsewhere")] {
        let changed = json!({"spec": {field: value}});
        match sessions.patch("limits", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&changed)).await {
            Err(kube::Error::Api(e)) => {
                assert_eq!(e.code, 422, "{e:?}");
                assert!(e.message.contains(&format!("{field} is immutable")), "{}", e.message);
            }
            other => panic!("changing {field}: expected 422, got {other:?}"),
        }
    }
    let unset = json!({"spec": {"nodeName": null}});
    match sessions.patch("limits", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&unset)).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            assert!(e.message.contains("nodeName cannot be unset once placed"), "{}", e.message);
        }
        other => panic!("unsetting nodeName: expected 422, got {other:?}"),
    }
    let mut unplaced = valid_spec();
    unplaced.as_object_mut().unwrap().remove("nodeName");
    let unplaced = session("unplaced", unplaced);
    sessions
        .create(&PostParams::default(), &unplaced)
        .await
        .expect("a session without a node: the controller places it");
    // A WorkSession's name is a DNS label (the API server alone allows a subdomain); an ssh user name is no secret.
    let dotted = sessions.create(&PostParams::default(), &session("a.b", valid_spec())).await.unwrap_err();
    assert!(matches!(&dotted, kube::Error::Api(e) if e.code == 422 && e.message.contains("DNS label")), "{dotted:?}");
    let ssh = with("workspace", json!({"url": "ssh://git@github.com/o/r.git"}));
    sessions.create(&PostParams::default(), &session("ssh-user", ssh)).await.unwrap();

    let events = dynamic::<WorkEvent>(&ns);
    let event = |spec: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkEvent", "metadata": {"generateName": "e-"}, "spec": spec})).unwrap()
    };
    let err = events.create(&PostParams::default(), &event(json!({"session": "limits"}))).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(e) if e.code == 422 && e.message.contains("prompt")), "{err:?}");
    let bad_source = json!({"session": "limits", "prompt": "hi", "source": {"type": "email"}});
    assert!(events.create(&PostParams::default(), &event(bad_source)).await.is_err());
    // An answer instead of a prompt: one of the two, naming a request by its id's shape; local mode says the same.
    let answer = json!({"request": "0123456789ab", "decision": "Allow"});
    let refused = [
        ("both", json!({"session": "limits", "prompt": "hi", "answer": answer}), "prompt or an answer"),
        ("an odd id", json!({"session": "limits", "answer": {"request": "1; rm", "decision": "Allow"}}), "request"),
        ("no decision", json!({"session": "limits", "answer": {"request": "0123456789ab"}}), "decision"),
    ];
    for (what, spec, said) in refused {
        let err = events.create(&PostParams::default(), &event(spec.clone())).await.unwrap_err();
        assert!(matches!(&err, kube::Error::Api(e) if e.code == 422 && e.message.contains(said)), "{what}: {err:?}");
        let local: Result<worksession::api::WorkEventSpec, _> = serde_json::from_value(spec);
        assert!(local.map_or(true, |spec| spec.problem().is_some()), "{what}: local mode refuses it too");
    }
    let answered = json!({"session": "limits", "answer": answer});
    events.create(&PostParams::default(), &event(answered.clone())).await.unwrap();
    assert_eq!(serde_json::from_value::<worksession::api::WorkEventSpec>(answered).unwrap().problem(), None);
    let ok = events.create(&PostParams::default(), &event(json!({"session": "limits", "prompt": "hi"}))).await.unwrap();
    let typed: Api<WorkEvent> = ns.api();
    assert_eq!(typed.get(&ok.name_any()).await.unwrap().spec.prompt, "hi");
}

/// The CRDs' schemas print no warning when the API server takes them (`kubectl apply -f crds/` printed
/// `Warning: unrecognized format "uint32"`). Each CRD is created under another name with `--dry-run=server`, so the
/// schema is checked as on a first install, whatever this control plane already holds.
#[test]
fn applying_the_crds_prints_no_warning() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let yaml = std::fs::read_to_string(support::repo_root().join("crds/worksession.dev.yaml")).unwrap();
    for doc in yaml.split("\n---\n") {
        let mut crd: CustomResourceDefinition = serde_yaml_ng::from_str(doc).unwrap();
        let names = &mut crd.spec.names;
        names.plural = format!("{}probes", names.plural);
        names.kind = format!("{}Probe", names.kind);
        names.singular = names.singular.as_ref().map(|s| format!("{s}probe"));
        names.list_kind = Some(format!("{}List", names.kind));
        names.short_names = None;
        crd.metadata.name = Some(format!("{}.{}", names.plural, crd.spec.group));
        let mut child = support::tool("kubectl")
            .args(["create", "--dry-run=server", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(serde_yaml_ng::to_string(&crd).unwrap().as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{stdout}{stderr}");
        assert!(!stderr.contains("Warning"), "{stderr}");
    }
}
