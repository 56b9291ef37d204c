//! Usage: what the harness's record says its model calls spent, added to the status once, kept across conversations,
//! and priced by the config's table.

use super::*;
use crate::api::{CountedReply, MAX_MODELS, OTHER_MODELS, Tokens, Usage};
use crate::config::{Price, Prices};
use crate::harness::usage::Tally;

fn tokens(input: u64, output: u64, cache_write: u64, cache_read: u64) -> Tokens {
    Tokens { input, output, cache_write, cache_read }
}

/// A read of `conversation`'s record from `from` to `to` that found one reply of `model` ending a turn.
fn read(conversation: &str, (from, to): (u64, u64), model: &str, spent: Tokens) -> UsageRead {
    let last_reply =
        Some(CountedReply { id: format!("msg-{to}"), model: model.into(), tokens: spent, ended_turn: true });
    let tally = Tally {
        models: vec![(model.into(), spent, 1)],
        turns: 1,
        last_turn_end: Some(t(to as i64)),
        last_reply,
        limit: None,
    };
    UsageRead { conversation: conversation.into(), stood: from, from, to, more: false, tally }
}

/// A live session running `OLD`, whose record was read as `usage` says.
fn running(usage: Option<Usage>) -> Case {
    let mut case = Case::new(WorkSessionStatus { phase: Some(Phase::Running), usage, ..ran_old() });
    (case.liveness, case.tmux, case.events) = (Liveness::Alive, Some(SessionView { alive: true, ..ours() }), vec![]);
    case
}

fn usage_of(plan: &Plan) -> &Usage {
    plan.status.usage.as_ref().expect("usage in status")
}

#[test]
fn two_turns_of_one_conversation_add_up_read_once_each() {
    let mut case = running(None);
    case.usage = Some(read(OLD, (0, 400), "claude-sonnet-4-5", tokens(100, 20, 30, 900)));
    case.status = case.step().status;
    case.usage = Some(read(OLD, (400, 700), "claude-sonnet-4-5", tokens(10, 5, 0, 1000)));
    let plan = case.step();
    let usage = usage_of(&plan);
    assert_eq!(usage.models.len(), 1);
    assert_eq!(usage.models[0].tokens, tokens(110, 25, 30, 1900));
    assert_eq!((usage.models[0].replies, usage.turns, usage.tokens), (2, 2, 110 + 25 + 30 + 1900));
    assert_eq!(usage.last_turn_time, Some(Time(t(700))));
    let conversation = usage.conversation.as_ref().unwrap();
    assert_eq!((conversation.harness_session_id.as_str(), conversation.read_offset), (OLD, 700));
    assert_eq!((conversation.tokens, conversation.turns), (tokens(110, 25, 30, 1900), 2));

    // The same read again (a decision from a status older than the count) adds nothing.
    case.status = plan.status.clone();
    assert_eq!(usage_of(&case.step()), usage_of(&plan), "a read not from where the count stands is not added");
}

#[test]
fn a_new_conversation_adds_to_the_work_items_total_and_starts_its_own_share() {
    let mut case = running(None);
    case.usage = Some(read(OLD, (0, 400), "claude-sonnet-4-5", tokens(100, 20, 0, 0)));
    case.status = case.step().status;
    // A fresh fallback: the status now records NEW, whose record is read from its start.
    case.status.harness_session_id = Some(NEW.into());
    case.usage = Some(read(NEW, (0, 250), "claude-haiku-4-5", tokens(7, 3, 0, 0)));
    let plan = case.step();
    let usage = usage_of(&plan);
    let by_model: Vec<(&str, Tokens)> = usage.models.iter().map(|m| (m.model.as_str(), m.tokens)).collect();
    assert_eq!(by_model, [("claude-sonnet-4-5", tokens(100, 20, 0, 0)), ("claude-haiku-4-5", tokens(7, 3, 0, 0))]);
    assert_eq!((usage.tokens, usage.turns), (130, 2), "the work item's total holds both");
    let conversation = usage.conversation.as_ref().unwrap();
    assert_eq!((conversation.harness_session_id.as_str(), conversation.tokens), (NEW, tokens(7, 3, 0, 0)));
    assert_eq!((conversation.turns, conversation.read_offset), (1, 250), "its own share only");
}

