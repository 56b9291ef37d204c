//! Table tests of the decision core: one row per row of the resume table and per case of the
//! product brief's steps 1-6.

use super::*;
use crate::api::{PromptStatus, Respawn, RestartPolicy, ResumeSpec, WorkSessionSpec};
use crate::harness::hooks::Turn;

mod approval;
mod budget;
mod delivery;
mod discover;
mod front_door;
mod handoff;
mod hooks;
mod idle;
mod isolation;
mod limit;
mod moves;
mod push;
mod resume;
mod usage;
mod whole;
mod workspace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

const READY: ConditionType = ConditionType::Ready;
const RESUMED: ConditionType = ConditionType::Resumed;
const CONFINED: ConditionType = ConditionType::Confined;
const WORKSPACE_READY: ConditionType = ConditionType::WorkspaceReady;
const CONVERSATION_ID: ConditionType = ConditionType::ConversationId;
const NEW: &str = "11111111-2222-4333-8444-555555555555";
/// The WorkSession's UID, its tag on the tmux sessions it spawns.
const OWNER: &str = "uid-of-this-session";
const OLD: &str = "0a0b0c0d-old";

/// What tmux shows of a session this WorkSession's spawn tagged.
fn ours() -> SessionView {
    SessionView { owner: OWNER.into(), ..Default::default() }
}

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn spec() -> WorkSessionSpec {
    WorkSessionSpec {
        work_item: "repo-12".into(),
        node_name: Some("node-a".into()),
        harness: "claude".into(),
        workdir: "/srv/work/repo".into(),
        ..Default::default()
    }
}

/// A session that ran `OLD` and died: it was verified at t(0).
fn ran_old() -> WorkSessionStatus {
    WorkSessionStatus {
        phase: Some(Phase::Pending),
        harness_session_id: Some(OLD.into()),
        last_respawn: Some(Respawn {
            time: Time(t(0)),
            resumed: false,
            reason: "NoRecordedSession".into(),
            harness_session_id: OLD.into(),
            event: None,
        }),
        ..Default::default()
    }
}

fn ev(name: &str, prompt: &str) -> PendingWorkEvent {
    PendingWorkEvent::pending(name, prompt, t(-10))
}

/// An event sent at t(-1) and not yet known delivered.
fn delivering(name: &str, prompt: &str, via: Via) -> PendingWorkEvent {
    PendingWorkEvent { phase: PromptPhase::Delivering, sent: Some(t(-1)), via: Some(via), ..ev(name, prompt) }
}

/// One decision's inputs, with defaults: a dead session, event `e1` pending, at t(100).
#[derive(Clone)]
struct Case {
    spec: WorkSessionSpec,
    status: WorkSessionStatus,
    events: Vec<PendingWorkEvent>,
    liveness: Liveness,
    output: &'static str,
    spawn_failure: Option<&'static str>,
    config: Config,
    now: Timestamp,
    deleting: bool,
    tmux: Option<SessionView>,
    server: bool,
    session: Option<&'static str>,
    screen: Option<&'static str>,
    confirmed: Vec<String>,
    queued: Vec<String>,
    dropped: Vec<String>,
    steered: Vec<String>,
    found: Option<bool>,
    workspace: Workspace,
    discovered: Option<&'static str>,
    hooked: Option<&'static str>,
    /// The harness's record: its kind (`None`: as the profile and config give it) and length.
    proof: Option<Proof>,
    record_len: u64,
    awaits_transcript: bool,
    turn: Option<Turn>,
    /// The live spawn's latest permission request.
    asked: Option<crate::harness::hooks::Asked>,
    /// Answers to permission requests not yet taken.
    answers: Vec<crate::core::PendingAnswer>,
    discovering_here: Option<&'static str>,
    id_taken_by: Option<&'static str>,
    /// `None`: rooms off; `Some(Err(why))`: on, and none to be had.
    room: Option<Result<Room, &'static str>>,
    /// Rooms on, and the session's room is to be given (wins over `room`).
    room_due: bool,
    finalized: bool,
    finished: Vec<FinishedWorkEvent>,
    /// The node a move asks for.
    move_to: Option<&'static str>,
    limited_label: Option<bool>,
    pull_request: Option<String>,
    checkout: Option<(&'static str, &'static str)>,
    push: PushGrant,
    usage: Option<UsageRead>,
    limited: Vec<Limited>,
    limit_reset: Option<Reset>,
    budgets: Vec<crate::core::NamespaceBudget>,
}

