//! Push credentials (`workspaces.push`): a harness whose checkout is a configured host's repository is handed a
//! token for that repository before its spawn and again before the token runs out while it runs; a failed grant is
//! tried again a minute later and holds nothing up; a harness that is not running gets none.

use super::*;
use crate::api::WorkspaceSpec;
use crate::config::workspaces::PushConfig;

const GRANT: &str = "grant push octo/api (github.com) into /home/h/.worksession/push/ns_repo-12";

/// What the grants in these cases were for: octo/api into the session's folder.
static KEY: std::sync::LazyLock<u64> =
    std::sync::LazyLock::new(|| grant_key("octo/api", std::path::Path::new("/home/h/.worksession/push/ns_repo-12")));

/// A session whose checkout is `url`, its workspace ready, with `workspaces.push` configured.
fn pushing(url: &str, liveness: Liveness) -> Case {
    let mut case = Case::new(ran_old());
    case.spec.workspace = Some(WorkspaceSpec { url: url.into(), r#ref: None });
    case.config.harness_home = Some("/home/h".into());
    case.config.workspaces.repositories = Some([("ns".to_string(), vec!["*".to_string()])].into());
    case.config.workspaces.push = Some(PushConfig {
        api_url: "https://api.github.com".into(),
        host: "github.com".into(),
        app_id: 1,
        private_key: Vec::new(),
        installation_id: None,
    });
    case.liveness = liveness;
    if liveness == Liveness::Alive {
        case.tmux = Some(ours());
        case.status.phase = Some(Phase::Running);
        case.events.clear();
    }
    case
}

fn env(plan: &Plan) -> Vec<(String, String)> {
    plan.ops.iter().find_map(|op| if let Op::Spawn(s) = op { Some(s.env.clone()) } else { None }).unwrap_or_default()
}

#[test]
fn a_spawn_is_handed_a_token_for_its_repository_first_and_told_where_it_is() {
    let plan = pushing("https://github.com/octo/api.git", Liveness::Dead).decide();
    let ops = ops(&plan);
    let (grant, spawn) = (ops.iter().position(|o| o == GRANT), ops.iter().position(|o| o.starts_with("spawn")));
    assert!(grant.is_some() && grant < spawn, "{ops:?}");
    let env = env(&plan);
    let value = |k: &str| env.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    assert_eq!(value("WORKSESSION_PUSH_TOKEN_FILE"), Some("/home/h/.worksession/push/ns_repo-12/token"));
    assert_eq!(value("GIT_CONFIG_KEY_0"), Some("credential.https://github.com.helper"));
    assert!(value("GIT_CONFIG_VALUE_0").is_some_and(|h| h.contains("$WORKSESSION_PUSH_TOKEN_FILE")));
    assert_eq!(value("GH_CONFIG_DIR"), Some("/home/h/.worksession/push/ns_repo-12/gh"));
    assert_eq!(plan.requeue_after.map(|d| d <= Duration::from_secs(1)), Some(true), "its expiry is read back soon");
}

#[test]
fn a_running_harness_is_handed_a_new_token_before_the_old_runs_out() {
    let mut case = pushing("https://github.com/octo/api", Liveness::Alive);
    case.push = PushGrant::Granted { at: t(0), expires: t(100 + 16 * 60), key: *KEY };
    let plan = case.decide();
    assert!(!ops(&plan).contains(&GRANT.to_string()), "{:?}", ops(&plan));
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(60)), "woken when 15 minutes are left");

    case.push = PushGrant::Granted { at: t(0), expires: t(100 + 14 * 60), key: *KEY };
    assert_eq!(ops(&case.decide()), [GRANT]);
    // An expiry GitHub gave too soon makes no grant a second: the next waits ten seconds from the last.
    case.push = PushGrant::Granted { at: t(95), expires: t(100 + 5 * 60), key: *KEY };
    assert!(ops(&case.decide()).is_empty());
    assert_eq!(case.decide().requeue_after, Some(Duration::from_secs(5)));
    case.push = PushGrant::Missing; // the agent restarted
    assert_eq!(ops(&case.decide()), [GRANT]);
    // Granted for another repository (the spec changed) or folder (a new room): granted again at once.
    case.push = PushGrant::Granted { at: t(95), expires: t(100 + 50 * 60), key: *KEY + 1 };
    assert_eq!(ops(&case.decide()), [GRANT]);
}

