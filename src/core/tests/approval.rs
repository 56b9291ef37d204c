//! Approvals from afar: a live harness's permission request becomes `status.approval`; it is answered by a rule of
//! the session, by a person's answer naming its id, or denied at its deadline; an answer to any other request does
//! nothing but fail; a request the harness went on from, or died with, waits no more.

use super::*;
use crate::api::{Answer, ApprovalRule, ApprovalSpec, Decision};
use crate::core::PendingAnswer;
use crate::harness::hooks::Asked;

const ID: &str = "0123456789ab";
const OLDER: &str = "ba9876543210";

/// A live harness of conversation `OLD` that asks to run `git push` at t(90), waiting until t(690).
fn asking() -> Case {
    let mut case = Case::new(WorkSessionStatus { phase: Some(Phase::Running), ..ran_old() });
    case.liveness = Liveness::Alive;
    case.tmux = Some(ours());
    case.events.clear();
    case.config.harness_home = Some("/home/h".into());
    case.turn = Some(Turn { hook: "PermissionRequest".into(), at: Some(t(90)), kind: None, message: None });
    case.asked = Some(Asked {
        id: ID.into(),
        tool: Some("Bash".into()),
        subject: Some("git push origin HEAD".into()),
        digest: Some("d1".into()),
        detail: Some("Push the branch".into()),
        at: Some(t(90)),
        deadline: Some(t(690)),
        answered: None,
        passed: false,
    });
    case
}

fn answer(name: &str, request: &str, decision: Decision, by: &str) -> PendingAnswer {
    let answer = Answer { request: request.into(), decision, reason: None, by: Some(by.into()) };
    PendingAnswer { name: name.into(), answer, created: t(95) }
}

fn approval(case: &Case) -> crate::api::ApprovalStatus {
    case.status.approval.clone().expect("a request recorded")
}

#[test]
fn a_permission_request_becomes_a_record_said_once() {
    let mut case = asking();
    let plan = case.step();
    assert_eq!(ops(&plan), ["approval.requested"]);
    let a = approval(&case);
    assert_eq!((a.id.as_str(), a.tool.as_str()), (ID, "Bash"));
    assert_eq!(a.request, "Bash: git push origin HEAD (Push the branch)");
    assert_eq!((a.asked_time.0, a.deadline.0), (t(90), t(690)));
    assert!(a.waiting());
    let (status, reason, message) = condition_of(&case.status, "Activity");
    assert_eq!((status, reason), ("False", "WaitingForApproval"));
    assert!(message.contains(&format!("worksession approve repo-12 {ID}")), "{message}");
    assert_eq!(plan.requeue_after, Some(Duration::from_secs(591)), "woken at its deadline");
    // Its dialog's own notice says no more than that; nothing is said twice.
    case.turn = Some(Turn {
        hook: "Notification".into(),
        at: Some(t(91)),
        kind: Some("permission_prompt".into()),
        message: None,
    });
    assert_eq!(ops(&case.step()), Vec::<String>::new());
    assert_eq!(condition_of(&case.status, "Activity").1, "WaitingForApproval");
}

#[test]
fn a_persons_answer_to_the_waiting_request_is_given_to_the_receiver_once() {
    let mut case = asking();
    case.step();
    case.answers = vec![answer("repo-12.answer-1", ID, Decision::Allow, "alice")];
    let plan = case.step();
    assert_eq!(
        ops(&plan),
        [format!("answer {ID} allow"), "event repo-12.answer-1 Delivered".into(), "approval.answered".into()]
    );
    let a = approval(&case);
    assert_eq!(
        (a.decision, a.by.as_deref(), a.decided_time.map(|t| t.0)),
        (Some(Decision::Allow), Some("alice"), Some(t(100)))
    );
    // Taken: the same answer again (its event not yet seen Delivered) answers nothing twice.
    let again = case.step();
    assert!(!ops(&again).iter().any(|op| op.starts_with("answer")), "{:?}", ops(&again));
    assert!(ops(&again).iter().any(|op| op == "event repo-12.answer-1 Failed"), "{:?}", ops(&again));
}

