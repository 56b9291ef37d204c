//! Deliveries GitHub could not hand over are asked of it again: a delivery the bridge answered with a 5xx (the API
//! server slow past 8 s, a rollout, a session being deleted) or never answered is one GitHub does not redeliver by
//! itself. With `github.redeliver`, a sweep beside the webhooks lists each configured hook's recent deliveries and
//! has every one that never succeeded redelivered. The delivery id names its WorkEvent, so a redelivery is written
//! once however often it comes ([`super::event_name`]).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use tokio::sync::watch;

use super::config::{BridgeConfig, Hook, Redeliver};
use super::metrics::{BridgeMetrics, GithubLabels, RedeliveryLabels};
use crate::github::{Github, GithubError};

/// Attempts of one delivery after which the sweep stops asking (each failed again): a delivery the bridge refuses for
/// good would otherwise be asked for every sweep.
pub const MAX_ATTEMPTS: usize = 5;

/// The most pages of 100 a sweep reads of one hook.
const MAX_PAGES: usize = 20;

/// One attempt of a delivery, as GitHub lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryAttempt {
    /// The attempt's id: what a redelivery names.
    pub id: u64,
    /// The delivery's id (`X-GitHub-Delivery`), the same for its every attempt.
    pub guid: String,
    /// What the bridge answered; 0 when it did not answer.
    pub status_code: u16,
    /// When GitHub made the attempt.
    pub at: Timestamp,
    /// A redelivery (someone asked for it), not the delivery's first attempt.
    pub redelivery: bool,
}

impl DeliveryAttempt {
    fn of(v: &Value) -> Option<Self> {
        Some(Self {
            id: v.get("id")?.as_u64()?,
            guid: v.get("guid")?.as_str()?.to_string(),
            status_code: v.get("status_code").and_then(Value::as_u64).unwrap_or(0).try_into().unwrap_or(0),
            at: v.get("delivered_at")?.as_str()?.parse().ok()?,
            redelivery: v.get("redelivery").and_then(Value::as_bool).unwrap_or(false),
        })
    }

    /// Whether the bridge did not take it: it answered with a server error, or not at all. A 4xx is the bridge's word
    /// on the delivery itself (a wrong signature, a malformed body): asking again changes nothing.
    fn failed(&self) -> bool {
        self.status_code == 0 || self.status_code >= 500
    }
}

/// What a sweep does with the attempts it read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Due {
    /// The attempts to redeliver: each the newest of a delivery none of whose attempts succeeded.
    pub redeliver: Vec<u64>,
    /// The deliveries that failed [`MAX_ATTEMPTS`] times: given up, counted.
    pub given_up: Vec<String>,
}

/// How long a redelivery this bridge asked for is waited for before it is asked again: GitHub queues it, and lists its
/// attempt only once made.
pub const ASKED_WAIT: SignedDuration = SignedDuration::from_mins(5);

/// Which deliveries to ask again as of `now`: those whose newest attempt failed at least `settle` ago, and that this
/// bridge did not ask for since (`asked`, by delivery id) unless that was [`ASKED_WAIT`] ago.
pub fn due(
    attempts: &[DeliveryAttempt],
    now: Timestamp,
    settle: Duration,
    asked: &std::collections::HashMap<String, Timestamp>,
) -> Due {
    let settle = SignedDuration::try_from(settle).unwrap_or(SignedDuration::MAX);
    let mut by_guid: std::collections::BTreeMap<&str, Vec<&DeliveryAttempt>> = Default::default();
    for a in attempts {
        by_guid.entry(&a.guid).or_default().push(a);
    }
    let mut due = Due::default();
    for (guid, tries) in by_guid {
        // Its first attempt is older than what was read, so its attempts cannot be counted: left alone.
        let whole = tries.iter().any(|a| !a.redelivery);
        if !whole || !tries.iter().all(|a| a.failed()) {
            continue;
        }
        let Some(newest) = tries.iter().max_by_key(|a| (a.at, a.id)) else { continue };
        if newest.at.checked_add(settle).is_ok_and(|settled| settled > now) {
            continue;
        }
        let waiting =
            asked.get(guid).is_some_and(|at| *at > newest.at && at.checked_add(ASKED_WAIT).is_ok_and(|t| t > now));
        if waiting {
            continue;
        }
        if tries.len() >= MAX_ATTEMPTS {
            due.given_up.push(guid.to_string());
        } else {
            due.redeliver.push(newest.id);
        }
    }
    due
}

