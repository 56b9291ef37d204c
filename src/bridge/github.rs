//! GitHub webhooks: the signature check and what a payload says (repository, number, sender, text, link).

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

/// What an issue or pull-request event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    /// `owner/name`.
    pub repository: String,
    /// The owner.
    pub owner: String,
    /// The repository name.
    pub repo: String,
    /// The issue or pull-request number.
    pub number: u64,
    /// Who sent it.
    pub sender: String,
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
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

/// Reads the subject of an `issue_comment`, `issues`, `pull_request_review_comment` or `pull_request_review`
/// payload; `Err` says what is missing.
pub fn subject(payload: &Value) -> Result<Subject, &'static str> {
    let repository = str_at(payload, &["repository", "full_name"]).ok_or("no repository.full_name")?;
    let (owner, repo) = repository.split_once('/').ok_or("repository.full_name is not owner/name")?;
    let item = payload.get("issue").or_else(|| payload.get("pull_request")).ok_or("no issue or pull_request")?;
    let number = item.get("number").and_then(Value::as_u64).ok_or("no issue or pull request number")?;
    let sender = str_at(payload, &["sender", "login"]).unwrap_or("someone");
    let detail = payload.get("comment").or_else(|| payload.get("review")).unwrap_or(item);
    Ok(Subject {
        repository: repository.to_string(),
        owner: owner.to_string(),
        repo: repo.to_string(),
        number,
        sender: sender.to_string(),
        title: str_at(item, &["title"]).unwrap_or_default().to_string(),
        body: str_at(detail, &["body"]).unwrap_or_default().to_string(),
        url: str_at(detail, &["html_url"]).or_else(|| str_at(item, &["html_url"])).unwrap_or_default().to_string(),
        association: str_at(detail, &["author_association"]).map(str::to_string),
        comment_id: payload.get("comment").and_then(|c| c.get("id")).and_then(Value::as_u64),
    })
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