impl Case {
    fn new(status: WorkSessionStatus) -> Self {
        // The claude profile without its transcript: the probe and the settle window are what tell (the delivery
        // tests give it back its transcript where they need one).
        let mut config = Config::default();
        config.harnesses.get_mut("claude").unwrap().conversation_path = None;
        Case {
            spec: spec(),
            status,
            events: vec![ev("e1", "please fix the bug")],
            liveness: Liveness::Dead,
            output: "",
            spawn_failure: None,
            config,
            now: t(100),
            deleting: false,
            tmux: None,
            server: true,
            session: None,
            screen: Some(CLAUDE_READY),
            confirmed: Vec::new(),
            queued: Vec::new(),
            dropped: Vec::new(),
            steered: Vec::new(),
            found: None,
            workspace: Workspace::Ready,
            discovered: None,
            hooked: None,
            proof: None,
            record_len: 0,
            awaits_transcript: false,
            turn: None,
            asked: None,
            answers: Vec::new(),
            discovering_here: None,
            id_taken_by: None,
            room: None,
            room_due: false,
            finalized: true,
            finished: Vec::new(),
            move_to: None,
            limited_label: None,
            pull_request: None,
            checkout: None,
            push: PushGrant::Missing,
            usage: None,
            limited: Vec::new(),
            limit_reset: None,
            budgets: Vec::new(),
        }
    }

    fn decide(&self) -> Plan {
        let configured = self.config.tmux_session("ns/repo-12");
        let current = self.session.map_or_else(|| configured.clone(), str::to_string);
        let session = TmuxSession { current, configured };
        decide(&Input {
            object: Object {
                spec: &self.spec,
                status: &self.status,
                generation: Some(3),
                created: t(-1000),
                deleting: self.deleting.then_some(t(50)),
                finalized: self.finalized,
                owner: OWNER,
                owner_name: "ns/repo-12",
                events: &self.events,
                finished: &self.finished,
                answers: &self.answers,
                move_to: self.move_to,
                pull_request: self.pull_request.as_deref(),
                // As the status says: a test of the label sets it apart.
                limited_label: self
                    .limited_label
                    .unwrap_or_else(|| self.status.usage.as_ref().is_some_and(|u| u.limit.is_some())),
            },
            observed: Observed {
                session: &session,
                liveness: self.liveness,
                view: self.tmux.as_ref(),
                server: self.server,
                last_output: self.output,
                screen: self.screen,
            },
            evidence: &Evidence {
                confirmed: self.confirmed.clone(),
                queued: self.queued.clone(),
                dropped: self.dropped.clone(),
                steered: self.steered.clone(),
                conversation_found: self.found,
                discovered: self.discovered.map(str::to_string),
                hooked: self.hooked.map(str::to_string),
                record: Record {
                    proof: self.proof.unwrap_or_else(|| {
                        let profile = self.config.harnesses.get(&self.spec.harness);
                        let home = self.config.harness_home.as_deref();
                        profile.map_or(Proof::Settle, |p| Proof::of(p, &self.config, home, "ns/repo-12"))
                    }),
                    len: self.record_len,
                    awaits_transcript: self.awaits_transcript,
                },
                turn: self.turn.clone(),
                asked: self.asked.clone(),
                workspace: self.workspace.clone(),
                room: match &self.room {
                    _ if self.room_due => Confinement::Due,
                    None => Confinement::Off,
                    Some(Ok(room)) => Confinement::Room(room.clone()),
                    Some(Err(why)) => Confinement::Unavailable(why.to_string()),
                },
                discovering_here: self.discovering_here.map(str::to_string),
                id_taken_by: self.id_taken_by.map(str::to_string),
                spawn_failure: self.spawn_failure.map(str::to_string),
                checkout: self.checkout.map(|(b, c)| (b.to_string(), c.to_string())),
                push: self.push,
                usage: self.usage.clone(),
                limited: self.limited.clone(),
                limit_reset: self.limit_reset,
                budgets: self.budgets.clone(),
            },
            context: Context { config: &self.config, now: self.now, new_session_id: NEW },
        })
    }

