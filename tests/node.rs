//! The Helm chart on a real node: `scripts/testenv up --node` runs a kubelet with containerd, and the
//! image `scripts/image` builds (the runtime image plus python3 and the harness stand-in) is installed with
//! `helm install charts/worksession`, as a user would. One node runs per machine, so these tests take turns.
//!
//! Each test installs a release of its own in a namespace of its own (Pod Security: enforce `privileged`, warn and
//! audit `restricted`, as docs/install.md says), with a `hostPath` workspace the kubelet creates.

mod cluster;
#[path = "fixtures/github.rs"]
mod fixtures;
mod standin;
mod support;

use std::path::Path;
use std::process::Command;

use kube::ResourceExt;
use kube::api::ListParams;
use worksession::api::{Phase, PromptPhase, Via};

use cluster::{POD_WAIT, Release, SECRET, node, phase, pod_violations, run, turn, violations};
use support::{eventually_within, until};

#[tokio::test]
async fn the_chart_runs_on_a_node_with_projected_tokens_and_its_pod_security_as_documented() {
    let _turn = turn().await;
    let r = Release::install("node-install", &[]).await;

    // Ready means each talked to the API server: with the token the kubelet projects, never a client certificate.
    for component in ["agent", "bridge", "labeler"] {
        let pod = r.pod(component).await;
        let spec = pod.spec.unwrap();
        let projected = spec.volumes.unwrap_or_default().into_iter().find_map(|v| v.projected);
        let sources = projected.expect("a projected service account volume").sources.unwrap_or_default();
        assert!(sources.iter().any(|s| s.service_account_token.is_some()), "{component}: a projected token");
        assert_eq!(spec.service_account_name.as_deref(), Some(&*format!("w-worksession-{component}")));
    }
    // No cluster credential where the harnesses run. The pod mounts no token; the agent's container
    // alone has one (projected); from the tmux container the API server refuses what the agent's token may do.
    let spec = r.pod("agent").await.spec.unwrap();
    assert_eq!(spec.automount_service_account_token, Some(false));
    let mounts = |name: &str| {
        let container = spec.containers.iter().find(|c| c.name == name).unwrap();
        container.volume_mounts.clone().unwrap_or_default().into_iter().map(|m| m.mount_path).collect::<Vec<_>>()
    };
    let token_dir = "/var/run/secrets/kubernetes.io/serviceaccount".to_string();
    assert!(mounts("agent").contains(&token_dir) && !mounts("tmux").contains(&token_dir), "{:?}", mounts("tmux"));
    let (found, out) = r.exec("tmux", &["test", "-e", &format!("{token_dir}/token")]).await;
    assert!(!found, "a token in the tmux container: {out}");
    let probe = "import os,ssl,urllib.request,urllib.error\nh,p=os.environ['KUBERNETES_SERVICE_HOST'],os.environ['KUBERNETES_SERVICE_PORT']\nreq=urllib.request.Request(f'https://{h}:{p}/apis/worksession.dev/v1alpha1/workevents')\ntry: print(urllib.request.urlopen(req,context=ssl._create_unverified_context(),timeout=10).status)\nexcept urllib.error.HTTPError as e: print(e.code)\n";
    let (ok, answer) = r.exec("tmux", &["python3", "-c", probe]).await;
    assert!(ok && matches!(answer.trim(), "401" | "403"), "listing WorkEvents from the tmux container: {answer}");

    // Rooms (the default): the kubelet made the workspace, root's and closed to the harnesses' uids; no init
    // container hands it to anyone.
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&r.hostpath).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o755));
    assert!(r.pod("agent").await.spec.unwrap().init_containers.is_none());

    // Pod Security: the bridge and the labeler meet `restricted`; the agent's hostPath is refused by `baseline` and `restricted`.
    let agent = format!("{}: ", r.pod("agent").await.name_any());
    let restricted = violations(&r.ns, "restricted");
    assert!(pod_violations(&restricted, "w-worksession-bridge").is_none(), "the bridge meets restricted: {restricted}");
    assert!(
        pod_violations(&restricted, "w-worksession-labeler").is_none(),
        "the labeler meets restricted: {restricted}"
    );
    assert_eq!(
        pod_violations(&restricted, &agent).as_deref(),
        // The hostPath, and rooms: the tmux container as root with SETUID and SETGID, the agent's with CHOWN,
        // DAC_OVERRIDE and FOWNER (each allowed by `baseline`).
        Some("unrestricted capabilities, restricted volume types, runAsNonRoot != true, runAsUser=0"),
        "{restricted}"
    );
    let baseline = violations(&r.ns, "baseline");
    assert_eq!(pod_violations(&baseline, &agent).as_deref(), Some("hostPath volumes"), "{baseline}");

    // Rooms off and no init container (a workspace prepared on the node): the hostPath is the only violation.
    r.helm("upgrade", &["--set", "agent.rooms.enabled=false", "--set", "agent.workspace.chown=false"]);
    until("the agent pod without its init container", || async {
        let pod = r.pods().list(&ListParams::default().labels("app.kubernetes.io/component=agent")).await.unwrap();
        pod.items.len() == 1 && pod.items[0].spec.as_ref().unwrap().init_containers.is_none()
    })
    .await;
    r.await_pods_ready().await;
    let agent = format!("{}: ", r.pod("agent").await.name_any());
    let restricted = violations(&r.ns, "restricted");
    assert_eq!(pod_violations(&restricted, &agent).as_deref(), Some("restricted volume types"), "{restricted}");
    r.uninstall().await;
}

