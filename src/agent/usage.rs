//! Reads what the harness's model calls spent from its own record ([`crate::harness::usage`]), for the core's
//! [`UsageRead`]: only the bytes after where `status.usage` says the count stands, at most [`READ_LIMIT`] at a time,
//! and only whole lines. Off the runtime's threads.

use std::path::{Path, PathBuf};

use crate::api::WorkSessionStatus;
use crate::core::{UsageRead, count_stands};
use crate::harness::Profile;
use crate::harness::usage::Tally;
use crate::node::transcript;

/// The most one read takes of a record: the rest waits for the next reconcile, which comes soon.
pub const READ_LIMIT: u64 = 4 << 20;

/// What `conversation`'s record holds beyond the count in `status`, if its profile states usage and there is more.
pub async fn read(
    profile: &Profile,
    status: &WorkSessionStatus,
    (home, workdir): (&Path, &str),
    conversation: &str,
) -> Option<UsageRead> {
    let record = profile.usage.clone()?;
    if !crate::api::is_valid_session_id(conversation) {
        return None;
    }
    let template = record.path.or_else(|| profile.conversation_path.clone())?;
    let (offset, last_reply) = count_stands(status, conversation);
    let last_reply = last_reply.cloned();
    let (home, workdir, conversation) = (home.to_path_buf(), workdir.to_string(), conversation.to_string());
    let read = move || {
        let path = locate(&template, &home, &workdir, &conversation)?;
        let len = transcript::length(&home, &path)?;
        let from = if len < offset { 0 } else { offset };
        if len == from {
            return None;
        }
        let (bytes, len) = transcript::read_from(&home, &path, from, READ_LIMIT)?;
        let full = bytes.len() as u64 == READ_LIMIT;
        // Whole lines only: the last one may be being written. A line longer than a whole read states no usage (a
        // tool's output): it is passed over.
        let whole = match bytes.iter().rposition(|b| *b == b'\n') {
            Some(at) => at + 1,
            None if full => bytes.len(),
            None => return None,
        };
        let mut tally = Tally::after(last_reply.filter(|_| from == offset));
        for (_, line) in transcript::lines(&bytes[..whole], from, false) {
            tally.line(record.format, line);
        }
        let to = from + whole as u64;
        Some(UsageRead { conversation, stood: offset, from, to, more: full && to < len, tally })
    };
    tokio::task::spawn_blocking(read).await.ok().flatten()
}

/// The record's file: the template's, or where a template with `*` finds one named by the conversation.
fn locate(template: &str, home: &Path, workdir: &str, conversation: &str) -> Option<PathBuf> {
    if template.contains('*') {
        super::discovery::located(template, home, workdir, conversation)
    } else {
        Some(transcript::locate(template, home, workdir, conversation))
    }
}