/// The deliveries path of a hook, and the repository whose credentials read it (`None`: the App's own).
fn hook_path(hook: &Hook) -> (String, Option<String>) {
    match hook {
        Hook::Repository { repository, id } => {
            (format!("/repos/{repository}/hooks/{id}/deliveries"), Some(repository.clone()))
        }
        Hook::App => ("/app/hook/deliveries".to_string(), None),
    }
}

/// One sweep of one hook: its attempts of the last `lookback`, then the redeliveries they call for.
async fn sweep(
    github: &Github,
    hook: &Hook,
    r: &Redeliver,
    metrics: &BridgeMetrics,
    memory: &mut Memory,
) -> Result<(), GithubError> {
    let (path, repository) = hook_path(hook);
    let now = Timestamp::now();
    let since = now.checked_sub(SignedDuration::try_from(r.lookback).unwrap_or_default()).unwrap_or(Timestamp::MIN);
    let mut attempts = Vec::new();
    let mut next = Some(format!("{path}?per_page=100"));
    for _ in 0..MAX_PAGES {
        let Some(page) = next.take() else { break };
        let got = github.page(repository.as_deref(), &page).await;
        count(metrics, "deliveries", &got);
        let got = got?;
        let listed: Vec<DeliveryAttempt> =
            got.items.as_array().into_iter().flatten().filter_map(DeliveryAttempt::of).collect();
        // Newest first: a page reaching past the lookback is the last one read.
        let older = listed.iter().any(|a| a.at < since);
        attempts.extend(listed.into_iter().filter(|a| a.at >= since));
        next = got.next.filter(|_| !older);
    }
    let due = due(&attempts, now, r.settle, &memory.asked);
    let guid_of = |id: u64| attempts.iter().find(|a| a.id == id).map(|a| a.guid.clone()).unwrap_or_default();
    for guid in due.given_up.iter().filter(|g| memory.given_up.insert(g.to_string(), now).is_none()) {
        metrics.redeliveries.get_or_create(&RedeliveryLabels { outcome: "given_up" }).inc();
        tracing::warn!(
            event = "bridge.redelivery_given_up",
            delivery = guid,
            "failed {MAX_ATTEMPTS} times; not asked again"
        );
    }
    for id in due.redeliver {
        let answer = github.post(repository.as_deref(), &format!("{path}/{id}/attempts")).await;
        count(metrics, "redeliver", &answer);
        match answer {
            Ok(()) => {
                memory.asked.insert(guid_of(id), Timestamp::now());
                metrics.redeliveries.get_or_create(&RedeliveryLabels { outcome: "asked" }).inc();
                tracing::info!(
                    event = "bridge.redelivery_asked",
                    attempt = id,
                    "a delivery the bridge did not take is redelivered"
                );
            }
            Err(e) => {
                tracing::warn!(event = "bridge.redelivery_failed", attempt = id, error = %e, "asking for a redelivery failed; the next sweep asks again")
            }
        }
    }
    Ok(())
}

fn count<T>(metrics: &BridgeMetrics, call: &'static str, result: &Result<T, GithubError>) {
    let outcome = match result {
        Ok(_) => "ok",
        Err(e) if e.retryable() => "retried",
        Err(_) => "refused",
    };
    metrics.github_calls.get_or_create(&GithubLabels { call, outcome }).inc();
}

/// What a bridge remembers between sweeps, by delivery id: the redeliveries it asked for, and the deliveries it gave
/// up (counted once).
#[derive(Default)]
struct Memory {
    asked: std::collections::HashMap<String, Timestamp>,
    given_up: std::collections::HashMap<String, Timestamp>,
}