/// The chart's shared-storage variant (`agent.workspace.persistentVolumeClaim`, a ReadWriteMany
/// claim instead of the hostPath) installs and runs a harness in its room, its conversation in the room's HOME on
/// the volume (rooms on a shared volume are the cluster's: `rooms.shared`).
#[tokio::test]
async fn the_chart_with_a_shared_volume_claim_runs_a_harness_on_it() {
    let _turn = turn().await;
    let r = Release::install_with_claim("node-pvc", "shared", &[]).await;
    let spec = r.pod("agent").await.spec.unwrap();
    let workspace = spec.volumes.unwrap_or_default().into_iter().find(|v| v.name == "workspace").unwrap();
    assert_eq!(workspace.persistent_volume_claim.map(|c| c.claim_name).as_deref(), Some("shared"));
    assert!(workspace.host_path.is_none(), "the claim instead of the hostPath");
    r.create_session("item", "hello from the shared volume").await;
    let ws = r.await_session("item", "Running", |ws| phase(ws) == Some(Phase::Running)).await;
    let id = ws.status.unwrap().harness_session_id.expect("recorded id");
    let confined = r.await_session("item", "Confined", |ws| condition_status(ws, "Confined") == "True").await;
    let (uid, home) = r.room("item"); // the room's HOME, on the volume
    assert!(confined.status.unwrap().conditions.iter().any(|c| c.message.contains(&uid.to_string())));
    until("the initial prompt in the harness", || async { standin::read_prompts(&home).len() == 1 }).await;
    assert!(home.join(format!("conversations/{id}.jsonl")).is_file(), "its conversation on the volume");
    r.uninstall().await;
    let (ok, _, _) = run(node().tool("kubectl").args(["delete", "pv", "node-pvc-shared", "--wait=false"]));
    assert!(ok);
}

#[tokio::test]
async fn a_harness_on_the_node_outlives_its_agent_and_resumes_after_tmux_restarts() {
    let _turn = turn().await;
    let r = Release::install("node-restarts", &[]).await;
    r.create_session("item", "hello from the node").await;
    let ws = r.await_session("item", "Running", |ws| phase(ws) == Some(Phase::Running)).await;
    let id = ws.status.unwrap().harness_session_id.expect("recorded id");
    until("the initial prompt in the harness", || async { r.prompts().len() == 1 }).await;
    // It runs in the tmux container, and its room's HOME (on the node's workspace) is its own: it wrote its transcript.
    let pid = r.pane_pid(&format!("loop-{}_item", r.ns)).await;
    assert!(r.room("item").1.join(format!("conversations/{id}.jsonl")).is_file());
    assert_eq!(r.prompts()[0].conversation, id);

    // The agent container dies: the harness lives on, and the restarted agent adopts it and respawns nothing.
    r.kill_and_await_restart("agent").await;
    r.await_pods_ready().await;
    r.send("item", "item-1", "after the agent restart").await;
    let ev = r.await_delivered("item-1").await;
    assert_eq!((ev.via, ev.harness_session_id.as_deref()), (Some(Via::Pasted), Some(id.as_str())));
    assert_eq!(r.pane_pid(&format!("loop-{}_item", r.ns)).await, pid, "the same harness process");
    let prompts = r.prompts();
    assert_eq!((prompts.len(), prompts[1].pid), (2, prompts[0].pid), "delivered once, to the same process");
    let status = r.sessions().get("item").await.unwrap().status.unwrap();
    assert_eq!(status.respawn_count, 0);

    // The tmux container dies (and its harnesses with it): the agent starts no server of its own, says so, and the
    // next event after tmux is back resumes the conversation.
    r.kill_tmux_until_unavailable("item").await;
    r.await_pods_ready().await;
    r.send("item", "item-2", "after the tmux restart").await;
    let ev = r.await_delivered("item-2").await;
    // Into the resumed conversation, pasted once it was ready: with rooms no prompt rides on a command line.
    assert_eq!((ev.via, ev.harness_session_id.as_deref()), (Some(Via::Pasted), Some(id.as_str())));
    let status = r.sessions().get("item").await.unwrap().status.unwrap();
    assert!(status.last_respawn.is_some_and(|r| r.resumed), "a resume");
    let prompts = r.prompts();
    assert_eq!(
        prompts.last().map(|p| (p.conversation.as_str(), p.prompt.as_str())),
        Some((id.as_str(), "after the tmux restart"))
    );
    assert_eq!(prompts.len(), 3, "each prompt once");
    r.uninstall_before_the_sessions().await;
}

