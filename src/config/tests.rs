//! The agent config's parsing, defaults, checks and hot reload, as table tests.

use super::*;

fn parse(yaml: &str) -> Result<Config, ConfigError> {
    Config::parse(yaml, Path::new("agent.yaml"))
}

/// The agent judges a workdir where it shares the harness's filesystem: all of it when it starts tmux itself,
/// else only the volume its clones live on.
#[test]
fn a_workdir_is_judged_only_where_the_agent_sees_it_as_the_harness_does() {
    let local = parse("").unwrap();
    assert!(local.sees_workdir(Path::new("/anywhere/work")));
    let cluster = parse("tmux: {startServer: false}\nworkspaces: {mirrors: /workspace/.repos}\n").unwrap();
    assert!(cluster.sees_workdir(Path::new("/workspace/repo-12")));
    assert!(!cluster.sees_workdir(Path::new("/data/repo-12")), "a volume only the tmux container mounts");
    assert!(!cluster.sees_workdir(Path::new("/workspaces/repo-12")), "a path, not a string prefix");
    let rooted = parse("tmux: {startServer: false}\nworkspaces: {mirrors: /repos}\n").unwrap();
    assert!(!rooted.sees_workdir(Path::new("/data/repo-12")), "clones at the root name no volume");
}

#[test]
fn empty_file_gives_the_defaults() {
    let c = parse("").unwrap();
    assert_eq!(c.tmux, TmuxConfig { socket: None, session_prefix: "loop-".into(), start_server: true });
    assert_eq!(
        c.defaults,
        Defaults {
            resume_on_respawn: true,
            resume_probe_seconds: 2,
            resume_settle_seconds: 60,
            idle_suspend_after_seconds: None,
            archive_quiet_seconds: 60,
        }
    );
    assert_eq!(c.harnesses.keys().collect::<Vec<_>>(), ["claude", "codex", "copilot", "cursor", "gemini", "opencode"]);
    assert_eq!(c.harnesses["copilot"].store_path.as_deref(), Some("{home}/.copilot/session-state/{sessionId}"));
    assert_eq!(c.tmux_session("agents/repo-12"), "loop-agents_repo-12");
    assert_eq!(c.event_retention, Some(Duration::from_secs(3_600)));
    assert_eq!(parse("delivery:\n  retentionSeconds: 0\n").unwrap().event_retention, None);
}

#[test]
fn every_key() {
    let c = parse(
        r#"
tmux:
  socket: /run/worksession/tmux.sock
  sessionPrefix: ws-
  startServer: false
defaults:
  resumeOnRespawn: false
  resumeProbeSeconds: 0
  resumeSettleSeconds: 120
  idleSuspendAfterSeconds: 3600
harnesses:
  myharness:
    binary: /usr/local/bin/myharness
    extraArgs: ["--flag"]
    interactive: ["--session-id", "{sessionId}", "{extraArgs}", "{prompt}"]
    resume: ["--resume", "{sessionId}", "{extraArgs}", "{prompt}"]
    resumeFailedPattern: "No conversation found"
    readyPattern: "^> "
    conversationPath: "{home}/.myharness/{cwdSlug}/{sessionId}.jsonl"
  claude:
    binary: /opt/claude/bin/claude
  blind:
    binary: claude
    interactive: ["--session-id", "{sessionId}"]
    readyPattern: ""
    conversationPath: ""
delivery:
  retentionSeconds: 3600
  readyTimeoutSeconds: 30
  confirmTimeoutSeconds: 45
  usageLimitWaitSeconds: 60
  usageLimitSpreadSeconds: 0
harnessHome: /srv/home
"#,
    )
    .unwrap();
    assert_eq!(c.tmux.socket.as_deref(), Some(Path::new("/run/worksession/tmux.sock")));
    assert_eq!(c.tmux_session("default/a"), "ws-default_a");
    assert!(!c.tmux.start_server);
    assert_eq!(c.event_retention, Some(Duration::from_secs(3600)));
    assert_eq!(
        c.defaults,
        Defaults {
            resume_on_respawn: false,
            resume_probe_seconds: 0,
            resume_settle_seconds: 120,
            idle_suspend_after_seconds: Some(3600),
            archive_quiet_seconds: 60,
        }
    );
    let mine = &c.harnesses["myharness"];
    assert_eq!(
        mine.argv("myharness", harness::Mode::Resume, "id", Some("p")).unwrap(),
        ["--resume", "id", "--flag", "p"]
    );
    assert!(mine.resume_failed("No conversation found with session ID: id"));
    assert!(mine.ready(Some("> ")) && !mine.ready(Some("booting")));
    assert_eq!(mine.conversation_path.as_deref(), Some("{home}/.myharness/{cwdSlug}/{sessionId}.jsonl"));
    assert_eq!(c.confirm_timeout, Duration::from_secs(45));
    assert_eq!((c.usage_limit_wait, c.usage_limit_spread), (Duration::from_secs(60), Duration::ZERO));
    assert_eq!((c.ready_timeout, c.harness_home.as_deref()), (Duration::from_secs(30), Some(Path::new("/srv/home"))));
    let blind = &c.harnesses["blind"];
    assert!(blind.ready_pattern.is_none() && blind.conversation_path.is_none(), "empty turns them off");
    // Overriding one field of a built-in keeps the rest of it.
    let claude = &c.harnesses["claude"];
    assert_eq!(claude.binary, "/opt/claude/bin/claude");
    assert!(claude.resume.is_some() && claude.resume_failed_pattern.is_some());
    assert!(claude.ready_pattern.is_some() && claude.conversation_path.is_some());
    assert!(c.harnesses["cursor"].interactive.is_none());
}

