//! Local mode end to end: the agent on a directory of manifests, real tmux, the harness stand-in; the local
//! bridge writing events as files; `worksession get --local`.

mod scenarios;
use scenarios::fixtures;
mod standin;
mod support;

use scenarios::Rig;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use standin::{TmuxServer, seed_conversation};
use support::until;
use worksession::api::{WorkEventStatus, WorkSessionStatus};
use worksession::config::Config;
use worksession::node::tmux::{Liveness, Tmux};

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
        let agent = Self::spawn_agent(&tmux, &dir, None);
        Local { tmux, dir, agent }
    }

    fn spawn_agent(
        tmux: &TmuxServer,
        dir: &Path,
        failpoint: Option<worksession::agent::Failpoint>,
    ) -> tokio::task::JoinHandle<()> {
        let config = Arc::new(Config::parse(&tmux.agent_config_yaml(), Path::new("local.yaml")).unwrap());
        let dir = dir.to_path_buf();
        tokio::spawn(async move {
            let store = worksession::store::local::LocalStore::watching(dir).unwrap();
            let options = worksession::agent::AgentOptions {
                config: tokio::sync::watch::channel(config).1,
                admin_addr: None,
                admin_listening: None,
                failpoint,
            };
            worksession::agent::run_on_changes(store, options).await.unwrap();
        })
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
        scenarios::await_value(&format!("{name}: {what}"), || async { self.status(name) }, pred).await
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

#[tokio::test]
async fn delete_stops_the_session_and_bad_files_are_skipped() {
    let l = Local::new();
    std::fs::write(
        l.dir.join("broken.yaml"),
        "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {name: broken}\nspec: {workItem: -x}\n",
    )
    .unwrap();
    std::fs::write(l.dir.join("half.yaml"), "apiVersion: worksession.dev/v1al").unwrap();
    l.create_session("gamma", serde_json::json!({})).await;
    l.await_status("gamma", "Running", |s| phase(s) == "Running").await;
    assert_eq!(l.status("broken"), Value::Null, "an invalid manifest is never run");

    std::fs::remove_file(l.dir.join("gamma.yaml")).unwrap();
    let status = l.dir.join("gamma.status.yaml");
    until("the status file released", || async { !status.exists() }).await;
    assert_eq!(l.tmux.runner.observe().await.unwrap().liveness("loop-default_gamma"), Liveness::Absent);
}

/// A manifest renamed keeps its session: its status file follows it, and the harness runs on in its conversation (no
/// stop, no fresh start); the next event reaches that conversation. A `metadata.name` edited in place is refused as the
/// API server refuses to rename an object: the session runs on as recorded, `get` says why, and no second harness
/// runs its conversation under the new name.
#[tokio::test]
async fn a_renamed_manifest_keeps_its_session_and_a_name_edited_in_place_is_refused() {
    let l = Local::new();
    l.create_session("keep", serde_json::json!({})).await;
    let st = l.await_status("keep", "Running", |s| phase(s) == "Running").await;
    let id = st["harnessSessionId"].as_str().unwrap().to_string();
    let pid = l.tmux.pane_pid("loop-default_keep");
    std::fs::rename(l.dir.join("keep.yaml"), l.dir.join("renamed.yaml")).unwrap();
    l.await_status("renamed", "the status followed", |s| s["harnessSessionId"] == id.as_str()).await;
    assert!(!l.dir.join("keep.status.yaml").exists());
    l.event("keep", "keep-1", "after the rename");
    l.await_status("keep-1", "Delivered", |s| s["phase"] == "Delivered").await;
    assert_eq!(l.status("keep-1")["harnessSessionId"], id.as_str(), "the same conversation");
    assert_eq!(l.tmux.pane_pid("loop-default_keep"), pid, "the same harness, never stopped");

    let path = l.dir.join("renamed.yaml");
    let mut manifest: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    manifest["metadata"]["name"] = "other".into();
    worksession::store::local::write_atomic(&path, &manifest).unwrap();
    l.event("other", "other-1", "to the new name");
    l.event("keep", "keep-2", "to the old name");
    l.await_status("keep-2", "Delivered", |s| s["phase"] == "Delivered").await;
    assert_eq!(l.status("keep-2")["harnessSessionId"], id.as_str(), "the session runs on as recorded");
    assert_eq!(l.status("renamed")["harnessSessionId"], id.as_str());
    let observed = l.tmux.runner.observe().await.unwrap();
    assert_eq!(observed.liveness("loop-default_other"), Liveness::Absent, "no second harness");
    assert_eq!(observed.len(), 1);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_worksession"))
        .args(["get", "--local"])
        .arg(&l.dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("metadata.name cannot change"), "{stderr}");
    assert!(l.status("other-1")["phase"] != "Delivered", "nothing delivered to a name that never ran");
}

#[tokio::test]
async fn local_bridge_writes_events_once_and_get_lists_sessions() {
    use tower::ServiceExt;
    let l = Local::new();
    seed_conversation(&l.tmux.state(), "delta-conv");
    l.create_session("delta", serde_json::json!({"harnessSessionId": "delta-conv"})).await;
    l.await_status("delta", "Running", |s| phase(s) == "Running").await;

    let token_file = l.tmux.dir.path().join("token");
    std::fs::write(&token_file, "tok").unwrap();
    let yaml = format!("generic:\n  tokenFile: {}\n", token_file.display());
    let app = support::bridge_router(&yaml, Arc::new(worksession::store::local::LocalStore::new(&l.dir).unwrap()));
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

    // In local mode too: GitHub deliveries from strangers write nothing; a route's cap counts the directory.
    let secret = l.tmux.dir.path().join("github-secret");
    std::fs::write(&secret, "s3cret").unwrap();
    let yaml = format!(
        "github:\n  secretFile: {}\nroutes:\n  - {{repository: 'octo-org/*', namespace: default, nodeName: local, harness: standin, workdir: {}, maxSessions: 1}}\n",
        secret.display(),
        l.tmux.workdir().display()
    );
    let app = support::bridge_router(&yaml, Arc::new(worksession::store::local::LocalStore::new(&l.dir).unwrap()));
    let comment = |delivery: &str, number: u64, role: &str| {
        let mut payload = fixtures::issue_comment("octo-org/hello", number, "someone", "hi");
        payload["comment"]["author_association"] = role.into();
        let body = serde_json::to_vec(&payload).unwrap();
        axum::http::Request::post("/webhooks/github")
            .header("x-github-event", "issue_comment")
            .header("x-github-delivery", delivery)
            .header("x-hub-signature-256", worksession::bridge::github::sign(b"s3cret", &body))
            .body(axum::body::Body::from(body))
            .unwrap()
    };
    let files = || std::fs::read_dir(&l.dir).unwrap().count();
    let before = files();
    assert_eq!(app.clone().oneshot(comment("s-1", 1, "NONE")).await.unwrap().status(), 202);
    assert_eq!(files(), before, "a stranger writes no file");
    assert_eq!(app.clone().oneshot(comment("m-1", 1, "MEMBER")).await.unwrap().status(), 201);
    assert_eq!(app.clone().oneshot(comment("m-2", 2, "MEMBER")).await.unwrap().status(), 202, "past maxSessions");
    assert_eq!(app.oneshot(comment("m-3", 1, "MEMBER")).await.unwrap().status(), 201, "the existing session");

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

/// `get -w` in local mode: the table, then a row per change, told by the directory's notifications as the console
/// is; the watch ends with the test (dropped, it is killed), whether the test passes or not.
#[tokio::test]
async fn get_watch_in_local_mode_prints_a_row_per_change() {
    use tokio::io::AsyncBufReadExt;
    let l = Local::new();
    let mut watch = tokio::process::Command::new(env!("CARGO_BIN_EXE_worksession"))
        .args(["get", "-w", "--local"])
        .arg(&l.dir)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    assert!(lines.next_line().await.unwrap().is_some_and(|l| l.starts_with("NAME")), "the table's header first");
    l.create_session("watched", serde_json::json!({})).await;
    let running = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("watched ") && line.contains("Running") {
                return true;
            }
        }
        false
    };
    let seen = tokio::time::timeout(support::WAIT, running).await;
    assert!(matches!(seen, Ok(true)), "a Running row for the new session: {seen:?}");
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
        "reason: ConversationNotFound",
        "has no conversation",
        "argv  A reviewer asked for a test of the parser.",
        "tmux -S",
    ] {
        assert!(text.contains(expected), "{expected:?} in:\n{text}");
    }
}

