//! Usage counted: what the agent read of the harness's record since the last count ([`UsageRead`]) added to
//! `status.usage`, the work item's total and the current conversation's share, with the estimated cost by the config's
//! prices. A read that does not start where the status says the count stands (another decision counted meanwhile) is
//! not added.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{
    ConversationUsage, CountedConversation, MAX_MODELS, ModelUsage, OTHER_MODELS, Tokens, Usage, UsageLimit,
    WorkSessionStatus,
};
use crate::config::Prices;
use crate::harness::usage::{Limit, Tally};

/// How much of a record that says nothing of usage is read again rather than counted past with a status write.
pub const QUIET_BYTES: u64 = 256 << 10;
/// How soon a record longer than one read is read on.
pub const READ_AGAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// The conversations left whose count is kept beside the current one's.
pub const EARLIER_KEPT: usize = 10;

/// What the agent read of a conversation's record.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UsageRead {
    /// The conversation.
    pub conversation: String,
    /// Where the status the read was made from said the count stood ([`count_stands`]).
    pub stood: u64,
    /// Where the read started: the conversation's `readOffset`, or 0 when its record is new (or shorter than that).
    pub from: u64,
    /// Where it ended (after the last whole line).
    pub to: u64,
    /// Whether the record holds more than was read (a read is bounded): read again soon.
    pub more: bool,
    /// What it said.
    pub tally: Tally,
}

/// Where the count of `conversation` stands: the offset and the last reply counted, as the next read takes them.
pub fn count_stands<'s>(
    status: &'s WorkSessionStatus,
    conversation: &str,
) -> (u64, Option<&'s crate::api::CountedReply>) {
    let Some(usage) = status.usage.as_ref() else { return (0, None) };
    match &usage.conversation {
        Some(c) if c.harness_session_id == conversation => (c.read_offset, c.last_reply.as_ref()),
        _ => {
            let earlier = usage.earlier.iter().find(|e| e.harness_session_id == conversation);
            (earlier.map_or(0, |e| e.read_offset), None)
        }
    }
}

/// Adds `read` to `status.usage`, and prices it all again by `prices`.
pub fn count(status: &mut WorkSessionStatus, read: &UsageRead, prices: &Prices) {
    // Read from where this status says the count stands (or from the start of a record that was rewritten shorter);
    // a read made from another status's count is not added.
    let (offset, last_reply) = count_stands(status, &read.conversation);
    if read.stood != offset || (read.from != offset && read.from != 0) {
        return;
    }
    // Lines that say nothing of usage (most of a transcript) move no offset until they are many: the next read goes
    // over them again, which costs less than a status write for each.
    let current = status.usage.as_ref().and_then(|u| u.conversation.as_ref()).map(|c| c.harness_session_id.as_str());
    let tally = &read.tally;
    let silent = tally.models.is_empty() && tally.turns == 0 && tally.limit.is_none();
    if silent
        && current == Some(read.conversation.as_str())
        && tally.last_reply.as_ref() == last_reply
        && read.from == offset
        && read.to - offset < QUIET_BYTES
        && !read.more
    {
        return;
    }
    let usage = status.usage.get_or_insert_with(Usage::default);
    let conversation = match usage.conversation.take() {
        Some(c) if c.harness_session_id == read.conversation => c,
        left => {
            // Another conversation now: where the one left stands is kept, so a return to it reads on from there.
            if let Some(c) = left {
                usage.earlier.retain(|e| e.harness_session_id != c.harness_session_id);
                usage.earlier.insert(
                    0,
                    CountedConversation { harness_session_id: c.harness_session_id, read_offset: c.read_offset },
                );
            }
            usage.earlier.retain(|e| e.harness_session_id != read.conversation);
            usage.earlier.truncate(EARLIER_KEPT);
            ConversationUsage { harness_session_id: read.conversation.clone(), ..Default::default() }
        }
    };
    let conversation = if read.from == 0 && offset > 0 {
        // Its record was rewritten: its share starts again.
        ConversationUsage { harness_session_id: read.conversation.clone(), ..Default::default() }
    } else {
        conversation
    };
    let mut tokens = conversation.tokens;
    for (model, spent, replies) in &tally.models {
        tokens = tokens.plus(*spent);
        let name = if usage.models.len() < MAX_MODELS || usage.models.iter().any(|m| &m.model == model) {
            model.as_str()
        } else {
            OTHER_MODELS
        };
        match usage.models.iter_mut().find(|m| m.model == name) {
            Some(m) => {
                m.tokens = m.tokens.plus(*spent);
                m.replies += replies;
            }
            None => usage.models.push(ModelUsage { model: name.into(), tokens: *spent, replies: *replies }),
        }
    }
    usage.turns += tally.turns;
    match &tally.limit {
        Some(Limit::Reached { at, message }) => {
            usage.limit = Some(UsageLimit { time: at.map(Time), message: message.clone(), ..Default::default() });
        }
        Some(Limit::Behind) => usage.limit = None,
        None => {}
    }
    if let Some(end) = tally.last_turn_end {
        usage.last_turn_time = Some(Time(usage.last_turn_time.as_ref().map_or(end, |t| t.0.max(end))));
    }
    usage.conversation = Some(ConversationUsage {
        tokens,
        turns: conversation.turns + tally.turns,
        read_offset: read.to,
        last_reply: tally.last_reply.clone(),
        ..conversation
    });
    price(usage, prices);
}

/// Sets the total and the estimated cost from the models' tokens; a cost only when every model that spent has a price.
pub fn price(usage: &mut Usage, prices: &Prices) {
    usage.tokens =
        usage.models.iter().map(|m| m.tokens.total()).fold(0, u64::saturating_add).min(crate::api::MAX_COUNT);
    let spent = usage.models.iter().filter(|m| m.tokens != Tokens::default());
    let (mut cost, mut unpriced) = (0.0, Vec::new());
    for m in spent {
        match prices.of(&m.model) {
            Some(price) => cost += price.of(&m.tokens),
            None => unpriced.push(m.model.clone()),
        }
    }
    usage.estimated_cost = unpriced.is_empty().then(|| format!("{cost:.4}"));
    usage.unpriced_models = unpriced;
}
