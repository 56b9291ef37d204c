//! The console as a person uses it, in headless Chromium (Debian's `chromium` over `chromium-driver`):
//! against local mode (the real agent on a directory, real tmux, the stand-in) and against the test control plane
//! (the real agent on its API server). What a person sees is read through the DOM: the session list, a phase
//! change that appears without a reload, a session's page with the stand-in's ready prompt on its screen, its
//! WorkEvents and its Kubernetes Events; and a hostile prompt shown on the screen stays text. A permission request is
//! shown on its session's page and approved with its button. Screenshots of the two
//! pages go to `target/console/` (and to `docs/` with `WORKSESSION_CONSOLE_SHOTS=docs`).

mod browser;
mod scenarios;
mod standin;
mod support;
mod world;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use browser::Browser;
use serde_json::{Value, json};
use standin::TmuxServer;
use support::eventually;
use worksession::api::{Phase, PromptPhase};
use worksession::config::Config;
use worksession::console;

/// The console's token in these tests.
const TOKEN: &str = "console-test-token";

/// Serves the console's router for `source` on a free loopback port.
async fn serve<S: worksession::cli::read::Source>(source: S) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = console::router(source, console::hosts_for(addr), TOKEN.into());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The text of cell `column` of the list's row for `namespace/name` (`null` while there is none).
async fn cell(b: &Browser, session: &str, column: usize) -> Value {
    let script = format!(
        "const r = document.querySelector('tr[data-session=\"{session}\"]'); return r ? r.children[{column}].textContent : null;"
    );
    b.script(&script).await
}

async fn await_cell(b: &Browser, session: &str, column: usize, want: &str) {
    eventually(&format!("{session}: column {column} shows {want}"), || async {
        (cell(b, session, column).await == json!(want)).then_some(())
    })
    .await;
}

/// Where screenshots go.
fn shots() -> PathBuf {
    match std::env::var("WORKSESSION_CONSOLE_SHOTS").ok().as_deref() {
        Some("docs") => support::repo_root().join("docs"),
        _ => {
            let dir = support::repo_root().join("target/console");
            std::fs::create_dir_all(&dir).unwrap();
            dir
        }
    }
}

fn png(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000
}

/// The agent in local mode on the manifests of `dir`, with `config`.
fn local_agent(dir: &Path, config: &Config) -> tokio::task::JoinHandle<()> {
    let (dir, config) = (dir.to_path_buf(), Arc::new(config.clone()));
    tokio::spawn(async move {
        let store = worksession::store::local::LocalStore::watching(dir).unwrap();
        let options = worksession::agent::AgentOptions {
            config: tokio::sync::watch::channel(config).1,
            admin_addr: None,
            admin_listening: None,
            failpoint: None,
        };
        worksession::agent::run_on_changes(store, options).await.unwrap();
    })
}

fn write(dir: &Path, name: &str, text: &str) {
    // Written whole and renamed into place, as an editor does, so one notification names it.
    std::fs::write(dir.join(format!("{name}.tmp")), text).unwrap();
    std::fs::rename(dir.join(format!("{name}.tmp")), dir.join(format!("{name}.yaml"))).unwrap();
}