impl scenarios::Rig for Local {
    async fn create_session(&self, name: &str, spec: Value) {
        let mut full = serde_json::json!({"workItem": name, "nodeName": "local", "harness": "standin", "workdir": self.tmux.workdir()});
        full.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
        let manifest = serde_json::json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkSession", "metadata": {"name": name}, "spec": full});
        worksession::store::local::write_atomic(&self.dir.join(format!("{name}.yaml")), &manifest).unwrap();
    }

    async fn send(&self, session: &str, name: &str, prompt: &str) {
        self.event(session, name, prompt);
    }

    async fn send_command(&self, session: &str, name: &str, prompt: &str) {
        let manifest = serde_json::json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkEvent", "metadata": {"name": name}, "spec": {"session": session, "prompt": prompt, "command": true}});
        worksession::store::local::write_atomic(&self.dir.join(format!("{name}.yaml")), &manifest).unwrap();
    }

    async fn session_status(&self, name: &str) -> WorkSessionStatus {
        serde_json::from_value(self.status(name)).unwrap_or_default()
    }

    async fn event_status(&self, name: &str) -> WorkEventStatus {
        serde_json::from_value(self.status(name)).unwrap_or_default()
    }

    async fn session_gone(&self, name: &str) -> bool {
        !self.dir.join(format!("{name}.yaml")).exists() && !self.dir.join(format!("{name}.status.yaml")).exists()
    }

