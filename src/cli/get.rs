//! `worksession get`: WorkSessions (or WorkEvents) the way `kubectl get` shows them, from the cluster or from a local
//! directory, through the same [`read`](super::read) side as the console: `-n NS`, `-A` (with a NAMESPACE column),
//! the kubeconfig context's namespace by default (`default` in local mode), `NAME` arguments, `-o wide|json|yaml`,
//! and `-w` to keep printing a row per change.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use super::read::Source;
use crate::api::{WorkEvent, WorkSession};
use crate::core::ConditionType;

/// How to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A table with more columns.
    Wide,
    /// JSON: a Kubernetes `List`, or the object itself when one name was asked for.
    Json,
    /// The same as YAML.
    Yaml,
}

/// What to list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// WorkSessions (`ws`).
    WorkSessions,
    /// WorkEvents (`wev`).
    WorkEvents,
}

impl Resource {
    /// The kind a `kubectl get` resource word names, if any.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "ws" | "worksession" | "worksessions" | "sessions" => Some(Resource::WorkSessions),
            "wev" | "workevent" | "workevents" | "events" => Some(Resource::WorkEvents),
            _ => None,
        }
    }
}

/// Which namespaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `-A`.
    All,
    /// `-n NS`, or the context's namespace.
    One(String),
}

/// One `worksession get`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    /// WorkSessions or WorkEvents.
    pub kind: Resource,
    /// Names asked for (none: all).
    pub names: Vec<String>,
    /// Namespaces.
    pub scope: Scope,
    /// How to print.
    pub output: Option<Output>,
}

impl Query {
    /// The objects the query selects, in the order of the names given, else as [`Query::keep`] orders them; a missing
    /// name is an error, as kubectl's.
    pub fn select<K: ResourceExt>(&self, items: Vec<K>) -> Result<Vec<K>, String> {
        let items = self.keep(items);
        if self.names.is_empty() {
            return Ok(items);
        }
        let mut by_name: HashMap<String, K> = items.into_iter().map(|o| (o.name_any(), o)).collect();
        let what = if self.kind == Resource::WorkSessions { "worksession" } else { "workevent" };
        self.names.iter().map(|n| by_name.remove(n).ok_or_else(|| format!("{what} {n:?} not found"))).collect()
    }

    /// The objects in the query's namespaces with the names asked for (every name: none asked for), ordered by
    /// namespace and name as `kubectl get` orders them; a name asked for that is not there is simply not among them.
    pub fn keep<K: ResourceExt>(&self, items: Vec<K>) -> Vec<K> {
        let mut items: Vec<K> = items
            .into_iter()
            .filter(|o| match &self.scope {
                Scope::All => true,
                Scope::One(ns) => super::read::in_namespace(o, ns),
            })
            .filter(|o| self.names.is_empty() || self.names.contains(&o.name_any()))
            .collect();
        items.sort_by_key(|o| (o.namespace(), o.name_any()));
        items
    }

    fn all_namespaces(&self) -> bool {
        self.scope == Scope::All
    }
}

/// A compact age, like kubectl's (`45s`, `12m`, `3h`, `5d`).
pub fn age(created: Option<Timestamp>, now: Timestamp) -> String {
    let Some(created) = created else { return "<unknown>".into() };
    let secs = now.duration_since(created).as_secs().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// Objects as JSON or YAML: the object itself when one name was asked for, else a `List`.
fn document<K: Serialize>(items: &[K], query: &Query) -> String {
    let value = match (items, query.names.len()) {
        ([one], 1) => serde_json::to_value(one).expect("objects serialize"),
        _ => serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {}}),
    };
    match query.output {
        Some(Output::Yaml) => serde_yaml_ng::to_string(&value).expect("objects serialize"),
        _ => serde_json::to_string_pretty(&value).expect("objects serialize") + "\n",
    }
}

fn header(query: &Query) -> Vec<String> {
    let mut h: Vec<&str> = if query.all_namespaces() { vec!["NAMESPACE"] } else { vec![] };
    let wide = query.output == Some(Output::Wide);
    match query.kind {
        Resource::WorkSessions => {
            h.extend(["NAME", "NODE", "HARNESS", "PHASE", "ACTIVITY", "RESUMED", "SESSION ID", "PR", "CI"]);
            h.extend(["TOKENS", "COST", "AGE"]);
            if wide {
                h.extend(["TMUX", "RESPAWNS", "FAILURES", "REASON"]);
            }
        }
        Resource::WorkEvents => {
            h.extend(["NAME", "SESSION", "PHASE", "VIA", "AGE"]);
            if wide {
                h.extend(["ATTEMPTS", "SESSION ID", "MESSAGE"]);
            }
        }
    }
    h.into_iter().map(String::from).collect()
}

