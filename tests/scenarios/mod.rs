//! End-to-end scenarios shared by the Kubernetes agent (`tests/agent.rs`) and local mode (`tests/local.rs`): one
//! scenario, two object stores. A [`Rig`] is one running agent on a real tmux server with the stand-in harness.
#![allow(dead_code)] // each test binary uses a different part of this module

pub mod approvals;
pub mod discover;
#[path = "../fixtures/github.rs"]
pub mod fixtures;
pub mod front_door;
pub mod hazards;
pub mod hooks;
pub mod pull_requests;
pub mod shapes;
pub mod usage;
pub mod workspace;

use serde_json::Value;
use worksession::api::{Phase, PromptPhase, Via, WorkEventStatus, WorkSessionStatus};
use worksession::core::ConditionType;

use crate::standin::TmuxServer;
use crate::support::{WAIT, poll};
use worksession::agent::Failpoint;
use worksession::node::tmux::{Liveness, Tmux};

/// Registers every scenario shared by both modes, once for each, as a `#[tokio::test]` named `shared_...`: on a rig
/// made by `$rig` (an expression, `.await` allowed), then `$after(&rig, "shared_...")`, a mode's own checks after a
/// scenario (the agent's look at Kubernetes Events and finalizers). tests/local.rs and tests/agent.rs each call it
/// once: one list, never two hand-kept ones.
#[macro_export]
macro_rules! shared_scenarios {
    ($rig:expr, $after:path) => {
        $crate::shared_scenarios!(@tests $rig, $after;
            shared_resume_the_same_conversation: resume_the_same_conversation;
            shared_fast_resume_failure_falls_back: fast_resume_failure_falls_back;
            shared_slow_resume_failure_falls_back: slow_resume_failure_falls_back;
            shared_suspend_then_delete: suspend_then_delete;
            shared_restart_adopts_and_finishes_verifications: restart_adopts_and_finishes_verifications;
            shared_without_a_transcript_the_settle_window_confirms: without_a_transcript_the_settle_window_confirms;
            shared_late_resume_failure_loses_nothing: late_resume_failure_loses_nothing;
            shared_input_during_boot_waits_for_the_ready_prompt: input_during_boot_waits_for_the_ready_prompt;
            shared_adopted_unknown_conversation_starts_fresh_with_the_initial_prompt:
                adopted_unknown_conversation_starts_fresh_with_the_initial_prompt;
            shared_a_lost_conversation_is_handed_over_unless_turned_off: a_lost_conversation_is_handed_over_unless_turned_off;
            shared_killed_between_intent_and_spawn_runs_the_same_spawn: killed_between_intent_and_spawn_runs_the_same_spawn;
            shared_killed_between_paste_and_status_pastes_once: killed_between_paste_and_status_pastes_once;
            shared_idle_stops_and_an_event_wakes_the_same_conversation: idle_stops_and_an_event_wakes_the_same_conversation;
            shared_workspaces_per_work_item_from_one_clone: workspace::workspaces_per_work_item_from_one_clone;
            shared_a_workspace_that_cannot_be_prepared_says_what_git_printed:
                workspace::a_workspace_that_cannot_be_prepared_says_what_git_printed;
            shared_a_workspace_over_http_with_a_token: workspace::a_workspace_over_http_with_a_token;
            shared_a_missing_workdir_says_so_until_it_is_made: workspace::a_missing_workdir_says_so_until_it_is_made;
            shared_a_slow_preparation_never_holds_up_other_sessions: workspace::a_slow_preparation_never_holds_up_other_sessions;
            shared_ids_discovered_after_the_start: discover::ids_discovered_after_the_start;
            shared_the_codex_notify_names_its_conversation: discover::the_codex_notify_names_its_conversation;
            shared_a_codex_title_thread_is_not_taken_for_the_conversation: discover::a_codex_title_thread_is_not_taken_for_the_conversation;
            shared_a_paste_codex_lost_is_sent_again: discover::a_paste_codex_lost_is_sent_again;
            shared_the_gemini_shape_spawns_resumes_and_falls_back: shapes::spawn_resume_and_fall_back, "gemini";
            shared_the_copilot_shape_spawns_resumes_and_falls_back: shapes::spawn_resume_and_fall_back, "copilot";
            shared_the_opencode_shape_spawns_resumes_and_falls_back: shapes::spawn_resume_and_fall_back, "opencode";
            shared_the_codex_shape_spawns_resumes_and_falls_back: shapes::spawn_resume_and_fall_back, "codex";
            shared_prompts_are_text_never_harness_commands: front_door::prompts_are_text_never_harness_commands;
            shared_two_sessions_of_one_work_item_never_contend: front_door::two_sessions_of_one_work_item_never_contend;
            shared_a_conversation_another_session_records_is_not_adopted:
                front_door::a_conversation_another_session_records_is_not_adopted;
            shared_an_untagged_session_under_a_victims_name_gets_nothing:
                front_door::an_untagged_session_under_a_victims_name_gets_nothing;
            shared_the_git_token_goes_only_to_its_hosts: workspace::the_git_token_goes_only_to_its_hosts;
            shared_a_repository_never_makes_the_agent_run_its_code: workspace::a_repository_never_makes_the_agent_run_its_code;
            shared_a_namespace_checks_out_only_its_repositories: workspace::a_namespace_checks_out_only_its_repositories;
            shared_a_prompt_is_confirmed_only_after_its_send_and_sent_again_at_the_deadline:
                hooks::a_prompt_is_confirmed_only_after_its_send_and_sent_again_at_the_deadline;
            shared_an_unkind_harness_still_confirms_and_says_what_it_does:
                hooks::an_unkind_harness_still_confirms_and_says_what_it_does;
            shared_a_prompt_reported_but_never_written_is_sent_again:
                hooks::a_prompt_reported_but_never_written_is_sent_again;
            shared_a_resume_never_opens_the_summary_picker: hazards::a_resume_never_opens_the_summary_picker;
            shared_a_conversation_busy_elsewhere_waits_and_is_resumed:
                hazards::a_conversation_busy_elsewhere_waits_and_is_resumed;
            shared_a_harness_without_a_queue_gets_prompts_between_turns:
                hazards::a_harness_without_a_queue_gets_prompts_between_turns;
            shared_a_pull_request_and_its_ci_reach_the_conversation_that_took_the_issue:
                pull_requests::a_pull_request_and_its_ci_reach_the_conversation_that_took_the_issue;
            shared_usage_adds_up_across_a_resume_and_a_fresh_conversation:
                usage::usage_adds_up_across_a_resume_and_a_fresh_conversation;
            shared_a_budget_reached_pauses_after_the_turn_and_a_raise_goes_on:
                usage::a_budget_reached_pauses_after_the_turn_and_a_raise_goes_on;
            shared_a_usage_limit_parks_the_sessions_of_its_account_and_each_refused_prompt_is_answered_once:
                usage::a_usage_limit_parks_the_sessions_of_its_account_and_each_refused_prompt_is_answered_once;
            shared_a_namespaces_budget_reached_by_its_sessions_together_pauses_each_and_a_raise_goes_on:
                usage::a_namespaces_budget_reached_by_its_sessions_together_pauses_each_and_a_raise_goes_on;
            shared_a_permission_request_is_answered_by_a_person_or_a_rule_never_by_an_older_answer:
                approvals::a_permission_request_is_answered_by_a_person_or_a_rule_never_by_an_older_answer;
        );
    };
    (@tests $rig:expr, $after:path; $($name:ident: $($scenario:ident)::+ $(, $arg:expr)?;)*) => {
        $(
            #[tokio::test]
            async fn $name() {
                #[allow(unused_mut)]
                let mut rig = $rig;
                scenarios::$($scenario)::+(&mut rig $(, $arg)?).await;
                $after(&rig, stringify!($name)).await;
            }
        )*
    };
}

