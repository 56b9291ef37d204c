//! Local mode's [`Sink`]: what the bridge writes into the directory (below [`super::LocalStore`]), each
//! read-compare-write of a manifest one at a time.

use std::path::Path;

use kube::ResourceExt;
use serde_json::Value;

use super::{LocalStore, StoreError, create_exclusive, lock, manifest, write_atomic};
use crate::api::{PromptPhase, WorkEvent, WorkSession};
use crate::store::{Archived, Sink, SinkError};

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
        let path = self.dir.join(format!("{}.yaml", ws.name_any()));
        create_exclusive(&path, &value).map_err(|e| SinkError::Unavailable(e.to_string()))?;
        lock(&self.index).reload(&path);
        Ok(Some(ws))
    }

    async fn count_sessions(&self, _namespace: &str, (key, value): (&str, &str)) -> Result<usize, SinkError> {
        let sessions = self.session_files().map_err(|e| SinkError::Unavailable(e.to_string()))?;
        let going = |ws: &WorkSession| ws.metadata.deletion_timestamp.is_some();
        Ok(sessions.iter().filter(|(_, ws)| !going(ws) && ws.labels().get(key).is_some_and(|v| v == value)).count())
    }

    async fn create_event(&self, _namespace: &str, event: &WorkEvent) -> Result<bool, SinkError> {
        let value = manifest("WorkEvent", &event.metadata, &event.spec);
        let path = self.dir.join(format!("{}.yaml", event.name_any()));
        let created = create_exclusive(&path, &value).map_err(|e| SinkError::Unavailable(e.to_string()))?;
        lock(&self.index).reload(&path);
        Ok(created)
    }

    async fn archive(
        &self,
        _namespace: &str,
        name: &str,
        archived: bool,
        _delete_at: Option<k8s_openapi::jiff::Timestamp>,
        at: Option<k8s_openapi::jiff::Timestamp>,
    ) -> Result<Archived, SinkError> {
        let Some((path, _)) = self.session_path(name).map_err(|e| SinkError::Unavailable(e.to_string()))? else {
            return Ok(Archived::Missing);
        };
        let written = self.edit_manifest(&path, |value| {
            // Compared with the manifest as read under the edit lock: of two changes at once, the later wins.
            let recorded = value["metadata"]["annotations"][crate::api::LIFECYCLE_AT_ANNOTATION].as_str();
            let recorded = recorded.and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
            if matches!((recorded, at), (Some(recorded), Some(at)) if at < recorded) {
                return Ok(false);
            }
            let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut) else {
                return Err(SinkError::Rejected(format!("{} has no spec", path.display())));
            };
            if archived {
                spec.insert("archived".into(), Value::Bool(true));
            } else {
                spec.remove("archived");
            }
            if let Some(at) = at {
                set_meta(value, "annotations", crate::api::LIFECYCLE_AT_ANNOTATION, Some(&at.to_string()));
            }
            Ok(true)
        })?;
        Ok(if written { Archived::Written } else { Archived::Outdated })
    }

    async fn find_session(
        &self,
        _namespace: &str,
        (key, value): (&str, &str),
    ) -> Result<Option<WorkSession>, SinkError> {
        let sessions = self.session_files().map_err(|e| SinkError::Unavailable(e.to_string()))?;
        Ok(sessions.into_iter().map(|(_, ws)| ws).find(|ws| ws.labels().get(key).is_some_and(|v| v == value)))
    }

    async fn mark_session(
        &self,
        _namespace: &str,
        name: &str,
        labels: &[(&str, Option<&str>)],
        annotations: &[(&str, Option<&str>)],
    ) -> Result<bool, SinkError> {
        let Some((path, _)) = self.session_path(name).map_err(|e| SinkError::Unavailable(e.to_string()))? else {
            return Ok(false);
        };
        self.edit_manifest(&path, |value| {
            for (key, v) in labels {
                set_meta(value, "labels", key, *v);
            }
            for (key, v) in annotations {
                set_meta(value, "annotations", key, *v);
            }
            Ok(true)
        })?;
        Ok(true)
    }

    async fn update_annotation<F>(&self, _namespace: &str, name: &str, key: &str, change: F) -> Result<bool, SinkError>
    where
        F: Fn(Option<&str>) -> Option<String> + Send + Sync,
    {
        let Some((path, _)) = self.session_path(name).map_err(|e| SinkError::Unavailable(e.to_string()))? else {
            return Ok(false);
        };
        self.edit_manifest(&path, |value| {
            let Some(new) = change(value["metadata"]["annotations"][key].as_str()) else { return Ok(false) };
            set_meta(value, "annotations", key, Some(&new));
            Ok(true)
        })
    }

    async fn event(&self, _namespace: &str, name: &str) -> Result<Option<WorkEvent>, SinkError> {
        let events = self.all_events().map_err(|e| SinkError::Unavailable(e.to_string()))?;
        Ok(events.into_iter().map(|(_, e)| e).find(|e| e.name_any() == name))
    }

    async fn set_prompt(&self, event: &WorkEvent, prompt: &str) -> Result<bool, SinkError> {
        let unavailable = |e: StoreError| SinkError::Unavailable(e.to_string());
        let name = event.name_any();
        let Some(path) = self.event_path(&name).map_err(unavailable)? else { return Ok(false) };
        // As it is now: a delivery begun since it was read (its status written) keeps the prompt it took.
        let now = self.index().map_err(unavailable)?.events(None).into_iter().find(|(p, _)| *p == path);
        let begun = |e: &WorkEvent| e.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p != PromptPhase::Pending);
        if now.is_none_or(|(_, e)| begun(&e) || e.spec != event.spec) {
            return Ok(false);
        }
        self.edit_manifest(&path, |value| {
            value["spec"]["prompt"] = Value::String(prompt.to_string());
            Ok(true)
        })?;
        Ok(true)
    }

    async fn note(&self, _namespace: &str, name: &str, reason: &str, message: &str) {
        // Local mode has no Event objects: the log line is the record.
        tracing::warn!(event = "bridge.note", session = name, reason, "{message}");
    }

    async fn delete_due(&self, _now: k8s_openapi::jiff::Timestamp) -> Result<Vec<String>, SinkError> {
        // Local mode keeps what it archived (its manifests are a person's files): `onClose: Delete` archives only.
        Ok(Vec::new())
    }

    async fn ready(&self) -> bool {
        self.dir.is_dir()
    }
}

