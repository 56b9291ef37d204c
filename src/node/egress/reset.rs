//! When a model API's refusal for a usage or rate limit (HTTP 429) says its limit resets, read by the key gateway
//! ([`super::gateway`]) from the answer it relays: the harness's record of the refusal carries no such time (Claude
//! Code writes none), and its headers reach no file. Anthropic's `anthropic-ratelimit-unified-reset` (seconds since
//! the epoch), else the standard `retry-after` (seconds from now); at most [`LONGEST`] ahead, never in the past.

use std::time::Duration;

use hyper::HeaderMap;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The furthest ahead a reset is taken: an account's limits reset within a day (a weekly one is waited out a day at a
/// time).
pub const LONGEST: Duration = Duration::from_secs(24 * 3600);

/// When the limit of a 429 answer with `headers`, given at `now`, resets, if they say.
pub fn reset_of(headers: &HeaderMap, now: Timestamp) -> Option<Timestamp> {
    let number = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<i64>().ok();
    let at = match number("anthropic-ratelimit-unified-reset") {
        Some(epoch) => Timestamp::from_second(epoch).ok()?,
        None => now.checked_add(SignedDuration::from_secs(number("retry-after")?.max(0))).ok()?,
    };
    let latest = now.checked_add(SignedDuration::try_from(LONGEST).ok()?).ok()?;
    Some(at.clamp(now, latest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| (hyper::header::HeaderName::from_static(name), value.parse().unwrap()))
            .collect()
    }

    #[test]
    fn a_refusal_says_when_its_limit_resets_within_a_day() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let at = |secs: i64| Timestamp::from_second(1_800_000_000 + secs).unwrap();
        let unified = headers(&[("anthropic-ratelimit-unified-reset", "1800000120"), ("retry-after", "5")]);
        assert_eq!(reset_of(&unified, now), Some(at(120)), "the account's own reset first");
        assert_eq!(reset_of(&headers(&[("retry-after", "30")]), now), Some(at(30)));
        assert_eq!(reset_of(&headers(&[("retry-after", "-3")]), now), Some(now), "never in the past");
        assert_eq!(reset_of(&headers(&[("retry-after", "999999999")]), now), Some(at(24 * 3600)), "a day at most");
        let past = headers(&[("anthropic-ratelimit-unified-reset", "1700000000")]);
        assert_eq!(reset_of(&past, now), Some(now));
        assert_eq!(reset_of(&headers(&[("retry-after", "Wed, 21 Oct 2026 07:28:00 GMT")]), now), None);
        assert_eq!(reset_of(&HeaderMap::new(), now), None);
    }
}
