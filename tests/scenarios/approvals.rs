//! Approvals, with the stand-in asking as Claude Code does (`standin-hooks`, a prompt `PERMIT <command>`): its
//! `PermissionRequest` hook, this build's receiver, waits for the agent's answer; the request is `status.approval`;
//! an answer to another id does nothing; a person's answer, a rule, a denial with its reason, each reaches the
//! harness, and an agent restart while a request waits loses nothing.

use worksession::api::{ApprovalStatus, Decision, PromptPhase, WorkSessionStatus};
use worksession::core::ConditionType;

use super::{Rig, await_value, condition};

/// The decisions the stand-in took, in order (its `permits.jsonl`): the command, and `allow` or `deny` with why.
fn permits(rig: &impl Rig) -> Vec<(String, String, Option<String>)> {
    let text = std::fs::read_to_string(rig.tmux().state().join("permits.jsonl")).unwrap_or_default();
    let line = |l: &str| serde_json::from_str::<serde_json::Value>(l).ok();
    let field = |v: &serde_json::Value, k: &str| v[k].as_str().map(String::from);
    text.lines()
        .filter_map(line)
        .map(|v| (field(&v, "command").unwrap(), field(&v, "decision").unwrap(), field(&v, "message")))
        .collect()
}

/// The session's request waiting for an answer about `command`.
async fn asking(rig: &impl Rig, name: &str, command: &str) -> ApprovalStatus {
    let waiting = |s: &WorkSessionStatus| {
        let a = s.approval.as_ref().is_some_and(|a| a.waiting() && a.request.contains(command));
        a && condition(s, ConditionType::Activity).1 == "WaitingForApproval"
    };
    let st = await_value(&format!("{name} asking to {command}"), || rig.session_status(name), waiting).await;
    st.approval.unwrap()
}

/// The whole life of requests: an older id's answer, a person's approval, a rule's, and a denial after an agent restart.
pub async fn a_permission_request_is_answered_by_a_person_or_a_rule_never_by_an_older_answer(rig: &mut impl Rig) {
    let state = rig.tmux().state();
    let rules = serde_json::json!([{"match": "Bash(touch /*/ruled-file)", "decision": "Allow"}]);
    let spec = serde_json::json!({"harness": "standin-hooks", "approval": {"rules": rules}});
    rig.create_session("ap", spec).await;
    let asked_file = state.join("asked-file");
    rig.send("ap", "ap-1", &format!("PERMIT touch {}", asked_file.display())).await;
    let asked = asking(rig, "ap", "touch").await;

    // An answer naming another request: its WorkEvent fails, nothing is answered.
    rig.answer("ap", Some("000000000000"), Decision::Allow, None).await.expect("made");
    let failed = |s: &worksession::api::WorkEventStatus| s.phase == Some(PromptPhase::Failed);
    let ev = await_value("the older answer failed", || rig.event_status("ap.answer-000000000000"), failed).await;
    assert!(ev.message.unwrap().contains(&format!("request {} waits", asked.id)));
    assert!(rig.session_status("ap").await.approval.unwrap().waiting());
    assert!(permits(rig).is_empty() && !asked_file.exists(), "nothing ran");

    // A person's answer to the waiting request (no id: the one waiting).
    rig.answer("ap", None, Decision::Allow, None).await.expect("approved");
    let answered = |s: &WorkSessionStatus| s.approval.as_ref().is_some_and(|a| !a.waiting());
    let st = await_value("ap: the request answered", || rig.session_status("ap"), answered).await;
    let a = st.approval.unwrap();
    assert_eq!((a.id.as_str(), a.decision), (asked.id.as_str(), Some(Decision::Allow)));
    assert!(a.by.as_deref().is_some_and(|by| by.ends_with("tester")), "who: {:?}", a.by);
    await_value("the stand-in took the answer", || async { permits(rig) }, |p| p.len() == 1).await;
    assert_eq!(permits(rig)[0].1, "allow");
    assert!(asked_file.exists(), "the command ran");

    // A rule of the session answers without a person.
    rig.send("ap", "ap-2", &format!("PERMIT touch {}", state.join("ruled-file").display())).await;
    await_value("the rule's answer taken", || async { permits(rig) }, |p| p.len() == 2).await;
    assert_eq!(permits(rig)[1].1, "allow");
    let st = await_value(
        "ap: by the rule",
        || rig.session_status("ap"),
        |s| s.approval.as_ref().is_some_and(|a| a.by.as_deref() == Some("policy")),
    )
    .await;
    assert!(st.approval.unwrap().request.contains("ruled-file"));

    // A request waiting while the agent restarts, then denied with a reason the harness is told.
    let denied_file = state.join("denied-file");
    rig.send("ap", "ap-3", &format!("PERMIT touch {}", denied_file.display())).await;
    asking(rig, "ap", "denied-file").await;
    rig.restart_agent();
    rig.answer("ap", None, Decision::Deny, Some("not that file")).await.expect("denied");
    await_value("the denial taken", || async { permits(rig) }, |p| p.len() == 3).await;
    let (_, decision, message) = permits(rig).pop().unwrap();
    assert_eq!(decision, "deny");
    let told = message.unwrap_or_default();
    assert!(told.starts_with("Denied by ") && told.ends_with("tester: not that file"), "{told}");
    assert!(!denied_file.exists(), "the command did not run");
}