/// One table row of a WorkSession.
pub fn session_row(ws: &WorkSession, query: &Query, now: Timestamp) -> Vec<String> {
    let wide = query.output == Some(Output::Wide);
    let st = ws.status.clone().unwrap_or_default();
    let resumed = st.conditions.iter().find(|c| c.type_ == ConditionType::Resumed.as_str());
    let ready = st.conditions.iter().find(|c| c.type_ == ConditionType::Ready.as_str());
    let activity = st.conditions.iter().find(|c| c.type_ == ConditionType::Activity.as_str());
    let mut id = st.harness_session_id.clone().unwrap_or_default();
    if !wide && id.len() > 8 {
        id.truncate(8);
    }
    let mut row = if query.all_namespaces() { vec![ws.namespace().unwrap_or_default()] } else { vec![] };
    row.extend([
        ws.name_any(),
        ws.spec.node_name.clone().unwrap_or_else(|| "<none>".into()),
        ws.spec.harness.clone(),
        st.phase.map(|p| format!("{p:?}")).unwrap_or_default(),
        activity.map(|c| c.reason.clone()).unwrap_or_default(),
        resumed.map(|c| c.status.clone()).unwrap_or_default(),
        id,
        st.pull_request.as_ref().map(|p| p.number.to_string()).unwrap_or_default(),
        st.pull_request.as_ref().and_then(|p| p.checks).map(|c| c.to_string()).unwrap_or_default(),
        st.usage.as_ref().map(|u| u.tokens.to_string()).unwrap_or_default(),
        st.usage.as_ref().map(cost_words).unwrap_or_default(),
        age(ws.metadata.creation_timestamp.as_ref().map(|t| t.0), now),
    ]);
    if wide {
        row.extend([
            st.tmux_session.clone().unwrap_or_default(),
            st.respawn_count.to_string(),
            st.failure_count.to_string(),
            ready.map(|c| c.reason.clone()).unwrap_or_default(),
        ]);
    }
    row
}

/// An estimated cost as people read it: `$0.0276`, or `unknown` while a model has no price.
pub fn cost_words(usage: &crate::api::Usage) -> String {
    match &usage.estimated_cost {
        Some(cost) => format!("${cost}"),
        None if usage.tokens == 0 => String::new(),
        None => "unknown".into(),
    }
}

/// Usage as people read it: `4200 tokens in 4 turns, $0.0276` (the cost `unknown` while a model has no price).
pub fn usage_words(usage: &crate::api::Usage) -> String {
    let turns = if usage.turns == 1 { "1 turn".to_string() } else { format!("{} turns", usage.turns) };
    match cost_words(usage) {
        cost if cost.is_empty() => format!("{} tokens in {turns}", usage.tokens),
        cost => format!("{} tokens in {turns}, {cost}", usage.tokens),
    }
}

/// A pull request as people read it: `#57 Open, CI Failing`.
pub fn pull_request_words(p: &crate::api::PullRequestStatus) -> String {
    match p.checks {
        Some(checks) => format!("#{} {}, CI {checks}", p.number, p.state),
        None => format!("#{} {}", p.number, p.state),
    }
}

/// One table row of a WorkEvent.
pub fn event_row(ev: &WorkEvent, query: &Query, now: Timestamp) -> Vec<String> {
    let st = ev.status.clone().unwrap_or_default();
    let mut row = if query.all_namespaces() { vec![ev.namespace().unwrap_or_default()] } else { vec![] };
    row.extend([
        ev.name_any(),
        ev.spec.session.clone(),
        st.phase.map(|p| format!("{p:?}")).unwrap_or_default(),
        st.via.map(|v| format!("{v:?}")).unwrap_or_default(),
        age(ev.metadata.creation_timestamp.as_ref().map(|t| t.0), now),
    ]);
    if query.output == Some(Output::Wide) {
        row.extend([
            st.attempts.to_string(),
            st.harness_session_id.unwrap_or_default(),
            st.message.unwrap_or_default().replace('\n', " "),
        ]);
    }
    row
}

/// Rows as aligned columns, kubectl's way (three spaces between columns).
pub fn table(rows: &[Vec<String>]) -> String {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..width).map(|i| rows.iter().map(|r| r.get(i).map_or(0, |c| c.chars().count())).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    out
}

