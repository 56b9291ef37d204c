//! The tmux runner against real tmux, on a private socket per test, with the harness stand-in.

mod standin;
mod support;

use standin::{TmuxServer, seed_conversation};
use support::until;
use worksession::agent::Observer;
use worksession::harness::Mode;
use worksession::node::tmux::{Liveness, Tmux, TmuxRunner};

/// A runner on `tmux`'s server whose every tmux call is a line of the log returned.
fn counting(tmux: &TmuxServer) -> (TmuxRunner, std::path::PathBuf) {
    let log = tmux.dir.path().join("calls.log");
    let wrapper = tmux.dir.path().join("tmux-wrapper");
    std::fs::write(&wrapper, format!("#!/bin/sh\necho \"$*\" >> '{}'\nexec tmux \"$@\"\n", log.display())).unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (TmuxRunner::new(Some(tmux.socket().to_path_buf())).with_binary(&wrapper), log)
}

#[tokio::test]
async fn no_server_means_every_session_is_absent() {
    let tmux = TmuxServer::new();
    let obs = tmux.runner.observe().await.unwrap();
    assert!(obs.is_empty());
    assert_eq!(obs.liveness("loop-x"), Liveness::Absent);
    tmux.runner.stop("loop-x", "test-owner").await.unwrap();
}

#[tokio::test]
async fn one_call_observes_many_sessions() {
    let tmux = TmuxServer::new();
    for i in 0..12 {
        let spawn = tmux.spawn_of(&format!("loop-{i}"), Mode::Fresh, &format!("conv-{i}"), None, &[]);
        tmux.runner.spawn(&spawn).await.unwrap();
    }
    seed_conversation(&tmux.state(), "known");
    let dead = tmux.spawn_of("loop-dead", Mode::Resume, "unknown", None, &[]);
    tmux.runner.spawn(&dead).await.unwrap();
    tmux.await_liveness("loop-dead", Liveness::Dead).await;

    // Count tmux invocations through a wrapper: one observation is one call.
    let (counted, log) = counting(&tmux);
    let obs = counted.observe().await.unwrap();

    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1, "one tmux call");
    assert_eq!(obs.len(), 13);
    for i in 0..12 {
        assert_eq!(obs.liveness(&format!("loop-{i}")), Liveness::Alive, "loop-{i}");
    }
    assert_eq!(obs.liveness("loop-dead"), Liveness::Dead);
    assert_eq!(obs.liveness("loop-none"), Liveness::Absent);
}

#[tokio::test]
async fn spawn_clears_a_stale_session_of_the_same_name() {
    let tmux = TmuxServer::new();
    tmux.runner.spawn(&tmux.spawn_of("loop-a", Mode::Fresh, "first", Some("one"), &[])).await.unwrap();
    let first = tmux.await_prompts(1).await;
    tmux.runner.spawn(&tmux.spawn_of("loop-a", Mode::Fresh, "second", Some("two"), &[])).await.unwrap();
    let prompts = tmux.await_prompts(2).await;

    assert_eq!(prompts[1].conversation, "second");
    let first_proc = std::path::PathBuf::from(format!("/proc/{}", first[0].pid));
    until("the stale harness to be gone", || async { !first_proc.exists() }).await;
    let obs = tmux.runner.observe().await.unwrap();
    assert_eq!((obs.len(), obs.liveness("loop-a")), (1, Liveness::Alive));
}

/// A dead session respawned over, when it is the server's only one: one tmux call, the server stays up through it
/// (it never has no session), and nothing of the old one is left beside the new one.
#[tokio::test]
async fn a_clearing_spawn_of_the_only_session_is_one_call_and_leaves_nothing_behind() {
    let tmux = TmuxServer::new();
    tmux.runner.spawn(&tmux.spawn_of("loop-only", Mode::Resume, "no-such-conv", None, &[])).await.unwrap();
    tmux.await_liveness("loop-only", Liveness::Dead).await;
    let (counted, log) = counting(&tmux);

    counted.spawn(&tmux.spawn_of("loop-only", Mode::Fresh, "second", None, &[])).await.unwrap();
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1, "one tmux call");
    tmux.await_output("loop-only", "ready>").await;
    let obs = tmux.runner.observe().await.unwrap();
    let sessions: Vec<&str> = obs.sessions().map(|(name, _)| name).collect();
    assert_eq!(sessions, ["loop-only"], "the new session alone");
    assert_eq!(obs.session("loop-only").map(|v| v.spawn.as_str()), Some("spawn-second"));
}