    /// Decides, then carries the plan into the next case as the executor and tmux would: the status, the events'
    /// phases (known-delivered and failed ones leave the queue), and the tags a spawn or a paste leaves on the
    /// tmux session.
    fn step(&mut self) -> Plan {
        let plan = self.decide();
        self.status = plan.status.clone();
        self.spawn_failure = None;
        for op in &plan.ops {
            match op {
                Op::Spawn(s) => {
                    self.tmux = Some(SessionView {
                        alive: true,
                        spawn: s.tag.clone(),
                        owner: s.owner.clone(),
                        ..Default::default()
                    })
                }
                Op::Paste { tag, .. } => {
                    if let Some(view) = &mut self.tmux {
                        view.pasted = tag.clone();
                    }
                }
                Op::WorkEventStatus(u) => {
                    // A finished event sent back (a refused turn's) waits again, where its creation puts it.
                    let back = self.finished.iter().position(|f| f.name == u.event && u.phase == PromptPhase::Pending);
                    if let Some(i) = back {
                        let f = self.finished.remove(i);
                        // Sent once, as delivered ones here were.
                        let back =
                            PendingWorkEvent { attempts: 1, ..PendingWorkEvent::pending(&f.name, &f.prompt, t(-10)) };
                        self.events.push(back);
                        self.events = crate::core::queue::ordered(std::mem::take(&mut self.events));
                    }
                    if matches!(u.phase, PromptPhase::Delivered | PromptPhase::Failed) {
                        self.events.retain(|e| e.name != u.event);
                    } else if let Some(e) = self.events.iter_mut().find(|e| e.name == u.event) {
                        e.phase = u.phase;
                        e.sent = if u.phase == PromptPhase::Pending { None } else { u.sent.or(e.sent) };
                        e.via = if u.phase == PromptPhase::Pending { None } else { u.via.or(e.via) };
                        let forget = u.phase == PromptPhase::Pending && !u.keep_offset;
                        e.offset = if forget { None } else { u.offset.or(e.offset) };
                        e.attempts = if u.returned { 0 } else { e.attempts + u32::from(u.attempt) };
                        e.returns += u32::from(u.returned);
                    }
                }
                _ => {}
            }
        }
        plan
    }
}

/// The ops as short strings, for tables.
fn ops(plan: &Plan) -> Vec<String> {
    plan.ops
        .iter()
        .map(|op| match op {
            Op::AddFinalizer => "add finalizer".into(),
            Op::LabelLimited(on) => format!("label usage-limited {on}"),
            Op::ExpireEvent { event } => format!("expire {event}"),
            Op::Claim(Claim::Workdir(w)) => format!("claim workdir {w}"),
            Op::Claim(Claim::Conversation(id)) => format!("claim conversation {id}"),
            Op::Claim(Claim::Wake(credential)) => format!("claim wake {credential}"),
            Op::RecordIntent(_) => "record intent".into(),
            Op::MarkPrepared => "mark prepared".into(),
            Op::Stop { session } => format!("stop {session}"),
            Op::ReleaseRoom => "release room".into(),
            Op::Spawn(s) => format!("spawn {} {} {}", s.session, s.binary, s.argv.join(" ")),
            Op::Paste { session, key, text, .. } => format!("paste {key} into {session}: {text}"),
            Op::Submit { session, key } => format!("press Enter for {key} in {session}"),
            Op::WorkEventStatus(u) => {
                format!("event {} {:?}{}", u.event, u.phase, u.via.map(|v| format!(" via {v:?}")).unwrap_or_default())
            }
            Op::Notice(n) => match (n.resumed, n.row) {
                (Some(r), _) => format!("{} resumed={r}", n.reason.log_event()),
                (_, Some(why)) => format!("{} {why}", n.reason.log_event()),
                _ => n.reason.log_event().to_string(),
            },
            Op::GiveRoom => "give room".into(),
            Op::Answer { written, .. } => format!("answer {} {}", written.request, written.behavior),
            Op::ReleaseFinalizer { .. } => "release finalizer".into(),
            Op::Forget => "forget".into(),
            Op::PrepareWorkspace => "prepare workspace".into(),
            Op::RemoveWorkspace => "remove workspace".into(),
            Op::Move { node } => format!("move to {node}"),
            Op::LeaveRoom => "leave room".into(),
            Op::GrantPush { repository, host, dir, .. } => {
                format!("grant push {repository} ({host}) into {}", dir.display())
            }
        })
        .collect()
}

