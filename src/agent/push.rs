//! Push credentials, an edge of the executor ([`Op::GrantPush`]): a GitHub App's installation token minted for one
//! session's repository with only [`PUSH_PERMISSIONS`], written where the session's harness reads it (see
//! [`crate::core::push_env`]), and what was handed out, told back to the next decision
//! ([`crate::core::PushGrant`]).
//!
//! The folder is in the harness's `HOME`, which the harness writes: every step is opened without following a link
//! (`O_NOFOLLOW` from the `HOME` down), files are made fresh beside their name and renamed over it, and each is
//! handed to the room's uid. A link the harness planted makes the grant fail; it never makes the agent write
//! elsewhere.
//!
//! [`Op::GrantPush`]: crate::core::Op::GrantPush
//! [`PUSH_PERMISSIONS`]: crate::config::workspaces::PUSH_PERMISSIONS

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};
use std::sync::{Arc, Mutex};

use k8s_openapi::jiff::Timestamp;
use rustix::fs::{AtFlags, CWD, Mode, OFlags};

use crate::config::workspaces::{PUSH_PERMISSIONS, PushConfig};
use crate::core::PushGrant;
use crate::github::{Auth, Github, app::App};

/// What was handed out, by session (`namespace/name`), and the API client of the config it was made from.
#[derive(Default)]
pub struct PushGrants {
    grants: Mutex<HashMap<String, PushGrant>>,
    client: tokio::sync::Mutex<Option<(PushConfig, Arc<Github>)>>,
}

impl std::fmt::Debug for PushGrants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushGrants").finish_non_exhaustive()
    }
}

impl PushGrants {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, PushGrant>> {
        self.grants.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What `identity`'s harness was last handed.
    pub fn of(&self, identity: &str) -> PushGrant {
        self.lock().get(identity).copied().unwrap_or_default()
    }

    /// Forgets `identity` (its session is going).
    pub fn forget(&self, identity: &str) {
        self.lock().remove(identity);
    }

    /// Mints a token for `repository` and writes it into `dir` under `home` (for `gh`, as `host`'s), owned by
    /// `owner` (a room's uid; `None`: the agent's own). Returns whether an earlier grant had failed too (so a
    /// failure is reported once, not at every retry).
    pub async fn grant(
        &self,
        config: &PushConfig,
        identity: &str,
        (repository, host): (&str, &str),
        (home, dir): (&Path, &Path),
        owner: Option<u32>,
    ) -> Result<Timestamp, (String, bool)> {
        let failures = match self.of(identity) {
            PushGrant::Failed { failures, .. } => failures,
            _ => 0,
        };
        let minted = async {
            // The folder first: one the harness made unwritable costs no token.
            let folder = open_folder(home, dir, owner).map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
            let github = self.client(config).await?;
            let permissions: serde_json::Map<String, serde_json::Value> =
                PUSH_PERMISSIONS.iter().map(|(k, v)| (k.to_string(), (*v).into())).collect();
            let (token, expires) =
                github.scoped_token(repository, &permissions.into()).await.map_err(|e| e.to_string())?;
            // Only GitHub's token characters go into the files a shell and a YAML parser read.
            if token.is_empty() || !token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err("GitHub answered a token of an unexpected shape".to_string());
            }
            write(&folder, host, &token, owner).map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
            Ok(expires)
        };
        let result = minted.await;
        let now = Timestamp::now();
        let grant = match &result {
            Ok(expires) => {
                PushGrant::Granted { at: now, expires: *expires, key: crate::core::grant_key(repository, dir) }
            }
            Err(_) => PushGrant::Failed { at: now, failures: failures + 1 },
        };
        self.lock().insert(identity.to_string(), grant);
        result.map_err(|why| (format!("no push token for {repository}: {why}"), failures > 0))
    }

    /// The API client of `config`, made again when the config changed.
    async fn client(&self, config: &PushConfig) -> Result<Arc<Github>, String> {
        let mut client = self.client.lock().await;
        if let Some((_, github)) = client.as_ref().filter(|(made_from, _)| made_from == config) {
            return Ok(github.clone());
        }
        let app = App::new(config.app_id, &config.private_key, config.installation_id)
            .map_err(|why| format!("workspaces.push.app.privateKeyFile: {why}"))?;
        let github = Arc::new(Github::new(&config.api_url, Auth::App(Box::new(app))).map_err(|e| e.to_string())?);
        *client = Some((config.clone(), github.clone()));
        Ok(github)
    }
}