    async fn patch_spec(&self, name: &str, patch: Value) {
        let path = self.dir.join(format!("{name}.yaml"));
        let mut manifest: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for (key, value) in patch.as_object().unwrap() {
            match value {
                Value::Null => manifest["spec"].as_object_mut().unwrap().remove(key),
                _ => manifest["spec"].as_object_mut().unwrap().insert(key.clone(), value.clone()),
            };
        }
        worksession::store::local::write_atomic(&path, &manifest).unwrap();
    }

    async fn delete_session(&self, name: &str) {
        std::fs::remove_file(self.dir.join(format!("{name}.yaml"))).unwrap();
    }

    async fn notes(&self, _session: &str, _reason: &str) -> Option<Vec<String>> {
        None // local mode records no Events
    }

    async fn apply_budget(&self, name: &str, spec: Value) {
        let budget = serde_json::json!({
            "apiVersion": "worksession.dev/v1alpha1", "kind": "WorkBudget", "metadata": {"name": name}, "spec": spec
        });
        worksession::store::local::write_atomic(&self.dir.join(format!("budget-{name}.yaml")), &budget).unwrap();
    }

    fn restart_agent_with(&mut self, failpoint: Option<worksession::agent::Failpoint>) {
        self.agent.abort();
        self.agent = Self::spawn_agent(&self.tmux, &self.dir, failpoint);
    }

    fn namespace(&self) -> String {
        "default".into()
    }

    fn tmux(&self) -> &TmuxServer {
        &self.tmux
    }

    fn node(&self) -> String {
        "local".into()
    }

    fn bridge(&self, yaml: &str) -> axum::Router {
        let store = worksession::store::local::LocalStore::new(self.dir.clone()).unwrap();
        support::bridge_router(yaml, Arc::new(store))
    }

    async fn answer(
        &self,
        session: &str,
        id: Option<&str>,
        decision: worksession::api::Decision,
        reason: Option<&str>,
    ) -> Result<String, String> {
        // As a person types it: the binary, in local mode, as the user `tester`.
        let verb = if decision == worksession::api::Decision::Allow { "approve" } else { "deny" };
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_worksession"));
        cmd.arg(verb).arg(session).args(id).args(reason.map(|r| ["--reason", r]).into_iter().flatten());
        let out = cmd.arg("--local").arg(&self.dir).env("USER", "tester").output().await.unwrap();
        let said = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_string();
        if out.status.success() { Ok(said(&out.stdout)) } else { Err(said(&out.stderr)) }
    }
}

// The scenarios shared with the Kubernetes agent (tests/scenarios), registered from their one list.
shared_scenarios!(Local::new(), after);

/// Local mode checks nothing more after a shared scenario.
async fn after(_: &Local, _: &str) {}

/// `worksession peek` and `attach` in local mode, through tmux directly. Attach runs in a pane of a second tmux
/// server whose prefix is C-a, so that C-b d reaches the attached client: the screen shows the harness, then the
/// detach, and the harness keeps running.
#[tokio::test]
async fn peek_and_attach_in_local_mode() {
    let l = Local::new();
    l.create_session("pk", serde_json::json!({})).await;
    l.await_status("pk", "Running", |s| phase(s) == "Running").await;
    l.tmux.await_output("loop-default_pk", "ready>").await;
    let pid = l.tmux.pane_pid("loop-default_pk");
    let config = l.tmux.dir.path().join("agent.yaml");
    std::fs::write(&config, l.tmux.agent_config_yaml()).unwrap();
    let ws = |verb: &str| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_worksession"));
        cmd.arg(verb).arg("pk").arg("--local").arg(&l.dir).arg("--config").arg(&config);
        cmd
    };
    let out = ws("peek").args(["--lines", "10"]).output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ready>"), "{out:?}");
    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_worksession"))
        .args(["peek", "nope", "--local"])
        .arg(&l.dir)
        .output()
        .unwrap();
    assert!(!missing.status.success() && String::from_utf8_lossy(&missing.stderr).contains("not found"));

    // A terminal for `attach`: a pane of another tmux server.
    let outer = l.tmux.dir.path().join("outer.sock");
    let conf = l.tmux.dir.path().join("outer.conf");
    std::fs::write(&conf, "set -g prefix C-a\nunbind C-b\n").unwrap();
    let attach = ws("attach");
    let line: Vec<String> = std::iter::once(attach.get_program().to_string_lossy().into_owned())
        .chain(attach.get_args().map(|a| format!("'{}'", a.to_string_lossy())))
        .collect();
    let command = format!("{}; sleep 60", line.join(" "));
    let tmux = |args: &[&str]| {
        std::process::Command::new("tmux").arg("-S").arg(&outer).arg("-f").arg(&conf).args(args).output().unwrap()
    };
    assert!(tmux(&["new-session", "-d", "-s", "term", "-x", "120", "-y", "40", &command]).status.success());
    let screen = || String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "=term:"]).stdout).to_string();
    support::until("the attached harness on the terminal", || async { screen().contains("ready>") }).await;
    tmux(&["send-keys", "-t", "=term:", "C-b", "d"]);
    support::until("the detach", || async { screen().contains("[detached") }).await;
    tmux(&["kill-server"]);
    assert_eq!(l.tmux.pane_pid("loop-default_pk"), pid, "the harness keeps running");
}

