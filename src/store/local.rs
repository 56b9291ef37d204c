//! The directory backend of [`Store`] and [`Sink`] (local mode): the object store is a directory of YAML manifests instead of the API server, the way kubelet runs
//! static pods from a folder.
//!
//! `DIR/*.yaml` hold WorkSession and WorkEvent manifests (the CRDs' schema, checked the same way). The agent writes
//! each object's status beside it as `NAME.status.yaml` (the whole object, written to a temporary file, fsynced,
//! then renamed). A session whose manifest is gone while its status file remains is being deleted: its tmux
//! session is stopped and the status file removed. The bridge writes events with a hard link from a temporary
//! file, so a redelivery finds the name taken (a duplicate) and no reader ever sees half a file.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{FINALIZER, Sink, SinkError, Store, StoreError};
use crate::api::{self, WorkEvent, WorkEventStatus, WorkSession, WorkSessionStatus};
use crate::core::Notice;

/// The namespace every local object lives in (a manifest may name another).
pub const NAMESPACE: &str = "default";

/// A directory of manifests.
pub struct LocalStore {
    dir: PathBuf,
    /// Problems already reported, by file, with the modification time they were seen at.
    reported: Mutex<HashMap<PathBuf, std::time::SystemTime>>,
}

/// One manifest read from the directory.
enum Manifest {
    Session(Box<WorkSession>),
    Event(Box<WorkEvent>),
}

fn status_path(manifest: &Path) -> PathBuf {
    manifest.with_extension("status.yaml")
}

fn is_status(path: &Path) -> bool {
    path.to_string_lossy().ends_with(".status.yaml")
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

/// Parses one manifest: the right apiVersion and kind, the spec's required fields and shapes.
fn parse(path: &Path, text: &str) -> Result<Manifest, String> {
    let value: Value = serde_yaml_ng::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default();
    let version = value.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    if version != "worksession.dev/v1alpha1" {
        return Err(format!("apiVersion: {version:?} is not worksession.dev/v1alpha1"));
    }
    /// Typed, with the path of the first error; a field the type does not know is an error too, as the API server
    /// refuses it (a misspelt `initalPrompt` must not be dropped without a word).
    fn typed<K: DeserializeOwned>(value: Value) -> Result<K, String> {
        let mut unknown = Vec::new();
        let mut track = serde_path_to_error::Track::new();
        let tracked = serde_path_to_error::Deserializer::new(value, &mut track);
        let typed = serde_ignored::deserialize(tracked, |path| unknown.push(path.to_string()));
        let typed = typed.map_err(|e| format!("{}: {e}", track.path()))?;
        // apiVersion and kind were checked above; the generated types read them only when they serialize.
        let known = |path: &String| path == "apiVersion" || path == "kind" || path.starts_with("status");
        match unknown.into_iter().find(|path| !known(path)) {
            Some(path) => Err(format!("{path}: unknown field")),
            None => Ok(typed),
        }
    }
    let mut manifest = match kind {
        "WorkSession" => {
            let ws: WorkSession = typed(value)?;
            api::validate_spec(&ws.spec).map_err(|e| e.to_string())?;
            Manifest::Session(Box::new(ws))
        }
        "WorkEvent" => {
            let ev: WorkEvent = typed(value)?;
            if ev.spec.session.is_empty() || ev.spec.prompt.is_empty() {
                return Err("spec.session and spec.prompt are required".into());
            }
            Manifest::Event(Box::new(ev))
        }
        other => return Err(format!("kind: {other:?} is neither WorkSession nor WorkEvent")),
    };
    let meta = match &mut manifest {
        Manifest::Session(ws) => &mut ws.metadata,
        Manifest::Event(ev) => &mut ev.metadata,
    };
    if meta.name.as_deref().is_none_or(str::is_empty) {
        return Err("metadata.name is required".into());
    }
    meta.namespace.get_or_insert_with(|| NAMESPACE.to_string());
    let created = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    if meta.creation_timestamp.is_none() {
        let since = created.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).unwrap_or_default();
        let ts = k8s_openapi::jiff::Timestamp::from_nanosecond(since.as_nanos() as i128).unwrap_or_default();
        meta.creation_timestamp = Some(Time(ts));
    }
    meta.generation.get_or_insert(1);
    Ok(manifest)
}

