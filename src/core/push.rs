//! The decision's push credentials (`workspaces.push`): a harness whose checkout is a repository of the App's GitHub
//! host (`workspaces.push.host`), one its namespace may check out, holds a short-lived token for that repository alone, handed to it in files under its `HOME`
//! that its git (a credential helper named in its environment) and `gh` (`GH_CONFIG_DIR`) read at each use. The
//! token is asked for before the spawn that needs it and again [`RENEW_BEFORE`] its expiry while the harness runs;
//! a stopped harness gets none. A failed grant is retried after [`GRANT_RETRY`], doubling to an hour, and never stops
//! a spawn (the harness works, only its pushes fail until a grant succeeds); a GitHub that does not answer delays the
//! spawn it precedes by its call timeout. No two grants are closer than
//! [`GRANT_SPACING`], whatever expiry GitHub answers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::{Confinement, Decision, Liveness, Op};

/// A push token is renewed when it has less than this left (GitHub's installation tokens last an hour).
pub const RENEW_BEFORE: Duration = Duration::from_secs(15 * 60);

/// How soon a failed grant is tried again.
pub const GRANT_RETRY: Duration = Duration::from_secs(60);

/// The least time between two grants of one session, whatever expiry GitHub answers.
pub const GRANT_SPACING: Duration = Duration::from_secs(10);

/// How soon a grant's result is read back by a decision, which schedules the renewal from its expiry.
pub const GRANT_READ_BACK: Duration = Duration::from_secs(1);

/// The longest wait between failed grants.
pub const GRANT_RETRY_MAX: Duration = Duration::from_secs(60 * 60);

/// What the executor holds of a session's push token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PushGrant {
    /// None handed out (or the agent started since).
    #[default]
    Missing,
    /// One handed out `at`, expiring then, for the repository and folder [`grant_key`] names.
    Granted {
        /// When it was handed out.
        at: Timestamp,
        /// When GitHub said it expires.
        expires: Timestamp,
        /// What it was for ([`grant_key`]): another repository or folder (a changed spec, a new room) is granted
        /// again at once.
        key: u64,
    },
    /// The last `failures` grants failed, the last `at`.
    Failed {
        /// When the last failed.
        at: Timestamp,
        /// How many failed in a row.
        failures: u32,
    },
}

/// The repository a push token is for: the checkout's URL on a configured host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushTarget {
    /// `https` (or `http` to a loopback address, a test's server).
    pub scheme: String,
    /// The host (`host` or `host:port`).
    pub host: String,
    /// `owner/name`.
    pub repository: String,
}

