//! GitHub webhooks, the bridge's first source: the signature check, and what a delivery asks ([`parse`]): a prompt,
//! a closing or reopening, a work item's pull request seen or pushed to, a CI result. Which work item it is for is a
//! [`Target`]: the route's template, or the branch `worksession/<workItem>` its pull request carries.

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

/// Whether `signature` (the `X-Hub-Signature-256` header, `sha256=<hex>`) signs `body` with `secret`, compared in
/// constant time.
pub fn signature_valid(secret: &[u8], body: &[u8], signature: Option<&str>) -> bool {
    let Some(hex_sig) = signature.and_then(|s| s.strip_prefix("sha256=")) else { return false };
    let Ok(expected) = hex::decode(hex_sig) else { return false };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else { return false };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// Whether two secrets are equal, in time independent of where they differ (their MACs are compared).
pub fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(b"worksession secret comparison") else { return false };
    mac.update(expected);
    let tag = mac.finalize().into_bytes();
    let Ok(mut check) = Hmac::<Sha256>::new_from_slice(b"worksession secret comparison") else { return false };
    check.update(given);
    check.verify_slice(&tag).is_ok()
}

/// The `X-Hub-Signature-256` value for `body` (for tests and clients).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The branch prefix of a work item's checkout: a pull request whose head is `worksession/<workItem>` of the same
/// repository is that work item's.
pub const BRANCH_PREFIX: &str = "worksession/";

/// What a delivery is about: the repository, the issue or pull request, who sent it, and its text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    /// `owner/name`.
    pub repository: String,
    /// The owner.
    pub owner: String,
    /// The repository name.
    pub repo: String,
    /// The issue or pull-request number.
    pub number: u64,
    /// Who sent it (a CI result: the app's slug).
    pub sender: String,
    /// The sender is a bot (`sender.type` `Bot`: an app, a workflow's token), not a person.
    pub sender_bot: bool,
    /// The issue or pull-request title.
    pub title: String,
    /// The comment, review or issue text.
    pub body: String,
    /// A link to it.
    pub url: String,
    /// The role of its author in the repository (`author_association` of the comment, the review, or the issue or
    /// pull request itself, whichever the event is about); `None` when the payload has none.
    pub association: Option<String>,
    /// The comment's id (`issue_comment`, `pull_request_review_comment`); `None` for an issue, a pull request or a
    /// review.
    pub comment_id: Option<u64>,
    /// When GitHub says the issue or pull request last changed (`updated_at`): what orders its closings and reopenings.
    pub at: Option<k8s_openapi::jiff::Timestamp>,
    /// A pull request's head commit, where the payload names it.
    pub head: Option<String>,
}

/// How the work item of a delivery is found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Rendered from the route's `workItem` template (an issue, or a pull request that is not a work item's).
    Rendered,
    /// The work item whose branch the pull request carries (`worksession/<workItem>` of the same repository).
    Branch(String),
    /// A pull request whose payload names no branch (a comment in its conversation): the session it was linked to
    /// when its branch was seen, else [`Target::Rendered`].
    Linked,
}

/// A CI result on a work item's pull request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// The commit it ran on.
    pub sha: String,
    /// Whether it failed (`failure`, `timed_out`, `startup_failure`); `false`: it passed.
    pub failed: bool,
    /// The app that reported it (`github-actions`): who may speak for CI is configured by app.
    pub app: String,
    /// One line for the prompt: the kind, name, conclusion, title and link.
    pub line: String,
    /// A `github-actions` check run's job (its id), whose log's end a failure's prompt may get.
    pub job: Option<u64>,
    /// The check's name, as the line shows it.
    pub name: String,
}

/// What a delivery asks of the bridge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ask {
    /// A prompt, from a person (or an allowed bot reviewer).
    Prompt,
    /// The work item closed (`true`: an issue closed, a work item's pull request merged) or reopened (`false`).
    Lifecycle(bool),
    /// A work item's pull request closed without merging: its conversation is told, nothing is archived.
    ClosedUnmerged,
    /// Someone pushed to a work item's branch (`synchronize`): its conversation is told, unless the agent did.
    Pushed {
        /// The commit before.
        before: String,
        /// The commit after.
        after: String,
    },
    /// A work item's pull request seen (opened, edited, ...): only its link is recorded.
    Link,
    /// A CI result.
    Ci(Check),
    /// A comment `/approve <id>` or `/deny <id> [reason]`: an answer to a harness's permission request, never a
    /// prompt (`Err`: it said one of the two words, and no more that can be read).
    Answer(Result<Answering, &'static str>),
}

