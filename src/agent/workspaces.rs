//! The workspaces of the agent's sessions, beside the reconcile: each preparation runs as a task of its own (git can
//! take minutes; the reconcile only looks at it, as it looks at a probe's deadline), so it never holds up a reconcile
//! of any session. A finished task's result is taken once, by the next reconcile of its session.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use futures::FutureExt;
use tokio::task::JoinHandle;

use crate::api::WorkSession;
use crate::config::Config;
use crate::core::{Workspace, WorkspaceReason};
use crate::node::workspace::{Git, Locks, Prepared, Removal};

/// The preparations running, by session (`namespace/name`).
#[derive(Default)]
pub struct Workspaces {
    tasks: Mutex<HashMap<String, JoinHandle<Result<Prepared, String>>>>,
    locks: Locks,
}

impl Workspaces {
    fn git(&self, config: &Config) -> Git {
        Git::new(config.workspaces.clone(), config.harness_home.as_deref(), self.locks.clone())
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, HashMap<String, JoinHandle<Result<Prepared, String>>>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The workspace of `ws` (`key`: its `namespace/name`): a checkout prepared before counts as ready while its
    /// directory holds a `.git`.
    /// A workdir without a workspace is looked at only where the agent sees it as the harness does.
    pub fn state(&self, key: &str, ws: &WorkSession, config: &Config) -> Workspace {
        if ws.spec.workspace.is_none() {
            let workdir = Path::new(&ws.spec.workdir);
            let missing = config.sees_workdir(workdir) && !workdir.is_dir();
            return if missing { Workspace::NoWorkdir } else { Workspace::Ready };
        }
        let mut tasks = self.tasks();
        if tasks.get(key).is_some_and(|task| !task.is_finished()) {
            return Workspace::Preparing;
        }
        if let Some(task) = tasks.remove(key) {
            return match task.now_or_never() {
                Some(Ok(Ok(prepared))) => {
                    Workspace::Prepared { branch: prepared.branch, commit: prepared.commit, adopted: prepared.adopted }
                }
                Some(Ok(Err(output))) => Workspace::Failed(output),
                Some(Err(e)) => Workspace::Failed(format!("the preparation stopped: {e}")),
                None => Workspace::Preparing,
            };
        }
        let conditions = ws.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
        let prepared = crate::core::condition::<WorkspaceReason>(conditions).is_some_and(|(ok, _)| ok);
        if prepared && Path::new(&ws.spec.workdir).join(".git").exists() {
            Workspace::Ready
        } else {
            Workspace::Missing
        }
    }

    /// Starts preparing the workspace of `ws` (one task per session at a time).
    pub fn start(&self, key: &str, ws: &WorkSession, config: &Config) {
        let Some(spec) = ws.spec.workspace.clone() else { return };
        let mut tasks = self.tasks();
        if tasks.get(key).is_some_and(|t| !t.is_finished()) {
            return;
        }
        let git = self.git(config);
        let (workdir, work_item) = (ws.spec.workdir.clone(), ws.spec.work_item.clone());
        tasks.insert(
            key.to_string(),
            tokio::spawn(async move { git.prepare(&spec, Path::new(&workdir), &work_item).await }),
        );
    }

    /// Stops a preparation of `ws` that runs, then removes its checkout unless a removal would lose something.
    pub async fn remove(&self, key: &str, ws: &WorkSession, config: &Config) -> Removal {
        if let Some(task) = self.tasks().remove(key) {
            task.abort();
        }
        match &ws.spec.workspace {
            Some(spec) => self.git(config).remove(spec, Path::new(&ws.spec.workdir)).await,
            None => Removal::Removed,
        }
    }
}
