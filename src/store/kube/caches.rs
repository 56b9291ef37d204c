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

    /// The session changed since the version `ws` was read at (a write over that version was refused): read it
    /// fresh until the cache shows the version that read finds.
    pub(super) fn behind_on(&self, ws: &WorkSession) {
        let (namespace, name) = (ws.namespace().unwrap_or_default(), ws.name_any());
        let mut ahead = self.ahead.lock().unwrap();
        ahead.wrote(&namespace, &name);
        // No version is empty: the cache never matches it.
        ahead.known.insert(Key::Session(namespace, name), Some(String::new()));
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

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;

    use super::*;

    fn session(version: &str) -> WorkSession {
        let mut ws = WorkSession::new("s", Default::default());
        ws.metadata.namespace = Some("ns".into());
        ws.metadata.resource_version = Some(version.into());
        ws
    }

    fn event(name: &str, version: &str, label: Option<&str>) -> WorkEvent {
        let mut ev: WorkEvent = serde_json::from_value(serde_json::json!({
            "apiVersion": "worksession.dev/v1alpha1", "kind": "WorkEvent",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
            "spec": {"session": "s", "prompt": "p"},
        }))
        .unwrap();
        if let Some(label) = label {
            ev.labels_mut().insert(crate::api::NODE_LABEL.into(), label.into());
        }
        ev
    }

    struct Rig {
        sessions: Writer<WorkSession>,
        events: Writer<WorkEvent>,
        unlabelled: Writer<WorkEvent>,
        caches: Caches,
    }

    /// Caches over watches that listed nothing yet.
    fn rig() -> Rig {
        let (sessions, events, unlabelled) = (Writer::default(), Writer::default(), Writer::default());
        let caches = Caches::new(sessions.as_reader(), events.as_reader(), unlabelled.as_reader(), "node-a");
        Rig { sessions, events, unlabelled, caches }
    }

    fn list<K: kube::Resource<DynamicType = ()> + Clone>(writer: &mut Writer<K>, objects: &[K]) {
        writer.apply_watcher_event(&Event::Init);
        objects.iter().for_each(|o| writer.apply_watcher_event(&Event::InitApply(o.clone())));
        writer.apply_watcher_event(&Event::InitDone);
    }

    async fn listed(rig: &mut Rig, events: &[WorkEvent], unlabelled: &[WorkEvent]) {
        list(&mut rig.events, events);
        list(&mut rig.unlabelled, unlabelled);
        while !rig.caches.listed.load(Ordering::Acquire) {
            tokio::task::yield_now().await;
        }
    }

    fn version(ws: Option<WorkSession>) -> Option<String> {
        ws.and_then(|ws| ws.metadata.resource_version)
    }

    #[tokio::test]
    async fn a_session_comes_from_the_cache_unless_the_agent_wrote_or_read_a_version_it_has_not_shown() {
        let mut rig = rig();
        assert!(rig.caches.session("ns", "s").is_none(), "not listed yet: read fresh");
        list(&mut rig.sessions, &[session("1")]);
        assert_eq!(version(rig.caches.session("ns", "s")), Some("1".into()));

        rig.caches.wrote_session(&session("2"));
        assert!(rig.caches.session("ns", "s").is_none(), "behind the agent's own write");
        rig.sessions.apply_watcher_event(&Event::Apply(session("2")));
        assert_eq!(version(rig.caches.session("ns", "s")), Some("2".into()));
        rig.sessions.apply_watcher_event(&Event::Apply(session("3")));
        assert_eq!(version(rig.caches.session("ns", "s")), Some("3".into()), "caught up: what follows is newer");

        // A write refused over the version read: read fresh, and the cache again once it shows what that found.
        rig.caches.behind_on(&session("3"));
        assert!(rig.caches.session("ns", "s").is_none());
        let since = rig.caches.reading("ns", "s");
        rig.caches.read_session("ns", "s", Some(&session("4")), since);
        assert!(rig.caches.session("ns", "s").is_none());
        rig.sessions.apply_watcher_event(&Event::Apply(session("4")));
        assert_eq!(version(rig.caches.session("ns", "s")), Some("4".into()));
    }

    #[tokio::test]
    async fn a_fresh_read_that_began_before_a_write_records_nothing() {
        let mut rig = rig();
        list(&mut rig.sessions, &[session("1")]);
        let since = rig.caches.reading("ns", "s");
        rig.caches.wrote_session(&session("2"));
        rig.caches.read_session("ns", "s", Some(&session("1")), since);
        assert!(rig.caches.session("ns", "s").is_none(), "the write's version still awaited, not the read's older one");
    }

    #[tokio::test]
    async fn events_come_from_both_watches_once_listed_and_wait_for_the_agents_own_writes() {
        let mut rig = rig();
        assert!(rig.caches.events("ns", "s").is_none(), "an empty cache before its listing says nothing");
        let mine = event("e1", "1", Some("node-a"));
        let by_hand = event("e2", "1", None);
        listed(&mut rig, std::slice::from_ref(&mine), &[by_hand]).await;
        let names = |evs: Option<Vec<WorkEvent>>| evs.map(|evs| evs.iter().map(|e| e.name_any()).collect::<Vec<_>>());
        assert_eq!(names(rig.caches.events("ns", "s")), Some(vec!["e1".into(), "e2".into()]));

        // Its status written: the cache is used again once it shows that version.
        rig.caches.wrote_event(&event("e1", "2", Some("node-a")), false);
        assert!(rig.caches.events("ns", "s").is_none());
        rig.events.apply_watcher_event(&Event::Apply(event("e1", "2", Some("node-a"))));
        assert!(rig.caches.events("ns", "s").is_some());

        // Deleted: until the cache drops it.
        rig.caches.wrote_event(&mine, true);
        assert!(rig.caches.events("ns", "s").is_none());
        rig.events.apply_watcher_event(&Event::Delete(mine));
        assert_eq!(names(rig.caches.events("ns", "s")), Some(vec!["e2".into()]));

        // Labelled meanwhile: in both watches for a moment, the labelled copy is the one read.
        rig.events.apply_watcher_event(&Event::Apply(event("e2", "3", Some("node-a"))));
        let read = rig.caches.events("ns", "s").unwrap();
        assert_eq!(read.iter().map(|e| e.resource_version().unwrap()).collect::<Vec<_>>(), ["3"]);
    }

    #[tokio::test]
    async fn an_event_labelled_for_another_node_is_not_waited_for() {
        let mut rig = rig();
        listed(&mut rig, &[], &[]).await;
        rig.caches.wrote_event(&event("e3", "5", Some("node-b")), false);
        assert_eq!(rig.caches.events("ns", "s").map(|e| e.len()), Some(0));
    }
}
