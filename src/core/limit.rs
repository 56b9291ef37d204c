//! Usage limits, part of decide. A turn its model's API refused for a usage limit (the 429 its harness's record
//! shows, `status.usage.limit`) is not a failure, a crash or a reason for a fresh conversation: the session is
//! parked until the limit's wake time, when the prompt the refused turn was given goes back to `Pending` and is sent
//! again, once (a second refusal parks it again). The harnesses' records carry no reset time: the wait is the reset a
//! key gateway read as it relayed the refusal ([`super::Reset`]), else the config's (`delivery.usageLimitWaitSeconds`)
//! from the latest refusal. A namespace's sessions of one harness share its
//! account: one refused parks them all, and they wake `delivery.usageLimitSpreadSeconds` apart in the order they were
//! refused, so the new allowance is not spent in a minute; one with nothing refused sends nothing until they all woke.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::{Attempt, Decision, EventReason, Notice, PromptKey, ReadyReason, later, secs, until};
use crate::api::{Phase, PromptPhase, UsageLimit};

/// How near the refusal its record shows a key gateway must have relayed one for its reset to be that refusal's.
pub const TOLD_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The credential the session `namespace/name` spends running `harness`: its namespace's sessions of that harness
/// share the harness's account (a key or a subscription), and never another tenant's.
pub fn credential(session: &str, harness: &str) -> String {
    let namespace = session.split_once('/').map_or("", |(namespace, _)| namespace);
    format!("{namespace}/{harness}")
}

impl Decision<'_, '_> {
    /// A refusal this decision's read brought (the status held `before`): its time is made the clock's when the
    /// record gives none or a later one (a record is the harness's to write).
    pub(super) fn take_refusal(&mut self, before: Option<&UsageLimit>) {
        let now = self.input.context.now;
        let Some(limit) = self.status.usage.as_mut().and_then(|u| u.limit.as_mut()) else { return };
        if Some(&*limit) != before {
            limit.time = Some(Time(limit.time.as_ref().map_or(now, |t| t.0.min(now))));
        }
    }

    /// The wake of its own limit, once: the prompt the refused turn was given goes back to `Pending`, to be sent
    /// again (its count of sends kept: its next paste is told from the one refused, which its pane still shows). It
    /// is the prompt of the conversation known delivered last, among those sent at or before the refusal and known
    /// delivered at or after the turn before it ended (status times are kept to the second: every WorkEvent known
    /// delivered in that second, which came after `initialPrompt` if it was too). An earlier prompt refused in the
    /// same park is not sent again: it stays in the conversation, which the model reads with the one sent again. The
    /// wake is recorded before the prompt goes back (an intent): a decision that does not see it done sends nothing
    /// twice. Whether it came now.
    fn wake(&mut self) -> bool {
        let input = self.input;
        let last_turn = self.status.usage.as_ref().and_then(|u| u.last_turn_time.as_ref()).map(|t| t.0);
        let Some(limit) = self.status.usage.as_mut().and_then(|u| u.limit.as_mut()).filter(|l| !l.woken) else {
            return false;
        };
        let refused_at = limit.time.as_ref().map(|t| t.0);
        // When it came, for its credential's next wake to keep its distance (a wake may come after its time).
        (limit.woken, limit.wake_time) = (true, Some(Time(input.context.now)));
        self.claims.push(super::Claim::Wake(credential(input.object.owner_name, &input.object.spec.harness)));
        let message = format!("{}; it is sent again now the limit was waited out", limit.message);
        let said = format!("the usage limit was waited out at {}: the refused prompt is sent again", input.context.now);
        self.notice(Notice::new(EventReason::UsageLimitWaitedOut, said));
        let current = self.status.harness_session_id.clone();
        let this_conversation = |id: Option<&String>| id.is_none() || id == current.as_ref();
        let in_the_turn = |sent: Option<Timestamp>, at: Timestamp| {
            sent.is_some_and(|sent| refused_at.is_some_and(|r| sent <= r)) && last_turn.is_none_or(|end| at >= end)
        };
        let initial =
            self.status.initial_prompt.as_ref().filter(|p| {
                p.phase == Some(PromptPhase::Delivered) && this_conversation(p.harness_session_id.as_ref())
            });
        let initial = initial.and_then(|p| Some((p.sent_time.as_ref()?.0, p.delivered_at.as_ref()?.0)));
        let initial =
            initial.filter(|(sent, at)| in_the_turn(Some(*sent), *at)).map(|(_, at)| (at, super::INITIAL_PROMPT));
        let finished =
            input.object.finished.iter().filter(|e| e.delivered && this_conversation(e.conversation.as_ref()));
        let finished = finished.filter(|e| in_the_turn(e.sent, e.at)).map(|e| (e.at, e.name.as_str()));
        let delivered: Vec<(Timestamp, &str)> = finished.chain(initial).collect();
        self.intent = Some(self.status.clone());
        let Some(last) = delivered.iter().map(|(at, _)| *at).max() else { return true };
        let mut last: Vec<&str> = delivered.into_iter().filter(|(at, _)| *at == last).map(|(_, key)| key).collect();
        if last.len() > 1 {
            last.retain(|key| *key != super::INITIAL_PROMPT);
        }
        for key in last {
            let key = if key == super::INITIAL_PROMPT { PromptKey::Initial } else { PromptKey::Event(key) };
            self.set_prompt(key, PromptPhase::Pending, None, Attempt::No, Some(message.clone()));
            self.refused.push(key.to_string());
        }
        true
    }

