//! The decision's push credentials (`workspaces.push`): a harness whose checkout comes from a repository on a
//! configured host holds a short-lived token for that repository alone, handed to it in files under its `HOME`
//! that its git (a credential helper named in its environment) and `gh` (`GH_CONFIG_DIR`) read at each use. The
//! token is asked for before the spawn that needs it and again [`RENEW_BEFORE`] its expiry while the harness runs;
//! a stopped harness gets none. A failed grant is retried after [`GRANT_RETRY`] and never holds up a spawn: the
//! harness works, only its pushes fail until a grant succeeds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::{Confinement, Decision, Liveness, Op};

/// A push token is renewed when it has less than this left (GitHub's installation tokens last an hour).
pub const RENEW_BEFORE: Duration = Duration::from_secs(15 * 60);

/// How soon a failed grant is tried again.
pub const GRANT_RETRY: Duration = Duration::from_secs(60);

/// How soon a grant's result is read back by a decision, which schedules the renewal from its expiry.
pub const GRANT_READ_BACK: Duration = Duration::from_secs(1);

/// What the executor holds of a session's push token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PushGrant {
    /// None handed out (or the agent started since).
    #[default]
    Missing,
    /// One handed out, expiring then.
    Granted(Timestamp),
    /// The last grant failed then.
    Failed(Timestamp),
}

/// The repository a push token is for: the checkout's URL on a configured host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushTarget {
    /// `https` (or `http`, where `workspaces.protocols` allows it).
    pub scheme: String,
    /// The host (`host` or `host:port`).
    pub host: String,
    /// `owner/name`.
    pub repository: String,
}

/// The repository `url` names (`scheme://host/owner/name[.git]`) when it is on one of `hosts` over `https`, or
/// `http` where `protocols` allows it; `None` for anything else (an ssh remote, a path, user info in the URL, a
/// name git would read otherwise).
pub fn push_target(url: &str, hosts: &[String], protocols: &[String]) -> Option<PushTarget> {
    let (scheme, rest) = url.split_once("://")?;
    let allowed = scheme == "https" || (scheme == "http" && protocols.iter().any(|p| p == "http"));
    let (host, path) = rest.split_once('/')?;
    // A host listed bare stands for any port of it, as the checkout's own credentials take it.
    let bare = host.rsplit_once(':').filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit())).map(|(h, _)| h);
    if !allowed || !hosts.iter().any(|h| h == host || Some(h.as_str()) == bare) {
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
        host: host.to_string(),
        repository: format!("{owner}/{name}"),
    })
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
    /// The session's push target and credentials folder, when `workspaces.push` applies to it.
    pub(super) fn push(&self) -> Option<(PushTarget, PathBuf)> {
        let input = self.input;
        let workspaces = &input.context.config.workspaces;
        workspaces.push.as_ref()?;
        let url = &input.object.spec.workspace.as_ref()?.url;
        let target = push_target(url, &workspaces.hosts, &workspaces.protocols)?;
        let home = match input.evidence.room {
            Confinement::Room(room) => room.home.as_path(),
            Confinement::Off => input.context.config.harness_home.as_deref()?,
            Confinement::Unavailable(_) => return None,
        };
        Some((target, push_dir(home, input.object.owner_name)))
    }

    /// The grant `ops` need, in front of their spawn: for a harness being spawned or running (and not being
    /// stopped) whose token is missing, near its expiry, or whose last grant failed [`GRANT_RETRY`] ago. The
    /// decision is requeued for the next renewal or retry.
    pub(super) fn grant_push(&mut self, ops: &mut Vec<Op>) {
        let Some((target, dir)) = self.push() else { return };
        let spawn = ops.iter().position(|op| matches!(op, Op::Spawn(_)));
        let stopping = ops.iter().any(|op| matches!(op, Op::Stop { .. } | Op::ReleaseRoom | Op::Move { .. }));
        let running = self.input.observed.liveness == Liveness::Alive && !stopping;
        if spawn.is_none() && !running {
            return;
        }
        let now = self.input.context.now;
        let wait = match self.input.evidence.push {
            PushGrant::Missing => None,
            PushGrant::Granted(expires) => until(now, expires, -signed(RENEW_BEFORE)),
            PushGrant::Failed(at) => until(now, at, signed(GRANT_RETRY)),
        };
        if let Some(wait) = wait {
            self.requeue(wait);
            return;
        }
        let op = Op::GrantPush { repository: target.repository, host: target.host, dir };
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