/// A person's answer from a comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answering {
    /// The request it names.
    pub request: String,
    /// Allow or deny.
    pub decision: crate::api::Decision,
    /// The rest of the comment, for a denial: what the harness's model is told.
    pub reason: Option<String>,
}

/// The longest reason an answer carries, in characters.
const REASON_LIMIT: usize = 1024;

/// What a comment answers, if it is `/approve` or `/deny` (its first word); `None`: any other comment.
pub fn answering(body: &str) -> Option<Result<Answering, &'static str>> {
    let body = body.trim_start();
    let (word, rest) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
    let decision = match word {
        "/approve" => crate::api::Decision::Allow,
        "/deny" => crate::api::Decision::Deny,
        _ => return None,
    };
    let rest = rest.trim_start();
    let (request, reason) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    if !crate::harness::hooks::is_request_id(request) {
        return Some(Err("an answer names its request: `/approve <id>` or `/deny <id> [reason]`"));
    }
    let reason = Some(clipped(&one_line(reason), REASON_LIMIT)).filter(|r| !r.is_empty());
    Some(Ok(Answering { request: request.to_string(), decision, reason }))
}

/// One GitHub delivery as the bridge acts on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// What it is about.
    pub subject: Subject,
    /// How its work item is found.
    pub target: Target,
    /// What it asks.
    pub ask: Ask,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

/// The work item whose branch a pull request object (`pull_request`, or an entry of a check's `pull_requests`)
/// carries, when its head is a branch of `repo_id`'s repository (a fork's branch is never trusted this way).
fn branch_of(pr: &Value, repo_id: Option<u64>) -> Option<String> {
    let head = pr.get("head")?;
    let same = match (head.get("repo").and_then(|r| r.get("id")).and_then(Value::as_u64), repo_id) {
        (Some(head), Some(base)) => head == base,
        _ => false,
    };
    let item = str_at(head, &["ref"])?.strip_prefix(BRANCH_PREFIX)?;
    (same && crate::api::slug(item) == item).then(|| item.to_string())
}

/// The conclusions that make a CI result a failure; any other conclusion of a completed run is not one.
pub const FAILED_CONCLUSIONS: &[&str] = &["failure", "timed_out", "startup_failure"];

/// The longest title or summary a CI line carries, in characters.
const CI_TEXT_LIMIT: usize = 600;
/// The longest check name a CI line carries, in characters.
const NAME_LIMIT: usize = 100;

