//! A work item's pull request as its WorkSession's status shows it (`status.pullRequest`): the bridge records what
//! GitHub said of it on the session ([`super::PULL_REQUEST_STATE_ANNOTATION`], the only writer it has in both modes),
//! and the agent's decision copies what it reads there into status, where `kubectl get ws`, `worksession get` and
//! the console show it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

crate::words::words! {
    /// Where a pull request is.
    #[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
    pub enum PullRequestState {
        /// Open.
        Open,
        /// Closed without being merged.
        Closed,
        /// Merged.
        Merged,
    }
}

crate::words::words! {
    /// What CI said of a pull request's head commit, as far as the bridge heard.
    #[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
    pub enum ChecksState {
        /// Nothing heard of the head commit yet.
        Pending,
        /// A check passed on it, and none failed (as far as heard: a check still running is not known).
        Passing,
        /// A check failed on it.
        Failing,
    }
}

/// A work item's pull request, as GitHub last said.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PullRequestStatus {
    /// `owner/name`.
    #[schemars(length(max = 200))]
    pub repository: String,
    /// Its number.
    pub number: u64,
    /// A link to it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 500))]
    pub url: String,
    /// Open, closed or merged.
    pub state: PullRequestState,
    /// Its head commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub head_sha: Option<String>,
    /// What CI said of the head commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<ChecksState>,
    /// When GitHub says the pull request last changed (its `updated_at`): an older delivery changes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// The longest annotation read as a pull request's state: what the bridge writes is a few hundred bytes.
const ANNOTATION_LIMIT: usize = 2048;

impl PullRequestStatus {
    /// The state an annotation records, when it is one the bridge could have written: bounded as the CRD's schema
    /// bounds `status.pullRequest` (anyone who may patch the session can write the annotation, and a value the API
    /// server refuses would fail every status write of the session), well formed.
    pub fn from_annotation(text: &str) -> Option<Self> {
        let state: Self = (text.len() <= ANNOTATION_LIMIT).then(|| serde_json::from_str(text).ok()).flatten()?;
        let repository = state.repository.len() <= 200
            && state.repository.split_once('/').is_some_and(|(o, n)| !o.is_empty() && !n.is_empty())
            && !state.repository.chars().any(|c| c.is_control() || c.is_whitespace());
        let url = state.url.is_empty()
            || (state.url.len() <= 500
                && state.url.starts_with("https://")
                && !state.url.chars().any(char::is_control));
        let head = state.head_sha.as_deref().is_none_or(|h| h.len() <= 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        let number = i64::try_from(state.number).is_ok();
        (repository && url && head && number).then_some(state)
    }

    /// The annotation recording it.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a pull request's state serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_well_formed_bounded_annotation_is_read() {
        let state = PullRequestStatus {
            repository: "octo-org/hello".into(),
            number: 57,
            url: "https://github.com/octo-org/hello/pull/57".into(),
            state: PullRequestState::Open,
            head_sha: Some("abc123".into()),
            checks: Some(ChecksState::Failing),
            updated_at: None,
        };
        assert_eq!(PullRequestStatus::from_annotation(&state.to_annotation()), Some(state.clone()));
        assert!(PullRequestStatus::from_annotation("not json").is_none());
        assert!(PullRequestStatus::from_annotation(&format!("{:2100}", state.to_annotation())).is_none());
        let forged = PullRequestStatus { url: "x\u{1b}[2J".into(), ..state.clone() };
        assert!(PullRequestStatus::from_annotation(&forged.to_annotation()).is_none(), "no control characters");
        // What the API server would refuse in status (and so every status write of the session): never read.
        for forged in [
            PullRequestStatus { number: u64::MAX, ..state.clone() },
            PullRequestStatus { head_sha: Some("z".repeat(65)), ..state.clone() },
            PullRequestStatus { repository: "a".repeat(201), ..state.clone() },
            PullRequestStatus { url: "javascript:alert(1)".into(), ..state },
        ] {
            assert!(PullRequestStatus::from_annotation(&forged.to_annotation()).is_none(), "{forged:?}");
        }
    }
}