impl LocalStore {
    /// Rewrites the manifest at `path` as `edit` changes it (a person's comments go; all else keeps its meaning),
    /// unless `edit` says `false`; whether it was written. One edit at a time: each reads what the last one wrote.
    fn edit_manifest(
        &self,
        path: &Path,
        edit: impl FnOnce(&mut Value) -> Result<bool, SinkError>,
    ) -> Result<bool, SinkError> {
        let _one = lock(&self.editing);
        let unavailable = |e: String| SinkError::Unavailable(e);
        let text = std::fs::read_to_string(path).map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
        let mut value: Value =
            serde_yaml_ng::from_str(&text).map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
        if !edit(&mut value)? {
            return Ok(false);
        }
        write_atomic(path, &value).map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
        lock(&self.index).reload(path);
        Ok(true)
    }
}

/// Sets (`Some`) or removes (`None`) `metadata.<field>.<key>` of a manifest.
fn set_meta(manifest: &mut Value, field: &str, key: &str, value: Option<&str>) {
    let Some(metadata) = manifest.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    let map = metadata.entry(field).or_insert_with(|| Value::Object(Default::default()));
    if !map.is_object() {
        *map = Value::Object(Default::default());
    }
    let Some(map) = map.as_object_mut() else { return };
    match value {
        Some(v) => map.insert(key.into(), Value::String(v.into())),
        None => map.remove(key),
    };
}