/// The spawn op of a plan, if any.
fn spawned(plan: &Plan) -> String {
    ops(plan).into_iter().find(|o| o.starts_with("spawn")).unwrap_or_default()
}

/// The condition `type_` as written: its status and reason.
fn condition(status: &WorkSessionStatus, type_: ConditionType) -> Option<(&str, &str)> {
    status.conditions.iter().find(|c| c.type_ == type_.as_str()).map(|c| (c.status.as_str(), c.reason.as_str()))
}

/// The Claude Code CLI's screen once its input box is up.
const CLAUDE_READY: &str = "banner\n────────────────────\n❯ \n────────────────────\n  ? for shortcuts\n";

const RESUME_E1: &str = "spawn loop-ns_repo-12 claude --resume 0a0b0c0d-old -- please fix the bug";
const FRESH_E1: &str =
    "spawn loop-ns_repo-12 claude --session-id 11111111-2222-4333-8444-555555555555 -- please fix the bug";

#[test]
fn step1_deleted_and_suspended() {
    let mut case = Case::new(ran_old());
    case.deleting = true;
    assert_eq!(ops(&case.decide()), ["stop loop-ns_repo-12", "release finalizer"]);

    let mut case = Case::new(ran_old());
    case.spec.suspend = true;
    case.liveness = Liveness::Alive;
    let plan = case.decide();
    assert_eq!((ops(&plan), plan.status.phase), (vec!["stop loop-ns_repo-12".to_string()], Some(Phase::Suspended)));
    case.liveness = Liveness::Absent;
    assert_eq!(ops(&case.decide()), Vec::<String>::new(), "already stopped; events wait");
}

#[test]
fn step2_live_pane_gets_events_pasted_in_order() {
    let mut case = Case::new(ran_old());
    case.liveness = Liveness::Alive;
    case.events = vec![ev("e1", "one"), ev("e2", "two")];
    case.tmux = Some(SessionView { alive: true, ..ours() });
    let plan = case.step();
    assert_eq!(
        ops(&plan),
        [
            "paste e1 into loop-ns_repo-12: one",
            "event e1 Delivering via Pasted",
            "paste e2 into loop-ns_repo-12: two",
            "event e2 Delivering via Pasted",
        ]
    );
    assert_eq!((plan.status.phase, condition(&plan.status, READY)), (Some(Phase::Running), Some(("True", "Running"))));
    assert_eq!(plan.intent(), None);
    // Known delivered once the pane outlived the probe since the paste (no transcript here; the settle window of
    // the respawn at t(0) is long over).
    case.now = t(102);
    let plan = case.step();
    assert_eq!(
        ops(&plan),
        ["event e1 Delivered via Pasted", "event.delivered", "event e2 Delivered via Pasted", "event.delivered"]
    );
    assert_eq!(plan.status.last_prompt_time, Some(Time(t(102))), "when it last took a prompt");
}