#[test]
fn a_denial_tells_the_harness_who_denied_it_and_why() {
    let mut case = asking();
    let mut deny = answer("no", ID, Decision::Deny, "bob");
    deny.answer.reason = Some("not on main".into());
    case.answers = vec![deny];
    let plan = case.step();
    let written = plan.ops.iter().find_map(|op| match op {
        Op::Answer { written, trusted, below, group } => Some((written.clone(), trusted.join(below), *group)),
        _ => None,
    });
    let (written, dir, group) = written.expect("answered");
    assert_eq!(written.behavior, "deny");
    assert_eq!(written.message.as_deref(), Some("Denied by bob: not on main"));
    assert_eq!(written.digest.as_deref(), Some("d1"), "for the very request read");
    assert_eq!(dir, std::path::Path::new("/home/h/.worksession/answers/ns_repo-12"));
    assert_eq!(group, None, "rooms off");
}

#[test]
fn an_answer_to_another_request_answers_nothing_and_fails() {
    let mut case = asking();
    case.answers = vec![answer("old", OLDER, Decision::Allow, "mallory")];
    let plan = case.step();
    assert_eq!(ops(&plan), ["approval.requested", "event old Failed"]);
    assert!(approval(&case).waiting(), "the waiting request is untouched");
    let failed = plan.ops.iter().find_map(|op| match op {
        Op::WorkEventStatus(u) => u.message.clone(),
        _ => None,
    });
    assert!(failed.unwrap().contains(&format!("request {ID} waits")));
}

#[test]
fn a_rule_of_the_session_answers_at_once_the_first_that_matches_deciding() {
    let rules = |rules: &[(&str, Decision)]| ApprovalSpec {
        wait_seconds: None,
        rules: rules.iter().map(|(m, decision)| ApprovalRule { r#match: m.to_string(), decision: *decision }).collect(),
    };
    type Rules = &'static [(&'static str, Decision)];
    let table: &[(Rules, Option<&str>)] = &[
        (&[("Bash(git push*)", Decision::Deny), ("Bash", Decision::Allow)], Some("deny")),
        (&[("Bash(git status*)", Decision::Allow), ("Bash", Decision::Allow)], Some("allow")),
        (&[("Bash(git status*)", Decision::Allow)], None),
        (&[("Write", Decision::Allow)], None),
    ];
    for (rule_set, want) in table {
        let mut case = asking();
        case.spec.approval = Some(rules(rule_set));
        let plan = case.step();
        let answered = plan.ops.iter().find_map(|op| match op {
            Op::Answer { written, .. } => Some(written.behavior.clone()),
            _ => None,
        });
        assert_eq!(answered.as_deref(), *want, "{rule_set:?}");
        let by = approval(&case).by;
        assert_eq!(by.as_deref(), want.map(|_| "policy"), "{rule_set:?}");
    }
}

#[test]
fn no_answer_by_the_deadline_is_a_denial_the_receiver_gives_itself() {
    let mut case = asking();
    case.step();
    case.now = t(690);
    let plan = case.step();
    assert_eq!(ops(&plan), ["approval.answered"], "no answer written: the receiver denies at its own deadline");
    let a = approval(&case);
    assert_eq!((a.decision, a.by.as_deref()), (Some(Decision::Deny), Some("deadline")));
    assert_eq!(a.reason.as_deref(), Some("no answer within 600 s"));
}

#[test]
fn a_request_the_harness_went_on_from_or_died_with_waits_no_more() {
    let mut case = asking();
    case.step();
    case.asked.as_mut().unwrap().passed = true;
    case.step();
    let a = approval(&case);
    assert_eq!((a.decision, a.by.as_deref()), (None, Some("terminal")));

    let mut case = asking();
    case.step();
    case.liveness = Liveness::Dead;
    case.asked = None;
    case.answers = vec![answer("late", ID, Decision::Allow, "alice")];
    let plan = case.decide();
    assert!(ops(&plan).contains(&"event late Failed".to_string()), "{:?}", ops(&plan));
    assert!(!ops(&plan).iter().any(|op| op.starts_with("answer ")));
    let a = plan.status.approval.unwrap();
    assert_eq!(a.by.as_deref(), Some("exit"));
}

