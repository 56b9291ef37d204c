//! End-to-end: the node agent against the real API server and real tmux, with the harness stand-in.
//! Each test has its own namespace, node name, tmux server and agent.

mod scenarios;
mod standin;
mod support;
mod world;

use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use standin::seed_conversation;
use support::eventually;
use worksession::api::{Phase, PromptPhase, Via, WorkEvent, WorkSession};
use worksession::node::tmux::{Liveness, Tmux};
use world::{World, condition, recorded_id};

// The scenarios shared with local mode (tests/scenarios), registered from their one list.
shared_scenarios!(World::new().await, after);

/// What only the Kubernetes store shows, checked after a shared scenario.
async fn after(w: &World, scenario: &str) {
    match scenario {
        "shared_resume_the_same_conversation" => {
            let ws = w.sessions().get("alpha").await.unwrap();
            assert!(ws.finalizers().iter().any(|f| f == "worksession.dev/agent"));
            assert_eq!(ws.status.unwrap().respawn_count, 1);
        }
        "shared_a_pull_request_and_its_ci_reach_the_conversation_that_took_the_issue" => {
            // The failure past the bound is not sent, and the session's Events say why.
            let kube_events: Api<k8s_openapi::api::events::v1::Event> = w.ns.api();
            let bounded = eventually("a CIPromptsBounded Event", || async {
                let list = kube_events.list(&Default::default()).await.ok()?;
                list.items.into_iter().find(|e| e.reason.as_deref() == Some("CIPromptsBounded"))
            })
            .await;
            assert_eq!(bounded.regarding.as_ref().and_then(|r| r.name.as_deref()), Some("hello-12"));
            assert!(bounded.note.unwrap_or_default().contains("cccc333"), "it names the commit");
            let ws = w.sessions().get("hello-12").await.unwrap();
            assert!(ws.spec.archived, "the merge archived the work item");
        }
        "shared_workspaces_per_work_item_from_one_clone" => {
            let kube_events: Api<k8s_openapi::api::events::v1::Event> = w.ns.api();
            let kept = eventually("an Event saying what was kept", || async {
                let list = kube_events.list(&Default::default()).await.ok()?;
                list.items.into_iter().find(|e| e.reason.as_deref() == Some("WorkspaceKept"))
            })
            .await;
            assert!(kept.note.unwrap_or_default().contains("notes.txt"), "it names the uncommitted file");
        }
        "shared_an_unkind_harness_still_confirms_and_says_what_it_does" => {
            // A harness that waits for a person is a Warning Event, in its words.
            let kube_events: Api<k8s_openapi::api::events::v1::Event> = w.ns.api();
            let waiting = eventually("a WaitingForInput Event", || async {
                let list = kube_events.list(&Default::default()).await.ok()?;
                list.items.into_iter().find(|e| e.reason.as_deref() == Some("WaitingForInput"))
            })
            .await;
            assert_eq!(waiting.type_.as_deref(), Some("Warning"));
            let note = waiting.note.unwrap_or_default();
            assert!(note.contains("Standin needs your permission to use Bash"), "its words: {note}");
        }
        "shared_a_conversation_busy_elsewhere_waits_and_is_resumed" => {
            let kube_events: Api<k8s_openapi::api::events::v1::Event> = w.ns.api();
            let busy = eventually("a ResumeFailed Event for the busy conversation", || async {
                let list = kube_events.list(&Default::default()).await.ok()?;
                let busy = |e: &k8s_openapi::api::events::v1::Event| {
                    e.reason.as_deref() == Some("ResumeFailed")
                        && e.note.as_deref().is_some_and(|n| n.contains("is held by another process of the harness"))
                };
                list.items.into_iter().find(busy)
            })
            .await;
            let note = busy.note.unwrap_or_default();
            assert!(note.contains("never replaced by a fresh one"), "{note}");
        }
        _ => {}
    }
}