fn refused(yaml: &str) -> String {
    parse(yaml).expect_err("refused").to_string()
}

/// A namespace's keys: the Secret's name and the variables it may set, none that changes how the room runs or
/// what the room helper does as root.
#[test]
fn namespace_keys_name_a_secret_and_variables_that_change_nothing_of_the_room() {
    let keys = |body: &str| format!("rooms:\n  root: /r\n  namespaceKeys: {{{body}}}\n");
    let c = parse(&keys("secretName: tenant-keys, variables: [COPILOT_GITHUB_TOKEN, GH_TOKEN, OPENAI_API_KEY]"));
    let k = c.unwrap().rooms.unwrap().namespace_keys.unwrap();
    assert_eq!(k.secret_name, "tenant-keys");
    let refused_names = ["LD_PRELOAD", "PATH", "HOME", "HTTPS_PROXY", "GLIBC_TUNABLES", "MALLOC_ARENA_MAX"];
    for bad in refused_names.into_iter().chain(["WORKSESSION_LOG_JSON", "lower", "1X", "A-B"]) {
        let e = refused(&keys(&format!("secretName: k, variables: [{bad}]")));
        assert!(e.contains("rooms.namespaceKeys.variables"), "{bad}: {e}");
    }
    assert!(refused(&keys("secretName: 'Not A Name', variables: []")).contains("rooms.namespaceKeys.secretName"));
}

/// Prices over the built-in ones, and where a profile's record states usage.
#[test]
fn prices_and_a_profiles_usage_record() {
    let c = parse(
            "prices:\n  my-model: {input: 1, output: 4, cacheWrite: 1, cacheRead: 0.1}\n  gpt-5: null\n\
             harnesses:\n  mine:\n    binary: m\n    interactive: ['{prompt}']\n    usage: {format: copilot, path: '{home}/s/*/{sessionId}/e.jsonl'}\n  claude:\n    usage: {format: ''}\n",
        )
        .unwrap();
    assert_eq!(c.prices.of("my-model-20261201").map(|p| p.output), Some(4.0));
    assert_eq!(c.prices.of("gpt-5"), None);
    let usage = c.harnesses["mine"].usage.clone().unwrap();
    assert_eq!(usage.format, crate::harness::usage::UsageFormat::Copilot);
    assert_eq!(c.harnesses["claude"].usage, None, "turned off");
    assert_eq!(c.harnesses["codex"].usage.as_ref().map(|u| u.format), Some(crate::harness::usage::UsageFormat::Codex));
    // A built-in told not to look at its conversation before resuming still counts what it spends.
    for name in ["claude", "copilot", "codex"] {
        let c = parse(&format!("harnesses:\n  {name}:\n    conversationPath: ''\n")).unwrap();
        assert!(c.harnesses[name].usage.as_ref().is_some_and(|u| u.path.is_some()), "{name}");
    }
    assert!(refused("prices:\n  m: {input: -1, output: 1, cacheWrite: 1, cacheRead: 1}\n").contains("prices.m"));
    assert!(refused("prices:\n  m: {input: 1}\n").contains("prices"));
    let usage = |u: &str| format!("harnesses:\n  x:\n    binary: x\n    interactive: ['{{prompt}}']\n    usage: {u}\n");
    assert!(refused(&usage("{format: gemini}")).contains("harnesses.x.usage.format"));
    assert!(refused(&usage("{format: claude}")).contains("harnesses.x.usage.path"), "no path and no transcript");
    assert!(refused(&usage("{format: claude, path: 'rel/{sessionId}'}")).contains("harnesses.x.usage.path"));
    assert!(refused(&usage("{format: claude, path: '/s/{id}'}")).contains("harnesses.x.usage.path"));
}

