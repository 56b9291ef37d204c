//! The agent's reads from its watches, and read-your-writes over them: a WorkSession or its WorkEvents come from the
//! watch's cache unless the agent knows of a version the cache has not shown yet (one it wrote, or read fresh), or
//! the watch is listing (its store is replaced only at the listing's end, while the objects listed already wake
//! reconciles), or a write's outcome is unknown; then they are read fresh. A decision so never starts from a status
//! older than the agent's own last write (a delivered prompt pasted again, an intent forgotten), and most reconciles
//! cost no API read at all.
//!
//! resourceVersions are compared for equality only, never for order (the API conventions make them opaque): the
//! cache is used when it holds exactly the version known, which it reaches only through that version; a write by
//! someone else since moves it past, and a fresh read then learns the newer one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;

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
    /// Each watch ([`Watched`]) between the start of a listing and its end (from the agent's start until its first
    /// listing ends).
    listing: Arc<[AtomicBool; 3]>,
    ahead: Arc<Mutex<Ahead>>,
}

/// One of the watches [`Caches`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watched {
    /// The node's WorkSessions.
    Sessions,
    /// The WorkEvents labelled for the node.
    Events,
    /// The WorkEvents labelled for no node.
    Unlabelled,
}

/// How a write of a WorkEvent went.
pub(super) enum EventWrite<'a> {
    /// Written: the event as the API server returned it.
    Wrote(&'a WorkEvent),
    /// Deleted (or already gone).
    Deleted,
    /// Failed, with its outcome unknown.
    Unknown,
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

impl Key {
    fn of_session(&self) -> (&str, &str) {
        match self {
            Key::Session(namespace, session) | Key::Event { namespace, session, .. } => (namespace, session),
        }
    }
}

/// A version of an object the cache has not shown yet.
struct Known {
    /// `None`: deleted. A version no object has (empty): the outcome of a write is unknown.
    version: Option<String>,
    /// The sequence number of the last write of the object, kept when a read replaces the version (0: none).
    written: u64,
}

#[derive(Default)]
struct Ahead {
    known: HashMap<Key, Known>,
    /// How many writes were recorded: a fresh read that began before a write of what it read does not record its
    /// version (it may be older than the write's).
    writes: u64,
}

impl Ahead {
    fn wrote(&mut self, key: Key, version: Option<String>) {
        self.writes += 1;
        self.known.insert(key, Known { version, written: self.writes });
    }

    fn written(&self, key: &Key) -> u64 {
        self.known.get(key).map_or(0, |k| k.written)
    }
}

/// The version a write whose outcome is unknown leaves known: no object has it, so the cache never matches it.
const UNKNOWN: &str = "";

impl Caches {
    /// Reads through `sessions` and `events`, the stores of the watches that wake the reconciles of `node`, and
    /// `unlabelled`, the store of a watch of the events labelled for no node. Each watch's stream goes through
    /// [`Self::follow`] after its reflector.
    pub fn new(
        sessions: reflector::Store<WorkSession>,
        events: reflector::Store<WorkEvent>,
        unlabelled: reflector::Store<WorkEvent>,
        node: &str,
    ) -> Self {
        let node_label = Some(crate::api::node_label_value(node));
        let listing = Arc::new([AtomicBool::new(true), AtomicBool::new(true), AtomicBool::new(true)]);
        Self { sessions, events, unlabelled, node_label, listing, ahead: Default::default() }
    }

    /// What `watched`'s stream tells the caches, after its reflector applied it: a listing begins or ends; a
    /// session left the node (deleted, or placed elsewhere), so nothing known of it is kept.
    pub fn follow<K: ResourceExt>(
        &self,
        watched: Watched,
    ) -> impl Fn(&Result<watcher::Event<K>, watcher::Error>) + Send + 'static + use<K> {
        let caches = self.clone();
        move |event| match event {
            Ok(watcher::Event::Init) => caches.listing[watched as usize].store(true, Ordering::Release),
            Ok(watcher::Event::InitDone) => {
                caches.listing[watched as usize].store(false, Ordering::Release);
                if watched == Watched::Sessions {
                    let sessions = &caches.sessions;
                    let here = |(ns, name): (&str, &str)| sessions.get(&ObjectRef::new(name).within(ns)).is_some();
                    caches.ahead.lock().unwrap().known.retain(|key, _| here(key.of_session()));
                }
            }
            Ok(watcher::Event::Delete(obj)) if watched == Watched::Sessions => {
                let (namespace, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
                caches.ahead.lock().unwrap().known.retain(|key, _| key.of_session() != (&namespace, &name));
            }
            _ => {}
        }
    }

    fn listing(&self, watched: Watched) -> bool {
        self.listing[watched as usize].load(Ordering::Acquire)
    }

    /// The event watches' copies of the session's events; one in both was labelled meanwhile, and the labelled copy
    /// is the newer (a label is never taken away).
    fn cached_events(&self, namespace: &str, session: &str) -> Vec<WorkEvent> {
        let of = |ev: &&Arc<WorkEvent>| ev.spec.session == session && ev.namespace().as_deref() == Some(namespace);
        let labelled: Vec<WorkEvent> = self.events.state().iter().filter(of).map(|ev| (**ev).clone()).collect();
        let unlabelled = self.unlabelled.state();
        let more = unlabelled.iter().filter(of).filter(|ev| !labelled.iter().any(|l| l.name_any() == ev.name_any()));
        let more: Vec<WorkEvent> = more.map(|ev| (**ev).clone()).collect();
        labelled.into_iter().chain(more).collect()
    }

    /// Whether the event watches show `ev` as it is labelled (for this node, or for none).
    fn cached(&self, ev: &WorkEvent) -> bool {
        let label = ev.labels().get(crate::api::NODE_LABEL);
        label.is_none() || label == self.node_label.as_ref()
    }

    /// The session as cached, when the cache is as new as every version known of it (`None`: read it fresh).
    pub(super) fn session(&self, namespace: &str, name: &str) -> Option<WorkSession> {
        if self.listing(Watched::Sessions) {
            return None;
        }
        let cached = self.sessions.get(&ObjectRef::new(name).within(namespace))?;
        let key = Key::Session(namespace.into(), name.into());
        let mut ahead = self.ahead.lock().unwrap();
        match ahead.known.get(&key) {
            Some(Known { version: Some(version), .. }) if cached.resource_version().as_ref() == Some(version) => {
                ahead.known.remove(&key); // caught up: what it shows from now on is newer
            }
            Some(_) => return None,
            None => {}
        }
        Some((*cached).clone())
    }

    /// The session's events as cached, when the caches are as new as every version known of them (`None`: read them
    /// fresh). Only those labelled for this node or for none are cached: one labelled for another node is relabelled
    /// here when its session comes here (by the controller on a move it makes or finds, by the agent that moved it),
    /// and so reaches this cache and wakes the session.
    pub(super) fn events(&self, namespace: &str, session: &str) -> Option<Vec<WorkEvent>> {
        if self.listing(Watched::Events) || self.listing(Watched::Unlabelled) {
            return None;
        }
        let cached = self.cached_events(namespace, session);
        let mut ahead = self.ahead.lock().unwrap();
        let mut behind = false;
        ahead.known.retain(|key, known| {
            let Key::Event { namespace: ns, session: s, name } = key else { return true };
            if ns != namespace || s != session {
                return true;
            }
            let now = cached.iter().find(|ev| ev.name_any() == *name).map(|ev| ev.resource_version());
            let caught_up = match (&known.version, now) {
                (None, None) => true,
                (Some(version), Some(now)) => now.as_ref() == Some(version),
                _ => false,
            };
            behind |= !caught_up;
            !caught_up
        });
        (!behind).then_some(cached)
    }

    /// Where a fresh read begins: what it may record.
    pub(super) fn reading(&self) -> u64 {
        self.ahead.lock().unwrap().writes
    }

    /// `ws` as read fresh by a read that began at `since` ([`Self::reading`]); `None`: it is gone.
    pub(super) fn read_session(&self, namespace: &str, name: &str, ws: Option<&WorkSession>, since: u64) {
        let key = Key::Session(namespace.into(), name.into());
        let mut ahead = self.ahead.lock().unwrap();
        let written = ahead.written(&key);
        if written <= since {
            ahead.known.insert(key, Known { version: ws.and_then(|ws| ws.resource_version()), written });
        }
    }

    /// The session's events as read fresh by a read that began at `since`: what is known of them from now on.
    pub(super) fn read_events(&self, namespace: &str, session: &str, events: &[WorkEvent], since: u64) {
        let mut ahead = self.ahead.lock().unwrap();
        let of_session = |key: &Key| matches!(key, Key::Event { .. }) && key.of_session() == (namespace, session);
        let written = ahead.known.iter().filter(|(key, _)| of_session(key)).map(|(_, k)| k.written).max();
        let written = written.unwrap_or(0);
        if written > since {
            return;
        }
        ahead.known.retain(|key, _| !of_session(key));
        // Every event of the session the caches show and the read did not (or did, labelled for another node) is gone
        // from them once they catch up.
        for ev in self.cached_events(namespace, session) {
            if !events.iter().any(|e| e.name_any() == ev.name_any() && self.cached(e)) {
                ahead.known.insert(event_key(namespace, session, &ev.name_any()), Known { version: None, written });
            }
        }
        // Only those labelled for this node or for none come to the caches: the others are not waited for.
        for ev in events.iter().filter(|ev| self.cached(ev)) {
            let known = Known { version: ev.resource_version(), written };
            ahead.known.insert(event_key(namespace, session, &ev.name_any()), known);
        }
    }

    /// The session as this agent just wrote it.
    pub(super) fn wrote_session(&self, ws: &WorkSession) {
        let key = Key::Session(ws.namespace().unwrap_or_default(), ws.name_any());
        self.ahead.lock().unwrap().wrote(key, ws.resource_version());
    }

    /// The session may have changed since the version `ws` was read at (a write over that version was refused, or
    /// its outcome is unknown): read fresh until the cache shows the version such a read finds.
    pub(super) fn behind_on(&self, ws: &WorkSession) {
        let key = Key::Session(ws.namespace().unwrap_or_default(), ws.name_any());
        self.ahead.lock().unwrap().wrote(key, Some(UNKNOWN.into()));
    }

    /// How a write of the event `ev` went. One now labelled for another node is awaited gone from the caches (a copy
    /// from before its relabelling, which may still wait there, must not be sent again).
    pub(super) fn wrote_event(&self, ev: &WorkEvent, written: EventWrite<'_>) {
        let (namespace, name) = (ev.namespace().unwrap_or_default(), ev.name_any());
        let key = event_key(&namespace, &ev.spec.session, &name);
        let version = match written {
            EventWrite::Unknown => Some(UNKNOWN.into()),
            EventWrite::Deleted => None,
            EventWrite::Wrote(now) if self.cached(now) => now.resource_version(),
            EventWrite::Wrote(_) => None,
        };
        self.ahead.lock().unwrap().wrote(key, version);
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

    /// A watch's events, through its reflector's store and then [`Caches::follow`], as the agent's streams run.
    fn watch<K: kube::Resource<DynamicType = ()> + Clone>(
        caches: &Caches,
        writer: &mut Writer<K>,
        watched: Watched,
        events: &[Event<K>],
    ) {
        let follow = caches.follow(watched);
        for event in events {
            writer.apply_watcher_event(event);
            follow(&Ok(event.clone()));
        }
    }

    fn listing<K: kube::Resource<DynamicType = ()> + Clone>(objects: &[K]) -> Vec<Event<K>> {
        let applied = objects.iter().map(|o| Event::InitApply(o.clone()));
        std::iter::once(Event::Init).chain(applied).chain([Event::InitDone]).collect()
    }

    impl Rig {
        fn sessions(&mut self, events: &[Event<WorkSession>]) {
            watch(&self.caches, &mut self.sessions, Watched::Sessions, events);
        }

        fn events(&mut self, events: &[Event<WorkEvent>]) {
            watch(&self.caches, &mut self.events, Watched::Events, events);
        }

        fn listed(&mut self, events: &[WorkEvent], unlabelled: &[WorkEvent]) {
            self.events(&listing(events));
            watch(&self.caches, &mut self.unlabelled, Watched::Unlabelled, &listing(unlabelled));
        }
    }

    fn version(ws: Option<WorkSession>) -> Option<String> {
        ws.and_then(|ws| ws.metadata.resource_version)
    }

    #[test]
    fn a_session_comes_from_the_cache_unless_the_agent_wrote_or_read_a_version_it_has_not_shown() {
        let mut rig = rig();
        assert!(rig.caches.session("ns", "s").is_none(), "not listed yet: read fresh");
        rig.sessions(&listing(&[session("1")]));
        assert_eq!(version(rig.caches.session("ns", "s")), Some("1".into()));

        rig.caches.wrote_session(&session("2"));
        assert!(rig.caches.session("ns", "s").is_none(), "behind the agent's own write");
        rig.sessions(&[Event::Apply(session("2"))]);
        assert_eq!(version(rig.caches.session("ns", "s")), Some("2".into()));
        rig.sessions(&[Event::Apply(session("3"))]);
        assert_eq!(version(rig.caches.session("ns", "s")), Some("3".into()), "caught up: what follows is newer");

        // A write refused over the version read: read fresh, and the cache again once it shows what that found.
        rig.caches.behind_on(&session("3"));
        assert!(rig.caches.session("ns", "s").is_none());
        let since = rig.caches.reading();
        rig.caches.read_session("ns", "s", Some(&session("4")), since);
        assert!(rig.caches.session("ns", "s").is_none());
        rig.sessions(&[Event::Apply(session("4"))]);
        assert_eq!(version(rig.caches.session("ns", "s")), Some("4".into()));

        // Listing again: its store is the old one until the listing ends, so reads are fresh meanwhile.
        rig.sessions(&[Event::Init, Event::InitApply(session("5"))]);
        assert!(rig.caches.session("ns", "s").is_none(), "listing");
        rig.sessions(&[Event::InitDone]);
        assert_eq!(version(rig.caches.session("ns", "s")), Some("5".into()));

        // Gone from the node: nothing known of it is kept.
        rig.caches.wrote_session(&session("6"));
        rig.sessions(&[Event::Delete(session("5"))]);
        assert!(rig.caches.ahead.lock().unwrap().known.is_empty());
    }

    #[test]
    fn a_fresh_read_that_began_before_a_write_records_nothing() {
        let mut rig = rig();
        rig.sessions(&listing(&[session("1")]));
        let since = rig.caches.reading();
        rig.caches.wrote_session(&session("2"));
        rig.caches.read_session("ns", "s", Some(&session("1")), since);
        assert!(rig.caches.session("ns", "s").is_none(), "the write's version still awaited, not the read's older one");
        // Nor when a read that began after the write recorded in between.
        let first = rig.caches.reading();
        rig.caches.wrote_session(&session("3"));
        let second = rig.caches.reading();
        rig.caches.read_session("ns", "s", Some(&session("3")), second);
        rig.caches.read_session("ns", "s", Some(&session("1")), first);
        assert!(rig.caches.session("ns", "s").is_none(), "the cache at 1 is older than the write");
    }

    #[test]
    fn events_come_from_both_watches_once_listed_and_wait_for_the_agents_own_writes() {
        let mut rig = rig();
        assert!(rig.caches.events("ns", "s").is_none(), "an empty cache before its listing says nothing");
        let mine = event("e1", "1", Some("node-a"));
        let by_hand = event("e2", "1", None);
        rig.listed(std::slice::from_ref(&mine), &[by_hand]);
        let names = |evs: Option<Vec<WorkEvent>>| evs.map(|evs| evs.iter().map(|e| e.name_any()).collect::<Vec<_>>());
        assert_eq!(names(rig.caches.events("ns", "s")), Some(vec!["e1".into(), "e2".into()]));

        // Its status written: the cache is used again once it shows that version.
        rig.caches.wrote_event(&mine, EventWrite::Wrote(&event("e1", "2", Some("node-a"))));
        assert!(rig.caches.events("ns", "s").is_none());
        rig.events(&[Event::Apply(event("e1", "2", Some("node-a")))]);
        assert!(rig.caches.events("ns", "s").is_some());

        // A write whose outcome is unknown: fresh until a fresh read says what it is, and the cache shows that.
        rig.caches.wrote_event(&mine, EventWrite::Unknown);
        assert!(rig.caches.events("ns", "s").is_none());
        let since = rig.caches.reading();
        rig.caches.read_events("ns", "s", &[event("e1", "3", Some("node-a")), event("e2", "1", None)], since);
        assert!(rig.caches.events("ns", "s").is_none());
        rig.events(&[Event::Apply(event("e1", "3", Some("node-a")))]);
        assert!(rig.caches.events("ns", "s").is_some());

        // Deleted: until the cache drops it.
        rig.caches.wrote_event(&mine, EventWrite::Deleted);
        assert!(rig.caches.events("ns", "s").is_none());
        rig.events(&[Event::Delete(mine)]);
        assert_eq!(names(rig.caches.events("ns", "s")), Some(vec!["e2".into()]));

        // Labelled meanwhile: in both watches for a moment, the labelled copy is the one read.
        rig.events(&[Event::Apply(event("e2", "3", Some("node-a")))]);
        let read = rig.caches.events("ns", "s").unwrap();
        assert_eq!(read.iter().map(|e| e.resource_version().unwrap()).collect::<Vec<_>>(), ["3"]);
    }

    #[test]
    fn an_event_relabelled_for_another_node_is_awaited_gone_from_the_caches() {
        let mut rig = rig();
        let by_hand = event("e3", "4", None);
        rig.listed(&[], std::slice::from_ref(&by_hand));
        // Labelled for node-b meanwhile: the copy from before, Pending, must not be read again.
        let theirs = event("e3", "5", Some("node-b"));
        rig.caches.wrote_event(&by_hand, EventWrite::Wrote(&theirs));
        assert!(rig.caches.events("ns", "s").is_none(), "the unlabelled copy still shows");
        watch(&rig.caches, &mut rig.unlabelled, Watched::Unlabelled, &[Event::Delete(by_hand.clone())]);
        assert_eq!(rig.caches.events("ns", "s").map(|e| e.len()), Some(0), "gone: nothing to wait for");

        // The same learnt from a fresh read.
        let again = event("e4", "1", None);
        watch(&rig.caches, &mut rig.unlabelled, Watched::Unlabelled, &[Event::Apply(again.clone())]);
        let since = rig.caches.reading();
        rig.caches.read_events("ns", "s", &[event("e4", "2", Some("node-b"))], since);
        assert!(rig.caches.events("ns", "s").is_none());
        watch(&rig.caches, &mut rig.unlabelled, Watched::Unlabelled, &[Event::Delete(again)]);
        assert_eq!(rig.caches.events("ns", "s").map(|e| e.len()), Some(0));
    }
}