/// The folder `dir` and its `gh`, every folder from `home` down opened without following a link and made (0700)
/// where missing, handed to `owner`.
fn open_folder(home: &Path, dir: &Path, owner: Option<u32>) -> io::Result<(OwnedFd, OwnedFd)> {
    let below = dir.strip_prefix(home).map_err(|_| io::Error::other("the folder is not in the harness's HOME"))?;
    let mut at = open_dir(&rustix::fs::openat(CWD, home, dir_flags(), Mode::empty())?, ".")?;
    for part in below.components() {
        let Component::Normal(name) = part else { return Err(io::Error::other("not a plain path")) };
        at = enter(&at, name, owner)?;
    }
    let gh = enter(&at, std::ffi::OsStr::new("gh"), owner)?;
    Ok((at, gh))
}

/// Writes `token` into the folder's `token` and `gh/hosts.yml` (for `host`), handed to `owner`.
fn write((at, gh): &(OwnedFd, OwnedFd), host: &str, token: &str, owner: Option<u32>) -> io::Result<()> {
    put(at, "token", format!("{token}\n").as_bytes(), owner)?;
    let hosts = format!("{host}:\n    oauth_token: {token}\n    user: x-access-token\n    git_protocol: https\n");
    put(gh, "hosts.yml", hosts.as_bytes(), owner)
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn open_dir(at: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(at, name, dir_flags(), Mode::empty())?)
}

/// The folder `name` in `at` (made if missing), opened without following a link, owned by `owner`.
fn enter(at: &OwnedFd, name: &std::ffi::OsStr, owner: Option<u32>) -> io::Result<OwnedFd> {
    match rustix::fs::mkdirat(at, name, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let dir = rustix::fs::openat(at, name, dir_flags(), Mode::empty())?;
    own(&dir, owner)?;
    Ok(dir)
}

/// Writes `bytes` as `name` in `at`: a fresh file (0600, `owner`'s) renamed over the old one.
fn put(at: &OwnedFd, name: &str, bytes: &[u8], owner: Option<u32>) -> io::Result<()> {
    let fresh = format!(".{name}.worksession-new");
    let _ = rustix::fs::unlinkat(at, fresh.as_str(), AtFlags::empty());
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = rustix::fs::openat(at, fresh.as_str(), flags, Mode::from_raw_mode(0o600))?;
    own(&file, owner)?;
    let mut file = std::fs::File::from(file);
    io::Write::write_all(&mut file, bytes)?;
    rustix::fs::renameat(at, fresh.as_str(), at, name)?;
    Ok(())
}

fn own(fd: &OwnedFd, owner: Option<u32>) -> io::Result<()> {
    // A room's gid is its uid.
    owner.map_or(Ok(()), |uid| std::os::unix::fs::fchown(fd, Some(uid), Some(uid)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_written_fresh_and_no_planted_link_is_followed() {
        let home = tempfile::tempdir().unwrap();
        let dir = crate::core::push_dir(home.path(), "team/s1");
        let write = |dir: &Path, token: &str| {
            open_folder(home.path(), dir, None).and_then(|folder| super::write(&folder, "github.com", token, None))
        };
        write(&dir, "ghs_1").unwrap();
        write(&dir, "ghs_2").unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("token")).unwrap(), "ghs_2\n");
        let hosts = std::fs::read_to_string(dir.join("gh/hosts.yml")).unwrap();
        assert!(hosts.starts_with("github.com:\n    oauth_token: ghs_2\n"), "{hosts}");

        // A link in place of the folder, the token or gh's folder: nothing is written through it.
        let elsewhere = tempfile::tempdir().unwrap();
        let other = crate::core::push_dir(home.path(), "team/s2");
        std::fs::create_dir_all(other.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &other).unwrap();
        assert!(write(&other, "ghs_3").is_err());
        std::fs::remove_file(dir.join("token")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join("stolen"), dir.join("token")).unwrap();
        write(&dir, "ghs_4").unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("token")).unwrap(), "ghs_4\n", "the link replaced, not followed");
        std::fs::remove_dir_all(dir.join("gh")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.join("gh")).unwrap();
        assert!(open_folder(home.path(), &dir, None).is_err(), "gh is a link: refused before any token is minted");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0, "nothing written elsewhere");
    }
}
