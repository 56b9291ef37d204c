//! Workspaces, an edge of the executor like [`crate::node::tmux`]: real `git` preparing a work item's checkout from
//! `spec.workspace` (one bare clone per repository per node, the agent's alone, fetched into and reused; and a
//! repository of its own per work item, on its own branch, which its harness writes), and removing it when its
//! WorkSession goes, only when it holds nothing a removal would lose.
//!
//! Every argument is a separate word after `--` where git takes one, so a URL or ref is never a flag (the API also
//! refuses a leading `-`). Credentials are files: a token reaches git through a credential helper that reads the
//! file when git asks, and only for the configured hosts over an allowed protocol; an SSH key through
//! `GIT_SSH_COMMAND`'s `-i`; neither is in an argument, the environment, a URL or the clone's config, and every output
//! kept is stripped of URL user info. git runs on the agent's terms, whatever a repository's config says: no hooks,
//! no fsmonitor, no ssh command of its own, no system or global config, only the allowed protocols, and fetches from
//! the URL in the spec.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::process::Command;
use tokio::sync::Mutex;

use crate::api::WorkspaceSpec;

/// The branch of a work item's checkout.
pub fn branch_of(work_item: &str) -> String {
    format!("worksession/{work_item}")
}

/// The branch a checkout is on and its last commit, read from its own files (`.git/HEAD`, the branch's ref or
/// `packed-refs`), as the harness left them: never through a link, never more than a few KiB, and only a branch and
/// a commit of git's shapes (the harness writes these files: what it writes is only ever told back to it).
pub fn head_of(workdir: &Path) -> Option<(String, String)> {
    let read = |path: &str| {
        use std::io::Read;
        let mut text = String::new();
        crate::node::transcript::open(workdir, &workdir.join(path))?.take(64 << 10).read_to_string(&mut text).ok()?;
        Some(text)
    };
    let head = read(".git/HEAD")?;
    let branch = head.trim().strip_prefix("ref: refs/heads/")?.to_string();
    let ok_branch = branch.len() <= 255
        && !branch.contains("..")
        && branch.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.'));
    if !ok_branch {
        return None;
    }
    let name = format!("refs/heads/{branch}");
    let commit = read(&format!(".git/{name}")).map(|c| c.trim().to_string()).or_else(|| {
        let packed = read(".git/packed-refs")?;
        packed.lines().find_map(|l| l.strip_suffix(&name)?.strip_suffix(' ').map(String::from))
    })?;
    let ok_commit = matches!(commit.len(), 40 | 64) && commit.bytes().all(|b| b.is_ascii_hexdigit());
    ok_commit.then_some((branch, commit))
}

/// A checkout ready for the harness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// The branch checked out.
    pub branch: String,
    /// The commit checked out.
    pub commit: String,
    /// An existing checkout of the repository was taken as it is.
    pub adopted: bool,
}

/// What happened to a checkout when its WorkSession went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Removal {
    /// The checkout held nothing a removal would lose, and is gone.
    Removed,
    /// Kept, and why (uncommitted changes, commits on no remote branch, a harness's, or not a checkout the agent
    /// made).
    Kept(String),
}

/// One lock per clone, shared by every [`Git`] of an agent: two work items of one repository never clone or fetch
/// it at once.
pub type Locks = Arc<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>>;

/// Runs git for workspaces.
pub struct Git {
    config: WorkspacesConfig,
    mirrors: PathBuf,
    locks: Locks,
}

pub use crate::api::redact;

/// The last lines of git's output, redacted: what status and Events show.
fn tail(output: &str) -> String {
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    redact(&lines[lines.len().saturating_sub(8)..].join("\n"))
}

impl Git {
    /// Git for `config`; clones go under `config.mirrors`, or `<home>/.cache/worksession/repos`.
    pub fn new(config: WorkspacesConfig, home: Option<&Path>, locks: Locks) -> Self {
        let home = home.map(Path::to_path_buf).or_else(|| std::env::var_os("HOME").map(PathBuf::from));
        let mirrors = config
            .mirrors
            .clone()
            .unwrap_or_else(|| home.unwrap_or_else(|| PathBuf::from("/tmp")).join(".cache/worksession/repos"));
        Self { config, mirrors, locks }
    }