#[tokio::test]
async fn resume_disabled_respawns_fresh() {
    let w = World::new().await;
    w.create_session("delta", json!({"resume": {"enabled": false}})).await;
    let first = recorded_id(&w.await_phase("delta", Phase::Running).await);
    w.kill_harness("delta").await;
    w.send("delta", "delta-1", "again").await;
    let ev = w.await_event("delta-1", PromptPhase::Delivered).await;
    assert_eq!(ev.status.as_ref().unwrap().via, Some(Via::Fresh));
    let ws = w
        .await_session("delta", "a second conversation", |ws| ws.status.as_ref().is_some_and(|s| s.respawn_count == 1))
        .await;
    assert_ne!(recorded_id(&ws), first);
    assert_eq!(condition(&ws, "Resumed").map(|c| c.1), Some("ResumeDisabled".into()));
}

#[tokio::test]
async fn cursor_cannot_be_hosted_and_is_never_spawned() {
    let w = World::new().await;
    w.create_session("eps", json!({"harness": "cursor"})).await;
    let ws = w.await_phase("eps", Phase::Failed).await;
    let (status, reason, message) = condition(&ws, "Ready").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "HarnessCannotBeHosted"));
    assert!(message.contains("cursor"), "{message}");
    assert!(w.tmux.runner.observe().await.unwrap().is_empty());
}

#[tokio::test]
async fn always_with_a_crashing_harness_backs_off() {
    let w = World::new().await;
    w.create_session("eta", json!({"harness": "standin-crash", "restartPolicy": "Always"})).await;
    let ws = w
        .await_session("eta", "back-off after repeated crashes", |ws| {
            ws.status
                .as_ref()
                .is_some_and(|s| s.failure_count >= 2 && s.next_retry_time.is_some() && s.phase == Some(Phase::BackOff))
        })
        .await;
    let st = ws.status.clone().unwrap();
    assert!(st.last_failure_time.is_some());
    assert!(st.next_retry_time.unwrap().0 > st.last_failure_time.unwrap().0);
    assert_eq!(condition(&ws, "Ready").map(|c| c.1), Some("BackOff".into()));
}

#[tokio::test]
async fn another_nodes_session_is_left_alone() {
    let w = World::new().await;
    w.create_session("kappa", json!({"nodeName": "some-other-node"})).await;
    w.create_session("lambda", json!({})).await;
    w.send("kappa", "kappa-1", "not for us").await;
    w.await_phase("lambda", Phase::Running).await;
    w.send("lambda", "lambda-1", "sync point").await;
    w.await_event("lambda-1", PromptPhase::Delivered).await;
    let other = w.sessions().get("kappa").await.unwrap();
    assert!(other.status.is_none() && other.finalizers().is_empty());
    assert!(w.events().get("kappa-1").await.unwrap().status.is_none());
    assert_eq!(w.tmux.runner.observe().await.unwrap().liveness(&w.tmux_session("kappa")), Liveness::Absent);
}

#[tokio::test]
async fn two_events_at_once_for_a_dead_session_one_spawn_in_order() {
    let w = World::new().await;
    seed_conversation(&w.tmux.state(), "mu-conv");
    w.create_session("mu", json!({"harnessSessionId": "mu-conv"})).await;
    w.await_phase("mu", Phase::Running).await;
    w.kill_harness("mu").await;
    w.await_phase("mu", Phase::Pending).await;
    w.send("mu", "mu-1", "first").await;
    w.send("mu", "mu-2", "second").await;
    w.await_event("mu-1", PromptPhase::Delivered).await;
    w.await_event("mu-2", PromptPhase::Delivered).await;
    let prompts = w.tmux.await_prompts(2).await;
    let got: Vec<(&str, &str)> = prompts.iter().map(|p| (p.prompt.as_str(), p.conversation.as_str())).collect();
    assert_eq!(got, [("first", "mu-conv"), ("second", "mu-conv")], "in order, same conversation");
    assert_eq!(prompts[0].pid, prompts[1].pid, "one spawn");
}