/// What a scenario needs of an agent and its store.
pub trait Rig {
    /// Creates a WorkSession `name` (work item `name`, harness `standin`, the rig's workdir) with `spec` merged in.
    fn create_session(&self, name: &str, spec: Value) -> impl Future<Output = ()>;
    /// Sends a WorkEvent `name` to `session`.
    fn send(&self, session: &str, name: &str, prompt: &str) -> impl Future<Output = ()>;
    /// Sends a WorkEvent `name` to `session` that opts in to being a harness command (`spec.command`).
    fn send_command(&self, session: &str, name: &str, prompt: &str) -> impl Future<Output = ()>;
    /// A WorkSession's status (empty when it has none or is gone).
    fn session_status(&self, name: &str) -> impl Future<Output = WorkSessionStatus>;
    /// A WorkEvent's status (empty when it has none).
    fn event_status(&self, name: &str) -> impl Future<Output = WorkEventStatus>;
    /// Whether the WorkSession is gone altogether (deleted and released).
    fn session_gone(&self, name: &str) -> impl Future<Output = bool>;
    /// Sets `spec.suspend`.
    fn suspend(&self, name: &str, on: bool) -> impl Future<Output = ()> {
        self.patch_spec(name, serde_json::json!({"suspend": on}))
    }
    /// Merges `patch` into the WorkSession's spec, key by key (`null` takes one away).
    fn patch_spec(&self, name: &str, patch: Value) -> impl Future<Output = ()>;
    /// Deletes the WorkSession.
    fn delete_session(&self, name: &str) -> impl Future<Output = ()>;
    /// Creates the namespace's WorkBudget `name` with `spec`, or replaces its spec.
    fn apply_budget(&self, name: &str, spec: Value) -> impl Future<Output = ()>;
    /// The notes of the Kubernetes Events of `reason` the agent recorded on the WorkSession `session` (a series keeps
    /// its first); `None` where the store keeps no Events (local mode).
    fn notes(&self, session: &str, reason: &str) -> impl Future<Output = Option<Vec<String>>>;
    /// Stops the agent and starts a new one that stops forever at `failpoint`, as if killed there.
    fn restart_agent_with(&mut self, failpoint: Option<Failpoint>);
    /// Stops the agent and starts a new one.
    fn restart_agent(&mut self) {
        self.restart_agent_with(None);
    }
    /// The tmux server and the stand-in's records.
    fn tmux(&self) -> &TmuxServer;
    /// The node the rig's agent serves.
    fn node(&self) -> String;
    /// The webhook bridge's routes on bridge config `yaml`, writing to the rig's store.
    fn bridge(&self, yaml: &str) -> axum::Router;
    /// The namespace of the rig's objects.
    fn namespace(&self) -> String;
    /// Answers the permission request `id` (default: the one waiting) of `session` as `worksession approve` or
    /// `deny` does (in local mode, that very command), by `tester`: what it said, or why it did not.
    fn answer(
        &self,
        session: &str,
        id: Option<&str>,
        decision: worksession::api::Decision,
        reason: Option<&str>,
    ) -> impl Future<Output = Result<String, String>>;
    /// The tmux session of the WorkSession `name` (`loop-<namespace>_<name>`).
    fn tmux_session(&self, name: &str) -> String {
        format!("loop-{}_{name}", self.namespace())
    }
}