/// A spawn told no session of its name is there asks tmux to clear nothing; one found there all the same (made
/// since the observation) is cleared as any other: its owner's is replaced, another owner's stays and the spawn fails.
#[tokio::test]
async fn a_spawn_told_of_no_session_still_meets_one_as_a_clearing_spawn_would() {
    let tmux = TmuxServer::new();
    tmux.runner.spawn(&tmux.spawn_of("loop-c", Mode::Resume, "no-such-conv", None, &[])).await.unwrap();
    tmux.await_liveness("loop-c", Liveness::Dead).await;
    let blind = |owner: &str, id: &str| worksession::node::tmux::Spawn {
        clear: false,
        owner: owner.into(),
        ..tmux.spawn_of("loop-c", Mode::Fresh, id, None, &[])
    };
    let refused = tmux.runner.spawn(&blind("another-owner", "theirs")).await.unwrap_err();
    assert!(refused.to_string().contains("duplicate session"), "{refused}");
    assert_eq!(tmux.runner.observe().await.unwrap().liveness("loop-c"), Liveness::Dead, "another owner's stays");
    tmux.runner.spawn(&blind("test-owner", "second")).await.unwrap();
    tmux.await_output("loop-c", "ready>").await;
    let obs = tmux.runner.observe().await.unwrap();
    assert_eq!(obs.session("loop-c").map(|v| v.spawn.as_str()), Some("spawn-second"), "the owner's replaced");
}

#[tokio::test]
async fn a_dead_pane_keeps_its_last_lines() {
    let tmux = TmuxServer::new();
    tmux.runner.spawn(&tmux.spawn_of("loop-r", Mode::Resume, "no-such-conv", Some("hello"), &[])).await.unwrap();
    tmux.await_liveness("loop-r", Liveness::Dead).await;
    let out = tmux.runner.last_lines("loop-r", 5).await.unwrap();
    assert_eq!(out.lines().last(), Some("No conversation found with session ID: no-such-conv"), "{out}");
    assert!(!out.contains("Pane is dead"), "tmux's own marker is dropped: {out}");
    assert!(tmux.prompts().is_empty(), "an unknown conversation receives nothing");
}

#[tokio::test]
async fn paste_reaches_a_live_pane_verbatim() {
    let tmux = TmuxServer::new();
    seed_conversation(&tmux.state(), "conv-p");
    tmux.runner.spawn(&tmux.spawn_of("loop-p", Mode::Resume, "conv-p", None, &[])).await.unwrap();
    tmux.await_output("loop-p", "ready>").await;

    let marker = tmux.dir.path().join("pwned");
    let hostile = format!("$(touch {m}); touch {m} && echo pwned;", m = marker.display());
    let texts = [
        "first line\nsecond line with \"quotes\" and 'single' and `ticks`",
        &hostile,
        "-p --dangerously-skip-permissions",
        &"long ".repeat(40_000), // 200 KB
    ];
    for text in texts {
        tmux.runner.paste("loop-p", text, "p").await.unwrap();
    }
    let prompts = tmux.await_prompts(texts.len()).await;
    let got: Vec<&str> = prompts.iter().map(|p| p.prompt.as_str()).collect();
    assert_eq!(got, texts);
    assert!(prompts.iter().all(|p| p.conversation == "conv-p" && p.via == "paste"));
    assert!(!marker.exists(), "a pasted prompt ran as a command");
}