/// WorkSessions as the query prints them.
pub fn render_sessions(items: &[WorkSession], query: &Query, now: Timestamp) -> String {
    if matches!(query.output, Some(Output::Json | Output::Yaml)) {
        return document(items, query);
    }
    let mut rows = vec![header(query)];
    rows.extend(items.iter().map(|ws| session_row(ws, query, now)));
    table(&rows)
}

/// WorkEvents as the query prints them.
pub fn render_events(items: &[WorkEvent], query: &Query, now: Timestamp) -> String {
    if matches!(query.output, Some(Output::Json | Output::Yaml)) {
        return document(items, query);
    }
    let mut rows = vec![header(query)];
    rows.extend(items.iter().map(|ev| event_row(ev, query, now)));
    table(&rows)
}

/// Prints what the query selects from `source` (the [`read`](super::read) side the console reads too); with
/// `watch`, then a row per object that changes, at each change the source reports, until interrupted.
pub async fn run<S: Source>(source: &S, query: &Query, watch: bool) -> Result<(), String> {
    // Subscribed before the first read, so a change after it is a row; only a watch asks (it needs the right to).
    let mut changes = watch.then(|| source.changes());
    let now = Timestamp::now();
    let (printed, mut seen) = match query.kind {
        Resource::WorkSessions => {
            let items = query.select(source.sessions().await?)?;
            (render_sessions(&items, query, now), states(&items, query, session_row).0)
        }
        Resource::WorkEvents => {
            let items = query.select(source.work_events().await?)?;
            (render_events(&items, query, now), states(&items, query, event_row).0)
        }
    };
    print!("{printed}");
    // A misspelt field must not make an object vanish from the listing without a word.
    for (file, why) in source.skipped()? {
        eprintln!("worksession: skipped {}: {why}", file.display());
    }
    let Some(changes) = changes.as_mut() else { return Ok(()) };
    let mut trouble = None;
    loop {
        changes.changed().await.map_err(|_| "the watch ended".to_string())?;
        // The watch retries on its own; a person is told each new way it fails (rows may be missing meanwhile). A
        // watch that is back is not told: it only shows in the rows of the next change.
        let now_trouble = source.trouble();
        if now_trouble != trouble {
            if let Some(why) = &now_trouble {
                eprintln!("worksession: the watch fails, retrying: {why}");
            }
            trouble = now_trouble;
        }
        // A name asked for that is gone is no row, not an error: the watch goes on for the others.
        let (current, rows) = match query.kind {
            Resource::WorkSessions => states(&query.keep(source.sessions().await?), query, session_row),
            Resource::WorkEvents => states(&query.keep(source.work_events().await?), query, event_row),
        };
        for (key, state) in current {
            if seen.get(&key) != Some(&state) {
                print!("{}", table(&[rows[&key].clone()]));
                seen.insert(key, state);
            }
        }
    }
}