#[test]
fn step3_when_a_dead_pane_is_respawned() {
    type Setup = fn(&mut Case);
    let rows: [(&str, Setup, Option<&str>, Phase); 6] = [
        ("event pending", |_| {}, Some(RESUME_E1), Phase::Verifying),
        ("OnEvent, nothing pending: waits", |c| c.events.clear(), None, Phase::Pending),
        (
            "Always, nothing pending",
            |c| {
                c.events.clear();
                c.spec.restart_policy = RestartPolicy::Always
            },
            Some("spawn loop-ns_repo-12 claude --resume 0a0b0c0d-old"),
            Phase::Verifying,
        ),
        ("Never after a run: waits, Failed", |c| c.spec.restart_policy = RestartPolicy::Never, None, Phase::Failed),
        (
            "first start with initialPrompt",
            |c| {
                c.status = WorkSessionStatus::default();
                c.events.clear();
                c.spec.initial_prompt = Some("hello".into())
            },
            Some("spawn loop-ns_repo-12 claude --session-id 11111111-2222-4333-8444-555555555555 -- hello"),
            Phase::Verifying,
        ),
        (
            "first start without a prompt",
            |c| {
                c.status = WorkSessionStatus::default();
                c.events.clear();
                c.liveness = Liveness::Absent
            },
            Some("spawn loop-ns_repo-12 claude --session-id 11111111-2222-4333-8444-555555555555"),
            Phase::Verifying,
        ),
    ];
    for (row, setup, spawn, phase) in rows {
        let mut case = Case::new(ran_old());
        setup(&mut case);
        let plan = case.decide();
        let spawned = ops(&plan).into_iter().find(|o| o.starts_with("spawn"));
        assert_eq!((spawned.as_deref(), plan.status.phase), (spawn, Some(phase)), "{row}");
    }
}

#[test]
fn step4_verification_does_not_block_and_probe_zero_does_not_wait() {
    let mut case = Case::new(ran_old());
    case.spec.resume = Some(ResumeSpec { probe_seconds: Some(0), settle_seconds: Some(0), ..Default::default() });
    let plan = case.step();
    assert_eq!(plan.requeue_after, Some(Duration::ZERO));
    case.liveness = Liveness::Alive;
    assert_eq!(ops(&case.step())[1], "event e1 Delivered via Resumed");

    // A fresh spawn that dies within its probe: the event goes back, the failure counts.
    let mut case = Case::new(WorkSessionStatus::default());
    case.step();
    case.output = "Segmentation fault";
    let plan = case.step();
    assert_eq!(ops(&plan), ["event e1 Pending", "session.exited"]);
    assert_eq!((plan.status.phase, plan.status.failure_count), (Some(Phase::Pending), 1));
}

#[test]
fn step5_resumed_pane_dying_within_settle() {
    let resumed_at_0 = || {
        let mut s = ran_old();
        s.phase = Some(Phase::Running);
        s.last_respawn = Some(Respawn {
            time: Time(t(0)),
            resumed: true,
            reason: "Resumed".into(),
            harness_session_id: OLD.into(),
            event: Some("e1".into()),
        });
        s
    };
    // Output matches the profile's pattern: the event comes back, and the next spawn is fresh.
    let mut case = Case::new(resumed_at_0());
    case.events = vec![delivering("e1", "please fix the bug", Via::Resumed)];
    case.now = t(30);
    case.output = "No conversation found with session ID: 0a0b0c0d-old";
    let plan = case.step();
    assert_eq!(ops(&plan), ["session.resume_failed PaneDiedAfterProbe", "event e1 Pending"]);
    assert_eq!(plan.requeue_after, Some(Duration::ZERO));
    let resumed = plan.status.conditions.iter().find(|c| c.type_ == RESUMED.as_str()).unwrap();
    assert_eq!(resumed.reason, "PaneDiedAfterProbe");
    assert!(resumed.message.contains("No conversation found with session ID: 0a0b0c0d-old"));
    assert_eq!((plan.status.failure_count, plan.status.next_retry_time.clone()), (1, None), "counts; retries at once");
    // The fresh spawn says why from the status's record of it, not from a condition read back (one that changed
    // since, or was never written back, is no state).
    case.status.conditions.clear();
    let plan = case.step();
    assert_eq!(spawned(&plan), FRESH_E1);
    let fresh = plan.status.verification.as_ref().unwrap();
    assert_eq!(fresh.fresh_reason.as_deref(), Some("PaneDiedAfterProbe"));
    let why = fresh.fresh_message.as_deref().unwrap_or_default();
    assert!(why.contains("No conversation found with session ID: 0a0b0c0d-old"), "{why}");

    // Output does not match: the event comes back and the next spawn resumes again.
    let mut case = Case::new(resumed_at_0());
    case.events = vec![delivering("e1", "please fix the bug", Via::Resumed)];
    case.now = t(30);
    case.output = "Killed";
    case.step();
    assert_eq!(spawned(&case.step()), RESUME_E1);

    // After the settle window: an ordinary death; the delivered event stays delivered.
    let mut case = Case::new(resumed_at_0());
    case.events.clear();
    case.now = t(61);
    assert_eq!(ops(&case.step()), ["session.exited"]);

    // After the settle window, but saying it cannot find the conversation before it ran long enough to be healthy (a
    // CLI slowed by a loaded node): the same late failure, and the next spawn is fresh, not the same resume for ever.
    let mut case = Case::new(resumed_at_0());
    case.events = vec![delivering("e1", "please fix the bug", Via::Resumed)];
    case.now = t(75);
    case.output = "No conversation found with session ID: 0a0b0c0d-old";
    assert_eq!(ops(&case.step()), ["session.resume_failed PaneDiedAfterProbe", "event e1 Pending"]);
    assert_eq!(spawned(&case.step()), FRESH_E1);
}