    /// The clone of `url` on this node: a readable name and a hash of the whole URL.
    pub fn mirror_of(&self, url: &str) -> PathBuf {
        use sha2::Digest;
        let clean = redact(url);
        let name = clean.trim_end_matches('/').trim_end_matches(".git").rsplit(['/', ':']).next().unwrap_or("repo");
        let digest = hex::encode(sha2::Sha256::digest(clean.as_bytes()));
        self.mirrors.join(format!("{}-{}.git", crate::api::dns_label(name), &digest[..12]))
    }

    fn git(&self) -> Command {
        let mut cmd = Command::new("git");
        cmd.kill_on_drop(true)
            .stdin(std::process::Stdio::null())
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "/bin/false")
            .env_remove("SSH_ASKPASS")
            // The machine's and the user's config are not the agent's; a repository's is overridden below.
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            // What a repository's config (which a harness may have written) could make git run: no hooks, no
            // fsmonitor, no ssh command of its own.
            .args(["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.sshCommand=ssh"])
            // Nor the command a fetch runs for a repository's alternates (`objects/info/alternates`, which the agent
            // never writes): `true` lists no refs of theirs.
            .args(["-c", "core.alternateRefsCommand=true"])
            // Only the allowed transports (`file://` reads any repository on the node, `ext::` runs a command): the
            // variable overrides every `protocol.*` setting, a repository's own `protocol.<name>.allow` included
            // (which would win over a `-c protocol.allow=never`).
            .env("GIT_ALLOW_PROTOCOL", self.config.protocols.join(":"))
            // No helper of the machine's: only ours, when a token file is configured.
            .args(["-c", "credential.helper="]);
        if let Some(file) = self.config.token_file.as_ref().filter(|f| f.is_file()) {
            // The helper reads the file when git asks, and answers only for the credential's hosts over https (http
            // only where the config allows it): a server elsewhere that answers 401 gets nothing. The token is never an
            // argument or in the environment.
            let helper = r#"!f() { test "$1" = get || return 0; p=; h=; while IFS='=' read -r k v; do case "$k" in protocol) p=$v;; host) h=$v;; esac; done; [ -n "$h" ] || return 0; case " $WORKSESSION_GIT_SCHEMES " in *" $p "*) ;; *) return 0;; esac; case " $WORKSESSION_GIT_HOSTS " in *" $h "*|*" ${h%:*} "*) ;; *) return 0;; esac; printf 'username=%s\npassword=%s\n' "$WORKSESSION_GIT_USERNAME" "$(cat "$WORKSESSION_GIT_TOKEN_FILE")"; }; f"#;
            let schemes = if self.config.protocols.iter().any(|p| p == "http") { "https http" } else { "https" };
            cmd.arg("-c").arg(format!("credential.helper={helper}"));
            cmd.env("WORKSESSION_GIT_USERNAME", &self.config.username)
                .env("WORKSESSION_GIT_TOKEN_FILE", file)
                .env("WORKSESSION_GIT_HOSTS", self.config.hosts.join(" "))
                .env("WORKSESSION_GIT_SCHEMES", schemes);
        }
        if let Some(key) = self.config.ssh_key_file.as_ref().filter(|f| f.is_file()) {
            let mut ssh = format!("ssh -i '{}' -o IdentitiesOnly=yes -o BatchMode=yes", key.display());
            if let Some(known) = self.config.known_hosts_file.as_ref().filter(|f| f.is_file()) {
                ssh.push_str(&format!(" -o UserKnownHostsFile='{}' -o StrictHostKeyChecking=yes", known.display()));
            }
            cmd.env("GIT_SSH_COMMAND", ssh);
        }
        cmd
    }

    /// Runs git with `args` (in `dir`, if given); its stdout, or its output's last lines as the error.
    async fn run(&self, dir: Option<&Path>, args: &[&str]) -> Result<String, String> {
        let mut cmd = self.git();
        if let Some(dir) = dir {
            if dir.starts_with(&self.mirrors) {
                // The node's clones are the agent's, whoever made them (an older release ran as another user).
                cmd.arg("-c").arg(format!("safe.directory={}", dir.display()));
            }
            cmd.arg("-C").arg(dir);
        }
        cmd.args(args);
        self.output(cmd, args[0]).await
    }

    /// Runs `cmd` (git `what`) within the timeout: its stdout, or its output's last lines as the error.
    async fn output(&self, mut cmd: Command, what: &str) -> Result<String, String> {
        let output = match tokio::time::timeout(self.config.git_timeout, cmd.output()).await {
            Err(_) => {
                return Err(format!("git {what} did not finish within {}s", self.config.git_timeout.as_secs()));
            }
            Ok(Err(e)) => return Err(format!("cannot run git: {e}")),
            Ok(Ok(output)) => output,
        };
        let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
        if output.status.success() {
            return Ok(stdout);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(tail(&format!("{stdout}\n{stderr}")))
    }

    async fn ok(&self, dir: &Path, args: &[&str]) -> Option<String> {
        self.run(Some(dir), args).await.ok()
    }

    /// Prepares `workdir` for `work_item` from `spec`: the repository's clone on the node is made (or fetched), then
    /// a checkout of its own in `workdir` on the work item's branch. An existing checkout of the repository is
    /// adopted as it is; anything else in the way is left alone and reported.
    ///
    /// The checkout is a repository of its own, not a worktree of the node's clone: its harness writes it (objects,
    /// refs, config), and nothing it writes there reaches the clone the agent fetches into, or another work item.
    pub async fn prepare(&self, spec: &WorkspaceSpec, workdir: &Path, work_item: &str) -> Result<Prepared, String> {
        let mirror = self.mirror_of(&spec.url);
        if let Some(prepared) = self.adopt(spec, &mirror, workdir).await? {
            return Ok(prepared);
        }
        let lock = self.locks.lock().await.entry(mirror.clone()).or_default().clone();
        let _one_at_a_time = lock.lock().await;
        self.clone_or_fetch(&spec.url, &mirror).await?;
        let start = self.start_point(&mirror, spec.r#ref.as_deref()).await?;
        let branch = branch_of(work_item);
        let (parent, name) = match (workdir.parent(), workdir.file_name()) {
            (Some(parent), Some(name)) => (parent, name.to_string_lossy()),
            _ => return Err(format!("{} cannot hold a checkout", workdir.display())),
        };
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        if !meta.is_dir() || meta.uid() != rustix::process::getuid().as_raw() || meta.mode() & 0o022 != 0 {
            // Another user could swap what is made there before git writes into it.
            return Err(format!(
                "{} is writable by others than the agent; no checkout is made in it",
                parent.display()
            ));
        }
        // Made beside it and moved into place: a checkout is whole, or not there.
        let partial = parent.join(format!(".{name}.worksession-partial"));
        let _ = std::fs::remove_dir_all(&partial);
        // Closed until it is handed to its room: no other room reads a checkout its harness has not started in.
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(&partial)
            .map_err(|e| format!("cannot create {}: {e}", partial.display()))?;
        let partial_s = partial.to_string_lossy();
        self.run(None, &["init", "--quiet", "--", &partial_s]).await?;
        self.fetch_from_clone(&partial, &mirror).await?;
        self.run(Some(&partial), &["checkout", "--quiet", "-b", &branch, &start]).await?;
        for (key, value) in [("remote.origin.url", redact(&spec.url)), ("remote.origin.fetch", ORIGIN_REFSPEC.into())] {
            self.run(Some(&partial), &["config", key, &value]).await?;
        }
        // An empty directory in the way (made by hand, or a mount point's) gives way; anything else stays.
        let _ = std::fs::remove_dir(workdir);
        std::fs::rename(&partial, workdir).map_err(|e| format!("cannot move the checkout into place: {e}"))?;
        Ok(Prepared { branch, commit: start, adopted: false })
    }

    /// Fetches the remote branches and tags of the node's clone `mirror` into the repository `dir`: the local
    /// transport allowed for this one command, the clone trusted whoever made it.
    async fn fetch_from_clone(&self, dir: &Path, mirror: &Path) -> Result<String, String> {
        let mut cmd = self.git();
        cmd.arg("-c").arg(format!("safe.directory={}", mirror.display()));
        cmd.env("GIT_ALLOW_PROTOCOL", "file").arg("-C").arg(dir).args(["fetch", "--quiet", "--no-tags", "--"]);
        cmd.arg(mirror).args(["+refs/remotes/origin/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"]);
        self.output(cmd, "fetch").await
    }

    /// An existing `workdir`: a checkout of the repository (a worktree of its clone here, or a clone of its URL) is
    /// taken as it is; an empty directory is prepared; anything else is refused.
    async fn adopt(&self, spec: &WorkspaceSpec, mirror: &Path, workdir: &Path) -> Result<Option<Prepared>, String> {
        let Ok(mut entries) = std::fs::read_dir(workdir) else { return Ok(None) };
        if entries.next().is_none() {
            return Ok(None);
        }
        use std::os::unix::fs::MetadataExt;
        if std::fs::symlink_metadata(workdir).is_ok_and(|m| m.uid() != rustix::process::getuid().as_raw()) {
            // Another user's (a room's harness wrote it): the agent runs no git in it.
            return Err(format!("{} exists and is another user's; it is left as it is", workdir.display()));
        }
        let ours = async {
            let common = self.ok(workdir, &["rev-parse", "--path-format=absolute", "--git-common-dir"]).await?;
            let same = std::fs::canonicalize(common).ok()? == std::fs::canonicalize(mirror).ok()?;
            let origin = self.ok(workdir, &["config", "--get", "remote.origin.url"]).await;
            (same || origin.is_some_and(|o| redact(&o) == redact(&spec.url))).then_some(())
        };
        let toplevel = self.ok(workdir, &["rev-parse", "--show-toplevel"]).await;
        let is_root = toplevel.and_then(|t| std::fs::canonicalize(t).ok()) == std::fs::canonicalize(workdir).ok();
        if !is_root || ours.await.is_none() {
            return Err(format!(
                "{} exists and is not a checkout of {}; it is left as it is",
                workdir.display(),
                redact(&spec.url)
            ));
        }
        let branch = self.ok(workdir, &["rev-parse", "--abbrev-ref", "HEAD"]).await.unwrap_or_default();
        let commit = self.run(Some(workdir), &["rev-parse", "HEAD"]).await?;
        Ok(Some(Prepared { branch, commit, adopted: true }))
    }

    async fn clone_or_fetch(&self, url: &str, mirror: &Path) -> Result<(), String> {
        std::fs::create_dir_all(&self.mirrors).map_err(|e| format!("cannot create {}: {e}", self.mirrors.display()))?;
        // The node's clones are the agent's alone: no harness reads another tenant's repository here or writes a
        // config, hook or ref that the agent's next fetch would act on (closed again each time: an older release
        // made them open).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&self.mirrors, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot close {}: {e}", self.mirrors.display()))?;
        if let Some(planted) = planted(mirror) {
            // Someone else wrote the clone (a harness sharing the agent's user, where the clones are within its
            // reach): it is made again rather than trusted.
            tracing::warn!(clone = %mirror.display(), planted, "the node's clone holds what the agent never writes; cloned again");
            std::fs::remove_dir_all(mirror).map_err(|e| format!("cannot remove {}: {e}", mirror.display()))?;
        }
        if mirror.join("HEAD").is_file() {
            // From the spec's URL, not whatever `remote.origin.url` says now.
            let args = ["fetch", "--prune", "--tags", "--", url, ORIGIN_REFSPEC];
            return self.run(Some(mirror), &args).await.map(drop);
        }
        let partial = mirror.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        let partial_s = partial.to_string_lossy();
        self.run(None, &["clone", "--bare", "--quiet", "--", url, &partial_s]).await?;
        // Remote branches as origin/*, so the work items' own branches (refs/heads/worksession/*) are never pruned.
        for (key, value) in [("remote.origin.fetch", ORIGIN_REFSPEC), ("remote.origin.url", url)] {
            self.run(Some(&partial), &["config", key, value]).await?;
        }
        self.run(Some(&partial), &["fetch", "--quiet", "--prune", "--tags", "--", url, ORIGIN_REFSPEC]).await?;
        std::fs::rename(&partial, mirror).map_err(|e| format!("cannot move the clone into place: {e}"))
    }

    /// The commit a new branch starts from: `reference` as a remote branch, a tag or a commit; default the
    /// repository's default branch.
    async fn start_point(&self, mirror: &Path, reference: Option<&str>) -> Result<String, String> {
        let candidates = match reference {
            Some(r) => vec![format!("refs/remotes/origin/{r}"), format!("refs/tags/{r}"), r.to_string()],
            None => {
                let head = self.ok(mirror, &["symbolic-ref", "--quiet", "HEAD"]).await.unwrap_or_default();
                let branch = head.strip_prefix("refs/heads/").unwrap_or("main");
                vec![format!("refs/remotes/origin/{branch}")]
            }
        };
        for candidate in &candidates {
            if let Some(commit) = self
                .ok(
                    mirror,
                    &["rev-parse", "--verify", "--quiet", "--end-of-options", &format!("{candidate}^{{commit}}")],
                )
                .await
            {
                return Ok(commit);
            }
        }
        Err(format!("{} names no branch, tag or commit of the repository", reference.unwrap_or("the default branch")))
    }

    /// Removes `workdir` when it is a checkout of the repository that holds nothing a removal would lose (no change,
    /// no commit that is not on a remote branch); otherwise keeps it and says why. A checkout handed to a room (owned
    /// by another uid) is the harness's: the agent runs no git where a harness wrote, so it is kept.
    pub async fn remove(&self, spec: &WorkspaceSpec, workdir: &Path) -> Removal {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::symlink_metadata(workdir) else { return Removal::Removed };
        if meta.uid() != rustix::process::getuid().as_raw() {
            return Removal::Kept(format!(
                "{} is the checkout of the session's harness (uid {}); the agent runs no git where a harness wrote, \
                 so it is kept: push what it holds, then delete it",
                workdir.display(),
                meta.uid()
            ));
        }
        // Never a `.git` file or link (which a harness could point at another repository): its own directory only,
        // named explicitly, so no discovery and no `core.worktree` decides where git looks.
        let dot_git = workdir.join(".git");
        if !std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_dir()) {
            return Removal::Kept(format!("{}'s .git is not a directory; kept", workdir.display()));
        }
        let place = [format!("--git-dir={}", dot_git.display()), format!("--work-tree={}", workdir.display())];
        let read = |args: &'static [&'static str], overrides: Vec<String>| {
            let mut cmd = self.git();
            // As GIT_CONFIG_KEY_<n>/VALUE_<n>, not `-c key=`: a driver's name may hold a '=' (`filter.a=b.clean`),
            // which `-c` would split at.
            cmd.env("GIT_CONFIG_COUNT", overrides.len().to_string());
            for (n, key) in overrides.iter().enumerate() {
                cmd.env(format!("GIT_CONFIG_KEY_{n}"), key).env(format!("GIT_CONFIG_VALUE_{n}"), "");
            }
            cmd.args(&place).args(args);
            self.output(cmd, args[0])
        };
        let origin = read(&["config", "--get", "remote.origin.url"], Vec::new()).await.ok();
        if origin.is_none_or(|o| redact(&o) != redact(&spec.url)) {
            return Removal::Kept(format!("{} is not a checkout of {}; kept", workdir.display(), redact(&spec.url)));
        }
        // `git status` would run the checkout's filter drivers (its config and `.gitattributes` are the harness's):
        // each one it defines is emptied on the command line, which wins over every config file.
        let defined =
            read(&["config", "--name-only", "--get-regexp", r"^filter\..*\.(clean|smudge|process)$"], Vec::new())
                .await
                .unwrap_or_default();
        let overrides: Vec<String> = defined.lines().map(str::to_string).collect();
        let status = &["status", "--porcelain", "--untracked-files=all", "--ignore-submodules=all"];
        let changes = read(status, overrides.clone()).await.ok();
        let unpushed = read(&["rev-list", "--max-count=10", "--branches", "--not", "--remotes"], overrides).await.ok();
        let (Some(changes), Some(unpushed)) = (changes, unpushed) else {
            return Removal::Kept(format!("git could not read {}; kept", workdir.display()));
        };
        if !changes.is_empty() || !unpushed.is_empty() {
            let files: Vec<&str> = changes.lines().take(10).collect();
            let commits = unpushed.lines().count();
            return Removal::Kept(format!(
                "{} has uncommitted changes or commits on no remote branch; kept: {} changed, {commits} commits{}",
                workdir.display(),
                changes.lines().count(),
                if files.is_empty() { String::new() } else { format!(" ({})", files.join(", ")) }
            ));
        }
        match std::fs::remove_dir_all(workdir) {
            Ok(()) => Removal::Removed,
            Err(e) => Removal::Kept(format!("cannot remove {}: {e}", workdir.display())),
        }
    }
}