#[tokio::test]
async fn huge_and_hostile_prompts_arrive_as_text() {
    let w = World::new().await;
    w.create_session("nu", json!({})).await;
    w.await_phase("nu", Phase::Running).await;
    w.kill_harness("nu").await;
    // 256 KiB for a dead session: too long for a command line, so the resume starts without it and it is pasted
    // once the harness is ready.
    let huge: String = "all work and no play ".repeat(256 * 1024 / 21 + 1)[..256 * 1024].to_string();
    w.send("nu", "nu-1", &huge).await;
    let ev = w.await_event("nu-1", PromptPhase::Delivered).await;
    assert_eq!(ev.status.unwrap().via, Some(Via::Pasted), "too long for a command line: pasted once ready");
    let marker = w.tmux.dir.path().join("pwned");
    let m = marker.display();
    let hostile = format!("$(touch {m}); `touch {m}` --dangerously-skip-permissions \u{1b}[201~ \u{3} tail;");
    w.send("nu", "nu-2", &hostile).await;
    w.await_event("nu-2", PromptPhase::Delivered).await;
    let prompts = w.tmux.await_prompts(2).await;
    assert_eq!(prompts[0].prompt.len(), huge.len());
    assert!(prompts[0].prompt == huge && prompts[0].via == "paste");
    let cleaned = format!("$(touch {m}); `touch {m}` --dangerously-skip-permissions [201~  tail;");
    assert_eq!(prompts[1].prompt, cleaned);
    assert!(!marker.exists(), "a prompt ran as a command");
}

#[tokio::test]
async fn a_tampered_recorded_id_is_not_resumed() {
    let mut w = World::new().await;
    w.create_session("xi", json!({})).await;
    w.await_phase("xi", Phase::Running).await;
    // Status has no schema pattern for the recorded id: the agent checks it before it becomes argv.
    w.stop_agent();
    let tamper = json!({"status": {"harnessSessionId": "--dangerously-skip-permissions"}});
    w.sessions().patch_status("xi", &PatchParams::default(), &Patch::Merge(&tamper)).await.unwrap();
    w.kill_harness("xi").await;
    w.start_agent();
    w.send("xi", "xi-1", "hello again").await;
    let ev = w.await_event("xi-1", PromptPhase::Delivered).await;
    assert_eq!(ev.status.unwrap().via, Some(Via::Fresh));
    let ws = w.await_phase("xi", Phase::Running).await;
    let (_, reason, message) = condition(&ws, "Resumed").unwrap();
    assert_eq!(reason, "InvalidSessionId");
    assert!(message.contains("--dangerously-skip-permissions"), "{message}");
    assert!(uuid::Uuid::parse_str(&recorded_id(&ws)).is_ok());
}