#[test]
fn step6_back_off_like_kubelet() {
    assert_eq!(
        [1, 2, 3, 4, 5, 6, 7, 8, 30].map(backoff),
        [0, 10, 20, 40, 80, 160, 300, 300, 300].map(Duration::from_secs)
    );
    // Always, a harness that keeps crashing: the first quick death respawns at once, the second backs off.
    let running = |failures| {
        let mut s = ran_old();
        s.phase = Some(Phase::Running);
        s.failure_count = failures;
        s
    };
    let mut case = Case::new(running(0));
    case.spec.restart_policy = RestartPolicy::Always;
    case.events.clear();
    let plan = case.decide();
    assert_eq!((plan.status.failure_count, plan.status.phase), (1, Some(Phase::Verifying)));

    let mut case = Case::new(running(1));
    case.spec.restart_policy = RestartPolicy::Always;
    case.events.clear();
    let plan = case.step();
    assert_eq!(ops(&plan), ["session.exited", "session.backoff"]);
    assert_eq!((plan.status.failure_count, plan.status.phase), (2, Some(Phase::BackOff)));
    assert_eq!(plan.status.next_retry_time.as_ref().map(|t| t.0), Some(t(110)));
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(10)));
    case.now = t(110);
    assert!(ops(&case.decide()).iter().any(|o| o.starts_with("spawn")), "retries at nextRetryTime");

    // Ten minutes healthy: a death is not a failure, and the count resets.
    let mut case = Case::new(running(4));
    case.now = t(601);
    let plan = case.decide();
    assert_eq!((plan.status.failure_count, plan.status.next_retry_time.clone()), (0, None));
    assert!(ops(&plan).iter().any(|o| o.starts_with("spawn")));
}

#[test]
fn restart_adopts_live_sessions_and_finishes_verifications() {
    // Agent restarted, session alive, nothing recorded: adopted, nothing spawned.
    let mut case = Case::new(WorkSessionStatus::default());
    case.liveness = Liveness::Alive;
    case.events.clear();
    let plan = case.decide();
    assert_eq!((ops(&plan), plan.status.phase), (vec![], Some(Phase::Running)));
    // Agent restarted mid-verification: the status carries it, and it finishes.
    let mut case = Case::new(ran_old());
    let plan = case.step(); // the spawn ran: its pane carries its tag
    case.status = plan.intent().unwrap().clone();
    case.events = vec![ev("e1", "please fix the bug")];
    case.liveness = Liveness::Alive;
    // Its boot prompt was sent with the spawn the intent stands for: recorded so, never sent again.
    assert_eq!(ops(&case.step()), ["event e1 Delivering via Resumed"]);
    case.now = t(105);
    assert_eq!(ops(&case.decide())[0], "session.respawned resumed=true");
}

