//! Local mode end to end: the agent on a directory of manifests, real tmux, the harness stand-in; the local
//! bridge writing events as files; `worksession get --local`.

mod standin;
mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use standin::{TmuxServer, await_until, seed_conversation, standin_binary};
use worksession::config::Config;
use worksession::tmux::{Liveness, Tmux};

struct Local {
    tmux: TmuxServer,
    dir: PathBuf,
    agent: tokio::task::JoinHandle<()>,
}

impl Local {
    fn new() -> Self {
        let tmux = TmuxServer::new();
        let dir = tmux.dir.path().join("manifests");
        std::fs::create_dir_all(&dir).unwrap();
        let yaml = format!(
            "tmux:\n  socket: {}\ndefaults:\n  resumeProbeSeconds: 1\nharnesses:\n  standin:\n    binary: {}\n    extraArgs: [--state, {}]\n    interactive: [--session-id, '{{sessionId}}', '{{extraArgs}}', '--', '{{prompt}}']\n    resume: [--resume, '{{sessionId}}', '{{extraArgs}}', '--', '{{prompt}}']\n    resumeFailedPattern: No conversation found\n",
            tmux.socket().display(),
            standin_binary().display(),
            tmux.state().display()
        );
        let config = Arc::new(Config::parse(&yaml, Path::new("local.yaml")).unwrap());
        let agent_dir = dir.clone();
        let agent = tokio::spawn(async move {
            worksession::agent::run_local(agent_dir, tokio::sync::watch::channel(config).1).await.unwrap();
        });
        Local { tmux, dir, agent }
    }

    fn session(&self, name: &str, extra: &str) {
        let text = format!(
            "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {{name: {name}}}\nspec:\n  workItem: {name}\n  nodeName: local\n  harness: standin\n  workdir: {}\n{extra}",
            self.tmux.workdir().display()
        );
        std::fs::write(self.dir.join(format!("{name}.yaml")), text).unwrap();
    }

    fn event(&self, session: &str, name: &str, prompt: &str) {
        let text = format!(
            "apiVersion: worksession.dev/v1alpha1\nkind: WorkEvent\nmetadata: {{name: {name}}}\nspec: {{session: {session}, prompt: {prompt:?}}}\n"
        );
        std::fs::write(self.dir.join(format!("{name}.yaml")), text).unwrap();
    }

    fn status(&self, name: &str) -> Value {
        let text = std::fs::read_to_string(self.dir.join(format!("{name}.status.yaml"))).unwrap_or_default();
        serde_yaml_ng::from_str::<Value>(&text).ok().and_then(|v| v.get("status").cloned()).unwrap_or(Value::Null)
    }