#[tokio::test]
async fn reports_events_metrics_and_health() {
    let mut w = World::new().await;
    let admin = w.restart_agent_with_admin().await;
    w.send("omicron", "omicron-1", "hi").await; // waiting before the session exists
    w.create_session("omicron", json!({"harnessSessionId": "ghost"})).await;
    // The boot prompt of the fresh conversation, or pasted into it when the labeler labelled the event after the
    // spawn was decided: either is the one delivery the metrics must count.
    let via = w.await_event("omicron-1", PromptPhase::Delivered).await.status.and_then(|s| s.via).unwrap();
    assert!(matches!(via, Via::Fresh | Via::Pasted), "the unknown id was never resumed: {via:?}");
    let delivered = format!("worksession_agent_events_delivered_total{{via=\"{}\"}} 1", via.as_str());

    let kube_events: Api<k8s_openapi::api::events::v1::Event> = w.ns.api();
    let reasons = eventually("Kubernetes Events on the WorkSession", || async {
        let list = kube_events.list(&Default::default()).await.ok()?;
        let reasons: Vec<String> = list.items.iter().filter_map(|e| e.reason.clone()).collect();
        (reasons.iter().any(|r| r == "ResumeFailed") && reasons.iter().any(|r| r == "Delivered")).then_some(reasons)
    })
    .await;
    assert!(reasons.iter().any(|r| r == "Started"), "{reasons:?}");

    let get = |path: &'static str| async move { support::http(admin, "GET", path, &[], b"").await.ok() };
    assert_eq!(get("/livez").await.unwrap().0, 200);
    let ready = eventually("/readyz", || async { get("/readyz").await.filter(|(status, _)| *status == 200) }).await;
    assert_eq!(ready.1, "ready");
    let lines = [
        "worksession_agent_resume_failures_total{reason=\"ConversationNotFound\"} 1",
        delivered.as_str(),
        "worksession_agent_reconcile_duration_seconds_count",
        "worksession_agent_reconciles_total",
        "worksession_agent_sessions{phase=\"Running\"} 1",
    ];
    // The counters move when the executor runs the op, just after the status write the test saw: wait for them.
    let metrics = support::poll("the metrics", support::WAIT, || async {
        let (_, metrics) = get("/metrics").await.ok_or("no answer")?;
        match lines.iter().find(|line| !metrics.contains(*line)) {
            None => Ok(metrics),
            Some(missing) => Err(format!("{missing} missing from\n{metrics}")),
        }
    })
    .await;
    assert!(
        metrics.contains("resume_failures_total{reason=\"PaneDied\"} 0"),
        "the unknown id was never resumed, and known reasons start at zero: {metrics}"
    );
}