/// Awaits `get()` satisfying `pred`, failing the test after [`WAIT`] with the last value seen.
pub async fn await_value<T: std::fmt::Debug, F: Future<Output = T>>(
    what: &str,
    mut get: impl FnMut() -> F,
    pred: impl Fn(&T) -> bool,
) -> T {
    poll(what, WAIT, || {
        let value = get();
        async {
            let last = value.await;
            if pred(&last) { Ok(last) } else { Err(format!("{last:?}")) }
        }
    })
    .await
}

async fn await_phase(rig: &impl Rig, name: &str, phase: Phase) -> WorkSessionStatus {
    await_value(&format!("{name} {phase}"), || rig.session_status(name), |s| s.phase == Some(phase)).await
}

async fn await_delivered(rig: &impl Rig, event: &str) -> WorkEventStatus {
    let delivered = |s: &WorkEventStatus| s.phase == Some(PromptPhase::Delivered);
    await_value(&format!("{event} Delivered"), || rig.event_status(event), delivered).await
}

/// Awaits the WorkSession `name` gone altogether.
pub async fn await_gone(rig: &impl Rig, name: &str) {
    await_value(&format!("{name} gone"), || rig.session_gone(name), |gone| *gone).await;
}

/// The conversation the stand-in recorded `prompt` in, once it did (a pane is alive, and Running, before the
/// harness has read its command line).
pub async fn conversation_of(rig: &impl Rig, prompt: &str) -> String {
    let get = || async {
        let prompts = rig.tmux().prompts();
        prompts.iter().find(|p| p.prompt == prompt).map(|p| p.conversation.clone())
    };
    await_value(&format!("{prompt:?} received"), get, Option::is_some).await.unwrap()
}

/// The recorded conversation's id (empty when none is).
pub fn id(status: &WorkSessionStatus) -> String {
    status.harness_session_id.clone().unwrap_or_default()
}