/// What the agent never writes in a clone of its own and git would act on: another repository's objects and refs
/// (and the command a fetch runs for them) through alternates. The first found, if any.
fn planted(clone: &Path) -> Option<&'static str> {
    ["objects/info/alternates", "objects/info/http-alternates"]
        .into_iter()
        .find(|file| std::fs::symlink_metadata(clone.join(file)).is_ok())
}

/// Remote branches land as `origin/*`, so the work items' own branches (`refs/heads/worksession/*`) are never pruned.
const ORIGIN_REFSPEC: &str = "+refs/heads/*:refs/remotes/origin/*";

pub use crate::config::workspaces::{
    DEFAULT_GIT_TIMEOUT, DEFAULT_PROTOCOLS, DEFAULT_TOKEN_HOSTS, WorkspacesConfig, glob_match,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_of_a_checkout_is_read_from_its_files_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(git.join("refs/heads/worksession")).unwrap();
        std::fs::write(git.join("HEAD"), "ref: refs/heads/worksession/x\n").unwrap();
        let commit = "0123456789abcdef0123456789abcdef01234567";
        std::fs::write(git.join("packed-refs"), format!("# pack-refs\n{commit} refs/heads/worksession/x\n")).unwrap();
        assert_eq!(head_of(dir.path()), Some(("worksession/x".into(), commit.into())), "from packed-refs");
        std::fs::write(git.join("refs/heads/worksession/x"), "not a commit\n").unwrap();
        assert_eq!(head_of(dir.path()), None, "only git's shapes");
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(elsewhere.path().join("ref"), format!("{commit}\n")).unwrap();
        std::fs::remove_file(git.join("refs/heads/worksession/x")).unwrap();
        std::fs::remove_file(git.join("packed-refs")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join("ref"), git.join("refs/heads/worksession/x")).unwrap();
        assert_eq!(head_of(dir.path()), None, "a link is not followed");
    }

    #[test]
    fn credentials_in_urls_never_reach_status() {
        assert_eq!(
            redact("fatal: unable to access 'https://x:s3cret@example.com/a.git/'"),
            "fatal: unable to access 'https://example.com/a.git/'"
        );
        assert_eq!(redact("ssh://git@host/a.git and HTTPS://tok@h/b"), "ssh://host/a.git and HTTPS://h/b");
        assert_eq!(redact("no url here"), "no url here");
    }

    #[test]
    fn one_clone_per_repository_named_readably() {
        let git =
            Git::new(WorkspacesConfig { mirrors: Some("/m".into()), ..Default::default() }, None, Locks::default());
        let a = git.mirror_of("https://github.com/Octo/API.git");
        assert!(a.to_string_lossy().starts_with("/m/api-"), "{a:?}");
        assert_eq!(a, git.mirror_of("https://github.com/Octo/API.git"));
        assert_ne!(a, git.mirror_of("https://github.com/acme/API.git"));
        assert_eq!(git.mirror_of("git@github.com:octo/api.git").parent(), Some(Path::new("/m")));
    }
}