#[test]
fn a_record_shorter_than_the_count_is_read_again_from_its_start() {
    let mut case = running(None);
    case.usage = Some(read(OLD, (0, 400), "claude-sonnet-4-5", tokens(100, 20, 0, 0)));
    case.status = case.step().status;
    case.usage = Some(UsageRead { stood: 400, ..read(OLD, (0, 100), "claude-sonnet-4-5", tokens(1, 1, 0, 0)) });
    let usage = case.step().status.usage.unwrap();
    assert_eq!(usage.models[0].tokens, tokens(101, 21, 0, 0));
    let share = usage.conversation.unwrap();
    assert_eq!((share.read_offset, share.tokens), (100, tokens(1, 1, 0, 0)), "its share starts again");
}

#[test]
fn a_read_made_from_another_status_is_not_added() {
    let mut case = running(None);
    case.usage = Some(read(OLD, (0, 400), "m", tokens(100, 20, 0, 0)));
    case.status = case.step().status;
    // Read when the count stood at 0, and from 0: as if the record had been rewritten, but the status moved since.
    case.usage = Some(read(OLD, (0, 400), "m", tokens(100, 20, 0, 0)));
    assert_eq!(case.step().status.usage.unwrap().tokens, 120, "counted once");
}

#[test]
fn a_return_to_an_earlier_conversation_reads_on_from_where_it_stood() {
    let mut case = running(None);
    case.usage = Some(read(OLD, (0, 400), "m", tokens(100, 0, 0, 0)));
    case.status = case.step().status;
    // The harness moved to NEW (a /clear), then back to OLD (its /resume).
    case.status.harness_session_id = Some(NEW.into());
    case.usage = Some(read(NEW, (0, 50), "m", tokens(10, 0, 0, 0)));
    case.status = case.step().status;
    assert_eq!(crate::core::count_stands(&case.status, OLD).0, 400, "where OLD stood is kept");
    case.status.harness_session_id = Some(OLD.into());
    case.usage = Some(read(OLD, (400, 450), "m", tokens(1, 0, 0, 0)));
    let usage = case.step().status.usage.unwrap();
    assert_eq!(usage.tokens, 111, "OLD's first 400 bytes were not counted again");
    assert_eq!(usage.conversation.as_ref().map(|c| c.read_offset), Some(450));
    assert_eq!(
        usage.earlier.iter().map(|e| (e.harness_session_id.as_str(), e.read_offset)).collect::<Vec<_>>(),
        [(NEW, 50)]
    );
}

#[test]
fn the_cost_is_estimated_from_the_price_table_and_never_zero_for_an_unknown_model() {
    let mut case = running(None);
    case.usage = Some(read(OLD, (0, 400), "claude-sonnet-4-5-20250929", tokens(1_000_000, 100_000, 0, 2_000_000)));
    let plan = case.step();
    // Sonnet 4.5: $3 input, $15 output, $0.30 cache read per million.
    assert_eq!(usage_of(&plan).estimated_cost.as_deref(), Some("5.1000"));
    assert!(usage_of(&plan).unpriced_models.is_empty());

    case.status = plan.status;
    case.usage = Some(read(OLD, (400, 500), "a-model-of-its-own", tokens(10, 10, 0, 0)));
    let plan = case.step();
    let usage = usage_of(&plan);
    assert_eq!(usage.estimated_cost, None, "unknown, not zero");
    assert_eq!(usage.unpriced_models, ["a-model-of-its-own"]);
    assert_eq!(usage.tokens, 3_100_000 + 20, "its tokens still count");

    // A price for it in the config: the next decision prices it, with nothing new read.
    let price = Price { input: 1000.0, output: 1000.0, cache_write: 0.0, cache_read: 0.0 };
    let prices = std::collections::BTreeMap::from([("a-model-of-its-own".to_string(), Some(price))]);
    case.config.prices = Prices::with(prices).unwrap();
    (case.status, case.usage) = (plan.status.clone(), None);
    assert_eq!(usage_of(&case.step()).estimated_cost.as_deref(), Some("5.1200"));
}

