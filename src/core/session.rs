//! The tmux session, as the core knows it: which one a WorkSession's harness runs in ([`tmux_session`], the one
//! answer to that question for the agent, the poll and `peek`), what one observation saw of it ([`Liveness`],
//! [`SessionView`]) and the harness a plan asks tmux to start ([`Spawn`]). The tmux edge parses into these and runs
//! them; the core never calls tmux.

use std::path::PathBuf;

use crate::api::{WorkSession, is_tag};
use crate::config::Config;

/// Whether a tmux session's harness is running, as one observation saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// The session exists and a pane is not dead (an unreadable `pane_dead` counts as live).
    Alive,
    /// The session exists and every pane is dead (kept by `remain-on-exit`).
    Dead,
    /// There is no such session (or no tmux server).
    Absent,
}

/// What one observation saw of one tmux session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionView {
    /// A pane is not dead.
    pub alive: bool,
    /// The tag of the spawn that made it ([`crate::node::tmux::SPAWN_TAG`]).
    pub spawn: String,
    /// The key of the last prompt pasted into it ([`crate::node::tmux::PASTE_TAG`]).
    pub pasted: String,
    /// The UID of the object that owns it ([`crate::node::tmux::OWNER_TAG`]; empty: spawned before owners were tagged).
    pub owner: String,
    /// That object's `namespace/name`.
    pub owner_name: String,
    /// When its window last printed anything (or was made), in seconds since the epoch; 0 when tmux did not say.
    pub activity: i64,
}

impl SessionView {
    /// Whether the session may be adopted, pasted into or stopped by the object with UID `owner`: only one its own
    /// spawn tagged (a session nobody tagged may be anyone's, a harness's own included).
    pub fn belongs_to(&self, owner: &str) -> bool {
        !owner.is_empty() && self.owner == owner
    }
}

/// A harness to start in a new tmux session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spawn {
    /// The tmux session name.
    pub session: String,
    /// Working directory of the harness.
    pub workdir: PathBuf,
    /// The harness executable.
    pub binary: String,
    /// Its arguments, each one word.
    pub argv: Vec<String>,
    /// Environment variables it starts with (the profile's `env`), each given to tmux as one `-e NAME=VALUE` word.
    pub env: Vec<(String, String)>,
    /// Tagged on the session as [`crate::node::tmux::SPAWN_TAG`] in the same tmux call (letters, digits and `-` only).
    pub tag: String,
    /// The owner's UID, tagged as [`crate::node::tmux::OWNER_TAG`] in the same call (letters, digits and `-` only).
    pub owner: String,
    /// The owner's `namespace/name`, tagged as [`crate::node::tmux::OWNER_NAME_TAG`].
    pub owner_name: String,
    /// The room the harness runs in (`worksession room`), if rooms are on.
    pub confine: Option<Confine>,
    /// Whether a session of this name may be there to clear first (the owner's only): the observation showed one, or
    /// did not look at this name. `false` saves a tmux call; a session found there all the same is cleared then.
    pub clear: bool,
}

/// How a spawn enters its room: the tmux server runs `<helper> room --uid <uid> --home <home> --workdir <workdir> --
/// <binary> <argv>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confine {
    /// The `worksession` binary where the tmux server runs.
    pub helper: PathBuf,
    /// The room's uid.
    pub uid: u32,
    /// The room's `HOME`.
    pub home: PathBuf,
    /// The egress proxy's port on loopback, the only one the harness may connect to over TCP (`rooms.egress`).
    pub egress_port: Option<u16>,
    /// Variables the room's harness is given beside its profile's: each key gateway's URL and placeholder key.
    pub env: Vec<(String, String)>,
    /// The variables it takes from a Secret of its session's namespace (`rooms.namespaceKeys`), whose values the
    /// executor reads at the spawn: no value is ever part of a plan, which is logged.
    pub keys: Option<Box<KeysFrom>>,
}

/// Variables a spawn takes from a Secret of its session's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeysFrom {
    /// The Secret's name.
    pub secret: String,
    /// The variables, none the profile or a key gateway sets.
    pub variables: Vec<String>,
}