/// A condition's status, reason and message, empty when it is absent.
pub fn condition(status: &WorkSessionStatus, type_: ConditionType) -> (String, String, String) {
    match status.conditions.iter().find(|c| c.type_ == type_.as_str()) {
        Some(c) => (c.status.clone(), c.reason.clone(), c.message.clone()),
        None => Default::default(),
    }
}

/// A condition's status and reason, empty when it is absent.
pub fn status_reason(status: &WorkSessionStatus, type_: ConditionType) -> (String, String) {
    let (status, reason, _) = condition(status, type_);
    (status, reason)
}

pub fn ready_message(status: &WorkSessionStatus) -> String {
    condition(status, ConditionType::Ready).2
}

fn resumed(status: &WorkSessionStatus) -> (String, String, String) {
    condition(status, ConditionType::Resumed)
}

/// The phase of `spec.initialPrompt`'s delivery.
fn initial_phase(status: &WorkSessionStatus) -> Option<PromptPhase> {
    status.initial_prompt.as_ref().and_then(|p| p.phase)
}

/// First spawn; the pane killed; an event resumes the same conversation; then a paste into the live pane.
pub async fn resume_the_same_conversation(rig: &impl Rig) {
    rig.create_session("alpha", serde_json::json!({"initialPrompt": "hello"})).await;
    let st = await_phase(rig, "alpha", Phase::Running).await;
    let id = id(&st);
    let tmux = rig.tmux();
    assert_eq!(tmux.await_prompts(1).await[0].prompt, "hello");

    tmux.kill_harness(&rig.tmux_session("alpha")).await;
    await_phase(rig, "alpha", Phase::Pending).await;
    rig.send("alpha", "alpha-1", "the reviewer asked for tests").await;
    let ev = await_delivered(rig, "alpha-1").await;
    assert_eq!((ev.via.map(Via::as_str), ev.harness_session_id.as_deref()), (Some("Resumed"), Some(id.as_str())));
    let st = await_phase(rig, "alpha", Phase::Running).await;
    assert_eq!(st.harness_session_id.as_deref(), Some(id.as_str()), "same conversation");
    assert_eq!(resumed(&st).0, "True");
    let prompts = tmux.await_prompts(2).await;
    assert_eq!(
        (prompts[1].conversation.as_str(), prompts[1].prompt.as_str()),
        (id.as_str(), "the reviewer asked for tests")
    );

    tmux.await_output(&rig.tmux_session("alpha"), "ready>").await;
    rig.send("alpha", "alpha-2", "and a changelog entry").await;
    assert_eq!(await_delivered(rig, "alpha-2").await.via, Some(Via::Pasted));
    let prompts = tmux.await_prompts(3).await;
    assert_eq!((prompts[2].via.as_str(), prompts[2].pid), ("paste", prompts[1].pid));
}

/// An unknown recorded id fails at once: `PaneDied`, a new uuid, the event delivered via `Fresh`.
pub async fn fast_resume_failure_falls_back(rig: &impl Rig) {
    rig.send("beta", "beta-1", "first event").await;
    // A 4 s probe: the stand-in dies at once, but a loaded machine may take a second or two to start it, and a death
    // after the probe would be the slow row of the table.
    let spec = serde_json::json!({"harness": "standin-blind", "harnessSessionId": "ghost-conversation", "resume": {"probeSeconds": 4}});
    rig.create_session("beta", spec).await;
    let ev = await_delivered(rig, "beta-1").await;
    let st = await_phase(rig, "beta", Phase::Running).await;
    let (status, reason, message) = resumed(&st);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "PaneDied"));
    assert!(message.contains("No conversation found with session ID: ghost-conversation"), "{message}");
    let id = st.harness_session_id.as_deref().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "a new uuid: {id}");
    assert_eq!((ev.via.map(Via::as_str), ev.harness_session_id.as_deref()), (Some("Fresh"), Some(id)));
    // Sent on the resume's command line, then on the fresh one's, in one decision: the resume's send returned with
    // the dead harness, the fresh harness's counted (a second send still due at its deadline).
    assert_eq!(ev.attempts, 1, "{ev:?}");
}

