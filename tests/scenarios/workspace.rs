//! Workspace scenarios, shared by both modes: real git against repositories made here, a bare origin over
//! `file://` and one served by `git http-backend` on loopback behind Basic authentication.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use super::{
    ConditionType, Phase, Rig, WorkSessionStatus, await_delivered, await_gone, await_phase, await_value, condition,
};
use worksession::node::tmux::{Liveness, Tmux};

#[path = "../fixtures/repos.rs"]
mod repos;
pub use repos::{git, origin};

async fn await_workspace(rig: &impl Rig, name: &str, status: &str, reason: &str) -> WorkSessionStatus {
    let what = format!("{name}: WorkspaceReady {status} {reason}");
    let wanted = |s: &WorkSessionStatus| {
        let (s_, r, _) = condition(s, ConditionType::WorkspaceReady);
        s_ == status && r == reason
    };
    await_value(&what, || rig.session_status(name), wanted).await
}

/// Two work items of one repository get one clone on the node and a checkout each (a repository of its own, which
/// the clone never shares), on their own branches from the right start; a crash and respawn never resets a
/// checkout; an existing checkout is adopted and anything else in the way left alone; deleting a session removes a
/// checkout that holds nothing a removal would lose, and keeps one with uncommitted work or a commit of its own.
pub async fn workspaces_per_work_item_from_one_clone(rig: &impl Rig) {
    let tmux = rig.tmux();
    let (root, work) = (tmux.state().join("origins"), tmux.state().join("checkouts"));
    std::fs::create_dir_all(&root).unwrap();
    let (bare, main, feature) = origin(&root, "api");
    let url = format!("file://{}", bare.display());
    let workdir = |name: &str| work.join(name);
    let session = |name: &str, reference: Option<&str>| json!({"workdir": workdir(name), "workspace": {"url": url, "ref": reference}});
    rig.create_session("wa", session("wa", None)).await;
    rig.create_session("wb", session("wb", Some("feature"))).await;
    for (name, commit) in [("wa", &main), ("wb", &feature)] {
        let st = await_phase(rig, name, Phase::Running).await;
        let (_, _, message) = condition(&st, ConditionType::WorkspaceReady);
        assert!(message.contains(commit.as_str()) && message.contains(&format!("worksession/{name}")), "{message}");
        assert_eq!(git(&workdir(name), &["rev-parse", "--abbrev-ref", "HEAD"]), format!("worksession/{name}"));
        assert_eq!(git(&workdir(name), &["rev-parse", "HEAD"]), *commit);
    }
    assert!(workdir("wa").join("README.md").exists() && !workdir("wa").join("FEATURE.md").exists());
    assert!(workdir("wb").join("FEATURE.md").exists(), "wb starts from its ref");
    let clones = std::fs::read_dir(tmux.state().join("repos")).unwrap().count();
    assert_eq!(clones, 1, "one clone per repository on the node");
    let clone = std::fs::read_dir(tmux.state().join("repos")).unwrap().next().unwrap().unwrap().path();
    let common = git(&workdir("wa"), &["rev-parse", "--path-format=absolute", "--git-common-dir"]);
    assert_eq!(Path::new(&common), workdir("wa").join(".git"), "a repository of its own, not a worktree of the clone");
    assert_eq!(git(&workdir("wa"), &["config", "remote.origin.url"]), url, "its origin is the spec's URL");

    // Uncommitted work survives a crash and the respawn that delivers the next event.
    std::fs::write(workdir("wa").join("notes.txt"), "work in progress\n").unwrap();
    tmux.kill_harness(&rig.tmux_session("wa")).await;
    rig.send("wa", "wa-1", "after the crash").await;
    await_delivered(rig, "wa-1").await;
    assert_eq!(std::fs::read_to_string(workdir("wa").join("notes.txt")).unwrap(), "work in progress\n");
    assert_eq!(git(&workdir("wa"), &["rev-parse", "HEAD"]), main, "never reset");

    // A checkout made by hand is adopted as it is; a directory that is no checkout is left alone.
    git(&work, &["clone", "-q", url.as_str(), workdir("wc").to_str().unwrap()]);
    std::fs::write(workdir("wc").join("mine.txt"), "by hand\n").unwrap();
    rig.create_session("wc", session("wc", None)).await;
    let st = await_workspace(rig, "wc", "True", "Prepared").await;
    assert!(condition(&st, ConditionType::WorkspaceReady).2.contains("adopted"), "{st:?}");
    assert!(workdir("wc").join("mine.txt").exists());
    std::fs::create_dir_all(workdir("wd")).unwrap();
    std::fs::write(workdir("wd").join("precious.txt"), "keep me\n").unwrap();
    rig.create_session("wd", session("wd", None)).await;
    let st = await_workspace(rig, "wd", "False", "PrepareFailed").await;
    assert!(condition(&st, ConditionType::WorkspaceReady).2.contains("is not a checkout"), "{st:?}");
    assert_eq!(std::fs::read_to_string(workdir("wd").join("precious.txt")).unwrap(), "keep me\n");

    // A commit in a checkout is its own: the node's clone never sees it.
    std::fs::write(workdir("wa").join("done.txt"), "a commit\n").unwrap();
    git(&workdir("wa"), &["add", "done.txt"]);
    git(&workdir("wa"), &["commit", "-q", "-m", "mine"]);
    let commit = git(&workdir("wa"), &["rev-parse", "HEAD"]);
    let seen = Command::new("git").arg("-C").arg(&clone).args(["cat-file", "-e", &commit]).status().unwrap();
    assert!(!seen.success(), "the node's clone has no object of a checkout's");

    // Deleting: a clean checkout goes; one with uncommitted work, or a commit on no remote branch, stays.
    rig.delete_session("wb").await;
    await_gone(rig, "wb").await;
    assert!(!workdir("wb").exists(), "the clean checkout is removed");
    assert_eq!(git(&clone, &["rev-parse", "refs/remotes/origin/feature"]), feature, "the clone is untouched");
    rig.delete_session("wa").await;
    await_gone(rig, "wa").await;
    assert!(workdir("wa").join("notes.txt").exists(), "a checkout with uncommitted work is kept");
    std::fs::remove_file(workdir("wa").join("notes.txt")).unwrap();
    rig.create_session("wa", session("wa", None)).await;
    await_phase(rig, "wa", Phase::Running).await;
    rig.delete_session("wa").await;
    await_gone(rig, "wa").await;
    assert!(workdir("wa").join("done.txt").exists(), "a checkout with a commit on no remote branch is kept");
}