#[tokio::test]
async fn prompts_and_ids_are_argv_never_shell_or_flags() {
    let tmux = TmuxServer::new();
    let marker = tmux.dir.path().join("pwned");
    let nasty = [
        format!("$(touch {m}); touch {m}; `touch {m}`", m = marker.display()),
        "--dangerously-skip-permissions".to_string(),
        "ends with a semicolon;".to_string(),
        ";".to_string(),
        "back\\;slash".to_string(),
        "unicode ✓ and\ttab and \"quotes\" and 'single' * ? [x]".to_string(),
    ];
    for (i, prompt) in nasty.iter().enumerate() {
        let spawn = tmux.spawn_of(&format!("loop-{i}"), Mode::Fresh, &format!("c{i}"), Some(prompt), &[]);
        tmux.runner.spawn(&spawn).await.unwrap();
    }
    let mut prompts = tmux.await_prompts(nasty.len()).await;
    prompts.sort_by(|a, b| a.conversation.cmp(&b.conversation));
    for (i, prompt) in nasty.iter().enumerate() {
        assert_eq!(
            (prompts[i].conversation.as_str(), prompts[i].prompt.as_str(), prompts[i].via.as_str()),
            (format!("c{i}").as_str(), prompt.as_str(), "argv")
        );
    }
    assert!(!marker.exists(), "nothing ran through a shell");
    let obs = tmux.runner.observe().await.unwrap();
    assert_eq!(obs.len(), nasty.len(), "a trailing ';' never split the tmux command");
}

#[tokio::test]
async fn spawn_refuses_a_missing_workdir() {
    let tmux = TmuxServer::new();
    let mut spawn = tmux.spawn_of("loop-w", Mode::Fresh, "w", None, &[]);
    spawn.workdir = tmux.dir.path().join("missing");
    let err = tmux.runner.spawn(&spawn).await.unwrap_err();
    assert_eq!(err.category().as_str(), "workdir");
    assert!(tmux.runner.observe().await.unwrap().is_empty());
    // A real directory whose name holds a tmux format: tmux would run it (`new-session -c` expands `#(...)`).
    let marker = tmux.dir.path().join("pwned");
    let hostile = tmux.dir.path().join(format!("x#(touch {})", marker.display()));
    std::fs::create_dir_all(&hostile).unwrap();
    spawn.workdir = hostile;
    assert_eq!(tmux.runner.spawn(&spawn).await.unwrap_err().category().as_str(), "workdir");
    assert!(!marker.exists(), "a workdir ran as a command");
}

#[tokio::test]
async fn paste_into_a_dead_pane_fails_and_the_server_survives() {
    let tmux = TmuxServer::new();
    tmux.runner.spawn(&tmux.spawn_of("loop-live", Mode::Fresh, "live", None, &[])).await.unwrap();
    tmux.runner.spawn(&tmux.spawn_of("loop-gone", Mode::Resume, "gone", None, &[])).await.unwrap();
    tmux.await_liveness("loop-gone", Liveness::Dead).await;
    let err = tmux.runner.paste("loop-gone", "hello", "g").await.unwrap_err();
    assert!(err.to_string().contains("dead"), "{err}");
    let obs = tmux.runner.observe().await.unwrap();
    assert_eq!((obs.liveness("loop-live"), obs.liveness("loop-gone")), (Liveness::Alive, Liveness::Dead));
    assert!(tmux.prompts().is_empty());
}

#[tokio::test]
async fn spawn_and_paste_tags_are_in_the_one_observation() {
    let tmux = TmuxServer::new();
    tmux.runner.spawn(&tmux.spawn_of("loop-tag", Mode::Fresh, "conv-tag", None, &[])).await.unwrap();
    let obs = tmux.runner.observe().await.unwrap();
    let view = obs.session("loop-tag").expect("observed");
    assert_eq!((view.spawn.as_str(), view.pasted.as_str()), ("spawn-conv-tag", ""), "tagged by the spawn's own call");
    tmux.await_output("loop-tag", "ready>").await;
    tmux.runner.paste("loop-tag", "hello", "ev-1").await.unwrap();
    let obs = tmux.runner.observe().await.unwrap();
    assert_eq!(obs.session("loop-tag").map(|v| v.pasted.as_str()), Some("ev-1"), "tagged by the paste's own call");
    assert_eq!(tmux.await_prompts(1).await[0].prompt, "hello");
    // The screen is what a person attached would see.
    assert!(tmux.runner.screen("loop-tag").await.unwrap().contains("ready>"));
}