/// Each object's `namespace/name` with what it is now (the whole object: any change is a row, as `kubectl get -w`
/// prints one per change), and its row; in that order.
fn states<K: ResourceExt + Serialize>(
    items: &[K],
    query: &Query,
    row: fn(&K, &Query, Timestamp) -> Vec<String>,
) -> (BTreeMap<String, String>, BTreeMap<String, Vec<String>>) {
    let now = Timestamp::now();
    let key = |o: &K| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
    let states = items.iter().map(|o| (key(o), serde_json::to_string(o).unwrap_or_default())).collect();
    let rows = items.iter().map(|o| (key(o), row(o, query, now))).collect();
    (states, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Phase, PromptPhase, WorkEventSpec, WorkEventStatus, WorkSessionSpec, WorkSessionStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn session(ns: &str, name: &str) -> WorkSession {
        let mut ws = WorkSession::new(
            name,
            WorkSessionSpec { node_name: Some("node-a".into()), harness: "claude".into(), ..Default::default() },
        );
        ws.metadata.namespace = Some(ns.into());
        ws.metadata.creation_timestamp = Some(Time("2026-11-30T00:00:00Z".parse().unwrap()));
        ws.status = Some(WorkSessionStatus {
            phase: Some(Phase::Running),
            harness_session_id: Some("0123456789abcdef".into()),
            conditions: vec![Condition {
                type_: ConditionType::Activity.as_str().into(),
                status: "False".into(),
                reason: "WaitingForInput".into(),
                message: "Claude needs your permission to use Bash".into(),
                last_transition_time: Time("2026-11-30T00:09:00Z".parse().unwrap()),
                observed_generation: None,
            }],
            pull_request: Some(crate::api::PullRequestStatus {
                repository: "octo/repo".into(),
                number: 57,
                url: "https://github.com/octo/repo/pull/57".into(),
                state: crate::api::PullRequestState::Open,
                head_sha: Some("abc".into()),
                checks: Some(crate::api::ChecksState::Failing),
                updated_at: None,
            }),
            usage: Some(crate::api::Usage {
                tokens: 4200,
                estimated_cost: Some("0.0276".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        ws
    }

    fn query(scope: Scope, names: &[&str], output: Option<Output>) -> Query {
        Query { kind: Resource::WorkSessions, names: names.iter().map(|s| s.to_string()).collect(), scope, output }
    }

    #[test]
    fn tables_like_kubectl() {
        let now: Timestamp = "2026-11-30T00:10:00Z".parse().unwrap();
        let ws = session("team-a", "repo-12");
        let one = query(Scope::One("team-a".into()), &[], None);
        assert_eq!(
            render_sessions(std::slice::from_ref(&ws), &one, now),
            "NAME      NODE     HARNESS   PHASE     ACTIVITY          RESUMED   SESSION ID   PR   CI        TOKENS   COST      AGE\n\
             repo-12   node-a   claude    Running   WaitingForInput             01234567     57   Failing   4200     $0.0276   10m\n"
        );
        let mut unpriced = ws.clone();
        let usage = crate::api::Usage { tokens: 10, unpriced_models: vec!["m".into()], ..Default::default() };
        unpriced.status.as_mut().unwrap().usage = Some(usage);
        assert!(render_sessions(&[unpriced], &one, now).contains("   10       unknown   "), "never zero");
        let all = render_sessions(std::slice::from_ref(&ws), &query(Scope::All, &[], None), now);
        assert!(all.starts_with("NAMESPACE   NAME") && all.contains("\nteam-a      repo-12"), "{all}");
        assert!(
            render_sessions(std::slice::from_ref(&ws), &query(Scope::All, &[], Some(Output::Wide)), now)
                .contains("0123456789abcdef")
        );
        let list: serde_json::Value = serde_json::from_str(&render_sessions(
            std::slice::from_ref(&ws),
            &query(Scope::All, &[], Some(Output::Json)),
            now,
        ))
        .unwrap();
        assert_eq!(
            (list["kind"].as_str(), list["items"][0]["status"]["phase"].as_str()),
            (Some("List"), Some("Running"))
        );
        let single =
            render_sessions(std::slice::from_ref(&ws), &query(Scope::All, &["repo-12"], Some(Output::Yaml)), now);
        assert!(single.contains("kind: WorkSession") && !single.contains("kind: List"), "{single}");

        let mut ev = WorkEvent::new(
            "ev-1",
            WorkEventSpec { session: "repo-12".into(), prompt: "p".into(), source: None, ..Default::default() },
        );
        ev.metadata.creation_timestamp = Some(Time("2026-11-30T00:09:00Z".parse().unwrap()));
        ev.status = Some(WorkEventStatus {
            phase: Some(PromptPhase::Delivered),
            via: Some(crate::api::Via::Pasted),
            ..Default::default()
        });
        let q = Query { kind: Resource::WorkEvents, ..one };
        assert_eq!(
            render_events(&[ev], &q, now),
            "NAME   SESSION   PHASE       VIA      AGE\nev-1   repo-12   Delivered   Pasted   60s\n"
        );
    }

    #[test]
    fn selection_by_namespace_and_names() {
        let items = vec![session("a", "x"), session("b", "x"), session("a", "y")];
        let names = |v: Vec<WorkSession>| {
            v.iter().map(|w| format!("{}/{}", w.namespace().unwrap(), w.name_any())).collect::<Vec<_>>()
        };
        assert_eq!(names(query(Scope::One("a".into()), &[], None).select(items.clone()).unwrap()), ["a/x", "a/y"]);
        // Ordered by namespace and name, whatever order the source gave (a watched cache gives none).
        assert_eq!(names(query(Scope::All, &[], None).select(items.clone()).unwrap()), ["a/x", "a/y", "b/x"]);
        // A watch keeps what is there of the names asked for: one gone is no error for the others.
        assert_eq!(names(query(Scope::One("a".into()), &["y", "z"], None).keep(items.clone())), ["a/y"]);
        assert_eq!(
            names(query(Scope::One("a".into()), &["y", "x"], None).select(items.clone()).unwrap()),
            ["a/y", "a/x"]
        );
        assert_eq!(
            query(Scope::One("a".into()), &["z"], None).select(items).unwrap_err(),
            "worksession \"z\" not found"
        );
        assert_eq!(Resource::parse("wev"), Some(Resource::WorkEvents));
        assert_eq!(Resource::parse("repo-12"), None);
    }
}