fn clipped(text: &str, limit: usize) -> String {
    let text = text.trim();
    match text.char_indices().nth(limit) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// `text` on one line: every line break and other control character a space.
fn one_line(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// Reads a delivery of `kind` (`X-GitHub-Event`); `Err` says why it carries nothing to act on.
pub fn parse(kind: &str, payload: &Value) -> Result<Parsed, &'static str> {
    let repository = str_at(payload, &["repository", "full_name"]).ok_or("no repository.full_name")?;
    let (owner, repo) = repository.split_once('/').ok_or("repository.full_name is not owner/name")?;
    let repo_id = payload.get("repository").and_then(|r| r.get("id")).and_then(Value::as_u64);
    let action = str_at(payload, &["action"]).unwrap_or_default();
    let sender = str_at(payload, &["sender", "login"]).unwrap_or("someone");
    let base = Subject {
        repository: repository.to_string(),
        owner: owner.to_string(),
        repo: repo.to_string(),
        sender: sender.to_string(),
        sender_bot: str_at(payload, &["sender", "type"]) == Some("Bot"),
        ..Default::default()
    };
    if matches!(kind, "check_run" | "check_suite" | "workflow_run") {
        return check(kind, payload, base, repo_id);
    }
    let item = payload.get("issue").or_else(|| payload.get("pull_request")).ok_or("no issue or pull_request")?;
    let number = item.get("number").and_then(Value::as_u64).ok_or("no issue or pull request number")?;
    let detail = payload.get("comment").or_else(|| payload.get("review")).unwrap_or(item);
    let subject = Subject {
        number,
        title: str_at(item, &["title"]).unwrap_or_default().to_string(),
        body: str_at(detail, &["body"]).unwrap_or_default().to_string(),
        url: str_at(detail, &["html_url"]).or_else(|| str_at(item, &["html_url"])).unwrap_or_default().to_string(),
        association: str_at(detail, &["author_association"]).map(str::to_string),
        comment_id: payload.get("comment").and_then(|c| c.get("id")).and_then(Value::as_u64),
        at: str_at(item, &["updated_at"]).and_then(|t| t.parse().ok()),
        head: payload.get("pull_request").and_then(|pr| str_at(pr, &["head", "sha"])).map(str::to_string),
        ..base
    };
    let pull_request = payload.get("pull_request");
    let target = match pull_request.and_then(|pr| branch_of(pr, repo_id)) {
        Some(item) => Target::Branch(item),
        // A comment in a pull request's conversation comes as an issue comment, with no branch in it.
        None if pull_request.is_none() && payload.get("issue").and_then(|i| i.get("pull_request")).is_some() => {
            Target::Linked
        }
        None => Target::Rendered,
    };
    let ask = match (kind, action, &target) {
        ("issues" | "pull_request", "reopened", _) => Ask::Lifecycle(false),
        ("issues", "closed", _) => Ask::Lifecycle(true),
        ("pull_request", "closed", Target::Branch(_)) => {
            match pull_request.and_then(|pr| pr.get("merged")).and_then(Value::as_bool) {
                Some(true) => Ask::Lifecycle(true),
                _ => Ask::ClosedUnmerged,
            }
        }
        ("pull_request", "closed", _) => Ask::Lifecycle(true),
        ("pull_request", "synchronize", Target::Branch(_)) => Ask::Pushed {
            before: str_at(payload, &["before"]).unwrap_or_default().to_string(),
            after: str_at(payload, &["after"]).unwrap_or_default().to_string(),
        },
        ("pull_request", _, Target::Branch(_)) => Ask::Link,
        // An answer is never a prompt, whatever carries it; only a new comment or review is taken.
        (_, action, _) if answering(&subject.body).is_some() => match action {
            "created" | "submitted" => Ask::Answer(answering(&subject.body).unwrap_or(Err("no answer"))),
            _ => Ask::Answer(Err("an answer is a new comment: an edited one answers nothing")),
        },
        _ => Ask::Prompt,
    };
    Ok(Parsed { subject, target, ask })
}

/// A `check_run`, `check_suite` or `workflow_run` delivery: a CI result, trusted only on a pull request of the same
/// repository whose head is a work item's branch.
fn check(kind: &str, payload: &Value, base: Subject, repo_id: Option<u64>) -> Result<Parsed, &'static str> {
    let run = payload.get(kind).ok_or("no check or run object")?;
    if str_at(run, &["status"]) != Some("completed") {
        return Err("not completed");
    }
    let conclusion = str_at(run, &["conclusion"]).ok_or("no conclusion")?;
    let sha = str_at(run, &["head_sha"]).ok_or("no head_sha")?;
    // Only the pull requests GitHub lists for the run (never a fork's), whose head is this commit: a result of an
    // older commit of the branch is no news.
    let prs = run
        .get("pull_requests")
        .or_else(|| run.get("check_suite").and_then(|s| s.get("pull_requests")))
        .and_then(Value::as_array)
        .ok_or("no pull request")?;
    let head_is = |pr: &Value| str_at(pr, &["head", "sha"]).is_none_or(|head| head == sha);
    let (pr, item) = prs
        .iter()
        .filter(|pr| head_is(pr))
        .find_map(|pr| Some((pr, branch_of(pr, repo_id)?)))
        .ok_or("no pull request of a work item's branch at this commit")?;
    let number = pr.get("number").and_then(Value::as_u64).ok_or("no pull request number")?;
    let app = match kind {
        "workflow_run" => "github-actions",
        _ => str_at(run, &["app", "slug"]).ok_or("no app")?,
    };
    let name = match kind {
        "check_suite" => format!("{app} check suite"),
        // Written by whoever made the check: one line, cut, so it cannot pass for the prompt's heading or another
        // check's line.
        _ => one_line(&clipped(str_at(run, &["name"]).unwrap_or("(unnamed)"), NAME_LIMIT)),
    };
    let title = str_at(run, &["output", "title"]).or_else(|| str_at(run, &["display_title"])).unwrap_or_default();
    let summary = str_at(run, &["output", "summary"]).unwrap_or_default();
    let url = str_at(run, &["html_url"]).or_else(|| str_at(run, &["details_url"])).unwrap_or_default();
    let mut line = format!("- {name}: {}", one_line(&clipped(conclusion, 40)));
    for part in [title, summary].into_iter().filter(|p| !p.trim().is_empty()) {
        line.push_str(&format!(" — {}", one_line(&clipped(part, CI_TEXT_LIMIT))));
    }
    if !url.is_empty() {
        line.push_str(&format!(" ({})", one_line(&clipped(url, 300))));
    }
    let job = (kind == "check_run" && app == "github-actions").then(|| run.get("id").and_then(Value::as_u64)).flatten();
    let failed = FAILED_CONCLUSIONS.contains(&conclusion);
    let check = Check { sha: sha.to_string(), failed, app: app.into(), line, job, name };
    let subject = Subject { number, sender: app.to_string(), url: url.to_string(), ..base };
    Ok(Parsed { subject, target: Target::Branch(item), ask: Ask::Ci(check) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures() {
        let sig = sign(b"key", b"{}");
        assert!(signature_valid(b"key", b"{}", Some(&sig)));
        assert!(!signature_valid(b"other", b"{}", Some(&sig)));
        assert!(!signature_valid(b"key", b"{ }", Some(&sig)));
        assert!(!signature_valid(b"key", b"{}", None));
        assert!(!signature_valid(b"key", b"{}", Some("sha1=abc")));
        assert!(!signature_valid(b"key", b"{}", Some("sha256=zz")));
        assert!(same_secret(b"token", b"token") && !same_secret(b"token", b"tokeN") && !same_secret(b"", b"token"));
        // GitHub's documented test vector.
        assert_eq!(
            sign(b"It's a Secret to Everybody", b"Hello, World!"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
    }

    fn subject(payload: &Value) -> Result<Subject, &'static str> {
        parse("issue_comment", payload).map(|p| p.subject)
    }

    #[test]
    fn subjects_of_each_event_kind() {
        let base = serde_json::json!({"repository": {"full_name": "octo-org/hello"}, "sender": {"login": "mona"}});
        let with = |extra: Value| {
            let mut v = base.clone();
            v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            v
        };
        let comment = subject(&with(serde_json::json!({
            "issue": {"number": 7, "title": "Bug", "html_url": "https://x/7"},
            "comment": {"body": "please look", "html_url": "https://x/7#c1", "author_association": "MEMBER"}
        })))
        .unwrap();
        assert_eq!(comment.association.as_deref(), Some("MEMBER"), "the comment's author, not the issue's");
        assert_eq!(comment.comment_id, None, "this one carries no id");
        assert_eq!(
            (comment.number, comment.body.as_str(), comment.url.as_str(), comment.repo.as_str()),
            (7, "please look", "https://x/7#c1", "hello")
        );
        let review = subject(&with(serde_json::json!({
            "pull_request": {"number": 9, "title": "PR", "author_association": "OWNER"},
            "review": {"body": "lgtm", "author_association": "NONE"}
        })))
        .unwrap();
        assert_eq!((review.number, review.body.as_str()), (9, "lgtm"));
        assert_eq!(review.association.as_deref(), Some("NONE"), "the reviewer's role");
        let opened = subject(&with(serde_json::json!({"issue": {"number": 3, "author_association": "CONTRIBUTOR"}})));
        assert_eq!(opened.unwrap().association.as_deref(), Some("CONTRIBUTOR"), "an issue's own author");
        assert_eq!(
            subject(&with(serde_json::json!({"issue": {"number": -1}}))),
            Err("no issue or pull request number")
        );
        assert_eq!(
            subject(&with(serde_json::json!({"issue": {"number": 1e30}}))),
            Err("no issue or pull request number")
        );
        assert_eq!(subject(&serde_json::json!({})), Err("no repository.full_name"));
    }
}