/// Sweeps every configured hook every `github.redeliver.intervalSeconds`, until the process stops. A failed sweep of
/// a hook is logged and tried at the next.
pub async fn run(github: Arc<Github>, mut config: watch::Receiver<Arc<BridgeConfig>>, metrics: BridgeMetrics) {
    let mut memory = Memory::default();
    loop {
        let redeliver = config.borrow_and_update().github.as_ref().and_then(|g| g.redeliver.clone());
        let Some(redeliver) = redeliver else {
            // Nothing to sweep until a reload names a hook.
            if config.changed().await.is_err() {
                return;
            }
            continue;
        };
        for hook in &redeliver.hooks {
            if let Err(e) = sweep(&github, hook, &redeliver, &metrics, &mut memory).await {
                tracing::warn!(event = "bridge.redelivery_sweep_failed", hook = ?hook, error = %e, "listing the hook's deliveries failed; trying at the next sweep");
            }
        }
        let now = Timestamp::now();
        memory.asked.retain(|_, at| at.checked_add(ASKED_WAIT).is_ok_and(|t| t > now));
        let lookback = SignedDuration::try_from(redeliver.lookback).unwrap_or(SignedDuration::MAX);
        memory.given_up.retain(|_, at| at.checked_add(lookback).is_ok_and(|t| t > now));
        tokio::time::sleep(redeliver.interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(id: u64, guid: &str, status_code: u16, secs_ago: i64) -> DeliveryAttempt {
        let at = Timestamp::from_second(1_800_000_000 - secs_ago).unwrap();
        DeliveryAttempt { id, guid: guid.into(), status_code, at, redelivery: false }
    }

    #[test]
    fn only_deliveries_that_never_succeeded_are_asked_again_newest_attempt_once_settled() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let attempts = [
            attempt(1, "taken", 201, 300),
            attempt(2, "failed-then-taken", 503, 300),
            attempt(3, "failed-then-taken", 200, 200),
            attempt(4, "failed", 503, 300),
            attempt(5, "failed", 0, 120),
            attempt(6, "just-failed", 503, 5),
            attempt(7, "refused", 401, 300),
            attempt(8, "ignored", 202, 300),
        ];
        let none = Default::default();
        let due = due(&attempts, now, Duration::from_secs(30), &none);
        assert_eq!(due.redeliver, [5], "the newest attempt of the one that never succeeded, once settled");
        assert!(due.given_up.is_empty());
        // Asked for since its newest attempt: waited for, until ASKED_WAIT passed.
        let asked = [("failed".to_string(), now.checked_sub(SignedDuration::from_secs(60)).unwrap())].into();
        assert!(super::due(&attempts, now, Duration::from_secs(30), &asked).redeliver.is_empty());
        let long_ago = [("failed".to_string(), now.checked_sub(SignedDuration::from_mins(6)).unwrap())].into();
        assert_eq!(super::due(&attempts, now, Duration::from_secs(30), &long_ago).redeliver, [5]);
    }

    #[test]
    fn a_delivery_that_keeps_failing_is_given_up() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let attempts: Vec<DeliveryAttempt> = (1..=5)
            .map(|i| DeliveryAttempt { redelivery: i > 1, ..attempt(i, "hopeless", 503, 600 - i as i64 * 60) })
            .collect();
        let (settle, none) = (Duration::from_secs(30), Default::default());
        assert_eq!(due(&attempts, now, settle, &none), Due { redeliver: vec![], given_up: vec!["hopeless".into()] });
        assert_eq!(due(&attempts[..4], now, settle, &none).redeliver, [4]);
        // Its first attempt fell out of what was read: its attempts cannot be counted, so it is not asked again.
        assert_eq!(due(&attempts[1..], now, settle, &none), Due::default());
    }

    #[test]
    fn what_github_lists_is_read_as_attempts() {
        let listed = serde_json::json!({"id": 12, "guid": "0b989ba4", "delivered_at": "2026-12-01T10:00:00Z",
            "redelivery": false, "status": "Invalid HTTP Response: 503", "status_code": 503, "event": "issue_comment"});
        let a = DeliveryAttempt::of(&listed).unwrap();
        assert_eq!((a.id, a.guid.as_str(), a.status_code), (12, "0b989ba4", 503));
        assert!(DeliveryAttempt::of(&serde_json::json!({"id": 1})).is_none());
    }
}
