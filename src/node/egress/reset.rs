//! When a model API's refusal for a usage or rate limit (HTTP 429) says its limit resets, read by the key gateway
//! ([`super::gateway`]) from the answer it relays: the harness's record of the refusal carries no such time (Claude
//! Code writes none), and its headers reach no file. Anthropic's `anthropic-ratelimit-unified-reset` (seconds since
//! the epoch) where its `anthropic-ratelimit-unified-status` says `rejected` (the account's own limit refused it;
//! otherwise it names a window's end, not this refusal's), else the standard `retry-after` (seconds from now); at
//! least [`SHORTEST`] and at most [`LONGEST`] ahead.

use std::time::Duration;

use hyper::HeaderMap;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The furthest ahead a reset is taken: an account's limits reset within a day (a weekly one is waited out a day at a
/// time).
pub const LONGEST: Duration = Duration::from_secs(24 * 3600);
/// The nearest a reset is taken: a refusal that says "now" (`retry-after: 0`, another clock) is not asked again at
/// once.
pub const SHORTEST: Duration = Duration::from_secs(1);

/// When the limit of a 429 answer with `headers`, given at `now`, resets, if they say.
pub fn reset_of(headers: &HeaderMap, now: Timestamp) -> Option<Timestamp> {
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    let number = |name: &str| text(name)?.parse::<i64>().ok();
    let rejected = text("anthropic-ratelimit-unified-status") == Some("rejected");
    let unified = number("anthropic-ratelimit-unified-reset").filter(|_| rejected);
    let at = unified.and_then(|epoch| Timestamp::from_second(epoch).ok()).or_else(|| {
        let after = number("retry-after")?.clamp(0, LONGEST.as_secs() as i64);
        now.checked_add(SignedDuration::from_secs(after)).ok()
    })?;
    let span = |d: Duration| now.checked_add(SignedDuration::try_from(d).ok()?).ok();
    Some(at.clamp(span(SHORTEST)?, span(LONGEST)?))
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
        let rejected = ("anthropic-ratelimit-unified-status", "rejected");
        let unified = headers(&[("anthropic-ratelimit-unified-reset", "1800000120"), ("retry-after", "5"), rejected]);
        assert_eq!(reset_of(&unified, now), Some(at(120)), "the account's own reset first");
        let allowed = headers(&[("anthropic-ratelimit-unified-reset", "1800000120"), ("retry-after", "5")]);
        assert_eq!(reset_of(&allowed, now), Some(at(5)), "a window's end is not this refusal's");
        let garbled =
            headers(&[("anthropic-ratelimit-unified-reset", "99999999999999"), ("retry-after", "5"), rejected]);
        assert_eq!(reset_of(&garbled, now), Some(at(5)), "a reset out of range: retry-after");
        assert_eq!(reset_of(&headers(&[("retry-after", "30")]), now), Some(at(30)));
        assert_eq!(reset_of(&headers(&[("retry-after", "-3")]), now), Some(at(1)), "a second ahead at least");
        assert_eq!(reset_of(&headers(&[("retry-after", "999999999")]), now), Some(at(24 * 3600)), "a day at most");
        let past = headers(&[("anthropic-ratelimit-unified-reset", "1700000000"), rejected]);
        assert_eq!(reset_of(&past, now), Some(at(1)));
        assert_eq!(reset_of(&headers(&[("retry-after", "Wed, 21 Oct 2026 07:28:00 GMT")]), now), None);
        assert_eq!(reset_of(&HeaderMap::new(), now), None);
    }
}
