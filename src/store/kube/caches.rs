//! The agent's reads from its watches, and read-your-writes over them: a WorkSession or its WorkEvents come from the
//! watch's cache unless the agent knows of a version the cache has not shown yet (one it wrote, or read fresh), in
//! which case they are read fresh. A decision so never starts from a status older than the agent's own last write
//! (a delivered prompt pasted again, an intent forgotten), and most reconciles cost no API read at all.
//!
//! resourceVersions are compared for equality only, never for order (the API conventions make them opaque): the
//! cache is used when it holds exactly the version known, which it reaches only through that version; a write by
//! someone else since moves it past, and a fresh read then learns the newer one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::runtime::reflector::{self, ObjectRef};

use crate::api::{WorkEvent, WorkSession};

/// What the agent's watches hold (its node's WorkSessions, the WorkEvents labelled for its node and those labelled for
/// none yet), and the versions it knows of that they did not show yet.
#[derive(Clone)]
pub struct Caches {
    sessions: reflector::Store<WorkSession>,
    events: reflector::Store<WorkEvent>,
    /// Events no node label was given yet (made by hand, or before their session): a decision sees them before the
    /// labeler gets to them, as a fresh read would.
    unlabelled: reflector::Store<WorkEvent>,
    /// The value of [`crate::api::NODE_LABEL`] on the events cached.
    node_label: Option<String>,
    /// Both event watches listed once: until then an empty cache says nothing.
    listed: Arc<AtomicBool>,
    ahead: Arc<Mutex<Ahead>>,
}

/// An object the caches are behind on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Session(String, String),
    /// An event, with its session's name (what a read asks for).
    Event {
        namespace: String,
        session: String,
        name: String,
    },
}

#[derive(Default)]
struct Ahead {
    /// The version known of each object the cache has not shown yet; `None`: deleted.
    known: HashMap<Key, Option<String>>,
    /// How many writes of each session (or of its events) were recorded: a fresh read that began before one does not
    /// record what it read (its version may be older than the write's).
    writes: HashMap<(String, String), u64>,
}

impl Ahead {
    fn wrote(&mut self, namespace: &str, session: &str) {
        *self.writes.entry((namespace.into(), session.into())).or_default() += 1;
    }

    fn writes(&self, namespace: &str, session: &str) -> u64 {
        self.writes.get(&(namespace.into(), session.into())).copied().unwrap_or_default()
    }
}

impl Caches {
    /// Reads through `sessions` and `events`, the stores of the watches that wake the reconciles of `node`, and
    /// `unlabelled`, the store of a watch of the events labelled for no node.
    pub fn new(
        sessions: reflector::Store<WorkSession>,
        events: reflector::Store<WorkEvent>,
        unlabelled: reflector::Store<WorkEvent>,
        node: &str,
    ) -> Self {
        let node_label = Some(crate::api::node_label_value(node));
        let listed = Arc::new(AtomicBool::new(false));
        tokio::spawn({
            let (events, unlabelled, listed) = (events.clone(), unlabelled.clone(), listed.clone());
            async move {
                if events.wait_until_ready().await.is_ok() && unlabelled.wait_until_ready().await.is_ok() {
                    listed.store(true, Ordering::Release);
                }
            }
        });
        Self { sessions, events, unlabelled, node_label, listed, ahead: Default::default() }
    }

    /// The session's events as both watches hold them; one in both was labelled meanwhile, and the labelled copy is
    /// the newer (a label is never taken away).
    fn cached_events(&self, namespace: &str, session: &str) -> Vec<WorkEvent> {
        let of = |ev: &&std::sync::Arc<WorkEvent>| {
            ev.spec.session == session && ev.namespace().as_deref() == Some(namespace)
        };
        let labelled: Vec<WorkEvent> = self.events.state().iter().filter(of).map(|ev| (**ev).clone()).collect();
        let unlabelled = self.unlabelled.state();
        let more = unlabelled.iter().filter(of).filter(|ev| !labelled.iter().any(|l| l.name_any() == ev.name_any()));
        let more: Vec<WorkEvent> = more.map(|ev| (**ev).clone()).collect();
        labelled.into_iter().chain(more).collect()
    }

    /// The session as cached, when the cache is as new as every version known of it (`None`: read it fresh).
    pub(super) fn session(&self, namespace: &str, name: &str) -> Option<WorkSession> {
        let key = Key::Session(namespace.into(), name.into());
        let mut ahead = self.ahead.lock().unwrap();
        let Some(cached) = self.sessions.get(&ObjectRef::new(name).within(namespace)) else {
            if ahead.known.get(&key) == Some(&None) {
                ahead.known.remove(&key); // gone, and the cache shows it gone
            }
            return None; // not cached (yet): read fresh
        };
        match ahead.known.get(&key) {
            Some(Some(version)) if cached.resource_version().as_ref() == Some(version) => {
                ahead.known.remove(&key); // caught up: what it shows from now on is newer
            }
            Some(_) => return None,
            None => {}
        }
        Some((*cached).clone())
    }