/// A resume that dies after the probe: the event goes back to `Pending`, then a fresh conversation gets it.
pub async fn slow_resume_failure_falls_back(rig: &impl Rig) {
    rig.send("gamma", "gamma-1", "slow one").await;
    rig.create_session("gamma", serde_json::json!({"harness": "standin-slow", "harnessSessionId": "ghost"})).await;
    let st = await_value(
        "gamma fresh after PaneDiedAfterProbe",
        || rig.session_status("gamma"),
        |s| {
            let (_, reason, message) = resumed(s);
            s.phase == Some(Phase::Running) && reason == "PaneDiedAfterProbe" && message.starts_with("started a fresh")
        },
    )
    .await;
    let id = id(&st);
    let ev = await_delivered(rig, "gamma-1").await;
    assert_eq!((ev.via.map(Via::as_str), ev.harness_session_id.as_deref()), (Some("Fresh"), Some(id.as_str())));
    // Sent to the resume that died, then to the fresh harness: the death returned it with its count at zero.
    assert_eq!(ev.attempts, 1, "counted for the harness that took it: {ev:?}");
    let prompts = rig.tmux().prompts();
    assert_eq!(
        prompts.iter().map(|p| (p.conversation.as_str(), p.prompt.as_str())).collect::<Vec<_>>(),
        [(id.as_str(), "slow one")]
    );
}

/// Suspend stops the session and holds events; unsuspend delivers them; delete stops it and releases it.
pub async fn suspend_then_delete(rig: &impl Rig) {
    rig.create_session("zeta", serde_json::json!({})).await;
    await_phase(rig, "zeta", Phase::Running).await;
    rig.suspend("zeta", true).await;
    await_phase(rig, "zeta", Phase::Suspended).await;
    assert_eq!(rig.tmux().runner.observe().await.unwrap().liveness(&rig.tmux_session("zeta")), Liveness::Absent);
    rig.send("zeta", "zeta-1", "wait for it").await;
    // The agent saw the event (its Ready condition counts it) and held it.
    await_value(
        "zeta to hold its event",
        || rig.session_status("zeta"),
        |s| ready_message(s).contains("1 prompt waits"),
    )
    .await;
    assert_eq!(rig.session_status("zeta").await.phase, Some(Phase::Suspended));
    assert_eq!(rig.event_status("zeta-1").await, WorkEventStatus::default(), "events wait while suspended");
    rig.suspend("zeta", false).await;
    await_delivered(rig, "zeta-1").await;

    rig.delete_session("zeta").await;
    await_gone(rig, "zeta").await;
    assert_eq!(rig.tmux().runner.observe().await.unwrap().liveness(&rig.tmux_session("zeta")), Liveness::Absent);
}

/// A restarted agent adopts a live session (nothing respawned) and finishes a verification in flight.
pub async fn restart_adopts_and_finishes_verifications(rig: &mut impl Rig) {
    rig.create_session("theta", serde_json::json!({})).await;
    let id = await_phase(rig, "theta", Phase::Running).await.harness_session_id.clone().unwrap();
    rig.create_session("iota", serde_json::json!({"resume": {"probeSeconds": 4}})).await;
    await_phase(rig, "iota", Phase::Running).await;
    let theta_pid = rig.tmux().pane_pid(&rig.tmux_session("theta"));

    rig.tmux().kill_harness(&rig.tmux_session("iota")).await;
    rig.send("iota", "iota-1", "during verification").await;
    await_phase(rig, "iota", Phase::Verifying).await;
    rig.restart_agent();

    assert_eq!(await_delivered(rig, "iota-1").await.via, Some(Via::Resumed));
    rig.tmux().await_output(&rig.tmux_session("theta"), "ready>").await;
    rig.send("theta", "theta-1", "still you?").await;
    assert_eq!(await_delivered(rig, "theta-1").await.via, Some(Via::Pasted), "adopted, not respawned");
    let st = rig.session_status("theta").await;
    assert_eq!((st.harness_session_id.as_deref(), st.respawn_count), (Some(id.as_str()), 0));
    assert_eq!(rig.tmux().pane_pid(&rig.tmux_session("theta")), theta_pid);
    let prompts = rig.tmux().await_prompts(2).await;
    assert_eq!(prompts.iter().filter(|p| p.prompt == "during verification").count(), 1, "one spawn for the event");
}

/// Prompts the stand-in received, as (conversation, prompt).
fn received(rig: &impl Rig) -> Vec<(String, String)> {
    rig.tmux().prompts().into_iter().map(|p| (p.conversation, p.prompt)).collect()
}