    /// Until when the session is parked, if it is now: its own limit's turn to wake, or, with prompts waiting and no
    /// limit of its own, until its credential's parked sessions all woke. Its limit's wake time is recorded. A
    /// refusal dated after the clock (a status not written by this agent: its own reads are dated at most now) parks
    /// nothing. The wake waits while the harness's word on a sent prompt, or the rest of its record, is still to come.
    pub(super) fn parked_until(&mut self) -> Option<Timestamp> {
        let input = self.input;
        let (config, now) = (input.context.config, input.context.now);
        if self.status.phase == Some(Phase::Failed) {
            return None; // failed for good: nothing is sent again
        }
        let limit = self.status.usage.as_ref().and_then(|u| u.limit.as_ref());
        if limit.is_some_and(|l| l.woken) {
            // Its wake came: what it sent again finds out whether the limit holds (a refusal parks it anew), and
            // its wake's time stays when it came, for the others' spread.
            return None;
        }
        let own = limit.and_then(|l| l.time.as_ref()).map(|t| t.0).filter(|at| *at <= now);
        let peers = input.evidence.limited.iter().filter(|l| l.at <= now);
        let mut parked: Vec<(Timestamp, &str)> = peers.map(|l| (l.at, l.session.as_str())).collect();
        parked.extend(own.map(|at| (at, input.object.owner_name)));
        parked.sort();
        // The latest refusal says the limit still holds, until the reset a gateway was told after it (else for the
        // config's wait); the first refused wakes first.
        let latest = parked.iter().map(|(at, _)| *at).max()?;
        // A gateway's word is this refusal's when told about when it was made (a turn's request and its record),
        // never an earlier refusal's long reset.
        let close = |told: Timestamp| told.duration_since(latest).abs() <= secs(TOLD_WITHIN);
        let told = input.evidence.limit_reset.filter(|r| r.at > latest && close(r.told)).map(|r| r.at);
        // Without it, the wait is the config's, and never shorter than the wake its status recorded: an agent
        // that restarted has forgotten what a gateway told it.
        let recorded = limit.filter(|_| told.is_none()).and_then(|l| l.wake_time.as_ref()).map(|t| t.0);
        let reset = told.unwrap_or_else(|| later(latest, config.usage_limit_wait));
        if told.is_none() && own.is_some() && now < later(latest, TOLD_WITHIN) {
            // The gateway's word may come just after the record's: looked at again before then.
            self.requeue(until(now, later(latest, TOLD_WITHIN)).max(super::deliver::DELIVERY_RECHECK));
        }
        let rank = parked.iter().position(|(_, s)| *s == input.object.owner_name).unwrap_or(parked.len());
        let wake = later(reset, config.usage_limit_spread.saturating_mul(rank as u32));
        let wake = recorded.map_or(wake, |recorded| recorded.max(wake));
        // And never within the spread of a wake that came: one held up (by its harness's word) is not followed at once.
        let spread = config.usage_limit_spread;
        // A wake dated after the clock (a status not this agent's writing) holds nothing back.
        let woke = input.evidence.limited.iter().filter_map(|l| l.woke).filter(|w| *w <= now);
        let woke = woke.map(|w| later(w, spread)).max();
        let wake = woke.map_or(wake, |after| after.max(wake));
        if let Some(limit) = self.status.usage.as_mut().and_then(|u| u.limit.as_mut()).filter(|_| own.is_some()) {
            limit.wake_time = Some(Time(wake));
        }
        let unsettled = self.prompts().iter().any(|p| p.phase == PromptPhase::Delivering)
            || input.evidence.usage.as_ref().is_some_and(|r| r.more);
        if now >= wake && !(own.is_some() && unsettled) {
            // The wake's own decision sends nothing: the refused prompt goes first, from the next.
            return self.wake().then_some(wake);
        }
        if now >= wake {
            return limit_unwoken(&self.status).then_some(wake);
        }
        (own.is_some() || !self.prompts().is_empty()).then_some(wake)
    }

    /// Parked until `wake`: nothing is sent or started before then; said once (a condition and an Event). The phase
    /// is the caller's: a live harness runs on, a stopped one is `Parked` (an idle or archived one stays so).
    pub(super) fn parked(&mut self, wake: Timestamp) {
        let waiting = self.prompts().len();
        let own = self.status.usage.as_ref().and_then(|u| u.limit.as_ref()).map(|l| l.message.clone());
        let why = own.unwrap_or_else(|| {
            "another session of its harness in this namespace was refused for a usage limit: its prompts wait".into()
        });
        let prompts = if waiting == 1 { "1 prompt waits" } else { &format!("{waiting} prompts wait") };
        let message = format!("{why}; parked until {wake}, {prompts}");
        if !super::has_reason(&self.input.object.status.conditions, ReadyReason::UsageLimited) {
            self.notice(Notice::new(EventReason::UsageLimited, message.clone()));
        }
        self.ready(false, ReadyReason::UsageLimited, message);
        // A wake come and waiting for the harness's word is looked at again as a sent prompt is.
        self.requeue(until(self.input.context.now, wake).max(super::deliver::DELIVERY_RECHECK));
    }

    /// Not running and parked: nothing starts until the wake.
    pub(super) fn parked_stopped(&mut self, wake: Timestamp) {
        if !matches!(self.status.phase, Some(Phase::Idle | Phase::Archived)) {
            self.status.phase = Some(Phase::Parked);
        }
        self.parked(wake);
    }
}

/// Whether the status holds a limit of its own whose wake has not come: the refused prompt is yet to be sent again.
pub(super) fn limit_unwoken(status: &crate::api::WorkSessionStatus) -> bool {
    status.usage.as_ref().and_then(|u| u.limit.as_ref()).is_some_and(|l| !l.woken)
}
