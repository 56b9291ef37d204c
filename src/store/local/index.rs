//! The index of local mode's directory, below [`super::LocalStore`]: every manifest and status file parsed once per
//! change and found by name and by session, so a reconcile reads memory, not the disk. What changed is told by
//! file-system notifications (see [`super::LocalStore::watching`]) or found by a rescan that reads only the files whose
//! size, modification time or inode changed; each change names the sessions it touches, which the agent's local
//! driver reconciles.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::NAMESPACE;
use crate::api::{self, WorkBudget, WorkEvent, WorkSession};
use crate::store::FINALIZER;

/// One manifest read from the directory.
pub(super) enum Manifest {
    Session(Box<WorkSession>),
    Event(Box<WorkEvent>),
    Budget(Box<WorkBudget>),
}

/// The status file of `manifest`.
pub(super) fn status_path(manifest: &Path) -> PathBuf {
    manifest.with_extension("status.yaml")
}

fn is_status(path: &Path) -> bool {
    path.to_string_lossy().ends_with(".status.yaml")
}

/// The manifest whose status file is `status`.
fn manifest_of(status: &Path) -> PathBuf {
    PathBuf::from(format!("{}.yaml", status.to_string_lossy().trim_end_matches(".status.yaml")))
}

/// Whether `path` is one the index holds: a `.yaml` file (temporary files are `.tmp-*`).
pub(super) fn is_indexed(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "yaml")
}

/// What tells that a file changed without reading it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: SystemTime,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok().filter(|m| m.is_file())?;
    Some(Stamp { len: meta.len(), modified: meta.modified().ok()?, inode: meta.ino() })
}

/// A file as parsed.
enum Content {
    Manifest(Manifest),
    /// A manifest that does not parse or breaks the schema (reported when read), and why.
    Invalid(String),
    /// A status file: the whole object as the agent wrote it.
    Status(Manifest),
    /// A status file that does not parse.
    OtherStatus,
}

impl Content {
    /// The session a change of this file concerns.
    fn session(&self) -> Option<String> {
        match self {
            Content::Manifest(Manifest::Session(ws)) | Content::Status(Manifest::Session(ws)) => Some(ws.name_any()),
            Content::Manifest(Manifest::Event(ev)) | Content::Status(Manifest::Event(ev)) => {
                Some(ev.spec.session.clone())
            }
            Content::Manifest(Manifest::Budget(_)) | Content::Status(Manifest::Budget(_)) => None,
            Content::Invalid(_) | Content::OtherStatus => None,
        }
    }
}

struct Indexed {
    stamp: Stamp,
    content: Content,
}

/// Every `.yaml` file of the directory, parsed.
#[derive(Default)]
pub(super) struct Index {
    files: BTreeMap<PathBuf, Indexed>,
    /// Session name to its manifest's path (for a deleted session, the path its status file belongs to). The first
    /// manifest in path order wins a name two of them claim.
    sessions: HashMap<String, PathBuf>,
    /// Event name to its manifest's path.
    events: HashMap<String, PathBuf>,
    /// Budget name to its manifest's path.
    budgets: HashMap<String, PathBuf>,
    /// Session name to the manifest paths of the events that name it.
    by_session: HashMap<String, Vec<PathBuf>>,
    /// Manifests the API server would refuse though they parse, and why: a session's edit of an immutable field (the
    /// session stays as its status file recorded it, as the API server keeps the old object when it refuses an
    /// update), and a name another manifest took first (in path order).
    refused: BTreeMap<PathBuf, String>,
    /// Session manifests that went, with their stamps, while their status files remain: one that comes back under
    /// another path with the same stamp was renamed (the same inode, length and modification time).
    gone: HashMap<PathBuf, Stamp>,
    /// Whether the three maps above are behind `files`.
    stale: bool,
    /// Whether a session's manifest went since the last call of [`Index::take_went`].
    went: bool,
    /// Files read (and parsed) so far: once per change.
    pub(super) reads: usize,
    /// Sessions touched by a change since [`Index::take_touched`]: anyone's, the agent's own writes included, as a
    /// watch on the API server reports the agent's own status writes (the core counts on that wake).
    touched: HashSet<String>,
}

