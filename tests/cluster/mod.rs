//! A release of the chart on the machine's real node (`scripts/testenv up --node`), for `tests/node.rs`: the node
//! started once per test binary with the test image, one test at a time on it ([`turn`]), each release in a namespace
//! of its own with a `hostPath` workspace the kubelet creates.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use worksession::api::{Phase, PromptPhase, WorkEvent, WorkSession};

use crate::support::{self, client_for, eventually_within, repo_root, until};

/// Pods start, containers restart and the kubelet reports them within this.
pub const POD_WAIT: Duration = Duration::from_secs(180);
/// The tmux socket inside the agent pod.
pub const SOCKET: &str = "/run/worksession/tmux.sock";
/// The webhook secret of every release here.
pub const SECRET: &str = "node-test-secret";

/// The machine's node, started once for this test binary and stopped when it exits.
pub struct Node {
    pub kubeconfig: PathBuf,
    pub dir: PathBuf,
    pub name: String,
    pub bin: PathBuf,
}

pub fn node() -> &'static Node {
    static NODE: OnceLock<Node> = OnceLock::new();
    NODE.get_or_init(|| {
        let work = std::env::temp_dir().join(format!("worksession-node-image-{}", std::process::id()));
        std::fs::create_dir_all(&work).unwrap();
        let image = work.join("worksession.tar");
        let standin = repo_root().join("tests/standin/harness");
        let built = Command::new(repo_root().join("scripts/image"))
            .args(["build", "--binary", env!("CARGO_BIN_EXE_worksession"), "--include", "python3", "--add"])
            .arg(format!("{}=/usr/local/bin/standin-harness", standin.display()))
            .arg("--out")
            .arg(&image)
            .stderr(Stdio::inherit())
            .status()
            .expect("run scripts/image");
        assert!(built.success(), "scripts/image build failed (see above)");
        let out = Command::new(repo_root().join("scripts/testenv"))
            .args(["up", "--node", "--owner-pid", &std::process::id().to_string(), "--image"])
            .arg(&image)
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/testenv up --node");
        assert!(out.status.success(), "scripts/testenv up --node failed (run `scripts/testenv install --node` first?)");
        std::fs::remove_dir_all(&work).ok();
        let exports = String::from_utf8(out.stdout).unwrap();
        let var = |name: &str| support::exported(&exports, name);
        let bin = Command::new(repo_root().join("scripts/testenv")).arg("bin-dir").output().unwrap();
        Node {
            kubeconfig: var("KUBECONFIG").into(),
            dir: var("WORKSESSION_TESTENV_DIR").into(),
            name: var("WORKSESSION_TESTENV_NODE"),
            bin: String::from_utf8(bin.stdout).unwrap().trim().into(),
        }
    })
}

/// One test at a time on the node: its two cores run one release's pods well, not three.
pub async fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

