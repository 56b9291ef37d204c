//! The directory backend of [`Store`] and [`Sink`] (local mode): the object store is a directory of YAML manifests instead of the API server, the way kubelet runs
//! static pods from a folder.
//!
//! `DIR/*.yaml` hold WorkSession, WorkEvent and WorkBudget manifests (the CRDs' schema, checked the same way). The agent writes
//! each object's status beside it as `NAME.status.yaml` (the whole object, written to a temporary file, fsynced,
//! then renamed). A session whose manifest is gone while its status file remains is being deleted: its tmux
//! session is stopped and the status file removed. The bridge writes events with a hard link from a temporary
//! file, so a redelivery finds the name taken (a duplicate) and no reader ever sees half a file.

mod index;
mod sink;

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kube::ResourceExt;
use serde_json::Value;

use super::{Changes, FINALIZER, Store, StoreError};
use crate::api::{WorkBudget, WorkEvent, WorkEventStatus, WorkSession, WorkSessionStatus};
use crate::core::Notice;
use index::{Index, is_indexed, status_path};

/// The namespace every local object lives in (a manifest may name another).
pub use super::DEFAULT_NAMESPACE as NAMESPACE;

/// How often a watching store stats every file anyway, in case a notification was lost.
pub const RESCAN_INTERVAL: Duration = Duration::from_secs(30);

/// A directory of manifests.
pub struct LocalStore {
    dir: PathBuf,
    index: Mutex<Index>,
    /// Held across each read-compare-write of a manifest by the bridge (its handlers run at once).
    editing: Mutex<()>,
    /// File-system notifications (`None`: every read stats the directory).
    watch: Option<Watch>,
}

/// What the notifications said since the index last looked.
struct Dirty {
    paths: HashSet<PathBuf>,
    /// A notification was lost (or could not name its files): stat every file.
    rescan: bool,
    last_rescan: Instant,
}

struct Watch {
    _watcher: notify::RecommendedWatcher,
    dirty: Arc<Mutex<Dirty>>,
    changed: Arc<tokio::sync::Notify>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn local_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Local(e.to_string())
}

