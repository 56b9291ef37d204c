//! The agent's git against real git, without an agent: what its configuration refuses.

use std::process::Command;

#[path = "fixtures/repos.rs"]
mod repos;

use repos::origin;
use worksession::api::WorkspaceSpec;
use worksession::node::workspace::{Git, Locks, WorkspacesConfig};

/// `file://` reads any repository on the node (another work item's unpushed branches in its clone included): refused
/// unless the config lists the transport, as the tests' own configs do.
#[tokio::test]
async fn file_urls_are_refused_unless_the_config_allows_them() {
    let dir = tempfile::tempdir().unwrap();
    let (bare, _, _) = origin(dir.path(), "origin");
    let spec = WorkspaceSpec { url: format!("file://{}", bare.display()), r#ref: None };
    let config = WorkspacesConfig { mirrors: Some(dir.path().join("repos")), ..Default::default() };
    let refused = Git::new(config.clone(), None, Locks::default()).prepare(&spec, &dir.path().join("w1"), "w1").await;
    let e = refused.unwrap_err();
    assert!(e.contains("transport 'file' not allowed"), "{e}");
    assert!(!dir.path().join("w1").join("README.md").exists());

    let allowing = WorkspacesConfig { protocols: vec!["file".into()], ..config };
    let prepared = Git::new(allowing, None, Locks::default()).prepare(&spec, &dir.path().join("w2"), "w2").await;
    assert_eq!(prepared.unwrap().branch, "worksession/w2");
    assert!(dir.path().join("w2").join("README.md").exists());
}

/// An origin (`file://`, allowed), the agent's git, and a first checkout made from it: the node's clone exists.
async fn one_checkout_made() -> (tempfile::TempDir, WorkspaceSpec, Git, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (bare, _, _) = origin(dir.path(), "origin");
    let spec = WorkspaceSpec { url: format!("file://{}", bare.display()), r#ref: None };
    let config = WorkspacesConfig {
        mirrors: Some(dir.path().join("repos")),
        protocols: vec!["file".into()],
        ..Default::default()
    };
    let git = Git::new(config, None, Locks::default());
    git.prepare(&spec, &dir.path().join("w1"), "w1").await.unwrap();
    let clone = std::fs::read_dir(dir.path().join("repos")).unwrap().next().unwrap().unwrap().path();
    (dir, spec, git, clone)
}

/// A clone's own `protocol.ext.allow` (which a harness that writes the clone could set) would win
/// over `protocol.allow=never`, and an `ext::` URL runs a command: with `GIT_ALLOW_PROTOCOL` nothing runs, and the
/// preparation says why.
#[tokio::test]
async fn a_clone_cannot_turn_on_a_protocol_that_runs_commands() {
    let (dir, spec, git, clone) = one_checkout_made().await;
    let marker = dir.path().join("ran");
    let set = |key: &str, value: &str| {
        assert!(Command::new("git").arg("-C").arg(&clone).args(["config", key, value]).status().unwrap().success());
    };
    set("protocol.ext.allow", "always");
    set(&format!("url.ext::sh -c touch% {}% .insteadOf", marker.display()), "file://");
    let e = git.prepare(&spec, &dir.path().join("w2"), "w2").await.unwrap_err();
    assert!(e.contains("transport 'ext' not allowed"), "{e}");
    assert!(!marker.exists(), "the clone's command ran in the agent");
}

/// A harness that can write the node's clone plants another repository as its alternate and a command to list that
/// one's refs (`core.alternateRefsCommand`), which the agent's next fetch would run in the agent's container (with its
/// git token and its ServiceAccount token): nothing runs, and the clone is made again without the alternate.
#[tokio::test]
async fn a_planted_alternate_runs_nothing_in_the_agent() {
    let (dir, spec, git, clone) = one_checkout_made().await;
    let (other, _, _) = origin(dir.path(), "other");
    let bare = dir.path().join("origin.git");
    let marker = dir.path().join("ran");
    let alternates = clone.join("objects/info/alternates");
    std::fs::write(&alternates, format!("{}/objects\n", other.display())).unwrap();
    let command = format!("touch {} #", marker.display());
    let set =
        Command::new("git").arg("-C").arg(&clone).args(["config", "core.alternateRefsCommand", &command]).status();
    assert!(set.unwrap().success());
    // Something new to fetch, so the fetch negotiates (and would list the alternate's refs).
    let seed = dir.path().join("origin-seed");
    std::fs::write(seed.join("NEW.md"), "new\n").unwrap();
    repos::git(&seed, &["add", "NEW.md"]);
    repos::git(&seed, &["commit", "-q", "-m", "new"]);
    repos::git(&seed, &["push", "-q", bare.to_str().unwrap(), "feature:main"]);
    let prepared = git.prepare(&spec, &dir.path().join("w2"), "w2").await.unwrap();
    assert_eq!(prepared.branch, "worksession/w2");
    assert!(!marker.exists(), "the planted command ran in the agent");
    assert!(!alternates.exists(), "the clone was made again");
}