    async fn await_status(&self, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        let found = tokio::time::timeout(standin::WAIT, async {
            loop {
                last = self.status(name);
                if pred(&last) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(found.is_ok(), "{name}: {what}; last status: {last}");
        last
    }

    async fn kill(&self, name: &str) {
        let out = std::process::Command::new("tmux")
            .arg("-S")
            .arg(self.tmux.socket())
            .args(["list-panes", "-t", &format!("=loop-{name}:"), "-F", "#{pane_pid}"])
            .output()
            .unwrap();
        let pid = String::from_utf8(out.stdout).unwrap().trim().to_string();
        std::process::Command::new("kill").args(["-9", &pid]).status().unwrap();
        self.tmux.await_liveness(&format!("loop-{name}"), Liveness::Dead).await;
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        self.agent.abort();
    }
}

fn phase(v: &Value) -> &str {
    v["phase"].as_str().unwrap_or_default()
}

fn resumed_reason(v: &Value) -> String {
    v["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Resumed")
        .map(|c| c["reason"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn resume_then_fast_fallback_from_a_directory() {
    let l = Local::new();
    l.session("alpha", "  initialPrompt: hello\n");
    let st = l.await_status("alpha", "Running", |s| phase(s) == "Running").await;
    let id = st["harnessSessionId"].as_str().unwrap().to_string();

    l.kill("alpha").await;
    l.event("alpha", "alpha-1", "after the crash");
    let ev = l.await_status("alpha-1", "Delivered", |s| s["phase"] == "Delivered").await;
    assert_eq!((ev["via"].as_str(), ev["harnessSessionId"].as_str()), (Some("Resumed"), Some(id.as_str())));
    let prompts = l.tmux.await_prompts(2).await;
    assert_eq!((prompts[1].conversation.as_str(), prompts[1].prompt.as_str()), (id.as_str(), "after the crash"));

    // An unknown recorded id: the resume dies at once, a fresh conversation gets the event.
    l.session("beta", "  harnessSessionId: ghost\n");
    l.event("beta", "beta-1", "first");
    let ev = l.await_status("beta-1", "Delivered", |s| s["phase"] == "Delivered").await;
    assert_eq!(ev["via"].as_str(), Some("Fresh"));
    let st = l.await_status("beta", "Running after the fallback", |s| phase(s) == "Running").await;
    assert_eq!(resumed_reason(&st), "PaneDied");
}

#[tokio::test]
async fn delete_stops_the_session_and_bad_files_are_skipped() {
    let l = Local::new();
    std::fs::write(
        l.dir.join("broken.yaml"),
        "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {name: broken}\nspec: {workItem: -x}\n",
    )
    .unwrap();
    std::fs::write(l.dir.join("half.yaml"), "apiVersion: worksession.dev/v1al").unwrap();
    l.session("gamma", "");
    l.await_status("gamma", "Running", |s| phase(s) == "Running").await;
    assert_eq!(l.status("broken"), Value::Null, "an invalid manifest is never run");

    std::fs::remove_file(l.dir.join("gamma.yaml")).unwrap();
    let status = l.dir.join("gamma.status.yaml");
    await_until("the status file released", || async { !status.exists() }).await;
    assert_eq!(l.tmux.runner.observe().await.unwrap().liveness("loop-gamma"), Liveness::Absent);
}

#[tokio::test]
async fn local_bridge_writes_events_once_and_get_lists_sessions() {
    use tower::ServiceExt;
    let l = Local::new();
    seed_conversation(&l.tmux.state(), "delta-conv");
    l.session("delta", "  harnessSessionId: delta-conv\n");
    l.await_status("delta", "Running", |s| phase(s) == "Running").await;

    let token_file = l.tmux.dir.path().join("token");
    std::fs::write(&token_file, "tok").unwrap();
    let config = worksession::bridge::BridgeConfig::parse(
        &format!("generic:\n  tokenFile: {}\n", token_file.display()),
        Path::new("b.yaml"),
    )
    .unwrap();
    let store = Arc::new(worksession::local::LocalStore::new(&l.dir).unwrap());
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = worksession::bridge::BridgeMetrics::register(&mut registry);
    let app =
        worksession::bridge::Bridge::new(tokio::sync::watch::channel(Arc::new(config)).1, store, metrics).router();
    let request = || {
        axum::http::Request::post("/webhooks/generic")
            .header("authorization", "Bearer tok")
            .body(axum::body::Body::from(r#"{"workItem": "delta", "prompt": "from the bridge", "deliveryId": "d-1"}"#))
            .unwrap()
    };
    assert_eq!(app.clone().oneshot(request()).await.unwrap().status(), 201);
    assert_eq!(app.oneshot(request()).await.unwrap().status(), 200, "a redelivery is a duplicate");
    let ev = l.await_status("gen-d-1", "Delivered", |s| s["phase"] == "Delivered").await;
    assert_eq!(ev["via"].as_str(), Some("Pasted"));
    let prompts = l.tmux.await_prompts(1).await;
    assert_eq!(prompts.iter().filter(|p| p.prompt == "from the bridge").count(), 1);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_worksession"))
        .args(["get", "--local"])
        .arg(&l.dir)
        .output()
        .unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("NAME") && lines[0].contains("RESUMED"), "{table}");
    assert!(lines.iter().any(|l| l.starts_with("delta") && l.contains("Running") && l.contains("True")), "{table}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_worksession"))
        .args(["get", "-o", "json", "--local"])
        .arg(&l.dir)
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"][0]["status"]["harnessSessionId"], "delta-conv");
}

/// The README's first command runs and shows what it promises.
#[test]
fn quick_start_runs_and_shows_resume_and_fallback() {
    let out = std::process::Command::new(support::repo_root().join("scripts/quickstart"))
        .env("WORKSESSION_BIN", env!("CARGO_BIN_EXE_worksession"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    for expected in [
        "1. a WorkSession appears",
        "demo   local   demo      Running",
        "via: Resumed",
        "via: Fresh",
        "reason: PaneDied",
        "No conversation found with session ID",
        "argv  A reviewer asked for a test of the parser.",
        "tmux -S",
    ] {
        assert!(text.contains(expected), "{expected:?} in:\n{text}");
    }
}
