//! The handoff, part of decide: a fresh conversation that takes over from one the harness could not resume is told,
//! with its first prompt, what the agent holds of the lost one: its id and why it was lost, the prompts it had taken
//! (newest kept when the budget is short), and the work item's branch and last commit. The prompt follows unchanged.
//! The text is made once, at the fallback, and recorded (`status.handoff`); the first prompt sent to the new
//! conversation claims it, and carries it on every send until it is known delivered (or failed): the executor looks
//! for what was sent, handoff and all ([`crate::api::carried`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::resume::{Fresh, ResumeReason, candidate};
use super::{Decision, INITIAL_PROMPT, PromptKey};
use crate::api::{HANDOFF_DEFAULT_CHARACTERS, HandoffStatus, PromptPhase};
use crate::harness::Profile;

/// How much of the reason a resume failed goes into a handoff (it may quote a dying screen).
const REASON_LIMIT: usize = 300;

impl Decision<'_, '_> {
    /// At a fresh spawn: records the handoff the new conversation is owed when the spawn is fresh because the
    /// recorded conversation could not be resumed, and there is something to hand over (a prompt it had taken, the
    /// agent's checkout). An earlier handoff not yet delivered is made again, for the conversation it named and the
    /// one that replaced it, which may have taken prompts behind the one that was to carry it.
    pub(super) fn hand_over(&mut self, profile: &Profile, fresh: &Fresh) {
        let input = self.input;
        let spec = input.object.spec;
        let enabled = profile.handoff && spec.handoff.as_ref().and_then(|h| h.enabled).unwrap_or(true);
        let lost = !matches!(fresh.reason, ResumeReason::ResumeDisabled | ResumeReason::NoRecordedSession);
        if !enabled || !lost {
            return;
        }
        let Some(candidate) = candidate(spec, &self.status).cloned() else { return };
        let earlier = self.status.handoff.as_ref().filter(|h| !h.delivered).map(|h| h.from.clone());
        let from = cut(earlier.as_deref().unwrap_or(&candidate), 128);
        let lost = |c: Option<&str>| c.is_some_and(|c| c == candidate || earlier.as_deref() == Some(c));
        let budget = spec.handoff.as_ref().and_then(|h| h.max_characters).unwrap_or(HANDOFF_DEFAULT_CHARACTERS);
        let mut taken: Vec<(k8s_openapi::jiff::Timestamp, &str)> = input
            .object
            .finished
            .iter()
            .filter(|e| lost(e.conversation.as_deref()))
            .map(|e| (e.at, e.prompt.as_str()))
            .collect();
        let initial = input.object.status.initial_prompt.as_ref();
        let initial =
            initial.filter(|p| p.phase == Some(PromptPhase::Delivered) && lost(p.harness_session_id.as_deref()));
        if let (Some(p), Some(text)) = (initial, spec.initial_prompt.as_deref()) {
            // First among those of its second (status times are whole seconds): it is the session's first prompt.
            taken.insert(0, (p.delivered_at.as_ref().map(|t| t.0).unwrap_or_default(), text));
        }
        taken.sort_by_key(|(at, _)| *at);
        let prompts: Vec<&str> = taken.into_iter().map(|(_, text)| text).filter(|t| !t.trim().is_empty()).collect();
        if prompts.is_empty() && input.evidence.checkout.is_none() {
            self.status.handoff = None;
            return; // nothing to hand over: the fresh conversation gets the prompt alone
        }
        let text = handoff_text(
            &from,
            fresh,
            &prompts,
            input.evidence.checkout.as_ref().map(|(b, c)| (b.as_str(), c.as_str())),
            budget as usize,
        );
        let time = Time(input.context.now);
        self.status.handoff =
            Some(HandoffStatus { from, time, prompt: None, prompt_uid: None, delivered: false, text });
    }

    /// Before anything is sent: a handoff whose prompt was delivered is done; one whose prompt failed or went away
    /// undelivered waits for the next prompt.
    pub(super) fn settle_handoff(&mut self) {
        let input = self.input;
        let Some(h) = self.status.handoff.as_mut().filter(|h| !h.delivered) else { return };
        let Some(uid) = h.prompt_uid.clone() else { return };
        let delivered = if uid == INITIAL_PROMPT {
            match input.object.status.initial_prompt.as_ref().and_then(|p| p.phase) {
                Some(PromptPhase::Delivered) => Some(true),
                Some(PromptPhase::Failed) => Some(false),
                _ => None,
            }
        } else if input.object.events.iter().any(|e| e.tag == uid) {
            None
        } else {
            // Finished (or gone: deleted, or expired after it finished) under that UID.
            Some(input.object.finished.iter().any(|e| e.tag == uid && e.delivered))
        };
        match delivered {
            None => {} // still on its way
            Some(true) => h.delivered = true,
            Some(false) => (h.prompt, h.prompt_uid) = (None, None),
        }
    }

    /// Sending `key` (not a harness command): it claims the handoff when one is owed and unclaimed; whether it did.
    pub(super) fn claim_handoff(&mut self, key: PromptKey<'_>) -> bool {
        let tag = self.prompt(key).map(|p| p.tag.to_string());
        let Some(h) = self.status.handoff.as_mut().filter(|h| !h.delivered && h.prompt.is_none()) else {
            return false;
        };
        (h.prompt, h.prompt_uid) = (Some(key.to_string()), tag);
        true
    }