#[tokio::test]
async fn delivered_events_are_deleted_after_the_retention() {
    let w = World::with_yaml(|_, yaml| yaml.replace("delivery:\n", "delivery:\n  retentionSeconds: 2\n")).await;
    w.create_session("pi", json!({})).await;
    w.await_phase("pi", Phase::Running).await;
    w.send("pi", "pi-1", "short-lived").await;
    w.await_event("pi-1", PromptPhase::Delivered).await;
    let events = w.events();
    eventually("pi-1 deleted after its retention", || async {
        events.get_opt("pi-1").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(w.prompts().iter().filter(|p| p.prompt == "short-lived").count(), 1);
}

// Isolation.

#[tokio::test]
async fn two_worksessions_of_one_name_in_two_namespaces_never_cross() {
    let w = World::new().await;
    w.create_session("shared", json!({})).await;
    let mine = recorded_id(&w.await_phase("shared", Phase::Running).await);
    w.tmux.await_output(&w.tmux_session("shared"), "ready>").await;
    let pid = w.tmux.pane_pid(&w.tmux_session("shared"));

    // The same name and work item on the same node, from another namespace: a tmux session of its own.
    let other = support::TestNamespace::new().await;
    let theirs: Api<WorkSession> = other.api();
    let spec = json!({"workItem": "shared", "nodeName": w.node, "harness": "standin", "workdir": w.tmux.workdir()});
    let ws: WorkSession = serde_json::from_value(json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkSession", "metadata": {"name": "shared"}, "spec": spec})).unwrap();
    theirs.create(&Default::default(), &ws).await.unwrap();
    let their_id = eventually("the second session running", || async {
        let ws = theirs.get("shared").await.ok()?;
        (world::phase_of(&ws) == Some(Phase::Running)).then(|| recorded_id(&ws))
    })
    .await;
    assert_ne!(their_id, mine, "a conversation of its own");
    let their_tmux = format!("loop-{}_shared", other.name);
    assert_eq!(w.tmux.runner.observe().await.unwrap().liveness(&their_tmux), Liveness::Alive);

    // Each event reaches its own session's conversation only.
    let events: Api<WorkEvent> = other.api();
    let ev: WorkEvent = serde_json::from_value(json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkEvent", "metadata": {"name": "theirs-1"}, "spec": {"session": "shared", "prompt": "not for you"}})).unwrap();
    events.create(&Default::default(), &ev).await.unwrap();
    w.send("shared", "mine-1", "for you").await;
    w.await_event("mine-1", PromptPhase::Delivered).await;
    eventually("their event delivered", || async {
        let phase = events.get("theirs-1").await.ok()?.status?.phase;
        (phase == Some(PromptPhase::Delivered)).then_some(())
    })
    .await;
    let prompts = w.prompts();
    let to = |text: &str| prompts.iter().find(|p| p.prompt == text).map(|p| p.conversation.clone());
    assert_eq!((to("for you"), to("not for you")), (Some(mine), Some(their_id)));

    // Deleting the second one leaves the first one's harness running.
    theirs.delete("shared", &Default::default()).await.unwrap();
    eventually("the second session gone", || async { theirs.get_opt("shared").await.ok()?.is_none().then_some(()) })
        .await;
    assert_eq!(w.tmux.pane_pid(&w.tmux_session("shared")), pid);
    let observed = w.tmux.runner.observe().await.unwrap();
    assert_eq!(
        (observed.liveness(&w.tmux_session("shared")), observed.liveness(&their_tmux)),
        (Liveness::Alive, Liveness::Absent)
    );
}

#[tokio::test]
async fn a_session_prefix_change_never_orphans_a_harness() {
    let mut w = World::new().await;
    w.create_session("pfx", json!({})).await;
    let id = recorded_id(&w.await_phase("pfx", Phase::Running).await);
    w.tmux.await_output(&w.tmux_session("pfx"), "ready>").await;
    let pid = w.tmux.pane_pid(&w.tmux_session("pfx"));
    w.restart_agent_with_yaml(|yaml| yaml.replacen("tmux:\n", "tmux:\n  sessionPrefix: ws-\n", 1));
    // The running harness keeps its conversation: the next event is pasted into it, same process.
    w.send("pfx", "pfx-1", "still there?").await;
    assert_eq!(w.await_event("pfx-1", PromptPhase::Delivered).await.status.unwrap().via, Some(Via::Pasted));
    assert_eq!(w.tmux.pane_pid(&w.tmux_session("pfx")), pid);
    // After a crash it resumes the same conversation under the new name, and the old session is gone.
    w.kill_harness("pfx").await;
    w.send("pfx", "pfx-2", "after the crash").await;
    let ev = w.await_event("pfx-2", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!((ev.via, ev.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())));
    let obs = w.tmux.runner.observe().await.unwrap();
    assert_eq!(
        (obs.liveness(&format!("ws-{}_pfx", w.ns.name)), obs.liveness(&w.tmux_session("pfx"))),
        (Liveness::Alive, Liveness::Absent)
    );
}

#[tokio::test]
async fn a_killed_tmux_server_is_never_replaced_by_the_agent() {
    let w = World::with_yaml(|_, yaml| yaml.replacen("tmux:\n", "tmux:\n  startServer: false\n", 1)).await;
    // tmux runs on its own (as the chart's tmux container does): a keeper session holds its server up.
    let keeper = || {
        let status = std::process::Command::new("tmux")
            .arg("-S")
            .arg(w.tmux.socket())
            .args(["new-session", "-d", "-s", "keeper", "sleep", "3600"])
            .status()
            .unwrap();
        assert!(status.success());
    };
    keeper();
    w.create_session("tu", json!({})).await;
    let id = recorded_id(&w.await_phase("tu", Phase::Running).await);
    w.tmux.await_output(&w.tmux_session("tu"), "ready>").await;

    let ready_reason =
        |reason: &'static str| move |ws: &WorkSession| condition(ws, "Ready").is_some_and(|c| c.1 == reason);
    w.tmux.kill_server();
    w.await_session("tu", "TmuxUnavailable", ready_reason("TmuxUnavailable")).await;
    // The server comes back empty (a restarted tmux container), then goes again: the harness was absent throughout,
    // and the agent still says the server is what is missing.
    keeper();
    w.await_session("tu", "HarnessNotRunning", ready_reason("HarnessNotRunning")).await;
    w.tmux.kill_server();
    w.await_session("tu", "TmuxUnavailable again", ready_reason("TmuxUnavailable")).await;
    w.send("tu", "tu-1", "are you there?").await;
    assert!(!w.tmux.runner.observe().await.unwrap().server, "the agent started no tmux server");

    keeper();
    let ev = w.await_event("tu-1", PromptPhase::Delivered).await.status.unwrap();
    assert_eq!((ev.via, ev.harness_session_id.as_deref()), (Some(Via::Resumed), Some(id.as_str())));
}

// Operators' tools.

/// `worksession get` as its binary, with a kubeconfig whose context namespace is `namespace`.
fn get_command(namespace: &str, dir: &std::path::Path) -> std::process::Command {
    let mut kubeconfig = kube::config::Kubeconfig::read_from(&support::control_plane().kubeconfig).unwrap();
    for context in &mut kubeconfig.contexts {
        if let Some(c) = context.context.as_mut() {
            c.namespace = Some(namespace.to_string());
        }
    }
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_yaml_ng::to_string(&kubeconfig).unwrap()).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_worksession"));
    cmd.env("KUBECONFIG", path).arg("get");
    cmd
}

fn output(cmd: &mut std::process::Command) -> (bool, String) {
    let out = cmd.output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr))
}

#[tokio::test]
async fn get_follows_kubectl() {
    let w = World::new().await;
    w.create_session("ga", json!({})).await;
    w.await_phase("ga", Phase::Running).await;
    w.send("ga", "ga-1", "hello").await;
    w.await_event("ga-1", PromptPhase::Delivered).await;
    let dir = w.tmux.dir.path();
    let get = || get_command(&w.ns.name, dir);

    let (ok, table) = output(&mut get());
    assert!(ok && table.starts_with("NAME ") && table.contains("\nga ") && table.contains("Running"), "{table}");
    let (_, all) = output(get().arg("-A"));
    assert!(all.starts_with("NAMESPACE ") && all.contains(&format!("\n{} ", w.ns.name)), "{all}");
    let (_, elsewhere) = output(get().args(["-n", "kube-system"]));
    assert!(!elsewhere.contains("\nga "), "another namespace: {elsewhere}");
    let (_, yaml) = output(get().args(["ga", "-o", "yaml"]));
    assert!(yaml.contains("kind: WorkSession") && yaml.contains("phase: Running"), "{yaml}");
    let (_, json) = output(get().args(["-o", "json"]));
    assert_eq!(serde_json::from_str::<serde_json::Value>(&json).unwrap()["kind"], "List");
    let (ok, missing) = output(get().arg("nope"));
    assert!(!ok && missing.contains("worksession \"nope\" not found"), "{missing}");
    let (_, events) = output(get().args(["wev", "-o", "wide"]));
    assert!(events.contains("ga-1") && events.contains("Delivered") && events.contains("Pasted"), "{events}");

    // -w: the table, then a row per change.
    let mut watch = get().arg("-w").stdout(std::process::Stdio::piped()).spawn().unwrap();
    let stdout = watch.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find(|l| l.starts_with("gb ") && l.contains("Running"))
    });
    w.create_session("gb", json!({})).await;
    w.await_phase("gb", Phase::Running).await;
    // Bounded: without the row, the watch is killed (closing its output ends the reader) and the test fails.
    let seen = tokio::time::timeout(support::WAIT, tokio::task::spawn_blocking(move || lines.join().unwrap())).await;
    watch.kill().unwrap();
    watch.wait().unwrap();
    assert!(matches!(seen, Ok(Ok(Some(_)))), "a Running row for the new session");
}