#[test]
fn an_answer_the_receiver_gave_that_the_status_missed_is_the_persons_it_took_or_only_the_harnesss_word() {
    let mut case = asking();
    case.step();
    case.asked.as_mut().unwrap().answered = Some("allow".into());
    case.answers = vec![answer("repo-12.answer-1", ID, Decision::Allow, "alice")];
    let plan = case.clone().step();
    assert!(!ops(&plan).iter().any(|op| op.starts_with("answer ")), "never answered twice");
    assert!(ops(&plan).contains(&"event repo-12.answer-1 Delivered".to_string()), "{:?}", ops(&plan));
    assert_eq!(
        (plan.status.approval.as_ref().unwrap().decision, plan.status.approval.unwrap().by.as_deref()),
        (Some(Decision::Allow), Some("alice"))
    );
    // No answer of a person's here: the hook file is the harness's, so its word decides nothing.
    case.answers.clear();
    case.step();
    assert_eq!((approval(&case).decision, approval(&case).by.as_deref()), (None, Some("hook record")));
    // Its own denial at the deadline is believed: it harms none but itself.
    let mut case = asking();
    case.step();
    case.asked.as_mut().unwrap().answered = Some("deny".into());
    case.now = t(691);
    case.step();
    assert_eq!((approval(&case).decision, approval(&case).by.as_deref()), (Some(Decision::Deny), Some("deadline")));
}

#[test]
fn a_later_line_of_the_same_request_matches_no_rule_and_a_new_request_ends_the_old() {
    let mut case = asking();
    case.step();
    // The harness wrote the same id again, saying `git status`: no rule answers it, the status keeps the first.
    case.spec.approval = Some(ApprovalSpec {
        wait_seconds: None,
        rules: vec![ApprovalRule { r#match: "Bash(git status)".into(), decision: Decision::Allow }],
    });
    let forged = case.asked.as_mut().unwrap();
    (forged.subject, forged.digest) = (Some("git status".into()), Some("d2".into()));
    let plan = case.step();
    assert!(!ops(&plan).iter().any(|op| op.starts_with("answer ")), "{:?}", ops(&plan));
    assert!(approval(&case).request.contains("git push"));
    // A new request: the old one ends, said once.
    let next = case.asked.as_mut().unwrap();
    (next.id, next.digest, next.subject) = (OLDER.into(), Some("d3".into()), Some("make".into()));
    case.spec.approval = None;
    let plan = case.step();
    assert_eq!(ops(&plan), ["approval.answered", "approval.requested"]);
    assert_eq!(approval(&case).id, OLDER);
}

#[test]
fn what_a_request_shows_is_one_line_without_hidden_characters_or_credentials_and_says_what_it_cut() {
    let pushed_out = format!("git status{}; rm -rf ~", " ".repeat(9000));
    assert_eq!(crate::core::approval::shown(&pushed_out, 2000), "git status ; rm -rf ~");
    assert_eq!(crate::core::approval::shown("rm \u{202e}fdp.exe\u{200b}", 100), "rm fdp.exe");
    assert_eq!(
        crate::core::approval::shown("curl -H 'Authorization: Bearer abcdefghijklmnopqrst'", 100),
        "curl -H 'Authorization: [redacted]'"
    );
    let long = "a".repeat(2010);
    assert!(crate::core::approval::shown(&long, 2000).ends_with("… [10 more characters not shown]"));
}

#[test]
fn a_prompt_waits_while_a_request_does() {
    let mut case = asking();
    case.screen = Some(CLAUDE_READY);
    case.events = vec![ev("e1", "please fix the bug")];
    let plan = case.step();
    assert!(!ops(&plan).iter().any(|op| op.starts_with("paste")), "{:?}", ops(&plan));
}

fn condition_of<'s>(status: &'s WorkSessionStatus, type_: &str) -> (&'s str, &'s str, &'s str) {
    let c = status.conditions.iter().find(|c| c.type_ == type_).expect("the condition");
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}