/// End to end in local mode: names are checked as the API server checks them. A WorkEvent whose
/// name would have been a tmux command, one named `initialPrompt`, and a session whose spec misspells a field are
/// skipped with a reason (and `get --local` says which files and why on stderr); nothing runs, and a good event is
/// delivered beside them. An edit of `workItem` is refused and the session keeps running as it was.
#[tokio::test]
async fn hostile_names_are_refused_and_get_says_what_it_skipped() {
    let l = Local::new();
    l.create_session("door", serde_json::json!({})).await;
    let running = l.await_status("door", "Running", |s| phase(s) == "Running").await;
    let marker = l.tmux.state().join("pwned");
    let hostile = format!("x ; run-shell 'touch {}'", marker.display());
    let manifest = |name: &str| {
        format!(
            "apiVersion: worksession.dev/v1alpha1\nkind: WorkEvent\nmetadata: {{name: {name:?}}}\nspec: {{session: door, prompt: hostile}}\n"
        )
    };
    std::fs::write(l.dir.join("hostile.yaml"), manifest(&hostile)).unwrap();
    std::fs::write(l.dir.join("initial.yaml"), manifest("initialPrompt")).unwrap();
    std::fs::write(
        l.dir.join("typo.yaml"),
        "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {name: typo}\nspec: {workItem: t, nodeName: local, harness: standin, workdir: /tmp, initalPrompt: hi}\n",
    )
    .unwrap();
    // A second manifest of a name is skipped, and said so (the first in path order keeps it).
    let door = std::fs::read_to_string(l.dir.join("door.yaml")).unwrap();
    std::fs::write(l.dir.join("zz-again.yaml"), door.replace("harness: standin", "harness: claude")).unwrap();
    l.event("door", "good-1", "a good one");
    let delivered = l.await_status("good-1", "Delivered", |s| phase(s) == "Delivered").await;
    assert_eq!(delivered["via"], "Pasted");

    // workItem is immutable: the edit is refused and the session runs on as recorded.
    let edited = std::fs::read_to_string(l.dir.join("door.yaml")).unwrap().replace("workItem: door", "workItem: moved");
    assert!(edited.contains("workItem: moved"), "{edited}");
    std::fs::write(l.dir.join("door.yaml"), edited).unwrap();

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_worksession"))
        .args(["get", "--local"])
        .arg(&l.dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    for (file, why) in [
        ("hostile.yaml", "metadata.name"),
        ("initial.yaml", "must be a DNS subdomain"),
        ("typo.yaml", "spec.initalPrompt: unknown field"),
        ("door.yaml", "spec.workItem: is immutable"),
        ("zz-again.yaml", "metadata.name \"door\" is taken by"),
    ] {
        assert!(stderr.lines().any(|line| line.contains(file) && line.contains(why)), "{file}: {why} in:\n{stderr}");
    }
    l.event("door", "good-2", "after the refused edit");
    l.await_status("good-2", "Delivered", |s| phase(s) == "Delivered").await;
    let status = l.status("door");
    assert_eq!(status["harnessSessionId"], running["harnessSessionId"], "the same conversation, untouched");
    let prompts: Vec<String> = l.tmux.prompts().into_iter().map(|p| p.prompt).collect();
    assert_eq!(prompts, ["a good one", "after the refused edit"], "nothing from the refused files");
    assert!(!marker.exists(), "no shell command ran");
    assert_eq!(l.status("typo"), Value::Null);
}