    /// The session's events as cached, when the cache is as new as every version known of them (`None`: read them
    /// fresh). Only those labelled for this node are cached: one labelled elsewhere is relabelled here when its
    /// session is (and so reaches this cache, and wakes the session).
    pub(super) fn events(&self, namespace: &str, session: &str) -> Option<Vec<WorkEvent>> {
        if !self.listed.load(Ordering::Acquire) {
            return None;
        }
        let cached = self.cached_events(namespace, session);
        let mut ahead = self.ahead.lock().unwrap();
        let mut behind = false;
        ahead.known.retain(|key, version| {
            let Key::Event { namespace: ns, session: s, name } = key else { return true };
            if ns != namespace || s != session {
                return true;
            }
            let now = cached.iter().find(|ev| ev.name_any() == *name).map(|ev| ev.resource_version());
            let caught_up = match (version, now) {
                (None, None) => true,
                (Some(version), Some(now)) => now.as_ref() == Some(version),
                _ => false,
            };
            behind |= !caught_up;
            !caught_up
        });
        (!behind).then_some(cached)
    }

    /// Where a fresh read of the session (or its events) begins: what it may record.
    pub(super) fn reading(&self, namespace: &str, session: &str) -> u64 {
        self.ahead.lock().unwrap().writes(namespace, session)
    }

    /// `ws` as read fresh by a read that began at `since` ([`Self::reading`]); `None`: it is gone.
    pub(super) fn read_session(&self, namespace: &str, name: &str, ws: Option<&WorkSession>, since: u64) {
        let mut ahead = self.ahead.lock().unwrap();
        if ahead.writes(namespace, name) == since {
            ahead.known.insert(Key::Session(namespace.into(), name.into()), ws.and_then(|ws| ws.resource_version()));
        }
    }

    /// The session's events as read fresh by a read that began at `since`: what is known of them from now on.
    pub(super) fn read_events(&self, namespace: &str, session: &str, events: &[WorkEvent], since: u64) {
        let mut ahead = self.ahead.lock().unwrap();
        if ahead.writes(namespace, session) != since {
            return;
        }
        ahead.known.retain(
            |key, _| !matches!(key, Key::Event { namespace: ns, session: s, .. } if ns == namespace && s == session),
        );
        // Every event of the session the cache shows and the read did not is gone.
        for ev in self.cached_events(namespace, session) {
            if !events.iter().any(|e| e.name_any() == ev.name_any()) {
                ahead.known.insert(event_key(namespace, session, &ev.name_any()), None);
            }
        }
        // Only those labelled for this node or for none come to the cache: the others are not waited for.
        for ev in events.iter().filter(|ev| self.cached(ev)) {
            ahead.known.insert(event_key(namespace, session, &ev.name_any()), ev.resource_version());
        }
    }

    /// The session as this agent just wrote it.
    pub(super) fn wrote_session(&self, ws: &WorkSession) {
        let (namespace, name) = (ws.namespace().unwrap_or_default(), ws.name_any());
        let mut ahead = self.ahead.lock().unwrap();
        ahead.wrote(&namespace, &name);
        ahead.known.insert(Key::Session(namespace, name), ws.resource_version());
    }

    /// The event as this agent just wrote it (`deleted`: it deleted it). One the cache never shows (labelled for
    /// another node) is not waited for.
    pub(super) fn wrote_event(&self, ev: &WorkEvent, deleted: bool) {
        let namespace = ev.namespace().unwrap_or_default();
        let mut ahead = self.ahead.lock().unwrap();
        ahead.wrote(&namespace, &ev.spec.session);
        if self.cached(ev) || deleted {
            let key = event_key(&namespace, &ev.spec.session, &ev.name_any());
            ahead.known.insert(key, ev.resource_version().filter(|_| !deleted));
        }
    }
}

impl Caches {
    /// Whether the watches show `ev` as it is labelled.
    fn cached(&self, ev: &WorkEvent) -> bool {
        let label = ev.labels().get(crate::api::NODE_LABEL);
        label.is_none() || label == self.node_label.as_ref()
    }
}

fn event_key(namespace: &str, session: &str, name: &str) -> Key {
    Key::Event { namespace: namespace.into(), session: session.into(), name: name.into() }
}