#[test]
fn models_beyond_the_cap_count_as_other() {
    let mut case = running(None);
    let mut status = case.status.clone();
    for i in 0..=MAX_MODELS as u64 + 1 {
        case.status = status;
        case.usage = Some(read(OLD, (i, i + 1), &format!("model-{i}"), tokens(1, 0, 0, 0)));
        status = case.step().status;
    }
    let usage = status.usage.unwrap();
    assert_eq!(usage.models.len(), MAX_MODELS + 1);
    assert_eq!(usage.models.last().map(|m| (m.model.as_str(), m.tokens.input)), Some((OTHER_MODELS, 2)));
    assert_eq!(usage.tokens, MAX_MODELS as u64 + 2, "nothing lost");
}

#[test]
fn a_record_longer_than_one_read_is_read_on_soon() {
    let mut case = running(None);
    case.usage = Some(UsageRead { more: true, ..read(OLD, (0, 400), "m", tokens(1, 1, 0, 0)) });
    let plan = case.step();
    assert!(plan.requeue_after.is_some_and(|d| d <= std::time::Duration::from_secs(1)), "{:?}", plan.requeue_after);
}

#[test]
fn a_turn_refused_for_a_limit_is_said_once_and_a_reply_puts_it_behind() {
    use crate::harness::usage::Limit;
    let mut case = running(None);
    case.turn = Some(Turn { hook: "UserPromptSubmit".into(), at: Some(t(50)), message: None, kind: None });
    let message = "the model's API refused the turn: HTTP 429 rate_limit_error".to_string();
    let limited = Tally { limit: Some(Limit::Reached { at: Some(t(60)), message }), ..Tally::default() };
    case.usage = Some(UsageRead { conversation: OLD.into(), tally: limited, to: 10, ..Default::default() });
    let plan = case.step();
    assert_eq!(condition(&plan.status, ConditionType::Activity), Some(("False", "UsageLimited")));
    assert!(ops(&plan).contains(&"session.usage_limited".to_string()), "{:?}", ops(&plan));
    case.usage = None;
    assert!(!ops(&case.step()).contains(&"session.usage_limited".to_string()), "said once");
    // The next prompt taken after it: working again; its reply puts the limit behind.
    case.turn = Some(Turn { hook: "UserPromptSubmit".into(), at: Some(t(70)), message: None, kind: None });
    assert_eq!(condition(&case.step().status, ConditionType::Activity), Some(("True", "Working")));
    let reply = Tally { limit: Some(Limit::Behind), ..Tally::default() };
    case.usage = Some(UsageRead { conversation: OLD.into(), stood: 10, from: 10, to: 20, tally: reply, more: false });
    assert_eq!(case.step().status.usage.unwrap().limit, None);
}

#[test]
fn lines_that_say_nothing_of_usage_move_no_offset_until_they_are_many() {
    let mut case = running(None);
    case.usage = Some(read(OLD, (0, 400), "m", tokens(100, 20, 0, 0)));
    case.status = case.step().status;
    let silent = |to: u64| UsageRead { conversation: OLD.into(), stood: 400, from: 400, to, ..Default::default() };
    let last_reply = case.status.usage.as_ref().unwrap().conversation.as_ref().unwrap().last_reply.clone();
    let quiet = UsageRead { tally: Tally { last_reply: last_reply.clone(), ..Tally::default() }, ..silent(900) };
    case.usage = Some(quiet);
    let usage = case.decide().status.usage;
    assert_eq!(usage, case.status.usage, "nothing of the usage changes: read again next time");
    let many = UsageRead { tally: Tally { last_reply, ..Tally::default() }, ..silent(400 + (256 << 10)) };
    case.usage = Some(many);
    assert_eq!(crate::core::count_stands(&case.decide().status, OLD).0, 400 + (256 << 10), "counted past");
}