#[tokio::test]
async fn upgrade_keeps_the_harness_a_signed_webhook_reaches_it_once_and_peek_attach_reach_it() {
    let _turn = turn().await;
    let r = Release::install("node-upgrade", &[]).await;
    r.create_session("up", "before the upgrade").await;
    r.await_session("up", "Running", |ws| phase(ws) == Some(Phase::Running)).await;
    let pid = r.pane_pid(&format!("loop-{}_up", r.ns)).await;

    // A changed agent config (a session prefix) rolls no pod: the harness survives and the new config is in effect.
    let pod = r.pod("agent").await.name_any();
    r.helm("upgrade", &["--set", "agent.config.tmux.sessionPrefix=ws-"]);
    // The kubelet updates the ConfigMap volume at the pod's next sync; the agent says when it has the new config.
    eventually_within("the agent to reload its config", POD_WAIT, || async {
        let (ok, logs, _) = run(node().tool("kubectl").args(["logs", "-n", &r.ns, &pod, "-c", "agent"]));
        (ok && logs.contains("config.reloaded")).then_some(())
    })
    .await;
    r.create_session("after", "after the upgrade").await;
    let renamed = format!("ws-{}_after", r.ns);
    r.await_session("after", "Running in ws-<namespace>_after", |ws| {
        phase(ws) == Some(Phase::Running)
            && ws.status.as_ref().and_then(|s| s.tmux_session.as_deref()) == Some(renamed.as_str())
    })
    .await;
    assert_eq!(r.pod("agent").await.name_any(), pod, "the same agent pod");
    assert_eq!(r.pane_pid(&format!("loop-{}_up", r.ns)).await, pid, "the same harness process");

    // A signed GitHub webhook to the bridge pod (its IP on the node's bridge network) reaches a harness once.
    let workdir = r.workdir("octo-org-hello-world");
    assert_eq!(workdir, "/srv/worksession/octo-org-hello-world");
    let ip = r.pod("bridge").await.status.unwrap().pod_ip.expect("a pod IP");
    let addr = std::net::SocketAddr::new(ip.parse().unwrap(), 8080);
    let payload = fixtures::issue_comment("octo-org/hello-world", 12, "mona", "Please add a test.");
    let body = serde_json::to_vec(&payload).unwrap();
    let signature = worksession::bridge::github::sign(SECRET.as_bytes(), &body);
    let headers = [
        ("Content-Type", "application/json"),
        ("X-GitHub-Event", "issue_comment"),
        ("X-GitHub-Delivery", "node-delivery-1"),
        ("X-Hub-Signature-256", signature.as_str()),
    ];
    for _ in 0..2 {
        // GitHub redelivers: the same delivery id is one event.
        let (status, text) = support::http(addr, "POST", "/webhooks/github", &headers, &body).await.unwrap();
        assert!(status == 201 || status == 200, "{status} {text}");
    }
    let item = support::work_item("octo-org/hello-world", 12);
    let item = item.as_str();
    r.await_session(item, "Running", |ws| phase(ws) == Some(Phase::Running)).await;
    until("the comment in the harness", || async {
        r.prompts().iter().any(|p| p.prompt.contains("Please add a test."))
    })
    .await;
    let events = r.events().list(&ListParams::default()).await.unwrap().items;
    let from_github: Vec<_> = events.iter().filter(|e| e.spec.session == item).collect();
    assert_eq!(from_github.len(), 1, "one event for one delivery");
    let delivered = r.await_delivered(&from_github[0].name_any()).await;
    assert_eq!(delivered.phase, Some(PromptPhase::Delivered));
    assert_eq!(r.prompts().iter().filter(|p| p.prompt.contains("Please add a test.")).count(), 1, "once");

    // A tenant's pod on the node, labelled as the agent's, in a namespace listed before the release's: never the one
    // a person's terminal is exec'd into.
    let tenant = format!("aaa-{}", r.ns);
    let lookalike = serde_json::json!({
        "metadata": {"name": "agent", "labels": {
            "app.kubernetes.io/name": "worksession", "app.kubernetes.io/component": "agent"}},
        "spec": {"nodeName": node().name, "containers": [{"name": "tmux", "image": "docker.io/library/worksession:dev",
            "imagePullPolicy": "Never", "command": ["sleep", "600"]}]},
    });
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(r.client.clone());
    let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": tenant}})).unwrap();
    namespaces.create(&Default::default(), &ns).await.unwrap();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(r.client.clone(), &tenant);
    pods.create(&Default::default(), &serde_json::from_value(lookalike).unwrap()).await.unwrap();

    // `worksession peek` on a cluster: kubectl exec into the tmux container of the agent pod on the session's node.
    let mut path = std::env::var_os("PATH").unwrap_or_default();
    path = std::env::join_paths(std::iter::once(node().bin.clone()).chain(std::env::split_paths(&path))).unwrap();
    let (ok, out, err) = run(Command::new(env!("CARGO_BIN_EXE_worksession"))
        .args(["peek", "up", "-n", &r.ns, "--lines", "20"])
        .env("WORKSESSION_AGENT_NAMESPACE", &r.ns)
        .env("KUBECONFIG", &node().kubeconfig)
        .env("PATH", &path));
    assert!(ok && out.contains("ready>"), "peek: {out}{err}");

    // `worksession attach` on a cluster (`kubectl exec -it`), from a terminal: a pane of a tmux server of the test's
    // own (its prefix C-a, so C-b reaches the attached session). Detaching leaves the harness running.
    let term = tempfile::tempdir().unwrap();
    let conf = term.path().join("outer.conf");
    std::fs::write(&conf, "set -g prefix C-a\nunbind C-b\n").unwrap();
    let outer = |args: &[&str]| {
        Command::new("tmux")
            .arg("-S")
            .arg(term.path().join("outer.sock"))
            .arg("-f")
            .arg(&conf)
            .args(args)
            .output()
            .unwrap()
    };
    let command = format!(
        "env KUBECONFIG='{}' PATH='{}' '{}' attach up -n {} --agent-namespace {}; sleep 60",
        node().kubeconfig.display(),
        path.to_string_lossy(),
        env!("CARGO_BIN_EXE_worksession"),
        r.ns,
        r.ns
    );
    assert!(outer(&["new-session", "-d", "-s", "term", "-x", "120", "-y", "40", &command]).status.success());
    let screen = || String::from_utf8_lossy(&outer(&["capture-pane", "-p", "-t", "=term:"]).stdout).into_owned();
    until("the attached harness on the terminal", || async { screen().contains("ready>") }).await;
    outer(&["send-keys", "-t", "=term:", "C-b", "d"]);
    until("the detach", || async { screen().contains("[detached") }).await;
    outer(&["kill-server"]);
    assert_eq!(r.pane_pid(&format!("loop-{}_up", r.ns)).await, pid, "the harness keeps running");
    namespaces.delete(&tenant, &Default::default()).await.unwrap();
    r.uninstall().await;
}