#[test]
fn a_failed_grant_is_tried_again_a_minute_later_and_holds_up_no_spawn() {
    let mut case = pushing("https://github.com/octo/api", Liveness::Alive);
    case.push = PushGrant::Failed { at: t(90), failures: 1 };
    let plan = case.decide();
    assert!(ops(&plan).is_empty(), "{:?}", ops(&plan));
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(50)));
    case.push = PushGrant::Failed { at: t(39), failures: 1 };
    assert_eq!(ops(&case.decide()), [GRANT]);
    // Failing again and again, it waits twice as long each time, up to an hour.
    case.push = PushGrant::Failed { at: t(39), failures: 3 };
    assert_eq!(case.decide().requeue_after, Some(Duration::from_secs(4 * 60 - 61)));
    case.push = PushGrant::Failed { at: t(100), failures: 30 };
    assert_eq!(case.decide().requeue_after, Some(GRANT_RETRY_MAX));

    let mut dead = pushing("https://github.com/octo/api", Liveness::Dead);
    dead.push = PushGrant::Failed { at: t(90), failures: 1 };
    assert!(!spawned(&dead.decide()).is_empty(), "the harness starts without it");
}

#[test]
fn no_token_where_push_is_off_the_checkout_is_not_a_hosts_or_no_harness_runs() {
    let none = |case: Case| {
        let plan = case.decide();
        assert!(!ops(&plan).iter().any(|o| o.starts_with("grant")), "{:?}", ops(&plan));
        assert!(!env(&plan).iter().any(|(k, _)| k.starts_with("GIT_CONFIG")), "{:?}", env(&plan));
    };
    let mut off = pushing("https://github.com/octo/api", Liveness::Dead);
    off.config.workspaces.push = None;
    none(off);
    let mut not_allowed = pushing("https://github.com/octo/api", Liveness::Alive);
    not_allowed.config.workspaces.repositories =
        Some([("ns".to_string(), vec!["https://github.com/mine/*".to_string()])].into());
    none(not_allowed);
    for url in [
        "git@github.com:octo/api.git",
        "ssh://github.com/octo/api",
        "https://gitlab.com/octo/api",
        "https://x:y@github.com/octo/api",
        "http://github.com/octo/api",
        "https://github.com:443/octo/api",
        "https://ghe.example.com/octo/api",
        "https://github.com/octo",
        "https://github.com/../api",
    ] {
        none(pushing(url, Liveness::Dead));
    }
    let mut stopped = pushing("https://github.com/octo/api", Liveness::Absent);
    stopped.events.clear();
    stopped.status.phase = Some(Phase::Idle);
    none(stopped);
}

#[test]
fn the_target_is_the_urls_repository_on_the_apps_host() {
    let target = push_target("https://github.com/octo/api.git/", "github.com").unwrap();
    assert_eq!(
        (target.scheme.as_str(), target.host.as_str(), target.repository.as_str()),
        ("https", "github.com", "octo/api")
    );
    assert!(push_target("http://github.com/octo/api", "github.com").is_none(), "no token in clear");
    let target = push_target("http://127.0.0.1:8080/octo/api", "127.0.0.1:8080").unwrap();
    assert_eq!(target.host, "127.0.0.1:8080", "plain http to a loopback address only");
    assert!(push_target("https://github.com/octo/api/extra", "github.com").is_none());
    assert!(push_target("https://127.0.0.1:9/octo/api", "127.0.0.1:8080").is_none(), "that port");
}