/// What a spawn is given of its namespace's Secret (`secret`, its entries by name): each of `keys`' variables it holds,
/// its value without a trailing newline (as a file leaves it); a value with another control character is not given
/// (it could end the `NAME=VALUE` word a terminal or a shell reads). The second list names the variables left out so.
pub fn given(
    secret: std::collections::BTreeMap<String, String>,
    keys: &KeysFrom,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut left_out = Vec::new();
    let mut given = Vec::new();
    for (name, value) in secret.into_iter().filter(|(name, _)| keys.variables.contains(name)) {
        let value = value.trim_end_matches(['\n', '\r']).to_string();
        match value.chars().any(char::is_control) {
            true => left_out.push(name),
            false => given.push((name, value)),
        }
    }
    (given, left_out)
}

/// The tmux sessions of one WorkSession.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TmuxSession {
    /// The one its harness runs in now (or would): the recorded one while it still exists and is of a shape the agent
    /// makes for this object, else [`TmuxSession::configured`].
    pub current: String,
    /// The one a spawn uses: `<prefix><namespace>_<name>` under the current config.
    pub configured: String,
}

/// Which tmux session `ws`'s harness runs in, where `exists` says whether a session of that name was observed.
///
/// The configured name is [`Config::tmux_session`]. A recorded session under another prefix, or
/// under the older `<prefix><workItem>` (the work item is immutable), is kept while it exists: a changed
/// `sessionPrefix` or an upgrade never orphans a running harness (another's or an untagged one under that name is the
/// core's to report, never to replace with a second harness of the conversation).
pub fn tmux_session(ws: &WorkSession, config: &Config, exists: impl Fn(&str) -> bool) -> TmuxSession {
    let configured = config.tmux_session(&crate::api::identity(ws));
    let recorded = ws.status.as_ref().and_then(|s| s.tmux_session.as_deref());
    // Only a name of a shape the agent makes for this object is used (it goes to tmux as a target).
    let suffix = configured.strip_prefix(config.tmux.session_prefix.as_str()).unwrap_or(&configured);
    let ours = |s: &str| s.ends_with(suffix) || s.ends_with(&ws.spec.work_item);
    let current = match recorded.filter(|s| *s != configured && ours(s) && is_tag(s)) {
        Some(old) if exists(old) => old.to_string(),
        _ => configured.clone(),
    };
    TmuxSession { current, configured }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{WorkSessionSpec, WorkSessionStatus};

    /// A WorkSession's tmux session is `<prefix><namespace>_<name>`; one recorded under the older
    /// `<prefix><workItem>` is used while it lives, never a session of another shape.
    #[test]
    fn the_tmux_session_is_the_recorded_one_while_it_exists_else_the_configured_one() {
        let config = Config::default();
        let mut ws = WorkSession::new("repo-12", WorkSessionSpec { work_item: "item-12".into(), ..Default::default() });
        ws.metadata.namespace = Some("agents".into());
        let with_recorded = |name: &str| {
            let mut ws = ws.clone();
            ws.status = Some(WorkSessionStatus { tmux_session: Some(name.into()), ..Default::default() });
            ws
        };
        let current = |ws: &WorkSession, seen: &[&str]| tmux_session(ws, &config, |s| seen.contains(&s)).current;
        assert_eq!(tmux_session(&ws, &config, |_| false).configured, "loop-agents_repo-12");
        assert_eq!(current(&ws, &[]), "loop-agents_repo-12");
        let old = with_recorded("loop-item-12");
        assert_eq!(current(&old, &["loop-item-12"]), "loop-item-12", "kept while it exists");
        assert_eq!(current(&old, &[]), "loop-agents_repo-12", "gone: the configured name");
        let renamed = with_recorded("ws-agents_repo-12");
        assert_eq!(current(&renamed, &["ws-agents_repo-12"]), "ws-agents_repo-12", "a changed prefix");
        let elsewhere = with_recorded("loop-other-item");
        assert_eq!(current(&elsewhere, &["loop-other-item"]), "loop-agents_repo-12", "not our shape");
        let parsed = with_recorded("loop-x;item-12");
        assert_eq!(current(&parsed, &["loop-x;item-12"]), "loop-agents_repo-12", "not a plain word");
    }
}