/// A repository that cannot be read: the condition says what git printed, the session backs off, and nothing spawns.
pub async fn a_workspace_that_cannot_be_prepared_says_what_git_printed(rig: &impl Rig) {
    let tmux = rig.tmux();
    let url = format!("file://{}/nowhere.git", tmux.state().display());
    let workdir = tmux.state().join("checkouts/bad");
    rig.create_session("wbad", json!({"workdir": workdir, "workspace": {"url": url}})).await;
    let st = await_workspace(rig, "wbad", "False", "PrepareFailed").await;
    let (_, _, message) = condition(&st, ConditionType::WorkspaceReady);
    assert!(message.contains("does not appear to be a git repository") || message.contains("not found"), "{message}");
    assert_eq!(st.phase, Some(Phase::BackOff));
    assert!(st.next_retry_time.is_some(), "{st:?}");
    let observed = tmux.runner.observe().await.unwrap();
    assert_eq!(observed.liveness(&rig.tmux_session("wbad")), Liveness::Absent, "nothing spawned");
}

/// A workdir that is not there, with nothing to clone into it: the session says so (`Ready=False WorkdirMissing`,
/// naming it), starts nothing and backs off from nothing, and its prompt waits; once the directory is made, the
/// harness starts there and gets the prompt, sent once.
pub async fn a_missing_workdir_says_so_until_it_is_made(rig: &impl Rig) {
    let tmux = rig.tmux();
    let workdir = tmux.state().join("not-made-yet");
    rig.create_session("nowd", json!({"workdir": workdir})).await;
    rig.send("nowd", "nowd-1", "waits for its workdir").await;
    let missing = |s: &WorkSessionStatus| condition(s, ConditionType::Ready).1 == "WorkdirMissing";
    let st = await_value("nowd: Ready False WorkdirMissing", || rig.session_status("nowd"), missing).await;
    let (ready, _, message) = condition(&st, ConditionType::Ready);
    assert!(ready == "False" && message.contains(&workdir.display().to_string()), "{message}");
    assert_eq!((st.phase, st.failure_count), (Some(Phase::Pending), 0), "{st:?}");
    let observed = tmux.runner.observe().await.unwrap();
    assert_eq!(observed.liveness(&rig.tmux_session("nowd")), Liveness::Absent, "nothing spawned");
    std::fs::create_dir_all(&workdir).unwrap();
    assert_eq!(await_delivered(rig, "nowd-1").await.attempts, 1);
    assert_eq!(rig.session_status("nowd").await.failure_count, 0, "no failed spawn on the way");
}