/// Without a transcript, a prompt is known delivered only once its pane outlived the window that proves it: the
/// boot prompt of a resume at the end of the settle window, a paste after the probe.
pub async fn without_a_transcript_the_settle_window_confirms(rig: &impl Rig) {
    crate::standin::seed_conversation(&rig.tmux().state(), "known-eps");
    rig.send("eps", "eps-1", "boot prompt").await;
    rig.create_session("eps", serde_json::json!({"harness": "standin-blind", "harnessSessionId": "known-eps"})).await;
    let running = await_phase(rig, "eps", Phase::Running).await;
    let ev = rig.event_status("eps-1").await;
    assert_eq!((ev.phase, ev.via), (Some(PromptPhase::Delivering), Some(Via::Resumed)), "{ev:?}");
    let ev = await_delivered(rig, "eps-1").await;
    let respawned = running.last_respawn.as_ref().unwrap().time.0;
    let settled = respawned + k8s_openapi::jiff::SignedDuration::from_secs(10);
    let delivered = ev.delivered_at.as_ref().unwrap().0;
    assert!(delivered >= settled, "Delivered at {delivered} before the settle window ended ({settled})");
    assert_eq!((ev.via.map(Via::as_str), ev.harness_session_id.as_deref()), (Some("Resumed"), Some("known-eps")));
}

/// A resume that fails late, with its TUI up: the boot prompt (`initialPrompt`) and an event pasted into the doomed
/// pane both go back to `Pending`, and each reaches the fresh conversation exactly once, without another event.
pub async fn late_resume_failure_loses_nothing(rig: &impl Rig) {
    let spec =
        serde_json::json!({"harness": "standin-slow", "harnessSessionId": "ghost", "initialPrompt": "hello first"});
    rig.create_session("kappa", spec).await;
    await_value("kappa's resume to survive its probe", || rig.session_status("kappa"), |s| resumed(s).1 == "Resumed")
        .await;
    rig.send("kappa", "kappa-1", "while it boots").await;
    await_value(
        "kappa-1 pasted into the doomed pane",
        || rig.event_status("kappa-1"),
        |e| e.phase == Some(PromptPhase::Delivering),
    )
    .await;
    let st = await_value(
        "kappa fresh after the late failure",
        || rig.session_status("kappa"),
        |s| initial_phase(s) == Some(PromptPhase::Delivered) && s.harness_session_id.as_deref() != Some("ghost"),
    )
    .await;
    let id = id(&st);
    let ev = await_delivered(rig, "kappa-1").await;
    assert_eq!(ev.harness_session_id.as_deref(), Some(id.as_str()));
    // Pasted into the doomed pane, then again: the death returned it with its count at zero.
    assert_eq!(ev.attempts, 1, "counted for the harness that took it: {ev:?}");
    assert_eq!(st.initial_prompt.as_ref().unwrap().harness_session_id.as_deref(), Some(id.as_str()));
    let (_, reason, message) = resumed(&st);
    assert_eq!(reason, "PaneDiedAfterProbe");
    assert!(message.contains("No conversation found with session ID: ghost"), "the dead pane quoted: {message}");
    let got = received(rig);
    for prompt in ["hello first", "while it boots"] {
        let count = got.iter().filter(|(c, p)| c == &id && p == prompt).count();
        assert_eq!(count, 1, "{prompt:?} reaches the fresh conversation once: {got:?}");
    }
}

/// An event that arrives while the harness boots waits for its ready prompt: pasted earlier, it would be lost.
pub async fn input_during_boot_waits_for_the_ready_prompt(rig: &impl Rig) {
    rig.create_session("lam", serde_json::json!({"harness": "standin-boot"})).await;
    await_phase(rig, "lam", Phase::Running).await; // the probe passed; the harness still boots (for 4 s)
    rig.tmux().await_output(&rig.tmux_session("lam"), "booting").await;
    let screen = rig.tmux().runner.screen(&rig.tmux_session("lam")).await.unwrap();
    assert!(!screen.contains("ready>"), "still booting when the event comes: {screen}");
    rig.send("lam", "lam-1", "are you up?").await;
    let ev = await_delivered(rig, "lam-1").await;
    assert_eq!(ev.via, Some(Via::Pasted));
    let got = received(rig);
    assert_eq!(got.iter().filter(|(_, p)| p == "are you up?").count(), 1, "{got:?}");
}

