//! Isolation, as the core decides it: a tmux session tagged for another WorkSession is never adopted, pasted into,
//! stopped or replaced; a prefix change never orphans a running harness; no tmux server where the agent must not
//! start one is a condition, not a spawn.

use super::*;

fn others() -> SessionView {
    SessionView {
        alive: true,
        owner: "uid-of-another".into(),
        owner_name: "team-b/repo-12".into(),
        ..Default::default()
    }
}

#[test]
fn a_session_tagged_for_another_worksession_is_never_adopted_pasted_into_or_stopped() {
    for liveness in [Liveness::Alive, Liveness::Dead] {
        let mut case = Case::new(ran_old());
        case.liveness = liveness;
        case.tmux = Some(SessionView { alive: liveness == Liveness::Alive, ..others() });
        let plan = case.decide();
        assert_eq!(ops(&plan), Vec::<String>::new(), "{liveness:?}: no paste, no stop, no spawn");
        assert_eq!(condition(&plan.status, READY), Some(("False", "TmuxSessionConflict")));
        let ready = plan.status.conditions.iter().find(|c| c.type_ == READY.as_str()).unwrap();
        assert!(ready.message.contains("team-b/repo-12"), "names the other: {}", ready.message);
        // Deleting this one releases it and leaves the other's harness alone.
        case.deleting = true;
        assert_eq!(ops(&case.decide()), ["release finalizer"]);
    }
    // Its own tag is adopted.
    let mut case = Case::new(ran_old());
    case.liveness = Liveness::Alive;
    case.tmux = Some(SessionView { alive: true, owner: OWNER.into(), ..Default::default() });
    assert_eq!(ops(&case.decide())[0], "paste e1 into loop-ns_repo-12: please fix the bug");
}

/// A session without the owner tag (a harness can make one under a victim's name while the victim
/// is idle) is never adopted, pasted into, stopped or replaced; it is reported, naming it.
#[test]
fn an_untagged_session_is_nobodys() {
    for liveness in [Liveness::Alive, Liveness::Dead] {
        let mut case = Case::new(ran_old());
        case.liveness = liveness;
        case.tmux = Some(SessionView { alive: liveness == Liveness::Alive, ..Default::default() });
        let plan = case.decide();
        assert_eq!(ops(&plan), Vec::<String>::new(), "{liveness:?}: no paste, no stop, no spawn");
        assert_eq!(condition(&plan.status, READY), Some(("False", "TmuxSessionUntagged")));
        let ready = plan.status.conditions.iter().find(|c| c.type_ == READY.as_str()).unwrap();
        assert!(ready.message.contains("loop-ns_repo-12"), "names it: {}", ready.message);
        case.deleting = true;
        assert_eq!(ops(&case.decide()), ["release finalizer"], "deleting leaves it alone");
    }
}

#[test]
fn a_prefix_change_keeps_a_live_harness_and_respawns_under_the_new_name() {
    let mut case = Case::new(ran_old());
    case.config.tmux.session_prefix = "ws-".into();
    case.session = Some("loop-ns_repo-12"); // the reconcile found the recorded session still there
    case.liveness = Liveness::Alive;
    let plan = case.decide();
    assert_eq!(ops(&plan)[0], "paste e1 into loop-ns_repo-12: please fix the bug", "the live harness gets the event");
    assert_eq!(plan.status.tmux_session.as_deref(), Some("loop-ns_repo-12"));
    // Once it died: the old session is cleared and the respawn takes the new name, resuming the same conversation.
    case.liveness = Liveness::Dead;
    let plan = case.decide();
    assert_eq!(
        ops(&plan)[..3],
        [
            "record intent",
            "stop loop-ns_repo-12",
            "spawn ws-ns_repo-12 claude --resume 0a0b0c0d-old -- please fix the bug"
        ]
    );
    assert_eq!(plan.status.tmux_session.as_deref(), Some("ws-ns_repo-12"));
}

#[test]
fn no_tmux_server_where_the_agent_must_not_start_one() {
    let mut case = Case::new(ran_old());
    case.config.tmux.start_server = false;
    case.server = false;
    case.liveness = Liveness::Absent;
    let plan = case.decide();
    assert_eq!(ops(&plan), Vec::<String>::new(), "no spawn: it would start a server");
    assert_eq!(condition(&plan.status, READY), Some(("False", "TmuxUnavailable")));
    assert_eq!(plan.requeue_after, Some(CONFLICT_RECHECK));
    case.server = true;
    assert_eq!(spawned(&case.decide()), RESUME_E1, "the server is back: the same conversation resumes");
    case.config.tmux.start_server = true;
    case.server = false;
    assert_eq!(spawned(&case.decide()), RESUME_E1, "local mode starts its own server");
}

pub(super) fn room() -> Room {
    Room { uid: 200_007, home: "/srv/ws/.rooms/200007".into() }
}

pub(super) fn rooms_on(case: &mut Case) {
    case.config.rooms = Some(crate::node::room::RoomsConfig {
        root: "/srv/ws/.rooms".into(),
        first_uid: 200_000,
        count: 10,
        helper: "/usr/local/bin/worksession".into(),
        egress: None,
        shared: false,
        namespace_keys: None,
    });
}

