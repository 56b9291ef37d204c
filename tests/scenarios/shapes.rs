//! The built-in profiles' shapes, shared by both modes: the stand-in speaking each CLI's flags, failure
//! text, exit code and store (`--shape`), driven by a profile with the built-in one's argv and patterns.

use serde_json::json;

use super::{
    ConditionType, Phase, PromptPhase, Rig, WorkSessionStatus, await_delivered, await_value, conversation_of, id,
    initial_phase, resumed, status_reason as condition,
};

async fn await_id(rig: &impl Rig, name: &str) -> WorkSessionStatus {
    await_value(
        &format!("{name}: Running with its conversation's id"),
        || rig.session_status(name),
        |s| s.phase == Some(Phase::Running) && s.harness_session_id.is_some(),
    )
    .await
}

/// Spawn, resume after a crash, and a fast fallback from an unknown id, for the stand-in `standin-<shape>`.
pub async fn spawn_resume_and_fall_back(rig: &impl Rig, shape: &str) {
    let harness = format!("standin-{shape}");
    let (a, b) = (format!("{shape}-a"), format!("{shape}-b"));
    let first = format!("first for {shape}");
    rig.create_session(&a, json!({"harness": harness, "initialPrompt": first, "workdir": rig.tmux().state()})).await;
    let st = await_id(rig, &a).await;
    let id = id(&st);
    assert_eq!(id, conversation_of(rig, &first).await, "{shape}: the conversation it runs");

    // Known delivered first (the settle window): a death before that would put the prompt back and respawn at once.
    await_value(
        &format!("{a}: initial prompt Delivered"),
        || rig.session_status(&a),
        |s| initial_phase(s) == Some(PromptPhase::Delivered),
    )
    .await;
    if matches!(shape, "gemini" | "copilot" | "opencode") {
        // Its hooks (given through `worksession hook-exec`: a settings file, a plugin directory, a plugin) say what it
        // does; without them there is no Activity condition at all.
        let said = |s: &WorkSessionStatus| !condition(s, ConditionType::Activity).1.is_empty();
        let st = await_value(&format!("{a}: its hooks say what it does"), || rig.session_status(&a), said).await;
        let activity = condition(&st, ConditionType::Activity).1;
        assert!(activity == "Working" || activity == "Idle", "{shape}: {st:?}");
    }
    if shape == "opencode" {
        // A subagent works in a child session of its own, whose prompt its plugin hears (before the event that says it
        // is a child): never the conversation's, never its id.
        rig.send(&a, &format!("{a}-task"), "TASK look around").await;
        await_delivered(rig, &format!("{a}-task")).await;
        let hooks = worksession::node::hook::file_of(&rig.tmux().state(), &format!("{}/{a}", rig.namespace()));
        let said = await_value(
            &format!("{a}: the task's turn over in its hooks"),
            || async { std::fs::read_to_string(&hooks).unwrap_or_default() },
            |said| said.matches("\"Stop\"").count() >= 2,
        )
        .await;
        assert!(
            !said.contains("a subagent's own prompt"),
            "{shape}: a child's prompt is not the conversation's: {said}"
        );
        let st = await_value(
            &format!("{a}: idle"),
            || rig.session_status(&a),
            |s| condition(s, ConditionType::Activity).1 == "Idle",
        )
        .await;
        assert_eq!(self::id(&st), id, "{shape}: still its own conversation");
    }
    rig.tmux().kill_harness(&rig.tmux_session(&a)).await;
    let second = format!("second for {shape}");
    rig.send(&a, &format!("{a}-1"), &second).await;
    await_delivered(rig, &format!("{a}-1")).await;
    assert_eq!(conversation_of(rig, &second).await, id, "{shape}: resumed");

    // An id the harness does not know: the resume runs and fails at once with the CLI's own words (which the built-in
    // profile's resumeFailedPattern knows), and a fresh conversation follows.
    let unknown =
        if shape == "opencode" { "ses_unknown0000000000000000".to_string() } else { uuid::Uuid::new_v4().to_string() };
    let third = format!("third for {shape}");
    rig.create_session(&b, json!({"harness": harness, "harnessSessionId": unknown, "initialPrompt": third})).await;
    let st = await_value(
        &format!("{b}: fell back"),
        || rig.session_status(&b),
        |s| s.phase == Some(Phase::Running) && condition(s, ConditionType::Resumed).0 == "False",
    )
    .await;
    let message = resumed(&st).2;
    if shape == "copilot" {
        // Its store tells first (older Copilot CLIs started an empty session for an unknown id): nothing spawned.
        assert_eq!(
            condition(&st, ConditionType::Resumed),
            ("False".into(), "ConversationNotFound".into()),
            "{shape}: {st:?}"
        );
        assert!(message.contains("in its store"), "{message}");
        let fresh = await_id(rig, &b).await.harness_session_id.clone().unwrap();
        assert_eq!(conversation_of(rig, &third).await, fresh);
        return;
    }
    // Its pane died at the probe, or (a loaded machine starting it slowly) within the settle window after it: both
    // are the resume failing, and both fall back.
    let (status, reason) = condition(&st, ConditionType::Resumed);
    assert!(status == "False" && ["PaneDied", "PaneDiedAfterProbe"].contains(&reason.as_str()), "{shape}: {st:?}");
    let builtin = &worksession::harness::builtin()[shape];
    assert!(builtin.resume_failed(&message), "{shape}: its words, known to the profile: {message}");
    let fresh = await_id(rig, &b).await.harness_session_id.clone().unwrap();
    assert_ne!(fresh, unknown);
    assert_eq!(conversation_of(rig, &third).await, fresh, "{shape}: the fresh conversation got the prompt");
}