#[test]
fn malformed_files_are_refused_naming_the_key() {
    assert!(refused("tmux: [").contains("agent.yaml"));
    assert!(refused("tmux:\n  sockett: /x\n").contains("sockett"));
    assert!(refused("defaults:\n  resumeProbeSeconds: soon\n").contains("resumeProbeSeconds"));
    assert!(refused("defaults:\n  resumeProbeSeconds: 301\n").contains("defaults.resumeProbeSeconds"));
    assert!(refused("defaults:\n  resumeSettleSeconds: 3601\n").contains("defaults.resumeSettleSeconds"));
    assert!(refused("tmux:\n  sessionPrefix: 'a:b'\n").contains("tmux.sessionPrefix"));
    assert!(refused("harnesses:\n  x:\n    interactive: ['{prompt}']\n").contains("harnesses.x.binary"));
    assert!(
        refused("harnesses:\n  x:\n    binary: x\n    resumeFailedPattern: '('\n")
            .contains("harnesses.x.resumeFailedPattern")
    );
    assert!(refused("harnesses:\n  x:\n    binary: x\n    readyPattern: '['\n").contains("harnesses.x.readyPattern"));
    assert!(refused("delivery:\n  readyTimeoutSeconds: 0\n").contains("delivery.readyTimeoutSeconds"));
    assert!(refused("delivery:\n  confirmTimeoutSeconds: 0\n").contains("delivery.confirmTimeoutSeconds"));
    assert!(refused("delivery:\n  usageLimitWaitSeconds: 0\n").contains("delivery.usageLimitWaitSeconds"));
    assert!(refused("delivery:\n  usageLimitSpreadSeconds: 3601\n").contains("delivery.usageLimitSpreadSeconds"));
    assert!(refused("harnessHome: relative/home\n").contains("harnessHome"));
    assert!(refused("workspaces:\n  protocols: [https, ftp]\n").contains("workspaces.protocols"));
    assert!(refused("workspaces:\n  credentials: {hosts: ['*']}\n").contains("workspaces.credentials.hosts"));
    let c = parse("workspaces:\n  protocols: [file]\n  credentials: {hosts: ['git.example.com:8443']}\n").unwrap();
    assert_eq!(
        (c.workspaces.protocols, c.workspaces.hosts),
        (vec!["file".into()], vec!["git.example.com:8443".into()])
    );
    let defaults = parse("").unwrap().workspaces;
    assert_eq!((defaults.protocols, defaults.hosts), (vec!["https".into(), "ssh".into()], vec!["github.com".into()]));
    let rooms = "rooms:\n  root: /r\n  egress:\n    hosts: ";
    assert!(refused(&format!("{rooms}['API.example.com']\n")).contains("rooms.egress.hosts"));
    assert!(refused(&format!("{rooms}['a.com:0']\n")).contains("rooms.egress.hosts"));
    assert!(refused(&format!("{rooms}['a com']\n")).contains("rooms.egress.hosts"));
    assert!(refused("rooms:\n  root: /r\n  egress:\n    port: 0\n").contains("rooms.egress.port"));
    assert!(refused("rooms:\n  root: /r\n  egress:\n    port: 443\n").contains("rooms.egress.port"));
    assert!(refused("rooms:\n  root: /r\n  egress:\n    port: 40000\n").contains("rooms.egress.port"));
    let c = parse(&format!("{rooms}['api.example.com', '*.example.org', 'git.example.com:8443']\n")).unwrap();
    let egress = c.rooms.unwrap().egress.unwrap();
    assert_eq!(egress.port, rooms::DEFAULT_EGRESS_PORT);
    assert_eq!(egress.hosts, ["api.example.com", "*.example.org", "git.example.com:8443"]);
    assert!(egress.gateways.is_empty());
    assert!(!egress.session_hosts && egress.namespaces.is_empty(), "no session's hosts, no namespace's list");
    let namespaces = "rooms:\n  root: /r\n  egress:\n    sessionHosts: true\n    namespaces:\n      ";
    let c = parse(&format!("{namespaces}team-a: [pypi.org, '*.pythonhosted.org']\n")).unwrap();
    let egress = c.rooms.unwrap().egress.unwrap();
    assert!(egress.session_hosts);
    assert_eq!(egress.namespaces["team-a"], ["pypi.org", "*.pythonhosted.org"]);
    assert!(refused(&format!("{namespaces}Team_A: [pypi.org]\n")).contains("rooms.egress.namespaces"));
    assert!(refused(&format!("{namespaces}team-a: ['pypi.org:99999']\n")).contains("rooms.egress.namespaces.team-a"));

    let gateway = |fields: &str| format!("rooms:\n  root: /r\n  egress:\n    gateways:\n      - {{{fields}}}\n");
    let good = "name: a, upstream: 'https://api.a.com/', keyFile: /k";
    let c = parse(&gateway(&format!("{good}, baseUrlEnv: A_BASE_URL, keyEnv: A_KEY"))).unwrap();
    let g = &c.rooms.unwrap().egress.unwrap().gateways[0];
    assert_eq!(
        (g.header.as_str(), g.placeholder.as_str()),
        (rooms::DEFAULT_GATEWAY_HEADER, rooms::DEFAULT_PLACEHOLDER)
    );
    assert!(g.allows("/v1/messages") && g.allows("/v1/messages/count_tokens") && !g.allows("/v1/files"));
    assert_eq!(g.upstream, "https://api.a.com", "no trailing slash kept");
    assert_eq!(
        g.env(3129),
        [
            ("A_BASE_URL".to_string(), "http://127.0.0.1:3129/gateway/a".to_string()),
            ("A_KEY".to_string(), rooms::DEFAULT_PLACEHOLDER.to_string())
        ]
    );
    for (fields, key) in [
        ("name: 'A b', upstream: 'https://a.com', keyFile: /k", "name"),
        ("name: a-, upstream: 'https://a.com', keyFile: /k", "name"),
        ("name: a, upstream: 'ftp://a.com', keyFile: /k", "upstream"),
        ("name: a, upstream: 'https://user:pw@a.com', keyFile: /k", "upstream"),
        ("name: a, upstream: 'https://a.com/?k=v', keyFile: /k", "upstream"),
        ("name: a, upstream: 'https://a.com', keyFile: k", "keyFile"),
        (&format!("{good}, header: 'X-Api-Key'"), "header"),
        (&format!("{good}, keyEnv: 'lower'"), "keyEnv"),
        (&format!("{good}, baseUrlEnv: '1A'"), "baseUrlEnv"),
        (&format!("{good}, placeholder: 'a b'"), "placeholder"),
        (&format!("{good}, paths: ['v1/messages']"), "paths"),
        (&format!("{good}, paths: ['/v1/messages?x=1']"), "paths"),
        (&format!("{good}, paths: ['v1/messages']"), "paths"),
        (&format!("{good}, paths: ['/v1/messages?x=1']"), "paths"),
    ] {
        let e = refused(&gateway(fields));
        assert!(e.contains(&format!("rooms.egress.gateways[0].{key}")), "{fields}: {e}");
    }
    let twice = "rooms:\n  root: /r\n  egress:\n    gateways:\n      - {name: a, upstream: 'https://a.com', keyFile: /k}\n      - {name: a, upstream: 'https://b.com', keyFile: /k}\n";
    assert!(refused(twice).contains("rooms.egress.gateways[1].name"));
}

