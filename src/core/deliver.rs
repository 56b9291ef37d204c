//! Delivery into a live pane: an adopted or running harness gets every pending event pasted, in order.

use super::{Decision, HEALTHY_AFTER, Notice, NoticeKind, Op, secs};
use crate::api::{EventPhase, Phase, Via};
use crate::harness::clean_prompt;

impl Decision<'_, '_> {
    /// Alive and not verifying: adopt it, and deliver pending events by pasting them.
    pub(super) fn deliver_to_live_pane(&mut self) {
        let now = self.input.now;
        self.status.phase = Some(Phase::Running);
        self.ready(true, "Running", "the harness is running");
        let healthy_since = self.status.last_respawn.as_ref().map(|r| r.time.0);
        if self.status.failure_count > 0 && healthy_since.is_some_and(|t| t + secs(HEALTHY_AFTER) <= now) {
            self.status.failure_count = 0;
            self.status.next_retry_time = None;
        }
        for e in self.input.events {
            let text = clean_prompt(&e.prompt).into_owned();
            self.ops.push(Op::Paste { session: self.session.clone(), event: e.name.clone(), text });
            self.event(&e.name, EventPhase::Delivered, Some(Via::Pasted), true, None);
            let message = format!("pasted event {} into the live pane", e.name);
            self.notice(Notice::new(NoticeKind::Delivered, message));
        }
    }
}