#[tokio::test]
async fn observations_and_screens_hold_without_a_utf8_locale() {
    // As in a container image without LANG: tmux would print tabs and non-ASCII as `_`.
    let tmux = TmuxServer::new();
    let wrapper = tmux.dir.path().join("tmux-c-locale");
    std::fs::write(&wrapper, "#!/bin/sh\nexec env -u LANG -u LC_ALL -u LC_CTYPE LANG=C tmux \"$@\"\n").unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let runner = TmuxRunner::new(Some(tmux.socket().to_path_buf())).with_binary(&wrapper);
    runner.spawn(&tmux.spawn_of("loop-c", Mode::Fresh, "conv-c", None, &[])).await.unwrap();
    let obs = runner.observe().await.unwrap();
    let view = obs.session("loop-c").expect("observed without a UTF-8 locale");
    assert_eq!((view.alive, view.spawn.as_str()), (true, "spawn-conv-c"));
    // A harness printing what Claude Code's TUI prints: its screen reads back as it was printed.
    let mut printer = tmux.spawn_of("loop-u", Mode::Fresh, "conv-u", None, &[]);
    printer.binary = "python3".into();
    printer.argv = vec!["-c".into(), r"print('h\u00e9llo \u276f', flush=True); import time; time.sleep(60)".into()];
    runner.spawn(&printer).await.unwrap();
    until("the pane to read back in UTF-8", || async { runner.screen("loop-u").await.unwrap().contains("héllo ❯") })
        .await;
}

#[tokio::test]
async fn stop_and_spawn_leave_another_owners_session_alone() {
    let tmux = TmuxServer::new();
    tmux.runner.spawn(&tmux.spawn_of("loop-shared", Mode::Fresh, "conv-a", None, &[])).await.unwrap();
    tmux.await_output("loop-shared", "ready>").await;
    let pid = tmux.pane_pid("loop-shared");
    // Another object's stop, and another object's spawn (which clears a stale session first), change nothing.
    tmux.runner.stop("loop-shared", "another-owner").await.unwrap();
    let theirs = worksession::node::tmux::Spawn {
        owner: "another-owner".into(),
        ..tmux.spawn_of("loop-shared", Mode::Fresh, "conv-b", None, &[])
    };
    let refused = tmux.runner.spawn(&theirs).await.unwrap_err();
    assert!(refused.to_string().contains("duplicate session"), "{refused}");
    assert_eq!(tmux.pane_pid("loop-shared"), pid, "the owner's harness still runs");
    let obs = tmux.runner.observe().await.unwrap();
    assert_eq!(obs.session("loop-shared").map(|v| v.owner.as_str()), Some("test-owner"));
    // Its owner's stop does stop it.
    tmux.runner.stop("loop-shared", "test-owner").await.unwrap();
    assert_eq!(tmux.runner.observe().await.unwrap().liveness("loop-shared"), Liveness::Absent);
}

#[tokio::test]
async fn without_starting_a_server_no_server_is_reported_and_none_is_started() {
    let tmux = TmuxServer::new();
    let runner = TmuxRunner::new(Some(tmux.socket().to_path_buf())).with_start_server(false);
    let obs = runner.observe().await.unwrap();
    assert!(!obs.server, "no server answers");
    let err = runner.spawn(&tmux.spawn_of("loop-n", Mode::Fresh, "conv-n", None, &[])).await.unwrap_err();
    assert!(!err.to_string().is_empty());
    assert!(!tmux.runner.observe().await.unwrap().server, "tmux -N started nothing");
    // With a server up, the same runner works.
    tmux.runner.spawn(&tmux.spawn_of("loop-up", Mode::Fresh, "conv-up", None, &[])).await.unwrap();
    assert!(runner.observe().await.unwrap().server);
    runner.spawn(&tmux.spawn_of("loop-n", Mode::Fresh, "conv-n", None, &[])).await.unwrap();
    tmux.await_output("loop-n", "ready>").await;
}

/// A test's tmux server takes with it every process its panes started, also one that left the pane's process group
/// and session (a daemon, as Codex CLI starts one): a suite run again and again leaves nothing behind.
#[tokio::test]
async fn a_test_server_ends_every_process_its_panes_started_daemons_included() {
    let tmux = TmuxServer::new();
    let dir = tmux.dir.path().to_path_buf();
    let daemon = "setsid sh -c 'exec sleep 600' </dev/null >/dev/null 2>&1 & exec sleep 600";
    let status = std::process::Command::new("tmux")
        .arg("-S")
        .arg(tmux.socket())
        .args(["new-session", "-d", "-s", "loop-daemon", "sh", "-c", daemon])
        .status()
        .unwrap();
    assert!(status.success());
    let sleeps = || {
        let comm = |pid: &i32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        standin::processes_under(&dir).iter().filter(|pid| comm(pid).trim() == "sleep").count()
    };
    until("the pane's sleep and its daemon", || async { sleeps() == 2 }).await;
    drop(tmux);
    until("nothing of the server left", || async { standin::processes_under(&dir).is_empty() }).await;
}

