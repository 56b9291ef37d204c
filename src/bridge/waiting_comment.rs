//! The waiting comment, for [`super::approval_comment`]: a harness that waits for a person with no permission request
//! of its own (one without such a hook, a question of its own) has its words posted on its issue, with how to answer
//! in its terminal; nothing is ever typed into it for anyone. Decided from the session alone.

use kube::ResourceExt;

use super::status_comment::code;
use crate::api::WorkSession;
use crate::core::ConditionType;

/// The most of a harness's words the comment repeats, in characters.
const WORDS: usize = 300;

/// The wait `ws` is in, if its `Activity` says it waits for a person: when it began (its transition, in Unix
/// seconds) and the harness's words.
pub fn episode(ws: &WorkSession) -> Option<(String, String)> {
    let st = ws.status.as_ref()?;
    let c = st.conditions.iter().find(|c| c.type_ == ConditionType::Activity.as_str())?;
    (c.reason == "WaitingForInput").then(|| (c.last_transition_time.0.as_second().to_string(), c.message.clone()))
}

/// What the comment says while the harness waits (`words`: what it says, where the route shows it).
pub fn render(ws: &WorkSession, words: Option<&str>, marker: &str) -> String {
    let (namespace, name) = (ws.namespace().unwrap_or_default(), ws.name_any());
    let head = match words {
        Some(words) => {
            let words: String = words.chars().take(WORDS).collect();
            format!("**worksession** · the agent waits for a person: {}", code(&words))
        }
        None => "**worksession** · the agent waits for a person.".to_string(),
    };
    [
        head,
        String::new(),
        format!(
            "It asks in its own terminal, where no answer can be given from here: someone with access attaches with \
             `worksession attach {name} -n {namespace}` and answers there."
        ),
        marker.to_string(),
    ]
    .join("\n")
}

/// What the comment says once the harness no longer waits.
pub fn ended(marker: &str) -> String {
    ["**worksession** · the agent waited for a person here; it no longer waits.", marker].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{WorkSessionSpec, WorkSessionStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    #[test]
    fn a_wait_for_a_person_is_posted_with_its_words_as_text_and_how_to_answer() {
        let mut ws = WorkSession::new("hello-12", WorkSessionSpec::default());
        ws.metadata.namespace = Some("agents".into());
        let activity = Condition {
            type_: "Activity".into(),
            status: "False".into(),
            reason: "WaitingForInput".into(),
            message: "Continue? @octocat `rm` [x](y)".into(),
            last_transition_time: Time("2026-12-05T10:00:00Z".parse().unwrap()),
            observed_generation: None,
        };
        ws.status = Some(WorkSessionStatus { conditions: vec![activity], ..Default::default() });
        let (episode, words) = episode(&ws).expect("waiting");
        assert_eq!(episode, "1796464800", "when the wait began, in seconds");
        let said = render(&ws, Some(&words), "<!-- m -->");
        assert!(said.contains("`` Continue? @octocat `rm` [x](y) ``"), "{said}");
        assert!(said.contains("`worksession attach hello-12 -n agents`"), "{said}");
        assert!(said.ends_with("<!-- m -->"));
        assert!(!render(&ws, None, "<!-- m -->").contains("Continue"), "brief: not its words");
        ws.status.as_mut().unwrap().conditions[0].reason = "Working".into();
        assert_eq!(super::episode(&ws), None);
        assert!(ended("<!-- m -->").contains("no longer waits"));
    }
}