/// An agent's watch carries only the WorkEvents of its node (a label selector), and events made by hand
/// without labels are labelled by the labeler and still delivered.
#[tokio::test]
async fn an_agent_watches_only_its_nodes_events_and_hand_made_ones_are_labelled() {
    let mut w = World::new().await;
    let admin = w.restart_agent_with_admin().await;
    let node_of = |ev: &WorkEvent| ev.labels().get(worksession::api::NODE_LABEL).cloned();

    // Another node's session (no agent runs for it here) and its hand-made events, labelled for that node first,
    // so they are in etcd before this node's event: a watch without the selector would see them before it.
    let far = json!({"nodeName": "elsewhere.example"});
    w.create_session("far", far).await;
    for i in 0..5 {
        w.send("far", &format!("far-{i}"), "not for this node").await;
    }
    for i in 0..5 {
        let name = format!("far-{i}");
        let ev = eventually(&format!("{name} labelled"), || async {
            w.events().get(&name).await.ok().filter(|ev| node_of(ev).is_some())
        })
        .await;
        assert_eq!(node_of(&ev).as_deref(), Some("elsewhere-example"));
    }

    w.create_session("near", json!({})).await;
    w.await_phase("near", Phase::Running).await;
    w.send("near", "near-1", "for this node").await;
    let ev = w.await_event("near-1", PromptPhase::Delivered).await;
    assert_eq!(node_of(&ev), Some(worksession::api::node_label_value(&w.node)));
    assert_eq!(w.prompts().iter().filter(|p| p.prompt.contains("for this node")).count(), 1);

    let notices = |addressed: &str| format!("worksession_agent_workevent_notices_total{{addressed=\"{addressed}\"}}");
    assert_eq!(
        support::metric(admin, &notices("false")).await,
        0.0,
        "another node's events reached this agent's watch"
    );
    assert!(
        support::metric(admin, &notices("true")).await >= 1.0,
        "this node's event woke the agent through its watch"
    );
    let far_status = w.events().get("far-0").await.unwrap().status;
    assert!(far_status.is_none(), "no agent touched another node's event: {far_status:?}");
}