#[test]
fn malformed_templates_are_refused_naming_the_key() {
    let e = refused("harnesses:\n  x:\n    binary: x\n    interactive: ['--id', '{session}', '{prompt}']\n");
    assert!(e.contains("harnesses.x.interactive") && e.contains("{session}"), "{e}");
    let e = refused("harnesses:\n  claude:\n    resume: ['--continue', '{prompt}']\n");
    assert!(e.contains("harnesses.claude.resume"), "{e}");
}

/// Awaits a watch change, failing the test instead of hanging.
async fn changed<T>(rx: &mut watch::Receiver<T>) {
    tokio::time::timeout(Duration::from_secs(10), rx.changed()).await.expect("a change in time").unwrap();
}

#[tokio::test]
async fn reload_and_bad_reload() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.yaml");
    std::fs::write(&path, "defaults:\n  resumeProbeSeconds: 5\n").unwrap();
    assert!(Reloader::start(dir.path().join("missing.yaml"), Duration::from_millis(20)).is_err());
    let reloader = Reloader::start(path.clone(), Duration::from_millis(20)).unwrap();
    let mut config = reloader.config();
    let mut errors = reloader.last_error();
    assert_eq!(config.borrow().defaults.resume_probe_seconds, 5);

    std::fs::write(&path, "defaults:\n  resumeProbeSeconds: 7\n").unwrap();
    changed(&mut config).await;
    assert_eq!(config.borrow_and_update().defaults.resume_probe_seconds, 7);

    std::fs::write(&path, "defaults:\n  resumeProbeSeconds: [\n").unwrap();
    changed(&mut errors).await;
    assert!(errors.borrow_and_update().as_deref().unwrap().contains("agent.yaml"));
    assert_eq!(config.borrow().defaults.resume_probe_seconds, 7, "the last good config stays");
    assert!(!config.has_changed().unwrap());

    // A ConfigMap-style swap: the path is replaced, not written in place.
    let next = dir.path().join("agent.yaml.new");
    std::fs::write(&next, "defaults:\n  resumeProbeSeconds: 9\n").unwrap();
    std::fs::rename(&next, &path).unwrap();
    changed(&mut config).await;
    assert_eq!(config.borrow().defaults.resume_probe_seconds, 9);
    assert_eq!(*errors.borrow(), None);
}