/// With rooms on, every spawn enters the session's own room (its uid and HOME), the condition
/// says so, and a session that goes frees its room after its harness is stopped.
#[test]
fn with_rooms_on_a_harness_starts_only_in_its_own_room() {
    let mut case = Case::new(ran_old());
    rooms_on(&mut case);
    case.room = Some(Ok(room()));
    let plan = case.decide();
    let Some(Op::Spawn(spawn)) = plan.ops.iter().find(|op| matches!(op, Op::Spawn(_))) else { panic!("{plan:?}") };
    let confine = spawn.confine.as_ref().expect("entered through the room");
    assert_eq!(
        (confine.uid, confine.home.to_str(), confine.helper.to_str()),
        (200_007, Some("/srv/ws/.rooms/200007"), Some("/usr/local/bin/worksession"))
    );
    assert_eq!(condition(&plan.status, CONFINED), Some(("True", "OwnRoom")));
    assert!(confine.env.is_empty() && confine.egress_port.is_none(), "no egress, no gateway: {confine:?}");
    case.deleting = true;
    case.liveness = Liveness::Alive;
    case.tmux = Some(SessionView { alive: true, owner: OWNER.into(), ..Default::default() });
    assert_eq!(ops(&case.decide()), ["stop loop-ns_repo-12", "release room", "release finalizer"]);
}

/// Anthropic's API as a key gateway, its URL in `ANTHROPIC_BASE_URL` and a placeholder in `ANTHROPIC_API_KEY`.
fn anthropic_gateway() -> crate::config::rooms::GatewayConfig {
    crate::config::rooms::GatewayConfig {
        name: "anthropic".into(),
        upstream: "https://api.anthropic.com".into(),
        key_file: "/etc/worksession/gateways/anthropic/key".into(),
        header: "x-api-key".into(),
        base_url_env: Some("ANTHROPIC_BASE_URL".into()),
        key_env: Some("ANTHROPIC_API_KEY".into()),
        placeholder: "sk-placeholder".into(),
        paths: vec!["*".into()],
    }
}

/// With a key gateway, a room's harness is given the gateway's URL and the placeholder, never the key; and the
/// egress proxy's port, the one it may connect to.
#[test]
fn a_harness_in_a_room_is_given_its_gateways_url_and_a_placeholder() {
    let mut case = Case::new(ran_old());
    rooms_on(&mut case);
    let gateway = anthropic_gateway();
    let egress = crate::config::rooms::EgressConfig::serving(3129, vec![gateway]);
    case.config.rooms.as_mut().unwrap().egress = Some(egress);
    case.room = Some(Ok(room()));
    let plan = case.decide();
    let Some(Op::Spawn(spawn)) = plan.ops.iter().find(|op| matches!(op, Op::Spawn(_))) else { panic!("{plan:?}") };
    let confine = spawn.confine.as_ref().expect("entered through the room");
    let env: Vec<(&str, &str)> = confine.env.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    assert_eq!(
        env,
        [("ANTHROPIC_BASE_URL", "http://127.0.0.1:3129/gateway/anthropic"), ("ANTHROPIC_API_KEY", "sk-placeholder")]
    );
    assert_eq!(confine.egress_port, Some(3129));
}

/// With a namespace's keys, a room's spawn names the Secret and the variables it takes, none a key gateway or the
/// profile sets (their values are read at the spawn, never part of the plan); what it is given of the Secret is those
/// variables alone, a trailing newline dropped, a value with another control character left out and said.
#[test]
fn a_harness_in_a_room_takes_its_namespaces_keys_by_name_only() {
    let mut case = Case::new(ran_old());
    rooms_on(&mut case);
    let gateway = crate::config::rooms::GatewayConfig { base_url_env: None, ..anthropic_gateway() };
    let rooms = case.config.rooms.as_mut().unwrap();
    rooms.egress = Some(crate::config::rooms::EgressConfig::serving(3129, vec![gateway]));
    let variables = ["COPILOT_GITHUB_TOKEN", "ANTHROPIC_API_KEY", "EDITOR", "GH_TOKEN"].map(String::from).to_vec();
    rooms.namespace_keys =
        Some(crate::config::rooms::NamespaceKeysConfig { secret_name: "tenant-keys".into(), variables });
    case.config.harnesses.get_mut("claude").unwrap().env = vec![("EDITOR".into(), "true".into())];
    case.room = Some(Ok(room()));
    let plan = case.decide();
    let Some(Op::Spawn(spawn)) = plan.ops.iter().find(|op| matches!(op, Op::Spawn(_))) else { panic!("{plan:?}") };
    let keys = spawn.confine.as_ref().and_then(|c| c.keys.as_deref().cloned()).expect("the namespace's keys");
    assert_eq!(keys.secret, "tenant-keys");
    assert_eq!(keys.variables, ["COPILOT_GITHUB_TOKEN", "GH_TOKEN"], "the gateway's and the profile's keep theirs");

    let secret = [("COPILOT_GITHUB_TOKEN", "ghu_tenant\n"), ("GH_TOKEN", "two\nlines"), ("LD_PRELOAD", "/x.so")];
    let secret = secret.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let (given, left_out) = crate::core::given(secret, &keys);
    assert_eq!(given, [("COPILOT_GITHUB_TOKEN".to_string(), "ghu_tenant".to_string())]);
    assert_eq!(left_out, ["GH_TOKEN"]);
}

