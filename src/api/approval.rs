//! Approvals: a hook-backed harness's permission request (`status.approval`), the rules that answer one without a
//! person (`spec.approval`), and a person's answer, which comes as a WorkEvent carrying `spec.answer` instead of a
//! prompt. A harness never writes any of them: they go through the API server (in local mode, the manifests folder).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The shape of a permission request's id, as the hook receiver makes it: 12 lowercase hexadecimal digits.
pub const REQUEST_ID_PATTERN: &str = "^[0-9a-f]{12}$";

/// The shape of a rule's `match`: a tool's name, optionally followed by a pattern in parentheses.
pub const RULE_PATTERN: &str = r"^[A-Za-z0-9_.:-]{1,64}(\(.*\))?$";

/// The characters by which a shell runs more than one command, or another's output: a command holding one is
/// never allowed by a pattern.
const SHELL_CONTROL: &[char] = &[';', '&', '|', '<', '>', '$', '`', '(', ')', '\n', '\r'];

/// The WorkEvent name of an answer to the request `id` of the session `session`: one per request, so a second answer
/// to it is refused by the store, whoever gives it (the command line or the bridge).
pub fn answer_name(session: &str, id: &str) -> String {
    let name = format!("{session}.answer-{id}");
    if name.len() <= 253 { name } else { format!("answer-{id}") }
}

/// How long a permission request waits for an answer when `spec.approval.waitSeconds` is unset.
pub const DEFAULT_WAIT_SECONDS: u32 = 600;

/// An answer to a permission request.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum Decision {
    /// The harness may do what it asked.
    Allow,
    /// It may not; the harness's model is told so (with the reason, if one was given).
    #[default]
    Deny,
}

/// How a session's permission requests are answered where no person has: `spec.approval`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalSpec {
    /// Seconds a request waits for an answer; then it is denied. Default 600. Read when the harness starts: a change
    /// applies from its next start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 86400))]
    pub wait_seconds: Option<u32>,
    /// Rules that answer a request at once, the first that matches deciding; none matching, a person answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub rules: Vec<ApprovalRule>,
}

/// A rule that answers a permission request without a person.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRule {
    /// What it matches: a tool's name (`Bash`, `Write`: any use of it), or a tool and a pattern of what it is given
    /// (`Bash(git status*)`: a command; `Write(/work/*)`, `Edit(...)`: a file's path; `*` stands for any characters,
    /// everything else for itself, the whole text matched).
    #[serde(rename = "match")]
    #[schemars(regex(pattern = RULE_PATTERN), length(min = 1, max = 1024))]
    pub r#match: String,
    /// `Allow` or `Deny`.
    pub decision: Decision,
}

/// A person's answer to a permission request, carried by a WorkEvent instead of a prompt.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// The request it answers (`status.approval.id`): an answer to any other request (an older one, one never asked)
    /// does nothing, and its WorkEvent says so as it fails.
    #[schemars(regex(pattern = REQUEST_ID_PATTERN))]
    pub request: String,
    /// `Allow` or `Deny`.
    pub decision: Decision,
    /// Why: with a denial, the harness's model is told it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
    /// Who gave it, as whoever made the WorkEvent said (`worksession approve`: the user the API server knows it as;
    /// the bridge: `github:<login>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub by: Option<String>,
}