impl LocalStore {
    /// The store over `dir` (created if missing).
    pub fn new(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        Ok(Self { dir, reported: Mutex::new(HashMap::new()) })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every valid manifest with its path; invalid ones are reported once per version and skipped.
    fn scan(&self) -> Result<Vec<(PathBuf, Manifest)>, StoreError> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(local_err)? {
            let path = entry.map_err(local_err)?.path();
            if path.extension().is_none_or(|e| e != "yaml") || is_status(&path) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else { continue }; // gone meanwhile
            match parse(&path, &text) {
                Ok(m) => out.push((path, m)),
                Err(problem) => self.report(&path, &problem),
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    fn report(&self, path: &Path, problem: &str) {
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
        let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        if reported.get(path) != Some(&modified) {
            reported.insert(path.to_path_buf(), modified);
            tracing::error!(event = "local.invalid_manifest", file = %path.display(), "{problem}; skipped");
        }
    }

    fn read_status<K: DeserializeOwned>(path: &Path) -> Option<K> {
        let text = std::fs::read_to_string(status_path(path)).ok()?;
        serde_yaml_ng::from_str(&text).ok()
    }

    /// Every WorkSession: its manifest merged with its status, and sessions being deleted (status file only).
    pub fn session_files(&self) -> Result<Vec<(PathBuf, WorkSession)>, StoreError> {
        let mut out = Vec::new();
        for (path, m) in self.scan()? {
            if let Manifest::Session(mut ws) = m {
                if let Some(recorded) = Self::read_status::<WorkSession>(&path) {
                    ws.status = recorded.status;
                    ws.metadata.finalizers = Some(vec![FINALIZER.into()]);
                }
                out.push((path, *ws));
            }
        }
        // Status files whose manifest is gone: deleted sessions, still to be cleaned up.
        for entry in std::fs::read_dir(&self.dir).map_err(local_err)? {
            let path = entry.map_err(local_err)?.path();
            let name = path.to_string_lossy();
            let Some(manifest) = name.strip_suffix(".status.yaml").map(|m| PathBuf::from(format!("{m}.yaml"))) else {
                continue;
            };
            if manifest.exists() {
                continue;
            }
            let recorded: Value =
                serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap_or_default()).unwrap_or_default();
            match recorded.get("kind").and_then(Value::as_str) {
                Some("WorkSession") => {
                    let Ok(mut ws) = serde_json::from_value::<WorkSession>(recorded) else { continue };
                    ws.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
                    ws.metadata.finalizers = Some(vec![FINALIZER.into()]);
                    out.push((manifest, ws));
                }
                // An event's manifest was removed by hand: its status goes with it.
                Some("WorkEvent") => drop(std::fs::remove_file(&path)),
                _ => {}
            }
        }
        Ok(out)
    }

    fn session_path(&self, name: &str) -> Result<Option<(PathBuf, WorkSession)>, StoreError> {
        Ok(self.session_files()?.into_iter().find(|(_, ws)| ws.name_any() == name))
    }

    /// Every WorkEvent with its status.
    pub fn all_events(&self) -> Result<Vec<(PathBuf, WorkEvent)>, StoreError> {
        let mut out = Vec::new();
        for (path, m) in self.scan()? {
            if let Manifest::Event(mut ev) = m {
                ev.status = Self::read_status::<WorkEvent>(&path).and_then(|e| e.status);
                out.push((path, *ev));
            }
        }
        Ok(out)
    }

    fn event_path(&self, name: &str) -> Result<Option<PathBuf>, StoreError> {
        Ok(self.all_events()?.into_iter().find(|(_, ev)| ev.name_any() == name).map(|(p, _)| p))
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
        Ok(self.all_events()?.into_iter().map(|(_, e)| e).filter(|e| e.spec.session == session).collect())
    }

    async fn write_status(&self, ws: &WorkSession, status: &WorkSessionStatus) -> Result<(), StoreError> {
        let Some((path, _)) = self.session_path(&ws.name_any())? else { return Ok(()) };
        let mut recorded = ws.clone();
        recorded.metadata.deletion_timestamp = None;
        recorded.metadata.finalizers = None;
        recorded.status = Some(status.clone());
        write_atomic(&status_path(&path), &recorded).map_err(local_err)
    }

    async fn write_event_status(&self, ev: &WorkEvent, status: &WorkEventStatus) -> Result<(), StoreError> {
        let Some(path) = self.event_path(&ev.name_any())? else { return Ok(()) };
        let mut recorded = ev.clone();
        recorded.status = Some(status.clone());
        write_atomic(&status_path(&path), &recorded).map_err(local_err)
    }

    async fn delete_event(&self, ev: &WorkEvent) -> Result<(), StoreError> {
        if let Some(path) = self.event_path(&ev.name_any())? {
            let _ = std::fs::remove_file(status_path(&path));
            let _ = std::fs::remove_file(&path);
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
            let _ = std::fs::remove_file(status_path(&path));
            ws.metadata.finalizers = None;
        }
        Ok(ws)
    }

    async fn record(&self, _ws: &WorkSession, _notice: &Notice) {
        // Local mode has no Event objects: the reconciler's log line is the record.
    }
}

impl Sink for std::sync::Arc<LocalStore> {
    async fn session(
        &self,
        _namespace: &str,
        name: &str,
        create: Option<WorkSession>,
    ) -> Result<Option<WorkSession>, SinkError> {
        let unavailable = |e: StoreError| SinkError::Unavailable(e.to_string());
        if let Some((_, ws)) = self.session_path(name).map_err(unavailable)? {
            return Ok(Some(ws));
        }
        let Some(ws) = create else { return Ok(None) };
        let value = manifest("WorkSession", &ws.metadata, &ws.spec);
        create_exclusive(&self.dir.join(format!("{}.yaml", ws.name_any())), &value)
            .map_err(|e| SinkError::Unavailable(e.to_string()))?;
        Ok(Some(ws))
    }

    async fn create_event(&self, _namespace: &str, event: &WorkEvent) -> Result<bool, SinkError> {
        let value = manifest("WorkEvent", &event.metadata, &event.spec);
        create_exclusive(&self.dir.join(format!("{}.yaml", event.name_any())), &value)
            .map_err(|e| SinkError::Unavailable(e.to_string()))
    }

    async fn ready(&self) -> bool {
        self.dir.is_dir()
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            parse(&dir.path().join("no-item.yaml"), &std::fs::read_to_string(dir.path().join("no-item.yaml")).unwrap())
                .err()
                .unwrap(),
            "spec: missing field `workItem`"
        );
        assert!(
            parse(&dir.path().join("dash.yaml"), &std::fs::read_to_string(dir.path().join("dash.yaml")).unwrap())
                .err()
                .unwrap()
                .contains("spec.workItem")
        );
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