#[tokio::test]
async fn the_observer_counts_the_server_going_and_coming_back_whoever_looks() {
    let tmux = TmuxServer::new();
    let observer = Observer::new(TmuxRunner::new(Some(tmux.socket().to_path_buf())).with_start_server(false));
    let look = || observer.since(std::time::Instant::now());
    assert!(!look().await.unwrap().server);
    tmux.runner.spawn(&tmux.spawn_of("loop-up", Mode::Fresh, "conv-up", None, &[])).await.unwrap();
    assert!(look().await.unwrap().server);
    assert!(look().await.unwrap().server);
    assert_eq!(observer.server_changes(), 1, "came back once");
    assert!(tmux.kill_server());
    assert!(!look().await.unwrap().server);
    assert_eq!(observer.server_changes(), 2, "and went once");
}

/// A session last seen dead or absent is not looked at again until this agent touches it (only its spawn makes it
/// live); a live one always is (its harness may have died since), and so is one touched since the last look, even
/// for a reconcile that began before that look.
#[tokio::test]
async fn the_observer_looks_again_for_a_live_or_touched_session_only() {
    let tmux = TmuxServer::new();
    tmux.runner.spawn(&tmux.spawn_of("loop-live", Mode::Fresh, "conv-live", None, &[])).await.unwrap();
    tmux.runner.spawn(&tmux.spawn_of("loop-dead", Mode::Resume, "no-such-conv", None, &[])).await.unwrap();
    tmux.await_liveness("loop-dead", Liveness::Dead).await;
    let observer = Observer::new(TmuxRunner::new(Some(tmux.socket().to_path_buf())));
    let first = observer.since(std::time::Instant::now()).await.unwrap();
    let look = |sessions: &'static [&'static str]| observer.since_unless_settled(std::time::Instant::now(), sessions);
    let same = |obs: &std::sync::Arc<worksession::node::tmux::Observation>| std::sync::Arc::ptr_eq(obs, &first);

    assert!(same(&look(&["loop-dead", "loop-none"]).await.unwrap()), "dead and absent: the last look stands");
    assert!(!same(&look(&["loop-dead", "loop-live"]).await.unwrap()), "a live one: looked at again");
    let second = observer.since(std::time::Instant::now()).await.unwrap();
    observer.touched("loop-dead");
    let third = look(&["loop-dead"]).await.unwrap();
    assert!(!std::sync::Arc::ptr_eq(&third, &second), "touched since: looked at again");
    assert!(std::sync::Arc::ptr_eq(&look(&["loop-dead"]).await.unwrap(), &third), "and that look stands");
    // A reconcile that began before a look that began before a touch (another reconcile's spawn, whose turn came
    // first) does not take that look for the touched session.
    let began = std::time::Instant::now();
    let before_the_touch = observer.since(std::time::Instant::now()).await.unwrap();
    observer.touched("loop-live");
    let after = observer.since_unless_settled(began, &["loop-live"]).await.unwrap();
    assert!(!std::sync::Arc::ptr_eq(&after, &before_the_touch), "a look from before the touch does not stand for it");
}