/// A preparation that hangs (a server that accepts and never answers) holds up only its own session: it shows
/// `Preparing` while another session starts and gets its event, and deleting it stops the preparation.
pub async fn a_slow_preparation_never_holds_up_other_sessions(rig: &impl Rig) {
    let tmux = rig.tmux();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap(); // never accepted: git waits for an answer
    let url = format!("http://{}/slow.git", silent.local_addr().unwrap());
    let workdir = tmux.state().join("checkouts/slow");
    rig.create_session("wslow", json!({"workdir": workdir, "workspace": {"url": url}})).await;
    let st = await_workspace(rig, "wslow", "False", "Preparing").await;
    assert_eq!(st.phase, Some(Phase::Preparing));

    rig.create_session("wfast", json!({})).await;
    await_phase(rig, "wfast", Phase::Running).await;
    rig.send("wfast", "wfast-1", "not held up").await;
    await_delivered(rig, "wfast-1").await;
    assert_eq!(rig.session_status("wslow").await.phase, Some(Phase::Preparing), "still waiting on its own git");

    rig.delete_session("wslow").await;
    await_gone(rig, "wslow").await;
    drop(silent);
}

/// A repository served over HTTP behind Basic authentication: the token file the agent is configured with gets it
/// through; a wrong token fails with git's words and the token appears in no status.
pub async fn a_workspace_over_http_with_a_token(rig: &impl Rig) {
    let tmux = rig.tmux();
    let root = tmux.state().join("served");
    std::fs::create_dir_all(&root).unwrap();
    let (_, main, _) = origin(&root, "private");
    let token = format!("tok-{}", uuid::Uuid::new_v4().simple());
    let addr = serve(root, token.clone()).await;
    let url = format!("http://{addr}/private.git");
    let token_file = tmux.state().join("git-token");

    std::fs::write(&token_file, "wrong-token\n").unwrap();
    let spec = |name: &str| json!({"workdir": tmux.state().join("checkouts").join(name), "workspace": {"url": url}});
    rig.create_session("wdenied", spec("wdenied")).await;
    let st = await_workspace(rig, "wdenied", "False", "PrepareFailed").await;
    assert!(condition(&st, ConditionType::WorkspaceReady).2.contains("Authentication failed"), "{st:?}");
    assert!(!serde_json::to_string(&st).unwrap().contains("wrong-token"), "the token is in no status: {st:?}");

    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    rig.create_session("wprivate", spec("wprivate")).await;
    let st = await_phase(rig, "wprivate", Phase::Running).await;
    assert!(condition(&st, ConditionType::WorkspaceReady).2.contains(main.as_str()), "{st:?}");
    assert!(!serde_json::to_string(&st).unwrap().contains(&token), "the token is in no status");
    let remote = git(&tmux.state().join("checkouts/wprivate"), &["config", "--get", "remote.origin.url"]);
    assert!(!remote.contains(&token), "nor in the clone's config: {remote}");
}