#[tokio::test]
async fn in_local_mode_a_person_sees_the_list_a_live_phase_change_and_the_screen() {
    let tmux = TmuxServer::new();
    let dir = tmux.dir.path().join("manifests");
    std::fs::create_dir_all(&dir).unwrap();
    // Beside the stand-in, a hostile harness: it prints markup, in red, where a person will look.
    let hostile = "  hostile:\n    binary: /bin/sh\n    interactive: ['-c', 'printf \"\\033[31m<img src=x onerror=document.title=1>\\033[0m\\nready>\\n\"; exec sleep 3600', sh, '{prompt}']\n";
    let yaml = tmux.agent_config_yaml() + hostile;
    let config = Config::parse(&yaml, Path::new("local.yaml")).unwrap();
    let agent = local_agent(&dir, &config);
    let session = |suspend: bool| {
        format!(
            "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {{name: fix-parser}}\nspec: {{workItem: fix-parser, harness: standin, workdir: {}, suspend: {suspend}, initialPrompt: 'Read issue 12 and propose a plan.'}}\n",
            tmux.workdir().display()
        )
    };
    write(&dir, "fix-parser", &session(false));
    let store = worksession::store::local::LocalStore::watching(dir.clone()).unwrap();
    let addr = serve(worksession::cli::read::Local::new(store, config)).await;
    let b = Browser::start().await;

    b.open(&format!("http://{addr}/?token={TOKEN}")).await; // as the console prints it; a cookie after
    await_cell(&b, "default/fix-parser", 2, "Running").await;
    assert_eq!(b.text("h1").await, json!("worksession"), "a real heading");
    assert_eq!(b.script("return document.querySelector('label[for=namespace]').textContent").await, json!("Namespace"));
    write(
        &dir,
        "fix-parser-1",
        "apiVersion: worksession.dev/v1alpha1\nkind: WorkEvent\nmetadata: {name: fix-parser-1}\nspec: {session: fix-parser, prompt: 'Also add a test, please.', source: {type: github, url: 'https://github.com/octo/repo/issues/12#issuecomment-1'}}\n",
    );
    write(
        &dir,
        "hostile",
        &format!(
            "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {{name: hostile}}\nspec: {{workItem: hostile, harness: hostile, workdir: {}}}\n",
            tmux.workdir().display()
        ),
    );
    await_cell(&b, "default/hostile", 2, "Running").await;
    assert_eq!(cell(&b, "default/fix-parser", 10).await, json!(""), "a first start is no failure");
    let list = b.screenshot().await;
    assert!(png(&list));
    std::fs::write(shots().join("console-list.png"), &list).unwrap();

    b.open(&format!("http://{addr}/sessions/default/fix-parser")).await;
    eventually("the screen shows the stand-in's ready prompt", || async {
        b.text("#screen").await.as_str().unwrap_or_default().contains("ready>").then_some(())
    })
    .await;
    eventually("the WorkEvent Delivered, linked to its comment", || async {
        let phase = b.text("tr[data-event=\"fix-parser-1\"] td:nth-child(3)").await;
        let link = b
            .script("const a = document.querySelector('tr[data-event=\"fix-parser-1\"] a'); return a ? a.href : null")
            .await;
        (phase == json!("Delivered") && link == json!("https://github.com/octo/repo/issues/12#issuecomment-1"))
            .then_some(())
    })
    .await;
    assert!(b.text("#conditions tbody").await.as_str().unwrap().contains("Ready"), "its conditions");
    assert_ne!(b.script("return document.title").await, json!("1"), "no markup ran");
    let page = b.screenshot().await;
    assert!(png(&page));
    std::fs::write(shots().join("console-session.png"), &page).unwrap();

    // The hostile harness's screen: its markup is text, in its red, and nothing of it runs.
    b.open(&format!("http://{addr}/sessions/default/hostile")).await;
    eventually("the hostile screen shown as text", || async {
        b.text("#screen")
            .await
            .as_str()
            .unwrap_or_default()
            .contains("<img src=x onerror=document.title=1>")
            .then_some(())
    })
    .await;
    assert_eq!(b.script("return document.querySelectorAll('img').length").await, json!(0), "no element made");
    let red = b.script("return [...document.querySelectorAll('#screen span')].find(s => s.textContent.includes('<img')).style.color").await;
    assert_eq!(red, json!("rgb(205, 0, 0)"), "its colour kept");
    assert_ne!(b.script("return document.title").await, json!("1"), "no script ran");

    // Back to the list, marked: the phase change arrives by the watch, with no reload (the mark survives).
    b.open(&format!("http://{addr}/")).await;
    await_cell(&b, "default/fix-parser", 2, "Running").await;
    b.script("window.kept = 'this page'; return null").await;
    write(&dir, "fix-parser", &session(true));
    await_cell(&b, "default/fix-parser", 2, "Suspended").await;
    assert_eq!(b.script("return window.kept || null").await, json!("this page"), "no reload");
    agent.abort();
}

/// A permission request (the stand-in asking as Claude Code does, `standin-hooks`) on its session's page: its full
/// text, approved with the page's button as the console's user, and the command runs; the page then says who allowed
/// it, and the form is gone. A screenshot goes with the others (`console-approval.png`).
#[tokio::test]
async fn in_local_mode_a_person_approves_a_permission_request_on_its_page() {
    let tmux = TmuxServer::new();
    let dir = tmux.dir.path().join("manifests");
    std::fs::create_dir_all(&dir).unwrap();
    let config = Config::parse(&tmux.agent_config_yaml(), Path::new("local.yaml")).unwrap();
    let agent = local_agent(&dir, &config);
    let made = tmux.state().join("made-by-approval");
    write(
        &dir,
        "asker",
        &format!(
            "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {{name: asker}}\nspec: {{workItem: asker, harness: standin-hooks, workdir: {}, initialPrompt: 'PERMIT touch {}'}}\n",
            tmux.workdir().display(),
            made.display()
        ),
    );
    let store = worksession::store::local::LocalStore::watching(dir.clone()).unwrap();
    let addr = serve(worksession::cli::read::Local::new(store, config)).await;
    let b = Browser::start().await;
    b.open(&format!("http://{addr}/?token={TOKEN}")).await;
    b.open(&format!("http://{addr}/sessions/default/asker")).await;
    eventually("the request on the page", || async {
        let shown = b.text("#approval-request").await;
        shown.as_str().is_some_and(|t| t.contains(&format!("Bash: touch {}", made.display()))).then_some(())
    })
    .await;
    assert_eq!(b.script("return document.querySelector('#approval').hidden").await, json!(false));
    let page = b.screenshot().await;
    assert!(png(&page));
    std::fs::write(shots().join("console-approval.png"), &page).unwrap();
    assert!(!made.exists(), "nothing ran before the answer");
    // A new request's buttons wait a moment before they take a click (a person reads first).
    eventually("the Approve button ready", || async {
        (b.script("return document.querySelector('#approve').disabled").await == json!(false)).then_some(())
    })
    .await;
    b.script("document.querySelector('#approve').click(); return null").await;
    eventually("the command ran", || async { made.exists().then_some(()) }).await;
    eventually("the page says who allowed it", || async {
        let answer = b.text("#approval-answer").await;
        let said = answer.as_str().unwrap_or_default().to_string();
        said.starts_with("Allow · by ").then_some(())
    })
    .await;
    assert_eq!(b.script("return document.querySelector('#approval-form').hidden").await, json!(true));
    agent.abort();
}