/// No key or name sits in a string tmux parses as commands unless it is a plain word. A WorkEvent
/// named `x ; run-shell 'touch <marker>'` (local mode read names unchecked) was spliced into the paste's `if-shell`
/// command and ran a shell command in the tmux server; now the paste is refused, nothing runs, and the pane gets
/// nothing.
#[tokio::test]
async fn a_hostile_key_or_session_name_never_becomes_a_tmux_command() {
    let tmux = TmuxServer::new();
    tmux.runner.spawn(&tmux.spawn_of("loop-h", Mode::Fresh, "conv-h", None, &[])).await.unwrap();
    tmux.await_output("loop-h", "ready>").await;
    let marker = tmux.state().join("pwned");
    let hostile = [
        format!("x ; run-shell 'touch {}'", marker.display()),
        format!("x;run-shell \"touch {}\"", marker.display()),
        "initial Prompt".to_string(),
        "$HOME".to_string(),
        "#{pane_pid}".to_string(),
        "-t".to_string(),
    ];
    for key in &hostile {
        let e = tmux.runner.paste("loop-h", "hello", key).await.unwrap_err();
        assert!(e.to_string().contains("is not a plain word"), "{key:?}: {e}");
        let e = tmux.runner.stop(&format!("loop-h ; run-shell 'touch {}'", marker.display()), "owner").await;
        assert!(e.is_err(), "a session name that is not a word is refused");
        let e = tmux.runner.stop("loop-h", key).await.unwrap_err();
        assert!(e.to_string().contains("not a plain word"), "{key:?}: {e}");
    }
    // A plain key works, and proves the paths above were live.
    tmux.runner.paste("loop-h", "hello", "9f1c2d3e-uid").await.unwrap();
    let prompts = tmux.await_prompts(1).await;
    assert_eq!(prompts.iter().map(|p| p.prompt.as_str()).collect::<Vec<_>>(), ["hello"], "only the plain paste");
    let observed = tmux.runner.observe().await.unwrap();
    assert_eq!(observed.session("loop-h").map(|v| v.pasted.as_str()), Some("9f1c2d3e-uid"));
    assert!(!marker.exists(), "no shell command ran in the tmux server");
}

/// On this machine's real tmux (the tests run as root): a confined spawn enters its room through
/// `worksession room` and the harness runs as the room's uid and gid with no other group and no capability, in its
/// workdir, with the room's HOME and TMPDIR, a private umask and no `TMUX`, and no abstract socket made outside the
/// room within its reach (this kernel scopes them); a room that cannot be entered (its HOME
/// missing a TMPDIR the agent makes) is a dead pane that says why, not a harness running as root.
#[tokio::test]
async fn a_confined_spawn_runs_as_its_rooms_user_in_its_workdir() {
    if rustix_uid() != 0 {
        return; // entering a room takes root's SETUID; the test command runs as root
    }
    let tmux = TmuxServer::new();
    let (home, workdir) = room_of(&tmux, 4_000_123);
    // An abstract UNIX socket made outside the room (another room's, say): out of its reach, without egress too.
    use std::os::linux::net::SocketAddrExt;
    let abstract_name = format!("worksession-room-{}", std::process::id());
    let address = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
    let _abstract_listener = std::os::unix::net::UnixListener::bind_addr(&address).unwrap();
    let connect = format!(
        "python3 -c 'import socket\ntry:\n socket.socket(socket.AF_UNIX).connect(\"\\0{abstract_name}\"); print(\"ok\")\nexcept OSError as e: print(type(e).__name__)'"
    );
    let script = format!(
        "{{ id -u; id -g; id -G; pwd; echo \"$HOME\"; echo \"$TMPDIR\"; umask; echo \"TMUX=${{TMUX:-}}\"; {connect}; \
         grep CapEff /proc/self/status; }} > report; sleep 60"
    );
    let mut spawn = tmux.spawn_of("loop-room", Mode::Fresh, "conv-room", None, &[]);
    (spawn.workdir, spawn.binary, spawn.argv) = (workdir.clone(), "/bin/sh".into(), vec!["-c".into(), script]);
    spawn.confine = Some(worksession::node::tmux::Confine {
        helper: env!("CARGO_BIN_EXE_worksession").into(),
        uid: 4_000_123,
        home: home.clone(),
        egress_port: None,
        env: Vec::new(),
        keys: None,
    });
    tmux.runner.spawn(&spawn).await.unwrap();
    let report = workdir.join("report");
    until("the confined harness's report", || async {
        std::fs::read_to_string(&report).is_ok_and(|r| r.contains("CapEff"))
    })
    .await;
    let text = std::fs::read_to_string(&report).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (home_s, tmp_s, work_s) =
        (home.display().to_string(), home.join(".tmp").display().to_string(), workdir.display().to_string());
    assert_eq!(
        lines[..9],
        [
            "4000123",
            "4000123",
            "4000123",
            work_s.as_str(),
            home_s.as_str(),
            tmp_s.as_str(),
            "0077",
            "TMUX=",
            "PermissionError"
        ],
        "{text}"
    );
    assert_eq!(lines[9].split_whitespace().nth(1), Some("0000000000000000"), "{text}");
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&report).unwrap()), 4_000_123);

    // Its processes, a child that left the tmux session included, are all gone once the room is evicted.
    tmux.runner.stop("loop-room", "test-owner").await.unwrap();
    let confine = spawn.confine.clone().unwrap();
    let mut orphan = spawn.clone();
    (orphan.session, orphan.argv) = ("loop-orphan".into(), vec!["-c".into(), "setsid sleep 600 & sleep 600".into()]);
    tmux.runner.spawn(&orphan).await.unwrap();
    until("the orphan running", || async { processes_of(4_000_123) >= 2 }).await;
    tmux.runner.stop("loop-orphan", "test-owner").await.unwrap();
    until("the tmux session gone", || async {
        tmux.runner.observe().await.unwrap().liveness("loop-orphan") == Liveness::Absent
    })
    .await;
    assert!(processes_of(4_000_123) >= 1, "the setsid child outlived its tmux session");
    tmux.runner.evict(&confine).await.unwrap();
    until("no process of the room", || async { processes_of(4_000_123) == 0 }).await;

    // A room it cannot enter: the pane dies saying why; nothing ran as root.
    std::fs::remove_dir_all(&workdir).unwrap();
    std::fs::create_dir_all(&workdir).unwrap();
    spawn.session = "loop-room-2".into();
    spawn.confine.as_mut().unwrap().uid = 0;
    tmux.runner.spawn(&spawn).await.unwrap();
    tmux.await_liveness("loop-room-2", Liveness::Dead).await;
    // Awaited, not read once: tmux may mark the pane dead before it has read the last of its output (seen once).
    tmux.await_output("loop-room-2", "worksession room").await;
    assert!(!workdir.join("report").exists(), "nothing ran");
}