/// One session, one room. A hostile harness (the stand-in told by its prompt to attack, as
/// an injected agent would) tries everything against another session on the same node, and every attempt fails:
/// the other's HOME, transcripts and workdir, the list of rooms and a claim on one, the node's clones, the tmux
/// server (no `TMUX`, no socket: no list, send-keys, capture or kill), a signal to the other's process, its
/// environment, root, the cluster's and git's tokens, and the model provider's key (a key gateway holds it: the room
/// has a placeholder, and its own model request reaches the provider with the key). It holds no capability. The
/// victim's harness and
/// conversation go on untouched. The one thing it reads is the other's command line (`/proc/<pid>/cmdline` is
/// readable by every user of a PID namespace), which holds its flags and conversation id but no prompt: with rooms
/// on every prompt is pasted. Written down in docs/security.md.
#[tokio::test]
async fn a_hostile_harness_reaches_nothing_of_another_session() {
    let _turn = turn().await;
    // The model provider, on this machine where the node's pods reach it; its key only in a Secret the agent mounts.
    const KEY: &str = "sk-the-agents-own-key-never-in-a-room";
    let bridge_ip = std::fs::read_to_string(node().dir.join("apiserver.host")).unwrap();
    let model = support::model::Model::start_on(bridge_ip.trim());
    let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "model-key"},
        "stringData": {"key": KEY}});
    // The tenant's own keys, for a harness no gateway serves: one variable the agent gives, one it does not.
    const TENANT_KEY: &str = "ghu-the-tenants-own-token";
    let tenant_keys = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "worksession-harness-keys"},
        "stringData": {"TENANT_TOKEN": format!("{TENANT_KEY}\n"), "LD_PRELOAD": "/nonexistent.so"}});
    let gateway = "agent.rooms.egress.gateways[0]";
    let values = [
        format!("{gateway}.name=model"),
        format!("{gateway}.upstream={}", model.base_url()),
        format!("{gateway}.secret.name=model-key"),
        format!("{gateway}.secret.key=key"),
        format!("{gateway}.baseUrlEnv=MODEL_BASE_URL"),
        format!("{gateway}.keyEnv=MODEL_API_KEY"),
        format!("{gateway}.placeholder=placeholder-key"),
        "agent.rooms.egress.enabled=true".into(),
        "agent.rooms.egress.sessionHosts=true".into(),
        "agent.rooms.namespaceKeys.namespaces[0]=node-rooms".into(),
        "agent.rooms.namespaceKeys.variables[0]=TENANT_TOKEN".into(),
    ];
    let sets: Vec<&str> = values.iter().flat_map(|v| ["--set", v.as_str()]).collect();
    let r = Release::install_with("node-rooms", &[secret, tenant_keys], &sets).await;
    let created = std::time::Instant::now();
    r.create_session("victim", "the victim's own words").await;
    let first = r
        .await_session("victim", "its first prompt Delivered", |ws| {
            ws.status.as_ref().and_then(|s| s.initial_prompt.as_ref()).and_then(|p| p.phase)
                == Some(PromptPhase::Delivered)
        })
        .await;
    let first = first.status.unwrap().initial_prompt.unwrap();
    // Not on its command line, which every room reads in /proc: pasted once the harness is ready (a measure, not an
    // assertion, of what it costs: 0.77-0.87 s when it rode on the command line).
    eprintln!("the victim's first prompt: Delivered {:.2} s after its creation", created.elapsed().as_secs_f64());
    assert_eq!(first.via, Some(Via::Pasted), "{first:?}");
    let ws = r.await_session("victim", "Running", |ws| phase(ws) == Some(Phase::Running)).await;
    let id = ws.status.unwrap().harness_session_id.expect("recorded id");
    let confined = r.await_session("victim", "Confined", |ws| condition_status(ws, "Confined") == "True").await;
    let (victim_uid, victim_home) = r.room("victim");
    assert!(confined.status.unwrap().conditions.iter().any(|c| c.message.contains(&victim_uid.to_string())));
    until("the victim's first prompt", || async { r.prompts().len() == 1 }).await;
    let victim = format!("loop-{}_victim", r.ns);
    let pid = r.pane_pid(&victim).await;
    // The victim would serve on loopback, as a harness's dev server or language server would: held to the egress
    // proxy, it can listen on no port (it says so), so the attacker's targets below are a port no room may reach
    // and the agent's own.
    r.send("victim", "victim-0", "LISTEN 18765").await;
    r.await_delivered("victim-0").await;
    let transcript = victim_home.join(format!("conversations/{id}.jsonl"));
    let before = std::fs::read_to_string(&transcript).unwrap();

    // Where a datagram out would land: a socket on the machine beside the node, which the pod's network reaches.
    let datagrams = std::net::UdpSocket::bind((bridge_ip.trim(), 0)).unwrap();
    let datagrams_port = datagrams.local_addr().unwrap().port();
    let in_pod = |p: &Path| Path::new("/srv/worksession").join(p.strip_prefix(&r.hostpath).unwrap());
    let target = serde_json::json!({
        "victim_home": in_pod(&victim_home), "victim_workdir": "/srv/worksession/victim",
        "victim_session": format!("={victim}:"), "victim_marker": id, "socket": "/run/worksession/tmux.sock",
        "rooms": "/srv/worksession/.rooms", "mirrors": "/var/lib/worksession/repos",
        "token_files": ["/var/run/secrets/kubernetes.io/serviceaccount/token", "/etc/worksession-git/token",
            "/etc/worksession-gateways/model/key"],
        "gateway_env": "MODEL_BASE_URL", "key_env": "MODEL_API_KEY",
        "victim_hooks": worksession::node::hook::file_of(&in_pod(&victim_home), &format!("{}/victim", r.ns)),
        "victim_port": 18765, "agent_port": 9090, "datagrams_to": [bridge_ip.trim(), datagrams_port],
    });
    // Its tenant lists the node's own addresses for it too (the metadata address, the API server by name, the
    // victim's port): a session's own list opens public addresses only.
    let own = ["169.254.169.254:80", "kubernetes.default.svc.cluster.local", "127.0.0.1:18765"];
    let egress = serde_json::json!({"egress": {"hosts": own}});
    r.create_session_with("attacker", &format!("ATTACK {target}"), egress).await;
    r.await_session("attacker", "Running", |ws| phase(ws) == Some(Phase::Running)).await;
    let (attacker_uid, attacker_home) = r.room("attacker");
    assert_ne!(attacker_uid, victim_uid, "a uid each");
    let report = attacker_home.join("attack.json");
    until("the attack's report", || async { report.is_file() }).await;
    let results: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    // Shown whatever follows: what each attempt got is the record of the attack.
    println!("the hostile harness's report: {results:#?}");
    assert_eq!(results.get("capabilities").map(String::as_str), Some("0000000000000000"), "{results:#?}");
    // Reports, not attacks: what the room sees and whether the kernel offers Landlock in it.
    let reports = ["capabilities", "visible_processes", "landlock", "environment", "use_gateway"];
    let not_defended: Vec<&str> = reports.iter().chain(&["read_victim_cmdline"]).copied().collect();
    let got_through: Vec<_> =
        results.iter().filter(|(k, v)| !not_defended.contains(&k.as_str()) && !v.starts_with("refused")).collect();
    assert!(got_through.is_empty(), "attempts that worked: {got_through:#?}");
    assert!(results.len() >= 20, "every attempt made: {results:#?}");
    // Every room sees every process of the tmux container (one PID namespace, /proc without hidepid) and reads its
    // command line: the victim's own (its room's uid, not the attacker's), which holds no prompt.
    let cmdline = &results["read_victim_cmdline"];
    assert!(cmdline.starts_with("done: pid ") && cmdline.contains(&format!(" uid {victim_uid}: ")), "{cmdline}");
    assert!(!cmdline.contains("the vict"), "no prompt on a command line: {cmdline}");
    // The model provider's key: not in the room (its environment holds the placeholder, the key's file is not
    // there), yet the room's model request reached the provider with it, through the agent's gateway.
    let environment = &results["environment"];
    assert!(environment.contains("MODEL_API_KEY=placeholder-key") && !environment.contains(KEY), "{environment}");
    assert!(environment.contains("\nMODEL_BASE_URL=http://127.0.0.1:3129/gateway/model\n"), "{environment}");
    assert_eq!(results["use_gateway"], "done: 200", "{results:#?}");
    // Its namespace's key, for a harness no gateway serves: the variable it may set, and not the one it may not.
    assert!(environment.contains(&format!("\nTENANT_TOKEN={TENANT_KEY}\n")), "{environment}");
    assert!(!environment.contains("LD_PRELOAD"), "{environment}");
    // Read by the agent's own right to that one Secret of that namespace: no other Secret, no list, no other namespace.
    let agent = format!("system:serviceaccount:{}:w-worksession-agent", r.ns);
    for (namespace, verb, name, allowed) in [
        (r.ns.as_str(), "get", Some("worksession-harness-keys"), true),
        (r.ns.as_str(), "get", Some("model-key"), false),
        (r.ns.as_str(), "list", None, false),
        ("default", "get", Some("worksession-harness-keys"), false),
    ] {
        let review = serde_json::json!({"spec": {"user": agent, "groups": ["system:serviceaccounts"],
            "resourceAttributes": {"namespace": namespace, "verb": verb, "resource": "secrets", "name": name}}});
        let review: k8s_openapi::api::authorization::v1::SubjectAccessReview = serde_json::from_value(review).unwrap();
        let reviews = kube::Api::<k8s_openapi::api::authorization::v1::SubjectAccessReview>::all(r.client.clone());
        let answer = reviews.create(&Default::default(), &review).await.unwrap();
        assert_eq!(answer.status.unwrap().allowed, allowed, "{verb} secrets {name:?} in {namespace}");
    }
    let keys: std::collections::BTreeSet<Option<String>> = model.requests().into_iter().map(|q| q.key).collect();
    assert_eq!(keys, [Some(KEY.to_string())].into(), "the provider got the key, never the placeholder");
    // The network the rooms share: held to the egress proxy (Landlock), which tunnels to none of the node's or the
    // cluster's own addresses, whatever they are called.
    for attempt in [
        "connect_api_server",
        "connect_victim_listener",
        "connect_agent_admin",
        "proxy_metadata",
        "proxy_victim_listener",
        "proxy_api_server",
        "proxy_api_server_by_name",
        "udp_out",
    ] {
        assert!(results.get(attempt).is_some_and(|r| r.starts_with("refused")), "{attempt}: {results:#?}");
    }
    datagrams.set_nonblocking(true).unwrap();
    assert!(datagrams.recv(&mut [0; 64]).is_err(), "no datagram left the room");
    // What the proxy refused is told on the attacker's session, host by host, where its owner looks: the metadata
    // address as one of the node's own, which its session's list (read by the proxy) cannot open.
    let kube_events: kube::Api<k8s_openapi::api::events::v1::Event> = kube::Api::namespaced(r.client.clone(), &r.ns);
    support::eventually("an EgressRefused Event on the attacker's session", || async {
        let list = kube_events.list(&ListParams::default()).await.ok()?;
        let told: Vec<String> = list
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("EgressRefused"))
            .filter(|e| e.regarding.as_ref().and_then(|o| o.name.as_deref()) == Some("attacker"))
            .filter_map(|e| e.note)
            .collect();
        told.iter().any(|note| note.contains("169.254.169.254:80") && note.contains("own addresses")).then_some(())
    })
    .await;

    // The victim: the same process, its conversation as it was, and its next event reaches it there.
    assert_eq!(r.pane_pid(&victim).await, pid, "untouched");
    assert_eq!(std::fs::read_to_string(&transcript).unwrap(), before);
    assert!(!victim_home.join("planted").exists() && !r.hostpath.join("victim/planted").exists());
    r.send("victim", "victim-1", "still mine").await;
    let ev = r.await_delivered("victim-1").await;
    assert_eq!((ev.via, ev.harness_session_id.as_deref()), (Some(Via::Pasted), Some(id.as_str())));
    let victims: Vec<_> = r.prompts().into_iter().filter(|p| p.conversation == id).map(|p| p.prompt).collect();
    assert_eq!(victims, ["the victim's own words", "LISTEN 18765", "still mine"]);

    // Deleting the sessions frees their rooms: no home, no owner file left to be given again with their data.
    r.sessions().delete_collection(&Default::default(), &ListParams::default()).await.unwrap();
    until("the sessions gone", || async { r.sessions().list(&ListParams::default()).await.unwrap().items.is_empty() })
        .await;
    let left = |dir: std::path::PathBuf| -> Vec<_> {
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect()
    };
    assert_eq!(left(r.rooms()), [".owners"], "homes left");
    assert!(left(r.rooms().join(".owners")).is_empty(), "owner files left");
    // Each workdir a harness wrote went aside, whole, out of every room's reach.
    let kept = left(r.hostpath.join(".kept"));
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(!r.hostpath.join("victim").exists());
    r.uninstall().await;
}

fn condition_status(ws: &worksession::api::WorkSession, type_: &str) -> String {
    let conditions = ws.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    conditions.into_iter().find(|c| c.type_ == type_).map(|c| c.status).unwrap_or_default()
}