/// The harness's latest permission request, and its answer once given: `status.approval`.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalStatus {
    /// Its id: what an answer names (`worksession approve NAME ID`).
    pub id: String,
    /// The tool it asks to use (`Bash`, `Write`, ...).
    pub tool: String,
    /// What it asks to do, for a person to read: the command, or the file and how much it changes; at most 2,000
    /// characters, control characters replaced, and the values of the session's own secrets replaced by
    /// `[redacted]`.
    pub request: String,
    /// When it was asked.
    pub asked_time: Time,
    /// Until when it waits for an answer; then it is denied.
    pub deadline: Time,
    /// The answer, once given (unset with `decidedTime` set: answered in the harness's own terminal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// Who gave it: a person (as their WorkEvent says), `policy` (a rule of `spec.approval`), `deadline`, or
    /// `terminal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Why: the rule that matched, the deadline, or the person's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it was answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_time: Option<Time>,
    /// The sha256 of the tool and its input as the agent first read them: an answer carries it, and the harness's
    /// hook takes an answer only for the very request it was handed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl ApprovalStatus {
    /// Whether it still waits for an answer.
    pub fn waiting(&self) -> bool {
        self.decided_time.is_none()
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any characters (none too) and everything else for itself,
/// the whole of `text` matched.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl ApprovalSpec {
    /// What is wrong with it as the CRD's schema would say it (its field below `approval` and why), if anything: the
    /// API server's checks for local mode and a bridge route's default.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if self.wait_seconds.is_some_and(|w| !(10..=86400).contains(&w)) {
            return Some(("waitSeconds", "must be between 10 and 86400".into()));
        }
        if self.rules.len() > 64 {
            return Some(("rules", "at most 64 rules".into()));
        }
        let shape = regex::Regex::new(RULE_PATTERN).expect("a valid pattern");
        match self.rules.iter().find(|r| r.r#match.len() > 1024 || !shape.is_match(&r.r#match)) {
            Some(bad) => {
                Some(("rules.match", format!("{:?} is not a tool or a tool and a pattern: Tool(pattern)", bad.r#match)))
            }
            None => None,
        }
    }
}

impl ApprovalRule {
    /// The rule's tool and pattern (`None`: any use of the tool).
    pub fn parts(&self) -> (&str, Option<&str>) {
        match self.r#match.split_once('(') {
            Some((tool, pattern)) => (tool, pattern.strip_suffix(')')),
            None => (self.r#match.as_str(), None),
        }
    }

    /// Whether it matches a use of `tool` given `subject` (the command, or the file's path). An `Allow` with a
    /// pattern never matches a subject that holds a shell's control characters (`Bash(git status*)` would otherwise
    /// allow `git status; rm -rf ~`) or a `..` path segment (`Write(/work/*)` would allow `/work/../etc/x`).
    pub fn matches(&self, tool: &str, subject: Option<&str>) -> bool {
        let (rule_tool, pattern) = self.parts();
        let compound = |s: &str| s.contains(SHELL_CONTROL) || s.split(['/', ' ', '=']).any(|part| part == "..");
        rule_tool == tool
            && match pattern {
                None => true,
                Some(_) if self.decision == Decision::Allow && subject.is_some_and(compound) => false,
                Some(pattern) => subject.is_some_and(|s| glob_matches(pattern, s)),
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_matches_the_whole_text_with_stars_for_any_characters() {
        assert!(glob_matches("git status*", "git status"));
        assert!(glob_matches("git status*", "git status --short"));
        assert!(!glob_matches("git status*", "git statu"));
        assert!(!glob_matches("git status", "git status; rm -rf /"), "the whole text");
        assert!(glob_matches("*", ""));
        assert!(glob_matches("a*b*c", "a-b-c"));
        assert!(!glob_matches("a*b*c", "a-c-b"));
        assert!(glob_matches("*.md", "docs/x.md"));
        assert!(!glob_matches("ab*ba", "aba"), "no overlap of the two ends");
    }

    #[test]
    fn a_spec_is_checked_as_the_crd_checks_it() {
        let rule = |m: &str| ApprovalRule { r#match: m.into(), decision: Decision::Allow };
        assert_eq!(ApprovalSpec { wait_seconds: Some(600), rules: vec![rule("Bash(git *)")] }.problem(), None);
        assert_eq!(ApprovalSpec { wait_seconds: Some(5), rules: vec![] }.problem().unwrap().0, "waitSeconds");
        assert_eq!(
            ApprovalSpec { wait_seconds: None, rules: vec![rule("rm -rf /")] }.problem().unwrap().0,
            "rules.match"
        );
    }

    #[test]
    fn a_rule_names_a_tool_and_what_it_is_given() {
        let rule = |m: &str| ApprovalRule { r#match: m.into(), decision: Decision::Allow };
        assert!(rule("Bash(git status*)").matches("Bash", Some("git status")));
        assert!(!rule("Bash(git status*)").matches("Write", Some("git status")));
        assert!(!rule("Bash(git status*)").matches("Bash", None));
        assert!(rule("Read").matches("Read", None));
        assert!(rule("Write(/work/*)").matches("Write", Some("/work/a.txt")));
        assert!(!rule("Write(/work/*)").matches("Write", Some("/work/../home/u/.bashrc")), "no way up");
        for chained in ["git status; rm -rf ~", "git status && curl x", "git status $(id)", "git status\nrm x"] {
            assert!(!rule("Bash(git status*)").matches("Bash", Some(chained)), "{chained:?} is more than one command");
            let deny = ApprovalRule { r#match: "Bash(git status*)".into(), decision: Decision::Deny };
            assert!(deny.matches("Bash", Some(chained)), "a denial matches it all the same");
        }
    }
}