/// Serves the bare repositories under `root` with `git http-backend`, for a client whose Basic password is `token`.
async fn serve(root: PathBuf, token: String) -> SocketAddr {
    serve_git(root, move |password| password == token).await.0
}

/// What a git server saw: each request it let through (its path and query) with the Basic password it carried.
pub type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;

/// Serves the bare repositories under `root` with `git http-backend` (pushes too) to a client user
/// `x-access-token` whose Basic password `accept` takes; the others are asked to authenticate.
pub async fn serve_git(root: PathBuf, accept: impl Fn(&str) -> bool + Send + Sync + 'static) -> (SocketAddr, Seen) {
    use axum::body::Body;
    use axum::http::Request;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let (accept, kept) = (std::sync::Arc::new(accept), seen.clone());
    let app = axum::Router::new()
        .fallback(move |request: Request<Body>| git_cgi(root.clone(), accept.clone(), kept.clone(), request));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

/// The password of a Basic `authorization` for user `x-access-token`.
fn password_of(authorization: &str) -> Option<String> {
    use base64::Engine;
    let encoded = authorization.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    String::from_utf8(decoded).ok()?.strip_prefix("x-access-token:").map(str::to_string)
}

/// One request to `git http-backend` (CGI), behind Basic authentication.
async fn git_cgi(
    root: PathBuf,
    accept: std::sync::Arc<impl Fn(&str) -> bool>,
    seen: Seen,
    request: axum::http::Request<axum::body::Body>,
) -> axum::http::Response<axum::body::Body> {
    use axum::body::{Body, to_bytes};
    use axum::http::{Response, StatusCode};
    // Everything read before the first await: a borrowed request would make the future not Send.
    let (authorization, content_type, encoding, protocol, method, path, query) = {
        let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        (
            header("authorization"),
            header("content-type"),
            header("content-encoding"),
            header("git-protocol"),
            request.method().to_string(),
            request.uri().path().to_string(),
            request.uri().query().unwrap_or_default().to_string(),
        )
    };
    let password = authorization.as_deref().and_then(password_of).filter(|p| accept(p));
    let Some(password) = password else {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header("www-authenticate", "Basic realm=\"git\"")
            .body(Body::empty())
            .unwrap();
    };
    seen.lock().unwrap().push((format!("{path}?{query}"), password));
    let body = to_bytes(request.into_body(), usize::MAX).await.unwrap();
    let mut cgi = tokio::process::Command::new("git");
    cgi.arg("http-backend")
        .env("GIT_PROJECT_ROOT", &root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("REMOTE_USER", "x-access-token")
        .env("CONTENT_LENGTH", body.len().to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    for (var, value) in
        [("CONTENT_TYPE", content_type), ("HTTP_CONTENT_ENCODING", encoding), ("GIT_PROTOCOL", protocol)]
    {
        if let Some(value) = value {
            cgi.env(var, value);
        }
    }
    let mut child = cgi.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, &body).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap().stdout;
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    let (end, gap) = split.or_else(|| out.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2))).unwrap();
    let mut response = Response::builder();
    for line in String::from_utf8_lossy(&out[..end]).lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        if name.eq_ignore_ascii_case("status") {
            let code: u16 = value.trim()[..3].parse().unwrap();
            response = response.status(code);
        } else {
            response = response.header(name.trim(), value.trim());
        }
    }
    response.body(Body::from(out[end + gap..].to_vec())).unwrap()
}