impl Index {
    /// Reads `path` again if it changed (or went); a change touches the sessions its old and new contents name.
    pub(super) fn reload(&mut self, path: &Path) {
        let now = stamp(path);
        if self.files.get(path).map(|f| f.stamp) == now {
            return;
        }
        let old = self.files.remove(path);
        let new = now.and_then(|stamp| {
            let text = std::fs::read_to_string(path).ok()?; // gone meanwhile
            self.reads += 1;
            Some(Indexed { stamp, content: read(path, &text) })
        });
        self.touched.extend(old.iter().chain(&new).filter_map(|f| f.content.session()));
        if let (Some(Indexed { stamp, content: Content::Manifest(Manifest::Session(_)) }), None) = (&old, &new) {
            self.gone.insert(path.to_path_buf(), *stamp);
            self.went = true;
        }
        if let Some(file) = new {
            self.files.insert(path.to_path_buf(), file);
        }
        self.stale = true;
    }

    /// Stats every file of `dir`, reading again those that changed and dropping those that went.
    pub(super) fn rescan(&mut self, dir: &Path) -> std::io::Result<()> {
        let mut present = HashSet::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if is_indexed(&path) {
                present.insert(path);
            }
        }
        let gone: Vec<PathBuf> = self.files.keys().filter(|p| !present.contains(*p)).cloned().collect();
        for path in gone.iter().chain(&present) {
            self.reload(path);
        }
        Ok(())
    }

    /// Whether a session's manifest went since the last call: it may have been renamed, and the notification of its
    /// new path may not have come yet.
    pub(super) fn take_went(&mut self) -> bool {
        std::mem::take(&mut self.went)
    }

    /// The sessions touched since the last call.
    pub(super) fn take_touched(&mut self) -> HashSet<String> {
        std::mem::take(&mut self.touched)
    }

    fn maps(&mut self) -> &Self {
        // A status file that followed its renamed manifest changes what that manifest's checks see: once more, then.
        while self.stale {
            self.stale = self.rebuild();
        }
        self
    }

    /// Builds the maps from `files`; whether a status file moved to follow its renamed manifest (the maps are then
    /// behind again).
    fn rebuild(&mut self) -> bool {
        let (mut sessions, mut events): (HashMap<String, PathBuf>, HashMap<String, PathBuf>) = Default::default();
        let mut budgets = HashMap::new();
        let mut by_session = HashMap::<_, Vec<_>>::new();
        let (mut orphans, mut refused, mut left) = (Vec::new(), BTreeMap::new(), Vec::new());
        let taken = |first: &PathBuf, name: String| format!("metadata.name {name:?} is taken by {}", first.display());
        for (path, file) in &self.files {
            let problem = match &file.content {
                Content::Manifest(Manifest::Session(ws)) => {
                    let recorded = self.status(path, |m| match m {
                        Manifest::Session(ws) => Some(ws),
                        Manifest::Event(_) | Manifest::Budget(_) => None,
                    });
                    // The API server never renames an object: a name edited in place is refused, and the session
                    // its status file records runs on (a second one under the new name would run its conversation
                    // beside it).
                    let name = recorded.map_or_else(|| ws.name_any(), |old| old.name_any());
                    match sessions.entry(name.clone()) {
                        Entry::Occupied(first) => Some(taken(first.get(), name)),
                        Entry::Vacant(entry) => {
                            entry.insert(path.clone());
                            match recorded {
                                Some(_) if name != ws.name_any() => Some(format!(
                                    "metadata.name cannot change from {name:?} to {:?}: the session runs on as its \
                                     status file recorded it (to start another, remove this file and write a new one)",
                                    ws.name_any()
                                )),
                                Some(old) => api::immutable_change(&old.spec, &ws.spec).map(|e| e.to_string()),
                                None => None,
                            }
                        }
                    }
                }
                Content::Manifest(Manifest::Budget(budget)) => match budgets.entry(budget.name_any()) {
                    Entry::Occupied(first) => Some(taken(first.get(), budget.name_any())),
                    Entry::Vacant(entry) => {
                        entry.insert(path.clone());
                        None
                    }
                },
                Content::Manifest(Manifest::Event(ev)) => match events.entry(ev.name_any()) {
                    Entry::Occupied(first) => Some(taken(first.get(), ev.name_any())),
                    Entry::Vacant(entry) => {
                        entry.insert(path.clone());
                        by_session.entry(ev.spec.session.clone()).or_default().push(path.clone());
                        None
                    }
                },
                // A status without its manifest: a session being deleted, or an event removed by hand.
                Content::Status(m) if !self.files.contains_key(&manifest_of(path)) => match m {
                    Manifest::Session(ws) => {
                        left.push((path.clone(), ws.name_any(), ws.metadata.creation_timestamp.clone()));
                        None
                    }
                    Manifest::Event(_) | Manifest::Budget(_) => {
                        orphans.push(path.clone());
                        None
                    }
                },
                _ => None,
            };
            if let Some(problem) = problem {
                // Reported once per change, as an invalid manifest is.
                if self.refused.get(path) != Some(&problem) {
                    tracing::error!(event = "local.invalid_manifest", file = %path.display(), "{problem}");
                }
                refused.insert(path.clone(), problem);
            }
        }
        // A session's status whose manifest went: the manifest was renamed (the same file is there under another
        // path, without a status of its own), and the status follows it, so the session and its conversation go on;
        // else the session is being deleted (a new file that reuses the name is a new session, once the old one is
        // gone).
        let mut moved = false;
        for (status, name, created) in left {
            let manifest = sessions.get(&name).cloned();
            // The same file under another name: its stamp when it went, or (the agent restarted since) its birth.
            let went = self.gone.get(&manifest_of(&status));
            let made_then = |path: &PathBuf| match self.files.get(path) {
                Some(Indexed { stamp, content: Content::Manifest(Manifest::Session(ws)) }) => {
                    // A status records its creation to the second, as the API server does.
                    let second = |t: &Option<Time>| t.as_ref().map(|t| t.0.as_second());
                    went == Some(stamp) || second(&ws.metadata.creation_timestamp) == second(&created)
                }
                _ => false,
            };
            let Some(path) = manifest else {
                sessions.insert(name, manifest_of(&status));
                continue;
            };
            let to = status_path(&path);
            if self.files.contains_key(&to) {
                continue; // a manifest of that name with a status of its own: this one is a leftover
            }
            if !made_then(&path) {
                // A new file that took the name: it waits until the old session's deletion ends.
                let problem = format!(
                    "metadata.name {name:?} belongs to a session being deleted: this one is created once that ends"
                );
                if self.refused.get(&path) != Some(&problem) {
                    tracing::error!(event = "local.invalid_manifest", file = %path.display(), "{problem}");
                }
                refused.insert(path, problem);
                sessions.insert(name, manifest_of(&status));
                continue;
            }
            match std::fs::rename(&status, &to) {
                Ok(()) => {
                    tracing::info!(event = "local.renamed", file = %to.display(), "the status follows its manifest");
                    if let Some(file) = self.files.remove(&status) {
                        self.files.insert(to, file);
                    }
                    self.touched.insert(name);
                    moved = true;
                }
                Err(e) => tracing::error!(
                    event = "local.rename_failed",
                    file = %status.display(),
                    "the status cannot follow its renamed manifest: {e}"
                ),
            }
        }
        let files = &self.files;
        self.gone.retain(|manifest, _| files.contains_key(&status_path(manifest)));
        // An event's manifest was removed by hand: its status goes with it.
        for path in orphans {
            let _ = std::fs::remove_file(&path);
            self.files.remove(&path);
        }
        (self.sessions, self.events, self.by_session, self.refused) = (sessions, events, by_session, refused);
        self.budgets = budgets;
        moved
    }

    /// The manifests that are skipped (they do not parse or break the schema) or whose last edit is refused, with
    /// why, in path order.
    pub(super) fn refusals(&mut self) -> Vec<(PathBuf, String)> {
        let refused = self.maps().refused.clone();
        let invalid = self.files.iter().filter_map(|(path, file)| match &file.content {
            Content::Invalid(why) if !why.is_empty() => Some((path.clone(), why.clone())),
            _ => None,
        });
        let mut all: Vec<(PathBuf, String)> = invalid.chain(refused).collect();
        all.sort();
        all
    }

    fn status<K: Clone>(&self, manifest: &Path, pick: impl Fn(&Manifest) -> Option<&K>) -> Option<&K> {
        match &self.files.get(&status_path(manifest))?.content {
            Content::Status(m) => pick(m),
            _ => None,
        }
    }

    /// The WorkSession `name` with its manifest's path: the manifest merged with its status, or, with only a status
    /// file left, a session being deleted.
    pub(super) fn session(&mut self, name: &str) -> Option<(PathBuf, WorkSession)> {
        let path = self.maps().sessions.get(name)?.clone();
        let recorded = self.status(&path, |m| match m {
            Manifest::Session(ws) => Some(ws),
            Manifest::Event(_) | Manifest::Budget(_) => None,
        });
        let ws = match self.files.get(&path).map(|f| &f.content) {
            Some(Content::Manifest(Manifest::Session(ws))) => {
                let mut ws = ws.as_ref().clone();
                if let Some(recorded) = recorded {
                    if self.refused.contains_key(&path) {
                        // The refused edit is not applied.
                        (ws.spec, ws.metadata.name) = (recorded.spec.clone(), recorded.metadata.name.clone());
                    }
                    ws.status = recorded.status.clone();
                    ws.metadata.finalizers = Some(vec![FINALIZER.into()]);
                }
                // The label the agent keeps on a cluster, which here no other node reads: as the status says.
                let limited = ws.status.as_ref().and_then(|s| s.usage.as_ref()).is_some_and(|u| u.limit.is_some());
                if limited {
                    ws.labels_mut().insert(api::USAGE_LIMITED_LABEL.into(), "true".into());
                }
                ws
            }
            Some(_) => return None,
            None => {
                let mut ws = recorded?.as_ref().clone();
                ws.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
                ws.metadata.finalizers = Some(vec![FINALIZER.into()]);
                ws
            }
        };
        Some((path, ws))
    }

    /// Every WorkSession (see [`Index::session`]), in path order.
    pub(super) fn sessions(&mut self) -> Vec<(PathBuf, WorkSession)> {
        let mut names: Vec<(PathBuf, String)> =
            self.maps().sessions.iter().map(|(name, path)| (path.clone(), name.clone())).collect();
        names.sort();
        names.into_iter().filter_map(|(_, name)| self.session(&name)).collect()
    }

    /// Every WorkBudget, in path order (local mode writes no status of one: the driver sums).
    pub(super) fn budgets(&mut self) -> Vec<WorkBudget> {
        let mut paths: Vec<PathBuf> = self.maps().budgets.values().cloned().collect();
        paths.sort();
        let budget = |path: &PathBuf| match self.files.get(path).map(|f| &f.content) {
            Some(Content::Manifest(Manifest::Budget(budget))) => Some(budget.as_ref().clone()),
            _ => None,
        };
        paths.iter().filter_map(budget).collect()
    }

    /// The path of the WorkEvent `name`'s manifest.
    pub(super) fn event_path(&mut self, name: &str) -> Option<PathBuf> {
        self.maps().events.get(name).cloned()
    }

    fn event(&self, path: &Path) -> Option<WorkEvent> {
        let Some(Content::Manifest(Manifest::Event(ev))) = self.files.get(path).map(|f| &f.content) else {
            return None;
        };
        let mut ev = ev.as_ref().clone();
        // A status recorded for an earlier object of the same name (another UID) is not this one's.
        let same = |recorded: &WorkEvent| {
            recorded.metadata.uid.as_ref().is_none_or(|uid| ev.metadata.uid.as_ref() == Some(uid))
        };
        ev.status = self
            .status(path, |m| match m {
                Manifest::Event(ev) => Some(ev),
                Manifest::Session(_) | Manifest::Budget(_) => None,
            })
            .filter(|recorded| same(recorded))
            .and_then(|recorded| recorded.status.clone());
        Some(ev)
    }

    /// The WorkEvents naming `session` (every one with `None`), with their status, in path order.
    pub(super) fn events(&mut self, session: Option<&str>) -> Vec<(PathBuf, WorkEvent)> {
        let mut paths: Vec<PathBuf> = match session {
            Some(session) => self.maps().by_session.get(session).cloned().unwrap_or_default(),
            None => self.maps().events.values().cloned().collect(),
        };
        paths.sort();
        paths.into_iter().filter_map(|path| Some((path.clone(), self.event(&path)?))).collect()
    }
}

