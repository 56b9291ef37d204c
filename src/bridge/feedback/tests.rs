//! What a WorkEvent is owed: a reaction once `Delivered` and not before; on `Failed` a sign and, with comments, one
//! short comment that never repeats the prompt; once per change; and the hold that keeps two bridges from both acting.

use super::*;
use crate::api::{EventSource, WorkEventSpec, WorkEventStatus};

fn event(kind: &str, comment_id: Option<u64>, phase: Option<PromptPhase>) -> WorkEvent {
    let mut ev = WorkEvent::new(
        "gh-1",
        WorkEventSpec {
            session: "octo-hello-7".into(),
            prompt: "please refactor the parser".into(),
            source: Some(EventSource {
                type_: SourceType::Github,
                event: Some(kind.into()),
                repository: Some("octo/hello".into()),
                number: Some(7),
                comment_id,
                ..Default::default()
            }),
            answer: None,
            command: false,
            not_before: None,
        },
    );
    ev.metadata.namespace = Some("agents".into());
    ev.status = Some(WorkEventStatus { phase, ..Default::default() });
    ev
}

#[test]
fn a_reaction_once_delivered_and_not_before() {
    for phase in [None, Some(PromptPhase::Pending), Some(PromptPhase::Delivering)] {
        assert_eq!(owed(&event("issue_comment", Some(42), phase), Feedback::Reactions), None, "{phase:?}");
    }
    let owed = owed(&event("issue_comment", Some(42), Some(PromptPhase::Delivered)), Feedback::Comments).unwrap();
    assert_eq!(owed.reaction, (Reactable::IssueComment(42), "eyes"));
    assert_eq!(owed.comment, None, "a delivery is told by the reaction alone");
    assert_eq!(owed.reaction.0.reactions("octo/hello"), "/repos/octo/hello/issues/comments/42/reactions");
}

#[test]
fn each_kind_of_comment_gets_its_own_reaction_and_the_rest_react_on_the_item() {
    let target =
        |kind, id| owed(&event(kind, id, Some(PromptPhase::Delivered)), Feedback::Reactions).unwrap().reaction.0;
    assert_eq!(target("pull_request_review_comment", Some(5)), Reactable::ReviewComment(5));
    assert_eq!(Reactable::ReviewComment(5).reactions("o/r"), "/repos/o/r/pulls/comments/5/reactions");
    assert_eq!(target("issues", None), Reactable::Issue(7), "an opened issue");
    assert_eq!(target("pull_request_review", None), Reactable::Issue(7), "GitHub has no reactions on reviews");
    assert_eq!(Reactable::Issue(7).reactions("o/r"), "/repos/o/r/issues/7/reactions");
}

#[test]
fn a_failure_gets_a_sign_and_with_comments_one_short_comment_without_the_prompt() {
    let mut ev = event("issue_comment", Some(42), Some(PromptPhase::Failed));
    let reactions = owed(&ev, Feedback::Reactions).unwrap();
    assert_eq!((reactions.reaction.1, reactions.comment), ("confused", None));
    let long = "x".repeat(500);
    ev.status.as_mut().unwrap().message =
        Some(format!("cannot be sent: please refactor the parser is `odd` {long}\nsecond line"));
    let comment = owed(&ev, Feedback::Comments).unwrap().comment.unwrap();
    let mut cr = ev.clone();
    cr.status.as_mut().unwrap().message = Some("failed\r\r@everyone **bold**\u{7}".into());
    let cr = owed(&cr, Feedback::Comments).unwrap().comment.unwrap();
    assert!(!cr.contains("@everyone") && !cr.contains('\u{7}'), "nothing after a carriage return: {cr}");
    assert!(!comment.contains("please refactor the parser"), "never the prompt: {comment}");
    assert!(!comment.contains("second line"), "one line");
    assert!(comment.len() < 400, "kept short: {}", comment.len());
    assert_eq!(comment.matches('`').count(), 2, "the reason quoted, nothing in it read as markup: {comment}");
    assert!(comment.ends_with("<!-- worksession:agents/gh-1 -->"), "{comment}");
}