/// A room's eviction runs its shell with no environment of a session's: tmux hands a job the environment of a session
/// it picks, and another tenant's keys may be there, where the uid evicted could read them before the kill lands.
#[tokio::test]
async fn an_eviction_holds_no_sessions_environment() {
    let tmux = TmuxServer::new();
    let mut keyed = tmux.spawn_of("loop-keyed", Mode::Fresh, "conv-keyed", None, &[]);
    (keyed.binary, keyed.argv) = ("/bin/sh".into(), vec!["-c".into(), "sleep 600".into()]);
    keyed.env = vec![("TENANT_TOKEN".into(), "another-tenants-key".into())];
    tmux.runner.spawn(&keyed).await.unwrap();
    tmux.await_liveness("loop-keyed", Liveness::Alive).await;
    // The helper the eviction runs, as a witness: it writes the environment it was given.
    let seen = tmux.dir.path().join("evicted-with");
    let helper = tmux.dir.path().join("helper");
    std::fs::write(&helper, format!("#!/bin/sh\nenv > {}\n", seen.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = tmux.dir.path().join("evicted-home");
    let (uid, egress_port, env) = (4_000_125, None, Vec::new());
    let keys = None;
    tmux.runner.evict(&worksession::node::tmux::Confine { helper, uid, home, egress_port, env, keys }).await.unwrap();
    let environment = std::fs::read_to_string(&seen).expect("the helper ran");
    assert!(!environment.contains("another-tenants-key"), "{environment}");
}

/// How many processes run as `uid`.
fn processes_of(uid: u32) -> usize {
    let entries = std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok());
    let statuses = entries.filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok());
    statuses
        .filter(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some(&uid.to_string())))
        .count()
}

fn rustix_uid() -> u32 {
    std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(u32::MAX)
}

/// A room's `HOME` (with its `.tmp`) and workdir under `tmux`'s directory, the room's `uid`'s and closed, as the
/// agent gives them.
fn room_of(tmux: &TmuxServer, uid: u32) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let (home, workdir) = (tmux.dir.path().join("room"), tmux.dir.path().join("work"));
    for dir in [&home, &home.join(".tmp"), &workdir] {
        std::fs::create_dir_all(dir).unwrap();
        std::os::unix::fs::chown(dir, Some(uid), Some(uid)).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    (home, workdir)
}