/// An adopted id the harness's store does not have is not resumed: fresh at once (`ConversationNotFound`), and
/// the `initialPrompt` reaches the fresh conversation's transcript, recorded in status.
pub async fn adopted_unknown_conversation_starts_fresh_with_the_initial_prompt(rig: &impl Rig) {
    let spec = serde_json::json!({"harnessSessionId": "never-was", "initialPrompt": "start here"});
    rig.create_session("mu", spec).await;
    let st = await_value(
        "mu's initial prompt delivered",
        || rig.session_status("mu"),
        |s| initial_phase(s) == Some(PromptPhase::Delivered),
    )
    .await;
    let (status, reason, _) = resumed(&st);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "ConversationNotFound"));
    let id = st.harness_session_id.as_deref().unwrap();
    assert_eq!(st.initial_prompt.as_ref().unwrap().harness_session_id.as_deref(), Some(id));
    let transcript = std::fs::read_to_string(crate::standin::transcript_of(&rig.tmux().state(), id)).unwrap();
    assert!(transcript.contains("start here"), "{transcript}");
    assert!(received(rig).iter().all(|(c, _)| c != "never-was"), "nothing was sent to the unknown id");
}

/// A lost conversation handed over: its transcript gone, its resume fails (`ConversationNotFound`), and the fresh
/// conversation's first prompt carries the prompts the lost one had taken, oldest first, then the event unchanged; the
/// status records the handoff. With `spec.handoff.enabled: false` the fallback sends the event alone.
pub async fn a_lost_conversation_is_handed_over_unless_turned_off(rig: &impl Rig) {
    for (name, handoff) in [("xo", serde_json::json!({})), ("xoff", serde_json::json!({"enabled": false}))] {
        rig.create_session(name, serde_json::json!({"initialPrompt": "first: build it", "handoff": handoff})).await;
        let st = await_value(
            "the initial prompt delivered",
            || rig.session_status(name),
            |s| initial_phase(s) == Some(PromptPhase::Delivered),
        )
        .await;
        let lost = st.harness_session_id.clone().unwrap();
        rig.send(name, &format!("{name}-1"), "second: test it").await;
        await_delivered(rig, &format!("{name}-1")).await;
        rig.tmux().kill_harness(&rig.tmux_session(name)).await;
        std::fs::remove_file(crate::standin::transcript_of(&rig.tmux().state(), &lost)).unwrap();
        rig.send(name, &format!("{name}-2"), "third: after the loss").await;
        let ev = await_delivered(rig, &format!("{name}-2")).await;
        assert_eq!(ev.via, Some(Via::Fresh));
        let fresh = ev.harness_session_id.unwrap();
        let got: Vec<String> = received(rig).into_iter().filter(|(c, _)| *c == fresh).map(|(_, p)| p).collect();
        // The event's status is written before the session's: wait for the session to say how it went.
        let st = await_value(
            "the fallback recorded",
            || rig.session_status(name),
            |s| resumed(s).1 == "ConversationNotFound",
        )
        .await;
        if name == "xoff" {
            assert_eq!(got, ["third: after the loss"], "turned off: the event alone");
            assert_eq!(st.handoff, None);
            continue;
        }
        let handoff = st.handoff.expect("recorded");
        assert_eq!((handoff.from.as_str(), handoff.prompt.as_deref()), (lost.as_str(), Some("xo-2")));
        assert_eq!(got, [format!("{}\n\nthird: after the loss", handoff.text)], "one prompt, the handoff first");
        let (first, second) = (handoff.text.find("[1] first: build it"), handoff.text.find("[2] second: test it"));
        assert!(first.is_some() && first < second, "{}", handoff.text);
    }
}

/// An agent killed between recording the intent and spawning: its successor runs the same spawn (a resume stays a
/// resume), once.
pub async fn killed_between_intent_and_spawn_runs_the_same_spawn(rig: &mut impl Rig) {
    crate::standin::seed_conversation(&rig.tmux().state(), "known-nu");
    rig.create_session("nu", serde_json::json!({"harnessSessionId": "known-nu"})).await;
    await_phase(rig, "nu", Phase::Running).await;
    rig.tmux().kill_harness(&rig.tmux_session("nu")).await;
    rig.restart_agent_with(Some(Failpoint::AfterIntent));
    rig.send("nu", "nu-1", "after the crash").await;
    await_phase(rig, "nu", Phase::Starting).await; // the intent is written; the agent stops there for good
    assert_eq!(
        rig.tmux().runner.observe().await.unwrap().liveness(&rig.tmux_session("nu")),
        Liveness::Dead,
        "never spawned"
    );
    rig.restart_agent();
    let ev = await_delivered(rig, "nu-1").await;
    assert_eq!((ev.via.map(Via::as_str), ev.harness_session_id.as_deref()), (Some("Resumed"), Some("known-nu")));
    // The event's status is written before the session's: wait for the session to say how it went.
    let st = await_value("nu Running", || rig.session_status("nu"), |s| s.phase == Some(Phase::Running)).await;
    assert_eq!(resumed(&st).1, "Resumed", "the same resume, not a failure: {st:?}");
    assert_eq!(st.failure_count, 1, "only the crash counts");
    let got = received(rig);
    assert_eq!(got.iter().filter(|(_, p)| p == "after the crash").count(), 1, "{got:?}");
}