#[test]
fn once_per_change_off_or_not_from_github_nothing() {
    let mut ev = event("issue_comment", Some(42), Some(PromptPhase::Delivered));
    assert_eq!(owed(&ev, Feedback::Off), None, "off");
    ev.metadata.annotations = Some([(GIVEN_ANNOTATION.to_string(), "Delivered".to_string())].into());
    assert_eq!(owed(&ev, Feedback::Reactions), None, "given once: a restart does not repeat it");
    let mut traversal = event("issue_comment", Some(42), Some(PromptPhase::Delivered));
    traversal.spec.source.as_mut().unwrap().repository = Some("octo/x/../../other/secret".into());
    assert_eq!(owed(&traversal, Feedback::Reactions), None, "only owner/name goes into a path");
    assert!(
        repository_shaped("octo-org/hello.world_2") && !repository_shaped("octo/..") && !repository_shaped("o/r/x")
    );
    let mut manual = event("issue_comment", Some(42), Some(PromptPhase::Delivered));
    manual.spec.source.as_mut().unwrap().type_ = SourceType::Manual;
    assert_eq!(owed(&manual, Feedback::Reactions), None, "not a GitHub comment");
}

#[test]
fn one_holder_at_a_time_and_a_lapsed_claim_is_taken_over() {
    let now: Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
    let at = |s: &str| s.parse::<Timestamp>().unwrap();
    assert_eq!(permit(None, PromptPhase::Delivered, "a", now), Permit::Ours { taken_over: None });
    let hold = Hold::parse("Delivered b-1 2026-12-01T11:59:30Z").unwrap();
    assert_eq!(hold.value(), "Delivered b-1 2026-12-01T11:59:30Z", "written as read");
    assert_eq!(permit(Some(&hold), PromptPhase::Delivered, "a", now), Permit::Wait(Duration::from_secs(90)));
    assert_eq!(permit(Some(&hold), PromptPhase::Delivered, "b-1", now), Permit::Ours { taken_over: None }, "its own");
    assert_eq!(permit(Some(&hold), PromptPhase::Failed, "a", now), Permit::Ours { taken_over: None }, "another phase");
    let lapsed = Hold { time: at("2026-12-01T11:57:00Z"), ..hold };
    assert_eq!(
        permit(Some(&lapsed), PromptPhase::Delivered, "a", now),
        Permit::Ours { taken_over: Some(at("2026-12-01T11:57:00Z")) }
    );
    assert_eq!(Hold::parse("Delivered"), None);
    assert_eq!(Hold::parse("Nonsense b 2026-12-01T11:57:00Z"), None);
}

#[test]
fn failing_calls_back_off_to_a_minute_within_the_hold() {
    assert!(BACKOFF_MAX < HOLD_TTL, "a holder that keeps trying keeps its hold");
    assert_eq!(
        [0, 1, 2, 8, 9, 40].map(backoff),
        [1, 2, 4, 60, 60, 60].map(Duration::from_secs),
        "1 s doubling, at most 60 s"
    );
}

#[test]
fn a_forged_event_points_the_credentials_at_no_repository_but_its_namespaces_own() {
    // Anyone who may create WorkEvents can write the route label and the source: only an event in its route's
    // namespace, about a repository that route routes, is given feedback.
    let token = tempfile::NamedTempFile::new().unwrap();
    let yaml = format!(
        "github:\n  secretEnv: PATH\n  api: {{tokenFile: {}}}\nroutes:\n  - repository: 'octo/*'\n    namespace: agents\n    harness: claude\n    workdir: /srv/{{repo}}\n",
        token.path().display()
    );
    let config = BridgeConfig::parse(&yaml, std::path::Path::new("bridge.yaml")).unwrap();
    let labelled = |namespace: &str, route: &str, repository: &str| {
        let mut ev = event("issue_comment", Some(42), Some(PromptPhase::Delivered));
        ev.metadata.namespace = Some(namespace.into());
        ev.metadata.labels = Some([(ROUTE_LABEL.to_string(), route.to_string())].into());
        ev.spec.source.as_mut().unwrap().repository = Some(repository.into());
        ev
    };
    let route = crate::api::slug("octo/*");
    assert_eq!(mode_of(&config, &labelled("agents", &route, "octo/hello")), Feedback::Reactions, "its own");
    assert_eq!(mode_of(&config, &labelled("tenant-b", &route, "octo/hello")), Feedback::Off, "another namespace");
    assert_eq!(
        mode_of(&config, &labelled("agents", &route, "victim/secret")),
        Feedback::Off,
        "a repository not routed"
    );
    assert_eq!(mode_of(&config, &labelled("agents", "no-such-route", "octo/hello")), Feedback::Off, "no such route");
}