/// Writes `value` as YAML to `path` atomically: a temporary file beside it, fsynced, renamed over it.
pub fn write_atomic(path: &Path, value: &impl serde::Serialize) -> std::io::Result<()> {
    let yaml = serde_yaml_ng::to_string(value).map_err(std::io::Error::other)?;
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(yaml.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

impl LocalStore {
    /// The store over `dir` (created if missing); every read stats the directory's files (for one-shot commands and
    /// the bridge).
    pub fn new(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        Ok(Self { dir, index: Mutex::new(Index::default()), editing: Mutex::new(()), watch: None })
    }

    /// The store over `dir`, told of changes by file-system notifications (inotify), with a rescan every
    /// [`RESCAN_INTERVAL`] as the safety net: for the agent, which reads far more often than files change.
    pub fn watching(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        use notify::Watcher;
        let mut store = Self::new(dir)?;
        let dirty = Arc::new(Mutex::new(Dirty { paths: HashSet::new(), rescan: true, last_rescan: Instant::now() }));
        let changed = Arc::new(tokio::sync::Notify::new());
        let (to_dirty, to_changed) = (dirty.clone(), changed.clone());
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let mut dirty = lock(&to_dirty);
            match event {
                Ok(event) if !event.need_rescan() => {
                    let before = dirty.paths.len();
                    dirty.paths.extend(event.paths.into_iter().filter(|p| is_indexed(p)));
                    if dirty.paths.len() == before {
                        return; // a temporary file, or a file seen changed already
                    }
                }
                _ => dirty.rescan = true,
            }
            drop(dirty);
            to_changed.notify_one();
        })
        .map_err(std::io::Error::other)?;
        watcher.watch(&store.dir, notify::RecursiveMode::NonRecursive).map_err(std::io::Error::other)?;
        store.watch = Some(Watch { _watcher: watcher, dirty, changed });
        Ok(store)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The index, brought up to date: the files notifications named, or (without notifications, after a lost one,
    /// or every [`RESCAN_INTERVAL`]) every file's stat.
    fn index(&self) -> Result<MutexGuard<'_, Index>, StoreError> {
        let mut index = lock(&self.index);
        let rescan = match &self.watch {
            None => true,
            Some(watch) => {
                let mut dirty = lock(&watch.dirty);
                let due = dirty.rescan || dirty.last_rescan.elapsed() >= RESCAN_INTERVAL;
                let paths = std::mem::take(&mut dirty.paths);
                if due {
                    (dirty.rescan, dirty.last_rescan) = (false, Instant::now());
                } else {
                    for path in paths {
                        index.reload(&path);
                    }
                }
                due
            }
        };
        // A rename can be told in two notifications; it is atomic, so when its old path is seen gone its new one is
        // there: read the directory, or the session would look deleted until the second comes.
        let went = index.take_went();
        if rescan || went {
            index.rescan(&self.dir).map_err(local_err)?;
            index.take_went(); // what this rescan saw go is read already
        }
        Ok(index)
    }

    /// Every WorkSession: its manifest merged with its status, and sessions being deleted (status file only).
    pub fn session_files(&self) -> Result<Vec<(PathBuf, WorkSession)>, StoreError> {
        Ok(self.index()?.sessions())
    }

    fn session_path(&self, name: &str) -> Result<Option<(PathBuf, WorkSession)>, StoreError> {
        Ok(self.index()?.session(name))
    }

    /// Every WorkEvent with its status.
    pub fn all_events(&self) -> Result<Vec<(PathBuf, WorkEvent)>, StoreError> {
        Ok(self.index()?.events(None))
    }

    /// The manifests skipped (they do not parse, or break the schema) or whose last edit is refused (an immutable
    /// field changed), with why: what `worksession get --local` reports on stderr.
    pub fn refusals(&self) -> Result<Vec<(PathBuf, String)>, StoreError> {
        Ok(self.index()?.refusals())
    }

    fn event_path(&self, name: &str) -> Result<Option<PathBuf>, StoreError> {
        Ok(self.index()?.event_path(name))
    }

    /// Writes `value` as the status file of `manifest`, and reads it into the index at once (the agent's next read
    /// sees its own write).
    fn write_status_file(&self, manifest: &Path, value: &impl serde::Serialize) -> Result<(), StoreError> {
        let path = status_path(manifest);
        write_atomic(&path, value).map_err(local_err)?;
        lock(&self.index).reload(&path);
        Ok(())
    }

    fn remove(&self, path: &Path) {
        let _ = std::fs::remove_file(path);
        lock(&self.index).reload(path);
    }
}

impl Changes for LocalStore {
    async fn changed(&self) {
        match &self.watch {
            Some(watch) => watch.changed.notified().await,
            None => std::future::pending().await,
        }
    }

    fn touched(&self) -> Result<HashSet<String>, StoreError> {
        Ok(self.index()?.take_touched())
    }

    fn budgets(&self) -> Result<Vec<WorkBudget>, StoreError> {
        Ok(self.index()?.budgets())
    }
}

impl Store for LocalStore {
    async fn sessions(&self) -> Result<Vec<WorkSession>, StoreError> {
        Ok(self.session_files()?.into_iter().map(|(_, ws)| ws).collect())
    }

    async fn session(&self, _namespace: &str, name: &str) -> Result<Option<WorkSession>, StoreError> {
        Ok(self.session_path(name)?.map(|(_, ws)| ws))
    }

    async fn events(&self, _namespace: &str, session: &str) -> Result<Vec<WorkEvent>, StoreError> {
        Ok(self.index()?.events(Some(session)).into_iter().map(|(_, e)| e).collect())
    }

    async fn write_status(&self, ws: &WorkSession, status: &WorkSessionStatus) -> Result<(), StoreError> {
        // Under the index's lock from finding the path to reading the write back: a status that follows its renamed
        // manifest meanwhile would leave this write behind under the old path.
        let mut index = self.index()?;
        let Some((path, _)) = index.session(&ws.name_any()) else { return Ok(()) };
        let mut recorded = ws.clone();
        recorded.metadata.deletion_timestamp = None;
        recorded.metadata.finalizers = None;
        recorded.status = Some(status.clone());
        let file = status_path(&path);
        write_atomic(&file, &recorded).map_err(local_err)?;
        index.reload(&file);
        Ok(())
    }

    /// One machine: no other node the session could have been handed to meanwhile.
    async fn write_intent(&self, ws: &WorkSession, status: &WorkSessionStatus) -> Result<bool, StoreError> {
        self.write_status(ws, status).await.map(|()| true)
    }

    async fn write_event_status(&self, ev: &WorkEvent, status: &WorkEventStatus) -> Result<(), StoreError> {
        let Some(path) = self.event_path(&ev.name_any())? else { return Ok(()) };
        let mut recorded = ev.clone();
        recorded.status = Some(status.clone());
        self.write_status_file(&path, &recorded)
    }

    async fn delete_event(&self, ev: &WorkEvent) -> Result<(), StoreError> {
        if let Some(path) = self.event_path(&ev.name_any())? {
            self.remove(&status_path(&path));
            self.remove(&path);
        }
        Ok(())
    }

    async fn set_finalizer(&self, ws: &WorkSession, present: bool) -> Result<WorkSession, StoreError> {
        let mut ws = ws.clone();
        if present {
            // The status file is the local finalizer: write it now so a deletion is noticed.
            ws.metadata.finalizers = Some(vec![FINALIZER.into()]);
            self.write_status(&ws, &ws.status.clone().unwrap_or_default()).await?;
        } else if let Some((path, _)) = self.session_path(&ws.name_any())? {
            self.remove(&status_path(&path));
            ws.metadata.finalizers = None;
        }
        Ok(ws)
    }

    async fn move_to(&self, _ws: &WorkSession, _node: &str) -> Result<(), StoreError> {
        Err(StoreError::Local("local mode runs on one machine: there is no other node".into()))
    }

    async fn label_limited(&self, _ws: &WorkSession, _on: bool) -> Result<(), StoreError> {
        Ok(()) // one node: its agent knows every limit already, and the index labels a session as its status says
    }

    async fn record(&self, _ws: &WorkSession, _notice: &Notice) {
        // Local mode has no Event objects: the reconciler's log line is the record.
    }

    async fn namespace_keys(
        &self,
        _namespace: &str,
        _name: &str,
    ) -> Result<Option<std::collections::BTreeMap<String, String>>, StoreError> {
        // One person's machine: their harnesses take their own keys from their environment.
        Ok(None)
    }
}

/// A manifest as a user would write it: no namespace (local mode has one) and no owner references.
fn manifest<S: serde::Serialize>(
    kind: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: &S,
) -> Value {
    let metadata = serde_json::json!({"name": meta.name, "labels": meta.labels});
    serde_json::json!({"apiVersion": "worksession.dev/v1alpha1", "kind": kind, "metadata": metadata, "spec": spec})
}

/// Creates `path` with `value` as YAML unless it exists (`Ok(false)`); readers never see a partial file.
pub fn create_exclusive(path: &Path, value: &impl serde::Serialize) -> std::io::Result<bool> {
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
    let yaml = serde_yaml_ng::to_string(value).map_err(std::io::Error::other)?;
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(yaml.as_bytes())?;
        f.sync_all()?;
    }
    let linked = std::fs::hard_link(&tmp, path);
    std::fs::remove_file(&tmp)?;
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

impl super::Listing for LocalStore {
    fn listed_sessions(&self) -> Result<Vec<WorkSession>, StoreError> {
        Ok(self.session_files()?.into_iter().map(|(_, ws)| ws).collect())
    }

    fn listed_events(&self) -> Result<Vec<WorkEvent>, StoreError> {
        Ok(self.all_events()?.into_iter().map(|(_, ev)| ev).collect())
    }

    fn skipped(&self) -> Result<Vec<(PathBuf, String)>, StoreError> {
        self.refusals()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Sink;
    use index::parse;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[tokio::test]
    async fn manifests_are_validated_like_the_crds_and_bad_ones_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path()).unwrap();
        write(
            dir.path(),
            "good.yaml",
            "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {name: good}\nspec: {workItem: good-1, nodeName: local, harness: claude, workdir: /tmp}\n",
        );
        write(
            dir.path(),
            "no-item.yaml",
            "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {name: bad}\nspec: {nodeName: local, harness: claude, workdir: /tmp}\n",
        );
        write(
            dir.path(),
            "dash.yaml",
            "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {name: dash}\nspec: {workItem: -x, nodeName: local, harness: claude, workdir: /tmp}\n",
        );
        write(dir.path(), "half.yaml", "apiVersion: worksession.dev/v1alpha1\nkind: WorkSess");
        write(
            dir.path(),
            "ev.yaml",
            "apiVersion: worksession.dev/v1alpha1\nkind: WorkEvent\nmetadata: {name: ev}\nspec: {session: good, prompt: hi}\n",
        );
        let sessions = store.session_files().unwrap();
        assert_eq!(sessions.iter().map(|(_, ws)| ws.name_any()).collect::<Vec<_>>(), ["good"]);
        let refusal = |name: &str| {
            let path = dir.path().join(name);
            parse(&path, &std::fs::read_to_string(&path).unwrap()).err().unwrap()
        };
        assert_eq!(refusal("no-item.yaml"), "spec: missing field `workItem`");
        assert!(refusal("dash.yaml").contains("spec.workItem"));
        assert_eq!(Store::events(&store, NAMESPACE, "good").await.unwrap().len(), 1);
        let typo = "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {name: typo}\nspec: {workItem: t, nodeName: local, harness: claude, workdir: /tmp, initalPrompt: hi}\n";
        assert_eq!(parse(&dir.path().join("typo.yaml"), typo).err().unwrap(), "spec.initalPrompt: unknown field");
    }

    #[tokio::test]
    async fn status_beside_the_manifest_and_deletion_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path()).unwrap();
        write(
            dir.path(),
            "a.yaml",
            "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {name: a}\nspec: {workItem: a, nodeName: local, harness: claude, workdir: /tmp}\n",
        );
        let ws = Store::session(&store, NAMESPACE, "a").await.unwrap().unwrap();
        let ws = store.set_finalizer(&ws, true).await.unwrap();
        let status = WorkSessionStatus { harness_session_id: Some("abc".into()), ..Default::default() };
        store.write_status(&ws, &status).await.unwrap();
        let read = Store::session(&store, NAMESPACE, "a").await.unwrap().unwrap();
        assert_eq!(read.status.unwrap().harness_session_id.as_deref(), Some("abc"));
        assert!(dir.path().join("a.status.yaml").exists());

        std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
        let deleting = Store::session(&store, NAMESPACE, "a").await.unwrap().unwrap();
        assert!(deleting.metadata.deletion_timestamp.is_some() && deleting.finalizers() == [FINALIZER]);
        store.set_finalizer(&deleting, false).await.unwrap();
        assert!(Store::session(&store, NAMESPACE, "a").await.unwrap().is_none());
    }

    /// A rename told by halves (the notification of the old path first, the new path's not yet): the session is
    /// not taken for deleted meanwhile.
    #[tokio::test]
    async fn a_rename_told_by_halves_is_not_a_deletion() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LocalStore::new(dir.path()).unwrap();
        // Notifications only as this test gives them.
        let dirty = Arc::new(Mutex::new(Dirty { paths: HashSet::new(), rescan: true, last_rescan: Instant::now() }));
        let silent = notify::recommended_watcher(|_: notify::Result<notify::Event>| {}).unwrap();
        store.watch = Some(Watch { _watcher: silent, dirty: dirty.clone(), changed: Default::default() });
        write(dir.path(), "a.yaml", &session("a"));
        let ws = Store::session(&store, NAMESPACE, "a").await.unwrap().unwrap();
        let status = WorkSessionStatus { harness_session_id: Some("abc".into()), ..Default::default() };
        store.write_status(&ws, &status).await.unwrap();
        std::fs::rename(dir.path().join("a.yaml"), dir.path().join("b.yaml")).unwrap();
        lock(&dirty).paths.insert(dir.path().join("a.yaml"));
        let moved = Store::session(&store, NAMESPACE, "a").await.unwrap().unwrap();
        assert!(moved.metadata.deletion_timestamp.is_none(), "not deleted");
        assert_eq!(moved.status.and_then(|s| s.harness_session_id).as_deref(), Some("abc"), "the status followed");
    }

    /// A manifest moved to another path takes its status along (the same file: its stamp, or its creation), even
    /// one an editor rewrote since; a new file that takes the name of a session being deleted waits for that to end
    /// and never inherits its conversation.
    #[tokio::test]
    async fn a_moved_manifest_takes_its_status_and_a_new_file_under_a_deleting_name_waits() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path()).unwrap();
        let made = |at: &str, item: &str| {
            format!(
                "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {{name: a, creationTimestamp: \
                 \"{at}\"}}\nspec: {{workItem: {item}, nodeName: local, harness: claude, workdir: /tmp}}\n"
            )
        };
        let id = |ws: &WorkSession| ws.status.as_ref().and_then(|s| s.harness_session_id.clone());
        write(dir.path(), "a.yaml", &made("2026-01-01T00:00:00Z", "one"));
        let ws = Store::session(&store, NAMESPACE, "a").await.unwrap().unwrap();
        let ws = store.set_finalizer(&ws, true).await.unwrap();
        let status = WorkSessionStatus { harness_session_id: Some("abc".into()), ..Default::default() };
        store.write_status(&ws, &status).await.unwrap();
        // An editor's save: a new file renamed over the old one (here with another creation).
        write(dir.path(), "a.tmp", &made("2026-01-02T00:00:00Z", "one"));
        std::fs::rename(dir.path().join("a.tmp"), dir.path().join("a.yaml")).unwrap();
        assert!(Store::session(&store, NAMESPACE, "a").await.unwrap().is_some());

        std::fs::rename(dir.path().join("a.yaml"), dir.path().join("b.yaml")).unwrap();
        let moved = Store::session(&store, NAMESPACE, "a").await.unwrap().unwrap();
        assert_eq!(id(&moved).as_deref(), Some("abc"), "the status followed");
        assert!(moved.metadata.deletion_timestamp.is_none());
        assert!(dir.path().join("b.status.yaml").exists() && !dir.path().join("a.status.yaml").exists());

        std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
        write(dir.path(), "c.yaml", &made("2026-03-01T00:00:00Z", "another"));
        let deleting = Store::session(&store, NAMESPACE, "a").await.unwrap().unwrap();
        assert!(deleting.metadata.deletion_timestamp.is_some(), "the old session is deleted first");
        assert_eq!(deleting.spec.work_item, "one");
        let skipped = store.refusals().unwrap();
        assert!(skipped.iter().any(|(p, why)| p.ends_with("c.yaml") && why.contains("being deleted")), "{skipped:?}");
        store.set_finalizer(&deleting, false).await.unwrap();
        let new = Store::session(&store, NAMESPACE, "a").await.unwrap().unwrap();
        assert_eq!((new.spec.work_item.as_str(), id(&new)), ("another", None), "a new session, its own conversation");

        // Moved while no agent looked (a fresh index remembers no stamp): its creation tells, to the second.
        write(dir.path(), "d.yaml", &session("d"));
        let ws = Store::session(&store, NAMESPACE, "d").await.unwrap().unwrap();
        store.write_status(&ws, &status).await.unwrap();
        std::fs::rename(dir.path().join("d.yaml"), dir.path().join("e.yaml")).unwrap();
        let restarted = LocalStore::new(dir.path()).unwrap();
        let moved = Store::session(&restarted, NAMESPACE, "d").await.unwrap().unwrap();
        assert_eq!(id(&moved).as_deref(), Some("abc"), "the status followed");
        assert!(moved.metadata.deletion_timestamp.is_none());
    }

    fn session(name: &str) -> String {
        format!(
            "apiVersion: worksession.dev/v1alpha1\nkind: WorkSession\nmetadata: {{name: {name}}}\nspec: {{workItem: {name}, nodeName: local, harness: claude, workdir: /tmp}}\n"
        )
    }

    fn touched(store: &LocalStore) -> Vec<String> {
        let mut names: Vec<String> = store.touched().unwrap().into_iter().collect();
        names.sort();
        names
    }

    /// A watching store reads each file once per change, told by notifications, and names the sessions a
    /// change touches (an event touches its session); reads in between cost no file reads.
    #[tokio::test]
    async fn notifications_reread_only_what_changed_and_name_the_sessions_it_touches() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a", "b", "c"] {
            write(dir.path(), &format!("{name}.yaml"), &session(name));
        }
        let store = LocalStore::watching(dir.path()).unwrap();
        assert_eq!(touched(&store), ["a", "b", "c"], "the first look reads everything");
        let reads = || lock(&store.index).reads;
        assert_eq!(reads(), 3);
        for _ in 0..10 {
            assert_eq!(Store::sessions(&store).await.unwrap().len(), 3);
            assert_eq!(Store::events(&store, NAMESPACE, "a").await.unwrap().len(), 0);
        }
        assert_eq!(reads(), 3, "reads without changes read no file");

        // Written whole and renamed into place, as the bridge and editors do, so one notification names it.
        write(
            dir.path(),
            "ev.tmp",
            "apiVersion: worksession.dev/v1alpha1\nkind: WorkEvent\nmetadata: {name: ev}\nspec: {session: b, prompt: hi}\n",
        );
        std::fs::rename(dir.path().join("ev.tmp"), dir.path().join("ev.yaml")).unwrap();
        let event_seen = async {
            loop {
                store.changed().await;
                let touched = touched(&store);
                if !touched.is_empty() {
                    return touched;
                }
            }
        };
        assert_eq!(event_seen.await, ["b"], "an event touches its session");
        assert_eq!(Store::events(&store, NAMESPACE, "b").await.unwrap().len(), 1);
        assert_eq!(reads(), 4, "only the new file was read");

        let ws = Store::session(&store, NAMESPACE, "c").await.unwrap().unwrap();
        let status = WorkSessionStatus { harness_session_id: Some("abc".into()), ..Default::default() };
        store.write_status(&ws, &status).await.unwrap();
        let read = Store::session(&store, NAMESPACE, "c").await.unwrap().unwrap();
        assert_eq!(read.status.unwrap().harness_session_id.as_deref(), Some("abc"), "its own write, read at once");
        assert_eq!(touched(&store), ["c"], "its own write touches its session, as a watch would");
    }

    /// Without notifications every read stats the files and reads only those that changed.
    #[tokio::test]
    async fn without_notifications_reads_stat_and_reread_only_what_changed() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.yaml", &session("a"));
        write(dir.path(), "b.yaml", &session("b"));
        let store = LocalStore::new(dir.path()).unwrap();
        assert_eq!(Store::sessions(&store).await.unwrap().len(), 2);
        assert_eq!(Store::sessions(&store).await.unwrap().len(), 2);
        assert_eq!(lock(&store.index).reads, 2);
        std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
        write(dir.path(), "b.yaml", &session("b").replace("harness: claude", "harness: codex"));
        let sessions = Store::sessions(&store).await.unwrap();
        assert_eq!(sessions.iter().map(|ws| ws.spec.harness.as_str()).collect::<Vec<_>>(), ["codex"]);
        assert_eq!(lock(&store.index).reads, 3);
        assert_eq!(touched(&store), ["a", "b"]);
    }

    /// A route's cap counts the sessions the store holds with its label, as the bridge created them.
    #[tokio::test]
    async fn sessions_are_counted_by_label() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(LocalStore::new(dir.path()).unwrap());
        let labelled = |name: &str, route: &str| {
            let mut ws = WorkSession::new(
                name,
                crate::api::WorkSessionSpec {
                    work_item: name.into(),
                    node_name: Some("local".into()),
                    harness: "claude".into(),
                    workdir: "/tmp".into(),
                    ..Default::default()
                },
            );
            ws.metadata.labels = Some([("worksession.dev/route".to_string(), route.to_string())].into());
            ws
        };
        for (name, route) in [("a", "r1"), ("b", "r1"), ("c", "r2")] {
            Sink::session(&store, NAMESPACE, name, Some(labelled(name, route))).await.unwrap();
        }
        write(dir.path(), "hand.yaml", &session("hand"));
        let count = |route: &'static str| {
            let store = store.clone();
            async move { Sink::count_sessions(&store, NAMESPACE, ("worksession.dev/route", route)).await.unwrap() }
        };
        assert_eq!((count("r1").await, count("r2").await, count("r3").await), (2, 1, 0));
    }

    #[test]
    fn exclusive_creation_dedupes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.yaml");
        assert!(create_exclusive(&path, &serde_json::json!({"a": 1})).unwrap());
        assert!(!create_exclusive(&path, &serde_json::json!({"a": 2})).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a: 1\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary files left");
    }
}