/// A harness in a room gets no prompt on its command line (every user of the PID namespace reads it in `/proc`, and
/// rooms share one): the spawn carries none, and the prompt is pasted once the harness is ready; a resume the same.
/// With rooms off it rides on the command line as before.
#[test]
fn with_rooms_on_no_prompt_rides_on_a_command_line() {
    let mut case = Case::new(ran_old());
    rooms_on(&mut case);
    case.room = Some(Ok(room()));
    let plan = case.step();
    assert!(spawned(&plan).ends_with(" --resume 0a0b0c0d-old"), "a resume, with no prompt: {}", spawned(&plan));
    case.liveness = Liveness::Alive;
    case.screen = Some(CLAUDE_READY);
    case.now = t(200);
    assert!(ops(&case.step()).contains(&"paste e1 into loop-ns_repo-12: please fix the bug".to_string()));

    let plan = Case::new(ran_old()).decide();
    assert!(spawned(&plan).ends_with("-- please fix the bug"), "rooms off: {}", spawned(&plan));
}

/// A resume an older agent started with the prompt on its command line, then rooms: when it dies and a fresh
/// conversation takes over, the prompt does not ride on that one's command line; it waits again and is pasted.
#[test]
fn a_fallback_in_a_room_gets_no_prompt_on_its_command_line_whatever_the_resume_had() {
    let mut case = Case::new(ran_old());
    case.found = Some(true);
    let plan = case.step();
    assert_eq!(spawned(&plan), RESUME_E1, "rooms off: on the command line");
    rooms_on(&mut case);
    case.room = Some(Ok(room()));
    (case.liveness, case.now) = (Liveness::Dead, t(101));
    case.output = "No conversation found with session ID: 0a0b0c0d-old";
    let plan = case.step();
    assert!(spawned(&plan).contains("--session-id"), "a fresh one: {}", spawned(&plan));
    assert!(!spawned(&plan).contains("please fix the bug"), "{}", spawned(&plan));
    assert_eq!((case.events[0].phase, case.events[0].attempts), (PromptPhase::Pending, 0), "waits again");
    (case.liveness, case.screen, case.now) = (Liveness::Alive, Some(CLAUDE_READY), t(200));
    assert!(ops(&case.step()).iter().any(|op| op.starts_with("paste e1 into loop-ns_repo-12")));
}

/// A room is given by the plan, never while the session is observed: a session without one gets it first, and its
/// harness starts in it at the next decision.
#[test]
fn a_room_is_given_by_the_plan_before_its_harness_starts_there() {
    let mut case = Case::new(ran_old());
    rooms_on(&mut case);
    case.room_due = true;
    let plan = case.decide();
    assert_eq!(ops(&plan), ["give room"], "nothing else: the spawn waits for it");
    assert_eq!(plan.requeue_after, Some(Duration::ZERO), "decided again at once");
    assert_eq!(plan.status.phase, ran_old().phase, "nothing said of it meanwhile");
    case.room_due = false;
    case.room = Some(Ok(room()));
    let plan = case.decide();
    assert!(plan.ops.iter().any(|op| matches!(op, Op::Spawn(s) if s.confine.is_some())), "{plan:?}");
}

/// No room to be had (all taken, or the home cannot be made): nothing starts outside one, and the condition and
/// Ready say why; a harness already running (started before rooms were on) keeps getting its prompts.
#[test]
fn without_a_room_no_harness_starts() {
    let mut case = Case::new(ran_old());
    rooms_on(&mut case);
    case.room = Some(Err("all 10 rooms (200000-200009) are taken"));
    let plan = case.decide();
    assert_eq!(ops(&plan), Vec::<String>::new(), "no spawn");
    assert_eq!(condition(&plan.status, CONFINED), Some(("False", "RoomUnavailable")));
    assert_eq!(condition(&plan.status, READY), Some(("False", "RoomUnavailable")));
    assert_eq!(plan.requeue_after, Some(CONFLICT_RECHECK), "looked at again");
    case.liveness = Liveness::Alive;
    case.tmux = Some(SessionView { alive: true, owner: OWNER.into(), ..Default::default() });
    assert_eq!(ops(&case.decide())[0], "paste e1 into loop-ns_repo-12: please fix the bug");
}

/// Rooms off (local mode, or a chart that turns them off): the harness spawns as before, and the condition says
/// that it shares the tmux server's user.
#[test]
fn with_rooms_off_the_condition_says_the_harness_is_not_confined() {
    let plan = Case::new(ran_old()).decide();
    let Some(Op::Spawn(spawn)) = plan.ops.iter().find(|op| matches!(op, Op::Spawn(_))) else { panic!("{plan:?}") };
    assert_eq!(spawn.confine, None);
    assert_eq!(condition(&plan.status, CONFINED), Some(("False", "RoomsOff")));
}