/// The repository `url` names (`scheme://host/owner/name[.git]`) when it is on `host` (the App's GitHub) over
/// `https`, or plain `http` to a loopback address (a test's server); `None` for anything else (an ssh remote, a
/// path, another host, user info in the URL, a name git would read otherwise).
pub fn push_target(url: &str, host: &str) -> Option<PushTarget> {
    let (scheme, rest) = url.split_once("://")?;
    let (url_host, path) = rest.split_once('/')?;
    let loopback = ["127.0.0.1:", "localhost:", "[::1]:"].iter().any(|l| url_host.starts_with(l));
    if url_host != host || !(scheme == "https" || (scheme == "http" && loopback)) {
        return None;
    }
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let (owner, name) = path.split_once('/')?;
    let part = |p: &str| {
        !p.is_empty() && !p.starts_with('.') && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    (part(owner) && part(name)).then(|| PushTarget {
        scheme: scheme.to_string(),
        host: url_host.to_string(),
        repository: format!("{owner}/{name}"),
    })
}

/// What a grant is for: the repository and the folder it was written to, as one number kept beside the grant.
pub fn grant_key(repository: &str, dir: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (repository, dir).hash(&mut hasher);
    hasher.finish()
}

/// Where a session's push credentials live in its harness's `HOME`: `token`, and `gh/hosts.yml`.
pub fn push_dir(home: &Path, identity: &str) -> PathBuf {
    home.join(".worksession/push").join(identity.replacen('/', "_", 1))
}

/// The environment that points the harness's git and `gh` at the credentials in `dir`: a credential helper for
/// the target's scheme and host alone, reading the token file when git asks (never the token itself, which is
/// renewed in the file while the harness runs).
pub fn push_env(target: &PushTarget, dir: &Path) -> Vec<(String, String)> {
    let helper = r#"!f() { test "$1" = get || return 0; printf 'username=x-access-token\npassword=%s\n' "$(cat "$WORKSESSION_PUSH_TOKEN_FILE")"; }; f"#;
    vec![
        ("WORKSESSION_PUSH_TOKEN_FILE".into(), dir.join("token").display().to_string()),
        ("GIT_CONFIG_COUNT".into(), "1".into()),
        ("GIT_CONFIG_KEY_0".into(), format!("credential.{}://{}.helper", target.scheme, target.host)),
        ("GIT_CONFIG_VALUE_0".into(), helper.into()),
        ("GH_CONFIG_DIR".into(), dir.join("gh").display().to_string()),
    ]
}

impl Decision<'_, '_> {
    /// The session's push target, its harness's `HOME` and room uid, when `workspaces.push` applies to it: a
    /// checkout of the App's host that the session's namespace may check out (`workspaces.repositories`, read again
    /// at each decision: a spec changed to another repository gets nothing the list does not allow).
    pub(super) fn push(&self) -> Option<(PushTarget, PathBuf, Option<u32>)> {
        let input = self.input;
        let workspaces = &input.context.config.workspaces;
        let push = workspaces.push.as_ref()?;
        let url = &input.object.spec.workspace.as_ref()?.url;
        let namespace = input.object.owner_name.split_once('/').map_or("", |(ns, _)| ns);
        if !workspaces.allows(namespace, url) {
            return None;
        }
        let target = push_target(url, &push.host)?;
        let (home, owner) = match &input.evidence.room {
            Confinement::Room(room) => (room.home.clone(), Some(room.uid)),
            Confinement::Off => (input.context.config.harness_home.clone()?, None),
            Confinement::Due | Confinement::Unavailable(_) => return None,
        };
        Some((target, home, owner))
    }

    /// The grant `ops` need, in front of their spawn: for a harness being spawned or running (and not being
    /// stopped) whose token is missing, near its expiry, or whose last grant failed [`GRANT_RETRY`] ago. The
    /// decision is requeued for the next renewal or retry.
    pub(super) fn grant_push(&mut self, ops: &mut Vec<Op>) {
        let Some((target, home, owner)) = self.push() else { return };
        let spawn = ops.iter().position(|op| matches!(op, Op::Spawn(_)));
        let stopping =
            ops.iter().any(|op| matches!(op, Op::Stop { .. } | Op::ReleaseRoom | Op::LeaveRoom | Op::Move { .. }));
        let running = self.input.observed.liveness == Liveness::Alive && !stopping;
        if spawn.is_none() && !running {
            return;
        }
        let now = self.input.context.now;
        let dir = push_dir(&home, self.input.object.owner_name);
        let key = grant_key(&target.repository, &dir);
        let wait = match self.input.evidence.push {
            PushGrant::Granted { key: was, .. } if was != key => None,
            PushGrant::Missing => None,
            // Never closer than the spacing, whatever expiry GitHub answered.
            PushGrant::Granted { at, expires, .. } => {
                until(now, expires, -signed(RENEW_BEFORE)).max(until(now, at, signed(GRANT_SPACING)))
            }
            PushGrant::Failed { at, failures } => {
                let backoff = GRANT_RETRY.saturating_mul(1 << failures.clamp(1, 7).saturating_sub(1));
                until(now, at, signed(backoff.min(GRANT_RETRY_MAX)))
            }
        };
        if let Some(wait) = wait {
            self.requeue(wait);
            return;
        }
        let op = Op::GrantPush { repository: target.repository, host: target.host, home, dir, owner };
        ops.insert(spawn.unwrap_or(ops.len()), op);
        self.requeue(GRANT_READ_BACK);
    }
}

/// How long from `now` until `at` moved by `by`; `None` when that time has come.
fn until(now: Timestamp, at: Timestamp, by: SignedDuration) -> Option<Duration> {
    let due = at.checked_add(by).ok()?;
    let left = now.duration_until(due);
    (left > SignedDuration::ZERO).then(|| Duration::try_from(left).ok()).flatten()
}

fn signed(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::ZERO)
}