/// The git token goes only to the hosts it is for. A server on loopback under another host name
/// (`localhost`, while the test config's token is for `127.0.0.1`) answers 401 to everything and records what it is
/// sent: git asks, and never gets the token.
pub async fn the_git_token_goes_only_to_its_hosts(rig: &impl Rig) {
    let tmux = rig.tmux();
    let token = format!("tok-{}", uuid::Uuid::new_v4().simple());
    std::fs::write(tmux.state().join("git-token"), format!("{token}\n")).unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |request: axum::http::Request<axum::body::Body>| {
        let authorization = request.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("none");
        record.lock().unwrap().push(authorization.to_string());
        async {
            axum::http::Response::builder()
                .status(401)
                .header("www-authenticate", "Basic realm=\"phish\"")
                .body(axum::body::Body::empty())
                .unwrap()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let url = format!("http://localhost:{port}/victim.git");
    let workdir = tmux.state().join("checkouts/phished");
    rig.create_session("wphish", json!({"workdir": workdir, "workspace": {"url": url}})).await;
    let st = await_workspace(rig, "wphish", "False", "PrepareFailed").await;
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty(), "git asked the server: {st:?}");
    assert!(seen.iter().all(|a| a == "none"), "no credential was sent: {seen:?}");
}

/// What a repository says (in the checkout its harness writes, or in the node's clone where a
/// harness shares the agent's user) never runs in the agent: hooks (its own hooks directory and `core.hooksPath`),
/// `core.fsmonitor`, `core.sshCommand`, filter drivers (clean, smudge and process, with a `.gitattributes` and a
/// changed file that `git status` must read through them); a rewritten `remote.origin.url` never changes what is
/// fetched, and a `.git` file pointing elsewhere is never followed. The next work item's preparation and the
/// removals run none of it (marker files).
pub async fn a_repository_never_makes_the_agent_run_its_code(rig: &impl Rig) {
    let tmux = rig.tmux();
    let (root, work) = (tmux.state().join("origins"), tmux.state().join("checkouts"));
    std::fs::create_dir_all(&root).unwrap();
    let (bare, main, _) = origin(&root, "lib");
    // Another repository, whose main differs (the same content at the same second would be the same commit).
    let (elsewhere, _, _) = origin(&root, "evil");
    let seed = root.join("evil-seed");
    std::fs::write(seed.join("EVIL.md"), "not the spec's\n").unwrap();
    git(&seed, &["checkout", "-q", "main"]);
    git(&seed, &["add", "EVIL.md"]);
    git(&seed, &["commit", "-q", "-m", "evil"]);
    git(&seed, &["push", "-q", elsewhere.to_str().unwrap(), "main"]);
    assert_ne!(main, git(&seed, &["rev-parse", "HEAD"]));
    let url = format!("file://{}", bare.display());
    let session = |name: &str| json!({"workdir": work.join(name), "workspace": {"url": url}});
    for name in ["hx", "hz"] {
        rig.create_session(name, session(name)).await;
        await_phase(rig, name, Phase::Running).await;
    }

    // The attack, written where a harness can write: the checkout's config, hooks and attributes, and the clone's.
    let clone = std::fs::read_dir(tmux.state().join("repos")).unwrap().next().unwrap().unwrap().path();
    let checkout = work.join("hx");
    // The harness's own commit of a second file, before it plants anything.
    std::fs::write(checkout.join("NOTES.md"), "notes\n").unwrap();
    git(&checkout, &["add", "NOTES.md"]);
    git(&checkout, &["commit", "-q", "-m", "notes"]);
    let markers = tmux.state().join("markers");
    std::fs::create_dir_all(&markers).unwrap();
    let hook = |dir: &Path, whose: &str, name: &str| {
        std::fs::create_dir_all(dir).unwrap();
        let script = dir.join(name);
        std::fs::write(&script, format!("#!/bin/sh\ntouch '{}/{whose}-{name}'\ncat\n", markers.display())).unwrap();
        Command::new("chmod").arg("+x").arg(&script).status().unwrap();
    };
    let evil_hooks = tmux.state().join("evil-hooks");
    for name in ["post-checkout", "reference-transaction", "pre-auto-gc", "post-index-change", "clean", "smudge"] {
        hook(&clone.join("hooks"), "clone", name);
        hook(&checkout.join(".git/hooks"), "checkout", name);
        hook(&evil_hooks, "hooks-path", name);
    }
    let marker = |what: &str| format!("touch '{}/{what}'; false", markers.display());
    let (fsmonitor, ssh) = (marker("fsmonitor"), marker("ssh"));
    let clean = evil_hooks.join("clean").to_string_lossy().into_owned();
    let smudge = evil_hooks.join("smudge").to_string_lossy().into_owned();
    let (process, equals) = (marker("filter-process"), marker("filter-named-with-equals"));
    for repo in [&clone, &checkout] {
        for (key, value) in [
            ("core.hooksPath", evil_hooks.to_str().unwrap()),
            ("core.fsmonitor", fsmonitor.as_str()),
            ("core.sshCommand", ssh.as_str()),
            ("filter.evil.clean", clean.as_str()),
            ("filter.evil.smudge", smudge.as_str()),
            ("filter.evil.process", process.as_str()),
            ("filter.evil.required", "true"),
            // A driver whose name holds '=': `-c filter.a=b.process=` would set `filter.a` instead.
            ("filter.a=b.process", equals.as_str()),
        ] {
            git(repo, &["config", key, value]);
        }
    }
    git(&clone, &["config", "remote.origin.url", &format!("file://{}", elsewhere.display())]);
    // Tracked files changed at their size, so `git status` must read them through their filters.
    std::fs::write(checkout.join(".gitattributes"), "README.md filter=evil\nNOTES.md filter=a=b\n").unwrap();
    std::fs::write(checkout.join("README.md"), "HELLO\n").unwrap();
    std::fs::write(checkout.join("NOTES.md"), "NOTES\n").unwrap();
    // The other checkout's .git becomes a file that points at the clone.
    std::fs::remove_dir_all(work.join("hz/.git")).unwrap();
    std::fs::write(work.join("hz/.git"), format!("gitdir: {}\n", clone.display())).unwrap();

    // The next work item of the repository: a fetch and a checkout from the spec's URL, with no code of either's.
    rig.create_session("hy", session("hy")).await;
    let st = await_phase(rig, "hy", Phase::Running).await;
    // Removing (git reads the checkout's state) runs none of it either; the `.git` file is not followed.
    for name in ["hx", "hz"] {
        rig.delete_session(name).await;
        await_gone(rig, name).await;
    }
    assert!(checkout.join("README.md").exists(), "a changed checkout is kept");
    assert!(work.join("hz/.git").is_file(), "a checkout whose .git is a file is kept, not followed");
    let ran: Vec<String> =
        std::fs::read_dir(&markers).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(ran.is_empty(), "the repository's code ran in the agent: {ran:?}");
    // Checked last: this test's own git reads the planted config too.
    assert!(
        condition(&st, ConditionType::WorkspaceReady).2.contains(main.as_str()),
        "fetched from the spec's URL: {st:?}"
    );
}

/// A namespace checks out only the repositories the agent config lists for it (the tests' config
/// lists `file://*` and `http://*` for every namespace): another is refused before any git runs, naming it.
pub async fn a_namespace_checks_out_only_its_repositories(rig: &impl Rig) {
    let tmux = rig.tmux();
    let workdir = tmux.state().join("checkouts/elsewhere");
    let url = "https://git.example.com/another-team/secret.git";
    rig.create_session("wnot", json!({"workdir": workdir, "workspace": {"url": url}})).await;
    let st = await_value(
        "wnot refused",
        || rig.session_status("wnot"),
        |s| super::status_reason(s, ConditionType::Ready).1 == "WorkspaceNotAllowed",
    )
    .await;
    assert!(super::ready_message(&st).contains(url), "{st:?}");
    assert_eq!(st.phase, Some(Phase::Failed));
    assert!(!workdir.exists(), "nothing prepared");
    let observed = tmux.runner.observe().await.unwrap();
    assert_eq!(observed.liveness(&rig.tmux_session("wnot")), Liveness::Absent, "nothing spawned");
}