#[test]
fn specs_the_agent_cannot_run_are_reported_not_spawned() {
    type Setup = fn(&mut Case);
    let rows: [(&str, Setup, &str); 3] = [
        ("cursor cannot be hosted", |c| c.spec.harness = "cursor".into(), "HarnessCannotBeHosted"),
        ("unknown harness", |c| c.spec.harness = "nope".into(), "UnknownHarness"),
        ("invalid workItem (no schema in local mode)", |c| c.spec.work_item = "-x".into(), "InvalidSpec"),
    ];
    for (row, setup, why) in rows {
        let mut case = Case::new(ran_old());
        setup(&mut case);
        let plan = case.decide();
        assert_eq!(ops(&plan), Vec::<String>::new(), "{row}");
        assert_eq!(
            (plan.status.phase, condition(&plan.status, READY)),
            (Some(Phase::Failed), Some(("False", why))),
            "{row}"
        );
    }
    // A dash-led prompt for a profile without "--": the event fails clearly; nothing is spawned.
    let mut case = Case::new(ran_old());
    case.config.harnesses.get_mut("claude").unwrap().resume =
        Some(vec!["--resume".into(), "{sessionId}".into(), "{prompt}".into()]);
    case.events = vec![ev("e1", "--dangerously-skip-permissions")];
    let plan = case.decide();
    assert_eq!(ops(&plan), ["event e1 Failed", "event.failed"]);
}

#[test]
fn long_boot_prompts_are_pasted_once_ready() {
    let long = "x".repeat(ARGV_PROMPT_LIMIT + 1);
    let mut case = Case::new(ran_old());
    case.events = vec![ev("e1", &long)];
    let plan = case.step();
    assert_eq!(spawned(&plan), "spawn loop-ns_repo-12 claude --resume 0a0b0c0d-old", "no prompt on the command line");
    case.liveness = Liveness::Alive;
    case.now = t(102);
    let plan = case.step();
    assert_eq!(ops(&plan)[1], format!("paste e1 into loop-ns_repo-12: {long}"));
    assert_eq!(ops(&plan)[2], "event e1 Delivering via Pasted");
}

#[test]
fn control_characters_never_reach_the_harness() {
    let mut case = Case::new(ran_old());
    case.events = vec![ev("e1", "stop\u{3}\u{1b}[201~now\u{0}")];
    assert_eq!(spawned(&case.decide()), "spawn loop-ns_repo-12 claude --resume 0a0b0c0d-old -- stop[201~now");
    case.liveness = Liveness::Alive;
    assert_eq!(ops(&case.decide())[0], "paste e1 into loop-ns_repo-12: stop[201~now");
}

#[test]
fn status_records_generation_and_tmux_session() {
    let plan = Case::new(ran_old()).decide();
    assert_eq!(
        (plan.status.observed_generation, plan.status.tmux_session.as_deref()),
        (Some(3), Some("loop-ns_repo-12"))
    );
    assert!(plan.status.conditions.iter().all(|c| c.observed_generation == Some(3)));
}

#[test]
fn status_shows_the_pull_request_the_bridge_recorded_and_nothing_malformed() {
    let mut case = Case::new(ran_old());
    let recorded = r#"{"repository":"octo-org/hello","number":57,"state":"Open","headSha":"abc","checks":"Failing"}"#;
    case.pull_request = Some(recorded.into());
    let shown = case.decide().status.pull_request.expect("shown");
    assert_eq!((shown.number, shown.checks), (57, Some(crate::api::ChecksState::Failing)));
    case.pull_request = Some(r#"{"number": "fifty-seven"}"#.into());
    assert_eq!(case.decide().status.pull_request, None, "a malformed record shows nothing");
    case.status.pull_request = Some(shown);
    case.pull_request = None;
    assert_eq!(case.decide().status.pull_request, None, "the record gone, the status follows");
}

#[test]
fn timestamps_at_the_end_of_time_do_not_panic() {
    let end = Timestamp::MAX;
    let mut status = ran_old();
    status.last_respawn.as_mut().unwrap().time = Time(end);
    status.next_retry_time = Some(Time(end));
    status.last_failure_time = Some(Time(end));
    for liveness in [Liveness::Alive, Liveness::Dead, Liveness::Absent] {
        for now in [t(100), end] {
            let mut case = Case::new(status.clone());
            case.status.phase = Some(Phase::Running);
            case.liveness = liveness;
            case.now = now;
            case.events = vec![delivering("e1", "one", Via::Pasted), ev("e2", "two")];
            case.step();
            case.step();
        }
    }
    let mut case = Case::new(ran_old());
    case.now = end;
    let plan = case.step(); // a spawn whose probe deadline lies past the end of time
    assert_eq!(plan.status.verification.map(|v| v.deadline.0), Some(end));
}