/// A room with an egress port: its harness (and what it starts) may open TCP connections to that port alone, held
/// by the kernel (Landlock, and seccomp for the sockets Landlock does not see); a listener of the node on any other
/// port, loopback's included, is out of its reach however it asks, it may listen on none, and its proxy variables
/// name the port; a gateway's variable reaches it.
#[tokio::test]
async fn a_confined_harness_connects_only_to_the_egress_port() {
    if rustix_uid() != 0 {
        return; // entering a room takes root's SETUID; the test command runs as root
    }
    let (proxy, other) =
        (std::net::TcpListener::bind("127.0.0.1:0").unwrap(), std::net::TcpListener::bind("127.0.0.1:0").unwrap());
    let (proxy_port, other_port) = (proxy.local_addr().unwrap().port(), other.local_addr().unwrap().port());
    // A resolver, or any server that takes datagrams: a way out Landlock does not hold.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    // Another room's abstract UNIX socket, as a harness's language server might listen on one: a name in the network
    // namespace every room shares, which no file permission guards.
    use std::os::linux::net::SocketAddrExt;
    let abstract_name = format!("worksession-test-{}", std::process::id());
    let address = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
    let _abstract_listener = std::os::unix::net::UnixListener::bind_addr(&address).unwrap();
    let tmux = TmuxServer::new();
    let (home, workdir) = room_of(&tmux, 4_000_124);
    // Each way out it tries, and what it got: `ok` or the error's name.
    let script = format!(
        r#"import os, socket
def attempt(action):
    try:
        action()
        return "ok"
    except OSError as e:
        return type(e).__name__
def connect(port):
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
def fast_open(port):
    socket.socket().sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", port))
tries = [
    attempt(lambda: connect({proxy_port})),
    attempt(lambda: connect({other_port})),
    attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect(("127.0.0.1", {other_port}))),
    attempt(lambda: fast_open({other_port})),
    attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_SEQPACKET)),
    attempt(lambda: socket.socket(40, socket.SOCK_STREAM)),
    attempt(lambda: socket.socket().bind(("127.0.0.1", 0))),
    attempt(lambda: socket.socket(socket.AF_UNIX).connect("\0{abstract_name}")),
    attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", {udp_port}))),
    attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM, socket.IPPROTO_UDP)),
    os.environ.get("HTTPS_PROXY"),
    os.environ.get("A_BASE_URL"),
]
open("report", "w").write(" ".join(tries) + "\n")
"#
    );
    let mut spawn = tmux.spawn_of("loop-egress", Mode::Fresh, "conv-egress", None, &[]);
    (spawn.workdir, spawn.binary, spawn.argv) = (workdir.clone(), "python3".into(), vec!["-c".into(), script]);
    spawn.confine = Some(worksession::node::tmux::Confine {
        helper: env!("CARGO_BIN_EXE_worksession").into(),
        uid: 4_000_124,
        home: home.clone(),
        egress_port: Some(proxy_port),
        env: vec![("A_BASE_URL".into(), format!("http://127.0.0.1:{proxy_port}/gateway/a"))],
        keys: None,
    });
    tmux.runner.spawn(&spawn).await.unwrap();
    let report = workdir.join("report");
    until("the confined harness's report", || async {
        std::fs::read_to_string(&report).is_ok_and(|r| r.ends_with('\n'))
    })
    .await;
    let text = std::fs::read_to_string(&report).unwrap();
    // The proxy's port; not another listener, by TCP, MPTCP or a Fast Open send; no SCTP (a sequenced packet socket)
    // nor VSOCK socket; no listener of its own; no abstract socket made outside the room (this kernel scopes them);
    // no UDP socket of either family, so no datagram out.
    let refused = ["PermissionError"; 9].join(" ");
    let expected = format!("ok {refused} http://127.0.0.1:{proxy_port} http://127.0.0.1:{proxy_port}/gateway/a");
    assert_eq!(text.trim(), expected, "{text}");
    udp.set_nonblocking(true).unwrap();
    assert!(udp.recv(&mut [0; 8]).is_err(), "no datagram reached the test's socket");
}