impl Node {
    pub fn tool(&self, name: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(name));
        cmd.env("KUBECONFIG", &self.kubeconfig);
        cmd
    }

    /// Kills a container's main process, as a crash or the OOM killer would; the kubelet restarts it.
    pub fn kill_container(&self, container_id: &str) {
        let id = container_id.trim_start_matches("containerd://");
        let status = Command::new("ctr")
            .arg("--address")
            .arg(self.dir.join("containerd.sock"))
            .args(["-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id])
            .status()
            .unwrap();
        assert!(status.success(), "ctr tasks kill {id}");
    }
}

/// Runs `cmd`; returns (success, stdout, stderr).
pub fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// A release of the chart in a namespace of its own, with a `hostPath` workspace that does not exist yet.
pub struct Release {
    pub ns: String,
    pub client: Client,
    pub hostpath: PathBuf,
}

impl Release {
    pub async fn install(ns: &str, extra: &[&str]) -> Release {
        Self::install_on(ns, extra, None, &[]).await
    }

    /// The same, with `objects` (Secrets, say) made in the namespace before the chart is installed.
    pub async fn install_with(ns: &str, objects: &[serde_json::Value], extra: &[&str]) -> Release {
        Self::install_on(ns, extra, None, objects).await
    }

    /// The same, its workspace the PersistentVolumeClaim `claim` (ReadWriteMany) of a PersistentVolume the test
    /// makes first, on the same folder of the node as the hostPath would be: how the chart's shared-storage variant
    /// is installed where a storage class provides such volumes (NFS, CephFS, a cloud file store).
    pub async fn install_with_claim(ns: &str, claim: &str, extra: &[&str]) -> Release {
        Self::install_on(ns, extra, Some(claim), &[]).await
    }

    async fn install_on(ns: &str, extra: &[&str], claim: Option<&str>, objects: &[serde_json::Value]) -> Release {
        let node = node();
        let client = client_for(&node.kubeconfig).await;
        let hostpath = PathBuf::from(format!("/tmp/worksession-node-{ns}-{}", std::process::id()));
        let namespace: Namespace = serde_json::from_value(json!({
            "metadata": {"name": ns, "labels": {
                "pod-security.kubernetes.io/enforce": "privileged",
                "pod-security.kubernetes.io/warn": "restricted",
                "pod-security.kubernetes.io/audit": "restricted",
            }}
        }))
        .unwrap();
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.unwrap();
        let release = Release { ns: ns.into(), client, hostpath };
        if !objects.is_empty() {
            let file = std::env::temp_dir().join(format!("worksession-node-objects-{ns}.json"));
            std::fs::write(&file, json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string()).unwrap();
            let (ok, out, err) = run(node.tool("kubectl").args(["apply", "-n", ns, "-f"]).arg(&file));
            assert!(ok, "kubectl apply: {out}{err}");
        }
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        if let Some(claim) = claim {
            std::fs::create_dir_all(&release.hostpath).unwrap();
            let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": format!("{ns}-{claim}")},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain", "storageClassName": format!("{ns}-shared"),
                    "hostPath": {"path": release.hostpath.display().to_string(), "type": "Directory"},
                    "claimRef": {"namespace": ns, "name": claim}}});
            let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
                "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": format!("{ns}-shared"),
                    "resources": {"requests": {"storage": "1Gi"}}, "volumeName": format!("{ns}-{claim}")}});
            let file = std::env::temp_dir().join(format!("worksession-node-claim-{ns}.json"));
            std::fs::write(&file, json!({"apiVersion": "v1", "kind": "List", "items": [pv, pvc]}).to_string()).unwrap();
            let (ok, out, err) = run(node.tool("kubectl").args(["apply", "-n", ns, "-f"]).arg(&file));
            assert!(ok, "kubectl apply: {out}{err}");
            extra.extend(["--set".to_string(), format!("agent.workspace.persistentVolumeClaim={claim}")]);
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        release.helm("install", &extra);
        release.await_pods_ready().await;
        release
    }

    /// `helm install|upgrade w charts/worksession` with the test's values and `extra` (`--set` and the like).
    pub fn helm(&self, verb: &str, extra: &[&str]) {
        let values = self.values();
        let file = std::env::temp_dir().join(format!("worksession-node-values-{}.yaml", self.ns));
        std::fs::write(&file, values).unwrap();
        let (ok, out, err) = run(node()
            .tool("helm")
            .args([verb, "w"])
            .arg(repo_root().join("charts/worksession"))
            .args(["-n", &self.ns, "-f"])
            .arg(&file)
            .args(extra));
        assert!(ok, "helm {verb}: {out}{err}");
    }

    /// The chart's values: the image the node has, the stand-in as harness (its state in the harnesses' HOME), a
    /// route for `octo-org/*` webhooks to this node.
    pub fn values(&self) -> String {
        let profile = |name: &str| {
            format!(
                "      {name}:
        binary: /usr/local/bin/standin-harness
        interactive: [--session-id, '{{sessionId}}', '{{extraArgs}}', '--', '{{prompt}}']
        resume: [--resume, '{{sessionId}}', '{{extraArgs}}', '--', '{{prompt}}']
        resumeFailedPattern: No conversation found
        readyPattern: 'ready>'
        conversationPath: '{{home}}/conversations/{{sessionId}}.jsonl'
"
            )
        };
        format!(
            "image: {{repository: worksession, tag: dev, pullPolicy: Never}}
agent:
  workspace: {{hostPath: {hostpath}, mountPath: /srv/worksession}}
  config:
    defaults: {{resumeProbeSeconds: 1, resumeSettleSeconds: 10}}
    harnesses:
{standin}bridge:
  secrets: {{githubSecret: {SECRET}}}
  routes:
    - repository: 'octo-org/*'
      namespace: {ns}
      nodeName: {node}
      harness: standin
      workdir: /srv/worksession/{{owner}}-{{repo}}
",
            hostpath = self.hostpath.display(),
            standin = profile("standin"),
            ns = self.ns,
            node = node().name,
        )
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn sessions(&self) -> Api<WorkSession> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn events(&self) -> Api<WorkEvent> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// The pod of `component` (`agent` or `bridge`).
    pub async fn pod(&self, component: &str) -> Pod {
        let params = ListParams::default().labels(&format!("app.kubernetes.io/component={component}"));
        let mut pods = self.pods().list(&params).await.unwrap().items;
        pods.retain(|p| p.metadata.deletion_timestamp.is_none());
        assert_eq!(pods.len(), 1, "one {component} pod");
        pods.remove(0)
    }

    /// Awaits the agent pod and the bridge pod being Ready (all their containers).
    pub async fn await_pods_ready(&self) {
        eventually_within("the agent, bridge and labeler pods to be Ready", POD_WAIT, || async {
            let pods = self.pods().list(&ListParams::default()).await.ok()?.items;
            let ready = |p: &Pod| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            };
            (pods.iter().filter(|p| ready(p)).count() == 3 && pods.len() == 3).then_some(())
        })
        .await;
    }

    /// The id and restart count of `container` in the agent pod.
    pub async fn container(&self, container: &str) -> (String, i32) {
        let pod = self.pod("agent").await;
        let statuses = pod.status.unwrap().container_statuses.unwrap_or_default();
        let s = statuses.into_iter().find(|s| s.name == container).expect("container status");
        (s.container_id.unwrap_or_default(), s.restart_count)
    }

    /// Kills `container` of the agent pod and awaits the kubelet restarting it (its restart count going up).
    pub async fn kill_and_await_restart(&self, container: &str) {
        let (id, restarts) = self.container(container).await;
        node().kill_container(&id);
        eventually_within(&format!("the {container} container to restart"), POD_WAIT, || async {
            let (_, now) = self.container(container).await;
            (now > restarts).then_some(())
        })
        .await;
    }

    /// Kills the tmux container until the agent is seen reporting `TmuxUnavailable` for `session`: the kubelet may
    /// restart it before the agent's next poll the first time, never the second (its restart back-off is 10 s).
    pub async fn kill_tmux_until_unavailable(&self, session: &str) {
        for _ in 0..3 {
            let (id, restarts) = self.container("tmux").await;
            node().kill_container(&id);
            let seen = eventually_within("TmuxUnavailable, or tmux back", POD_WAIT, || async {
                let ws = self.sessions().get(session).await.ok()?;
                if ready_reason(&ws).as_deref() == Some("TmuxUnavailable") {
                    return Some(true);
                }
                let (_, now) = self.container("tmux").await;
                (now > restarts && self.tmux(&["show-options", "-g", "exit-empty"]).await.0).then_some(false)
            })
            .await;
            if seen {
                return;
            }
        }
        panic!("{session}: the agent never reported TmuxUnavailable in three tmux restarts");
    }

    /// `args` run in `container` of the agent pod (through `kubectl exec`): whether it exited 0, and its output.
    pub async fn exec(&self, container: &str, args: &[&str]) -> (bool, String) {
        let pod = self.pod("agent").await.name_any();
        let (ok, out, err) =
            run(node().tool("kubectl").args(["exec", "-n", &self.ns, &pod, "-c", container, "--"]).args(args));
        (ok, format!("{out}{err}"))
    }

    /// tmux in the agent pod's tmux container (through `kubectl exec`, the API server to the kubelet).
    pub async fn tmux(&self, args: &[&str]) -> (bool, String) {
        let pod = self.pod("agent").await.name_any();
        let (ok, out, err) = run(node()
            .tool("kubectl")
            .args(["exec", "-n", &self.ns, &pod, "-c", "tmux", "--", "tmux", "-u", "-N", "-S", SOCKET])
            .args(args));
        (ok, if ok { out } else { err })
    }

    /// The pid (in the tmux container) of the harness in `session`'s pane.
    pub async fn pane_pid(&self, session: &str) -> String {
        let target = format!("={session}:");
        let (ok, out) = self.tmux(&["list-panes", "-t", &target, "-F", "#{pane_pid} #{pane_dead}"]).await;
        assert!(ok, "list-panes: {out}");
        let (pid, dead) = out.trim().split_once(' ').expect("pid and dead");
        assert_eq!(dead, "0", "the pane of {session} is alive");
        pid.to_string()
    }

    /// A work directory under the workspace, made by hand (the agent hands it to the session's room).
    pub fn workdir(&self, name: &str) -> String {
        let dir = self.hostpath.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(1000), Some(1000)).unwrap();
        format!("/srv/worksession/{name}")
    }

    /// Where the rooms are on the node.
    pub fn rooms(&self) -> PathBuf {
        self.hostpath.join(".rooms")
    }

    /// The uid and the HOME (on the node) of `session`'s room, from the agent's owner files (`.rooms/.owners/<uid>`,
    /// whose first line names the session).
    pub fn room(&self, session: &str) -> (u32, PathBuf) {
        let who = format!("{}/{session}", self.ns);
        for entry in std::fs::read_dir(self.rooms().join(".owners")).expect("the owner files") {
            let path = entry.unwrap().path();
            if std::fs::read_to_string(&path).unwrap().lines().next() == Some(who.as_str()) {
                let uid = path.file_name().unwrap().to_str().unwrap().to_string();
                return (uid.parse().unwrap(), self.rooms().join(uid));
            }
        }
        panic!("no room for {who}");
    }

    pub async fn create_session(&self, name: &str, initial_prompt: &str) {
        self.create_session_with(name, initial_prompt, json!({})).await
    }

    /// A session whose spec has `more` fields beside the test's own.
    pub async fn create_session_with(&self, name: &str, initial_prompt: &str, more: serde_json::Value) {
        let mut spec = json!({"workItem": name, "nodeName": node().name, "harness": "standin",
                              "workdir": self.workdir(name), "initialPrompt": initial_prompt});
        spec.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
        let ws: WorkSession = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        self.sessions().create(&PostParams::default(), &ws).await.unwrap();
    }

    pub async fn await_session(&self, name: &str, what: &str, check: impl Fn(&WorkSession) -> bool) -> WorkSession {
        support::poll(&format!("{name}: {what}"), POD_WAIT, || async {
            match self.sessions().get(name).await {
                Ok(ws) if check(&ws) => Ok(ws),
                Ok(ws) => Err(format!("status {}", serde_json::to_string(&ws.status).unwrap())),
                Err(e) => Err(e.to_string()),
            }
        })
        .await
    }

    /// A WorkEvent as `kubectl create` makes it, without labels: the chart's labeler labels it for its node.
    pub async fn send(&self, session: &str, name: &str, prompt: &str) {
        let ev: WorkEvent = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"session": session, "prompt": prompt, "source": {"type": "manual"}}
        }))
        .unwrap();
        self.events().create(&PostParams::default(), &ev).await.unwrap();
    }

    pub async fn await_delivered(&self, name: &str) -> worksession::api::WorkEventStatus {
        eventually_within(&format!("{name} to be Delivered"), POD_WAIT, || async {
            let ev = self.events().get(name).await.ok()?;
            ev.status.filter(|s| s.phase == Some(PromptPhase::Delivered))
        })
        .await
    }

    /// The prompts the stand-in recorded in the harnesses' HOME.
    pub fn prompts(&self) -> Vec<crate::standin::Prompt> {
        // Each stand-in keeps its record in its own room's HOME.
        let entries = std::fs::read_dir(self.rooms()).into_iter().flatten().filter_map(|e| e.ok());
        let homes = entries.filter(|e| !e.file_name().to_string_lossy().starts_with('.'));
        let mut homes: Vec<PathBuf> = homes.map(|e| e.path()).filter(|p| p.is_dir()).collect();
        homes.sort();
        homes.iter().flat_map(|home| crate::standin::read_prompts(home)).collect()
    }

    /// As docs/install.md says: delete the sessions first (the agent stops their harnesses and removes its finalizers),
    /// then uninstall the release.
    pub async fn uninstall(self) {
        let sessions = self.sessions();
        sessions.delete_collection(&DeleteParams::default(), &ListParams::default()).await.unwrap();
        until("the WorkSessions to be gone (the agent removed its finalizers)", || async {
            sessions.list(&ListParams::default()).await.unwrap().items.is_empty()
        })
        .await;
        let (ok, listed) = self.tmux(&["list-sessions", "-F", "#{session_name}"]).await;
        assert!(ok && listed.trim().is_empty(), "no tmux session left: {listed}");
        self.helm_uninstall();
        Api::<Namespace>::all(self.client.clone()).delete(&self.ns, &DeleteParams::default()).await.ok();
        std::fs::remove_dir_all(&self.hostpath).ok();
    }

    /// The other order: with the agent gone nothing removes the finalizers, and docs/install.md's remedy does.
    pub async fn uninstall_before_the_sessions(self) {
        self.helm_uninstall();
        let sessions = self.sessions();
        let names: Vec<String> =
            sessions.list(&ListParams::default()).await.unwrap().items.iter().map(|ws| ws.name_any()).collect();
        sessions.delete_collection(&DeleteParams::default(), &ListParams::default()).await.unwrap();
        for name in &names {
            let ws = sessions.get(name).await.unwrap();
            assert!(ws.metadata.deletion_timestamp.is_some() && !ws.finalizers().is_empty(), "{name} is stuck");
            let patch = r#"{"metadata":{"finalizers":null}}"#;
            let (ok, out, err) =
                run(node().tool("kubectl").args(["patch", "ws", name, "-n", &self.ns, "--type", "merge", "-p", patch]));
            assert!(ok, "docs/install.md's remedy: {out}{err}");
        }
        until("the WorkSessions to be gone", || async {
            sessions.list(&ListParams::default()).await.unwrap().items.is_empty()
        })
        .await;
        Api::<Namespace>::all(self.client.clone()).delete(&self.ns, &DeleteParams::default()).await.ok();
        std::fs::remove_dir_all(&self.hostpath).ok();
    }

    pub fn helm_uninstall(&self) {
        let (ok, out, err) = run(node().tool("helm").args(["uninstall", "w", "-n", &self.ns, "--wait"]));
        assert!(ok, "helm uninstall: {out}{err}");
    }
}

pub fn phase(ws: &WorkSession) -> Option<Phase> {
    ws.status.as_ref().and_then(|s| s.phase)
}

pub fn ready_reason(ws: &WorkSession) -> Option<String> {
    let conditions = &ws.status.as_ref()?.conditions;
    conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.reason.clone())
}

/// The violations the API server lists for the pods of `ns` were it to enforce `level` (a server-side dry run).
pub fn violations(ns: &str, level: &str) -> String {
    let label = format!("pod-security.kubernetes.io/enforce={level}");
    let (ok, out, err) =
        run(node().tool("kubectl").args(["label", "--dry-run=server", "--overwrite", "ns", ns, &label]));
    assert!(ok, "kubectl label --dry-run=server: {out}{err}");
    err
}

/// The violations listed for the pod whose name starts with `prefix`.
pub fn pod_violations(listing: &str, prefix: &str) -> Option<String> {
    listing.lines().find_map(|l| l.strip_prefix("Warning: ")?.strip_prefix(prefix).map(|rest| rest.to_string()))
}