/// With every session Running and no events, the agent reconciles nothing (so it makes no API requests
/// beyond its open watches) and one tmux call per poll observes every session.
#[tokio::test]
async fn an_idle_fleet_reconciles_nothing_and_polls_tmux_once_for_all_sessions() {
    const SESSIONS: usize = 8;
    let mut w = World::new().await;
    let admin = w.restart_agent_with_admin().await;
    for i in 0..SESSIONS {
        w.create_session(&format!("idle-{i}"), json!({})).await;
    }
    for i in 0..SESSIONS {
        w.await_phase(&format!("idle-{i}"), Phase::Running).await;
    }
    let observations = || support::metric(admin, "worksession_agent_tmux_observations_total");
    let polls = |n: f64| async move {
        let from = observations().await;
        eventually(&format!("{n} more tmux polls"), || async { (observations().await >= from + n).then_some(()) })
            .await;
    };
    // The reconciles the Running status writes woke (a watch notice each, one per session) finish: three polls go by
    // without one. Under load a notice can come seconds late (full runs counted 6 and 8 late ones after one quiet
    // poll); a session that kept reconciling never settles, and the assertion below fails.
    let reconciles = || support::metric(admin, "worksession_agent_reconciles_total");
    let (mut last, mut quiet) = (reconciles().await, 0);
    for _ in 0..40 {
        polls(1.0).await;
        let now = reconciles().await;
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
        if quiet == 3 {
            break;
        }
    }
    let (reconciles, observed) = (reconciles().await, observations().await);
    polls(3.0).await;
    assert_eq!(support::metric(admin, "worksession_agent_reconciles_total").await, reconciles, "a reconcile at rest");
    let calls = observations().await - observed;
    assert!(calls < SESSIONS as f64, "{calls} tmux calls over about 3 polls of {SESSIONS} sessions: one per session?");
}