    /// How long `key`'s text is as sent, with the handoff it would carry.
    pub(super) fn carried_len(&self, key: PromptKey<'_>, text: &str) -> usize {
        let mine = |h: &&HandoffStatus| !h.delivered && h.prompt.as_deref().is_none_or(|p| p == key.as_str());
        self.status.handoff.as_ref().filter(mine).map_or(0, |h| h.text.len() + 2) + text.len()
    }
}

/// The text handed to the new conversation, within `budget` characters (the prompts cut first, oldest first).
pub fn handoff_text(
    from: &str,
    fresh: &Fresh,
    prompts: &[&str],
    checkout: Option<(&str, &str)>,
    budget: usize,
) -> String {
    let reason: String = fresh.message.split_whitespace().collect::<Vec<_>>().join(" ");
    let reason = cut(&reason, REASON_LIMIT);
    let mut head = format!(
        "[worksession] This work item was in conversation {from}, which could not be resumed ({}: {reason}); this \
         is a new conversation.",
        fresh.reason
    );
    let tail = match checkout {
        Some((branch, commit)) => {
            format!("Its work is on branch {branch}, last commit {commit}.\n\nThe new prompt follows.")
        }
        None => "The new prompt follows.".to_string(),
    };
    if prompts.is_empty() {
        head.push_str(" It had taken no prompt the agent knows of.");
    }
    // The newest prompts first into the budget, each charged what it adds; each at most half of it, so one long
    // prompt does not hide the rest. A stub of an older prompt says less than leaving it out and saying so.
    let mut room = budget.saturating_sub(head.len() + tail.len() + 120);
    let mut kept: Vec<String> = Vec::new();
    for prompt in prompts.iter().rev() {
        let (prompt, limit) = (prompt.trim(), (budget / 2).min(room));
        let marker = format!("\n\n[{}] ", prompts.len());
        if limit < prompt.len().min(200) + marker.len() {
            break;
        }
        let piece = cut(prompt, limit - marker.len());
        room = room.saturating_sub(piece.len() + marker.len());
        kept.push(piece);
    }
    kept.reverse();
    let mut text = head;
    let left_out = prompts.len() - kept.len();
    if !prompts.is_empty() {
        text.push_str(&format!(" It had taken {} prompts", prompts.len()));
        match (kept.len(), left_out) {
            (0, _) => text.push_str(", none of which fit here."),
            (_, 0) => text.push_str(", oldest first:"),
            (kept, _) => text.push_str(&format!("; the last {kept} follow, oldest first:")),
        }
        for (i, prompt) in kept.iter().enumerate() {
            text.push_str(&format!("\n\n[{}] {prompt}", left_out + i + 1));
        }
    }
    text.push_str("\n\n");
    text.push_str(&tail);
    // The bound the status's schema holds it to, whatever the parts came to.
    cut(&text, budget.max(200))
}

/// `text` cut to at most `limit` bytes at a character boundary, with an ellipsis when cut.
fn cut(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    if limit < 4 {
        return String::new();
    }
    let mut end = limit - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost(reason: ResumeReason, message: &str) -> Fresh {
        Fresh { reason, message: message.into(), reported: true }
    }

    #[test]
    fn a_handoff_names_the_lost_conversation_why_its_prompts_and_the_branch() {
        let fresh = lost(ResumeReason::ConversationNotFound, "the claude harness has no conversation c-1 in its store");
        let text = handoff_text("c-1", &fresh, &["fix the bug", "also the test"], Some(("worksession/x", "abc")), 4000);
        assert!(text.starts_with("[worksession] This work item was in conversation c-1, which could not be resumed"));
        assert!(text.contains("(ConversationNotFound: the claude harness has no conversation c-1 in its store)"));
        let (first, second) = (text.find("[1] fix the bug").unwrap(), text.find("[2] also the test").unwrap());
        assert!(first < second, "oldest first: {text}");
        assert!(text.ends_with("Its work is on branch worksession/x, last commit abc.\n\nThe new prompt follows."));
    }

    #[test]
    fn a_short_budget_keeps_the_newest_prompts_and_says_how_many_were_left_out() {
        let fresh = lost(ResumeReason::PaneDied, "died");
        let old = "o".repeat(900);
        let prompts = [old.as_str(), old.as_str(), "the newest"];
        let text = handoff_text("c-1", &fresh, &prompts, None, 700);
        assert!(text.len() <= 700, "{}", text.len());
        assert!(text.contains("It had taken 3 prompts; the last 2 follow, oldest first:"), "{text}");
        assert!(text.contains("[2] ooo") && text.contains("[3] the newest") && !text.contains("[1]"), "{text}");
        let none_fit = handoff_text("c-1", &fresh, &prompts, None, 200);
        assert!(none_fit.len() <= 200 && none_fit.contains("It had taken 3 prompts"), "said, if cut: {none_fit}");
    }

    #[test]
    fn a_dying_screen_in_the_reason_is_one_bounded_line() {
        let screen = format!("No conversation found\n{}", "x ".repeat(1000));
        let checkout = Some(("worksession/x", "abc"));
        let text = handoff_text("c-1", &lost(ResumeReason::PaneDiedAfterProbe, &screen), &[], checkout, 4000);
        let first_line = text.lines().next().unwrap();
        assert!(first_line.contains("No conversation found x x") && first_line.len() < REASON_LIMIT + 200);
        assert!(text.contains("It had taken no prompt the agent knows of."));
    }
}