/// Parses a file of the directory; an invalid manifest is reported (once per version: it is read once per change).
fn read(path: &Path, text: &str) -> Content {
    if is_status(path) {
        let object: Option<Value> = serde_yaml_ng::from_str(text).ok();
        return match object.as_ref().and_then(|v| v.get("kind")).and_then(Value::as_str) {
            Some("WorkSession") => object
                .and_then(|v| serde_json::from_value(v).ok())
                .map_or(Content::OtherStatus, |ws| Content::Status(Manifest::Session(Box::new(ws)))),
            Some("WorkEvent") => object
                .and_then(|v| serde_json::from_value(v).ok())
                .map_or(Content::OtherStatus, |ev| Content::Status(Manifest::Event(Box::new(ev)))),
            _ => Content::OtherStatus,
        };
    }
    if text.trim().is_empty() {
        return Content::Invalid(String::new()); // being written (`>` truncates first): its next change says more
    }
    match parse(path, text) {
        Ok(manifest) => Content::Manifest(manifest),
        Err(problem) => {
            tracing::error!(event = "local.invalid_manifest", file = %path.display(), "{problem}; skipped");
            Content::Invalid(problem)
        }
    }
}

/// Parses one manifest: the right apiVersion and kind, the spec's required fields and shapes.
pub(super) fn parse(path: &Path, text: &str) -> Result<Manifest, String> {
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
    let (kind, mut manifest) = match kind {
        "WorkSession" => {
            let ws: WorkSession = typed(value)?;
            api::validate_spec(&ws.spec).map_err(|e| e.to_string())?;
            (api::Kind::WorkSession, Manifest::Session(Box::new(ws)))
        }
        "WorkBudget" => {
            let budget: WorkBudget = typed(value)?;
            if let Some((field, problem)) = budget.spec.problem() {
                return Err(format!("{field}: {problem}"));
            }
            (api::Kind::WorkBudget, Manifest::Budget(Box::new(budget)))
        }
        "WorkEvent" => {
            let ev: WorkEvent = typed(value)?;
            if let Some(problem) = ev.spec.problem() {
                return Err(problem);
            }
            (api::Kind::WorkEvent, Manifest::Event(Box::new(ev)))
        }
        other => return Err(format!("kind: {other:?} is none of WorkSession, WorkEvent and WorkBudget")),
    };
    let meta = match &mut manifest {
        Manifest::Session(ws) => &mut ws.metadata,
        Manifest::Event(ev) => &mut ev.metadata,
        Manifest::Budget(budget) => &mut budget.metadata,
    };
    let Some(name) = meta.name.clone().filter(|n| !n.is_empty()) else {
        return Err("metadata.name is required".into());
    };
    // The API server's checks of names, which local mode would otherwise skip: a name reaches tmux tags, file names
    // and labels.
    api::validate_name(kind, &name, meta.namespace.as_deref())?;
    meta.namespace.get_or_insert_with(|| NAMESPACE.to_string());
    // When the file was made (its birth time where the file system keeps one): a file made again is a new object.
    let created = std::fs::metadata(path).and_then(|m| m.created().or_else(|_| m.modified())).ok();
    if meta.creation_timestamp.is_none() {
        let since = created.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).unwrap_or_default();
        let ts = k8s_openapi::jiff::Timestamp::from_nanosecond(since.as_nanos() as i128).unwrap_or_default();
        meta.creation_timestamp = Some(Time(ts));
    }
    if kind == api::Kind::WorkEvent {
        // The API server gives each object a UID (whatever the manifest says); here a WorkEvent gets one made from its
        // name and creation, so one made again under a used name is a new delivery (its paste tag and status are its
        // own). A WorkSession keeps none: its file is rewritten by every edit, and its identity in tmux is its
        // `namespace/name`.
        let created = meta.creation_timestamp.as_ref().map(|t| t.0.as_nanosecond()).unwrap_or_default();
        meta.uid = Some(api::made_uid(meta.namespace.as_deref().unwrap_or(NAMESPACE), &name, created));
    }
    meta.generation.get_or_insert(1);
    Ok(manifest)
}