/// An agent killed between a paste and its status write: its successor sees the paste's tag and never pastes it
/// again.
pub async fn killed_between_paste_and_status_pastes_once(rig: &mut impl Rig) {
    rig.create_session("xi", serde_json::json!({})).await;
    await_phase(rig, "xi", Phase::Running).await;
    rig.tmux().await_output(&rig.tmux_session("xi"), "ready>").await;
    rig.restart_agent_with(Some(Failpoint::AfterPaste));
    rig.send("xi", "xi-1", "exactly once").await;
    rig.tmux().await_prompts(1).await; // pasted; the agent stops before recording it
    assert_ne!(
        rig.event_status("xi-1").await.phase,
        Some(PromptPhase::Delivering),
        "not recorded by the stopped agent"
    );
    rig.restart_agent();
    let ev = await_delivered(rig, "xi-1").await;
    assert_eq!(ev.via, Some(Via::Pasted));
    let got = received(rig);
    assert_eq!(got.iter().filter(|(_, p)| p == "exactly once").count(), 1, "{got:?}");
}

/// Idle suspension: output flowing keeps a harness; a prompt being delivered keeps a quiet one; quiet with
/// nothing owed, it is stopped as `Idle` (no failure); an event wakes it, resumed into the same conversation.
pub async fn idle_stops_and_an_event_wakes_the_same_conversation(rig: &impl Rig) {
    let idle = serde_json::json!({"suspendAfterSeconds": 2});
    let tmux = rig.tmux();
    rig.create_session("chatty", serde_json::json!({"harness": "standin-chatty", "idle": idle})).await;
    await_phase(rig, "chatty", Phase::Running).await;
    tmux.await_output(&rig.tmux_session("chatty"), "working 8").await; // 4 s of output: twice the idle period
    assert_eq!(rig.session_status("chatty").await.phase, Some(Phase::Running), "output keeps it");

    // The blind stand-in's initial prompt stays Delivering for its 10 s settle window, while the pane is quiet.
    rig.create_session("quiet", serde_json::json!({"harness": "standin-blind", "idle": idle, "initialPrompt": "hi"}))
        .await;
    let st = await_phase(rig, "quiet", Phase::Idle).await;
    assert_eq!(initial_phase(&st), Some(PromptPhase::Delivered));
    let delivered = st.initial_prompt.as_ref().and_then(|p| p.delivered_at.as_ref()).unwrap().0;
    assert!(st.idle_since.as_ref().unwrap().0 >= delivered, "not stopped while delivering: {st:?}");
    assert_eq!(status_reason(&st, ConditionType::Ready), ("False".into(), "Idle".into()));
    assert_eq!((st.failure_count, st.respawn_count), (0, 0), "no failure");
    assert_eq!(tmux.runner.observe().await.unwrap().liveness(&rig.tmux_session("quiet")), Liveness::Absent, "stopped");
    let id = id(&st);

    rig.send("quiet", "quiet-1", "wake up").await;
    let ev = await_delivered(rig, "quiet-1").await;
    assert_eq!((ev.via.map(Via::as_str), ev.harness_session_id.as_deref()), (Some("Resumed"), Some(id.as_str())));
    let st = rig.session_status("quiet").await;
    assert_eq!(resumed(&st).0, "True", "{st:?}");
    assert_eq!((st.failure_count, st.respawn_count), (0, 1), "an idle stop is no failure");
    let prompts = tmux.prompts();
    let last = prompts.last().unwrap();
    assert_eq!((last.conversation.as_str(), last.prompt.as_str()), (id.as_str(), "wake up"));
}