#[tokio::test]
async fn on_the_test_control_plane_a_person_sees_the_list_a_live_phase_change_and_the_events() {
    let w = world::World::new().await;
    w.create_session("api-review", json!({"harness": "standin", "initialPrompt": "Review the API."})).await;
    w.await_phase("api-review", Phase::Running).await;
    w.send("api-review", "api-review-1", "and the docs").await;
    w.await_event("api-review-1", PromptPhase::Delivered).await;
    let addr = serve(worksession::cli::read::Cluster::new(w.ns.client.clone(), Some(w.ns.name.clone()))).await;
    let b = Browser::start().await;
    let key = format!("{}/api-review", w.ns.name);

    b.open(&format!("http://{addr}/?token={TOKEN}")).await;
    await_cell(&b, &key, 2, "Running").await;
    assert!(cell(&b, &key, 4).await.as_str().unwrap().starts_with("False"), "Resumed: a first start is no resume");
    b.script("window.kept = 'this page'; return null").await;
    let patch = json!({"spec": {"suspend": true}});
    w.sessions()
        .patch("api-review", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
        .await
        .unwrap();
    await_cell(&b, &key, 2, "Suspended").await;
    assert_eq!(b.script("return window.kept || null").await, json!("this page"), "no reload");

    b.open(&format!("http://{addr}/sessions/{}/api-review", w.ns.name)).await;
    eventually("its WorkEvent and the agent's Kubernetes Events", || async {
        let event = b.text("tr[data-event=\"api-review-1\"] td:nth-child(3)").await;
        let kube_events = b.text("#kube-events tbody").await;
        (event == json!("Delivered") && kube_events.as_str().unwrap_or_default().contains("Started")).then_some(())
    })
    .await;
    // No agent pod here to exec into (the agent runs in the test): the screen says why, and the rest still shows.
    eventually("the screen says why it is not shown", || async {
        b.text("#screen").await.as_str().unwrap_or_default().starts_with("(no screen:").then_some(())
    })
    .await;
}

/// A screen (the console's, `peek`'s, `attach`'s) comes only from an agent pod of the release: labels alone are
/// anybody's. On one node of the test control plane: a tenant's pod with the agent's labels, a labelled pod in the
/// release's namespace that no DaemonSet made, and one that names the agent DaemonSet as its controller with another
/// uid are each passed over; the pod the agent DaemonSet made is found.
#[tokio::test]
async fn a_screen_comes_only_from_an_agent_pod_of_the_release() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::PostParams;
    use worksession::cli::terminal::agent_pod;
    let (release, tenant) = (support::TestNamespace::new().await, support::TestNamespace::new().await);
    let node = format!("node-{}", &release.name[8..]);
    let labels = json!({"app.kubernetes.io/name": "worksession", "app.kubernetes.io/component": "agent"});
    let pod = |name: &str, owner: Option<Value>| -> Pod {
        let owners: Vec<Value> = owner.into_iter().collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels, "ownerReferences": owners},
            "spec": {"nodeName": node, "containers": [{"name": "tmux", "image": "worksession:dev"}]},
        }))
        .unwrap()
    };
    let owner = |uid: &str| json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ws-agent", "uid": uid, "controller": true});
    let create = |ns: &support::TestNamespace, pod: Pod| {
        let pods = ns.api::<Pod>();
        async move { pods.create(&PostParams::default(), &pod).await.unwrap() }
    };
    let client = release.client.clone();

    create(&tenant, pod("agent-lookalike", None)).await;
    create(&release, pod("a-stray", None)).await;
    let err = agent_pod(&client, &release.name, &node).await.unwrap_err();
    assert!(err.contains("no worksession agent pod on node"), "{err}");

    let set: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "ws-agent", "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "tmux", "image": "x"}]}},
        },
    }))
    .unwrap();
    let set = release.api::<DaemonSet>().create(&PostParams::default(), &set).await.unwrap();
    create(&release, pod("b-forged", Some(owner("00000000-0000-0000-0000-000000000000")))).await;
    let err = agent_pod(&client, &release.name, &node).await.unwrap_err();
    assert!(err.contains("no worksession agent pod on node"), "a forged owner: {err}");

    create(&release, pod("c-agent", Some(owner(&set.metadata.uid.unwrap())))).await;
    assert_eq!(agent_pod(&client, &release.name, &node).await.unwrap(), "c-agent");
    let err = agent_pod(&client, &tenant.name, &node).await.unwrap_err();
    assert!(err.contains(&tenant.name), "only the release's namespace is looked in: {err}");
}
