//! Finding the ids of conversations that harnesses show after their start (beside the reconcile, for the core's
//! [`crate::core::discover`]): a file of the harness's store created since the spawn, whose name holds the id (and,
//! where the profile says so, whose first line names the workdir), or a pattern on its screen. An id another session
//! of this agent runs is never taken, and the workdirs with a discovery in flight are known, so that a second fresh
//! harness in one of them waits.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::UNIX_EPOCH;

use regex::Regex;

use crate::api::WorkSessionStatus;
use crate::core::Claim;
use crate::core::discover::{discovering, discovering_since};
use crate::harness::{Discover, SESSION_ID, WORKDIR};
use crate::node::transcript::{CWD_SLUG, HOME, cwd_slug};

/// The discoveries of one agent.
#[derive(Default)]
pub struct Discoveries {
    /// Workdir to the session (`namespace/name`) whose harness there is discovering its id.
    busy: Mutex<HashMap<String, String>>,
    /// Session to the conversation id it runs.
    claimed: Mutex<HashMap<String, String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Discoveries {
    /// Another session than `owner` that holds `workdir` while it discovers its conversation's id, if any.
    pub fn workdir_holder(&self, workdir: &str, owner: &str) -> Option<String> {
        lock(&self.busy).get(workdir).filter(|other| *other != owner).cloned()
    }

    /// Another session than `owner` that runs or records the conversation `id`, if any.
    pub fn conversation_holder(&self, id: &str, owner: &str) -> Option<String> {
        let claimed = lock(&self.claimed);
        claimed.iter().find(|(o, taken)| taken.as_str() == id && o.as_str() != owner).map(|(o, _)| o.clone())
    }

    /// Takes `claim` for `owner` until its recorded status lets it go (checked and taken under one lock: of two
    /// reconciles that decided at once, one spawns); `Err` names the session that holds it.
    pub fn take(&self, claim: &Claim, owner: &str) -> Result<(), String> {
        match claim {
            Claim::Workdir(workdir) => {
                let mut busy = lock(&self.busy);
                match busy.get(workdir) {
                    Some(other) if other != owner => Err(other.clone()),
                    _ => {
                        busy.insert(workdir.clone(), owner.to_string());
                        Ok(())
                    }
                }
            }
            Claim::Conversation(id) => {
                let mut claimed = lock(&self.claimed);
                let other = claimed.iter().find(|(o, taken)| *taken == id && o.as_str() != owner);
                if let Some((other, _)) = other {
                    return Err(other.clone());
                }
                claimed.insert(owner.to_string(), id.clone());
                Ok(())
            }
        }
    }

    /// Keeps the registry in step with the status `owner` just recorded (`None`: the session is gone); a fresh
    /// spawn of a harness that `discovers` its id makes its workdir busy from its intent on.
    pub fn recorded(&self, workdir: &str, owner: &str, status: Option<&WorkSessionStatus>, discovers: bool) {
        let verifying_fresh = status.and_then(|s| s.verification.as_ref()).is_some_and(|v| !v.resume);
        let busy = discovers && status.is_some_and(|s| discovering(s) || verifying_fresh);
        let mut map = lock(&self.busy);
        if busy {
            map.entry(workdir.to_string()).or_insert_with(|| owner.to_string());
        } else if map.get(workdir).is_some_and(|o| o == owner) {
            map.remove(workdir);
        }
        drop(map);
        // A spawn in flight claims the conversation it runs, before its status records it.
        let runs = status
            .and_then(|s| s.verification.as_ref().map(|v| &v.harness_session_id).or(s.harness_session_id.as_ref()));
        let mut claimed = lock(&self.claimed);
        match runs {
            Some(id) => claimed.insert(owner.to_string(), id.clone()),
            None => claimed.remove(owner),
        };
    }

    /// The id `owner`'s harness shows, when its status is discovering one.
    pub fn find(
        &self,
        discover: &Discover,
        status: &WorkSessionStatus,
        (home, workdir): (Option<&Path>, &str),
        screen: Option<&str>,
        owner: &str,
    ) -> Option<String> {
        if !discovering(status) {
            return None;
        }
        let free = |id: &String| !lock(&self.claimed).iter().any(|(o, taken)| taken == id && o != owner);
        if let (Some(pattern), Some(screen)) = (&discover.screen_pattern, screen)
            && let Some(id) = pattern.captures(screen).and_then(|c| c.get(1)).map(|m| m.as_str().to_string())
            && free(&id)
        {
            return Some(id);
        }
        let (home, since) = (home?, discovering_since(status)?.0.as_second());
        let expand = |t: &str| t.replace(HOME, &home.to_string_lossy()).replace(CWD_SLUG, &cwd_slug(workdir));
        if let Some(log) = &discover.log {
            let pattern = Regex::new(&log.pattern.replace(WORKDIR, &regex::escape(workdir))).ok()?;
            let mut found: Vec<(i64, String)> = matches(&expand(&log.path))
                .into_iter()
                .filter(|(path, _)| modified(path) >= since)
                .flat_map(|(path, _)| announced(home, &path, &pattern, since))
                .filter(|(_, id)| free(id))
                .collect();
            found.sort();
            if let Some((_, id)) = found.into_iter().next() {
                return Some(id);
            }
        }
        let template = discover.path.as_ref()?;
        let mut found: Vec<(i64, String)> = matches(&expand(template))
            .into_iter()
            .filter_map(|(path, id)| Some((path, id?)))
            .filter(|(path, _)| modified(path) >= since)
            .filter(|(path, _)| !discover.names_workdir || names_workdir(home, path, workdir))
            .filter(|(_, id)| free(id))
            .map(|(path, id)| (modified(&path), id))
            .collect();
        found.sort();
        found.into_iter().next().map(|(_, id)| id)
    }
}

/// The conversations a log announces since `since` (seconds since the epoch), with their time; only its last MiB is
/// read (a log grows for the life of the harness), and only as [`crate::node::transcript::open`] opens a harness's file.
fn announced(home: &Path, path: &Path, pattern: &Regex, since: i64) -> Vec<(i64, String)> {
    let Some(text) = crate::node::transcript::read_tail(home, path, 1 << 20) else { return Vec::new() };
    text.lines()
        .filter_map(|line| {
            let caps = pattern.captures(line)?;
            let time: k8s_openapi::jiff::Timestamp = caps.name("time")?.as_str().parse().ok()?;
            Some((time.as_second(), caps.name("id")?.as_str().to_string()))
        })
        .filter(|(time, _)| *time >= since)
        .collect()
}

/// Seconds since the epoch of `path`'s last change (0 when unknown).
fn modified(path: &Path) -> i64 {
    let time = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    time.and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs() as i64)
}

/// Whether the file's first line names `workdir` as its `cwd` (Codex CLI's `session_meta`).
fn names_workdir(home: &Path, path: &Path, workdir: &str) -> bool {
    use std::io::{BufRead, Read};
    let Some(file) = crate::node::transcript::open(home, path) else { return false };
    let mut first = String::new();
    if std::io::BufReader::new(file.take(64 * 1024)).read_line(&mut first).is_err() {
        return false;
    }
    let quoted = serde_json::to_string(workdir).unwrap_or_default();
    first.contains(&format!("\"cwd\":{quoted}"))
}

/// Whether the harness keeps conversation `id` in the store `template` names (`{home}`, `{cwdSlug}`, `*` and
/// `{sessionId}`), for a harness run in `workdir`.
pub fn stored(template: &str, home: &Path, workdir: &str, id: &str) -> bool {
    let expanded = template.replace(HOME, &home.to_string_lossy()).replace(CWD_SLUG, &cwd_slug(workdir));
    matches(&expanded).iter().any(|(_, named)| named.as_deref() == Some(id))
}

/// The files matching `template` (segments with `*` and `{sessionId}`), with the id each names (if it names one).
fn matches(template: &str) -> Vec<(PathBuf, Option<String>)> {
    let mut current: Vec<(PathBuf, Option<String>)> = vec![(PathBuf::from("/"), None)];
    for segment in template.split('/').filter(|s| !s.is_empty()) {
        let literal = !segment.contains('*') && !segment.contains(SESSION_ID);
        let pattern = (!literal).then(|| segment_regex(segment));
        let mut next = Vec::new();
        for (dir, id) in current {
            if literal {
                next.push((dir.join(segment), id));
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            // The harness writes its HOME: a link there (to /proc, say) is never followed into.
            for entry in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| !t.is_symlink())) {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(caps) = pattern.as_ref().and_then(|p| p.captures(&name)) else { continue };
                let id = caps.name("id").map(|m| m.as_str().to_string()).or_else(|| id.clone());
                next.push((entry.path(), id));
            }
        }
        current = next;
    }
    current.into_iter().filter(|(p, _)| p.is_file()).collect()
}

/// A path segment as a regex: `*` any characters, `{sessionId}` the id (captured), a UUID: beside a `*` any
/// looser shape would be ambiguous (Codex CLI's `rollout-<time>-<uuid>` has dashes on both sides).
fn segment_regex(segment: &str) -> Regex {
    let mut pattern = String::from("^");
    for (i, part) in segment.split(SESSION_ID).enumerate() {
        if i > 0 {
            pattern.push_str("(?P<id>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})");
        }
        let parts: Vec<String> = part.split('*').map(regex::escape).collect();
        pattern.push_str(&parts.join(".*?"));
    }
    pattern.push('$');
    Regex::new(&pattern).expect("an escaped template")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A conversation (and a discovering workdir) is claimed by one session: checked and taken at once, kept
    /// while its spawn is in flight and while its status records it, released when neither does.
    #[test]
    fn a_conversation_is_claimed_by_one_session_at_a_time() {
        let d = Discoveries::default();
        let conv = |id: &str| Claim::Conversation(id.into());
        assert_eq!(d.conversation_holder("conv-x", "a/one"), None, "free");
        assert_eq!(d.take(&conv("conv-x"), "a/one"), Ok(()), "taken");
        assert_eq!(d.take(&conv("conv-x"), "a/one"), Ok(()), "its own again");
        assert_eq!(d.take(&conv("conv-x"), "b/two"), Err("a/one".into()), "taken by the first");
        assert_eq!(d.conversation_holder("conv-x", "b/two").as_deref(), Some("a/one"));
        let verifying = WorkSessionStatus {
            verification: Some(crate::api::Verification {
                started: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                deadline: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                resume: true,
                harness_session_id: "conv-x".into(),
                event: None,
                fresh_reason: None,
                fresh_message: None,
                initial_prompt: false,
                spawn: "s".into(),
            }),
            ..Default::default()
        };
        d.recorded("/w", "a/one", Some(&verifying), false);
        assert_eq!(d.conversation_holder("conv-x", "b/two").as_deref(), Some("a/one"), "its spawn in flight keeps it");
        d.recorded("/w", "a/one", Some(&WorkSessionStatus::default()), false);
        assert_eq!(d.take(&conv("conv-x"), "b/two"), Ok(()), "released: the second may take it");
        let records = WorkSessionStatus { harness_session_id: Some("conv-y".into()), ..Default::default() };
        d.recorded("/v", "c/three", Some(&records), false); // as the agent's start does for every session
        assert_eq!(d.conversation_holder("conv-y", "b/two").as_deref(), Some("c/three"), "seeded at the agent's start");
        let workdir = Claim::Workdir("/w".into());
        assert_eq!((d.take(&workdir, "a/one"), d.take(&workdir, "b/two")), (Ok(()), Err("a/one".into())));
        assert_eq!(d.workdir_holder("/w", "b/two").as_deref(), Some("a/one"));
        d.recorded("/w", "a/one", Some(&WorkSessionStatus::default()), true);
        assert_eq!(d.workdir_holder("/w", "b/two"), None, "its status no longer discovers: let go");
    }

    #[test]
    fn codex_rollouts_are_found_by_their_name_and_workdir() {
        let home = tempfile::tempdir().unwrap();
        let day = home.path().join(".codex/sessions/2026/11/30");
        std::fs::create_dir_all(&day).unwrap();
        let id = "0199a213-81c0-7800-8aa1-bbab2a035a53";
        let meta = |cwd: &str| format!("{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"x\",\"cwd\":{cwd:?}}}}}\n");
        std::fs::write(day.join(format!("rollout-2026-11-30T10-00-00-{id}.jsonl")), meta("/srv/a")).unwrap();
        let other = "0199a213-81c0-7800-8aa1-000000000001";
        std::fs::write(day.join(format!("rollout-2026-11-30T10-00-01-{other}.jsonl")), meta("/srv/b")).unwrap();
        std::fs::write(day.join("notes.txt"), "").unwrap();
        let template = format!("{}/.codex/sessions/*/*/*/rollout-*-{{sessionId}}.jsonl", home.path().display());
        let mut found = matches(&template);
        found.sort();
        let mut ids: Vec<&str> = found.iter().filter_map(|(_, id)| id.as_deref()).collect();
        ids.sort();
        assert_eq!(ids, [other, id]);
        let path = &found.iter().find(|(_, i)| i.as_deref() == Some(id)).unwrap().0;
        assert!(names_workdir(home.path(), path, "/srv/a") && !names_workdir(home.path(), path, "/srv/b"));
    }

    #[test]
    fn opencode_announces_its_sessions_in_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("opencode.log");
        let line = |time: &str, id: &str, directory: &str| {
            format!(
                "timestamp={time} level=INFO run=1 message=created id={id} slug=x version=1.18.33 projectID=global directory={directory} path=x\n"
            )
        };
        let text = [
            line("2026-11-30T19:00:00.000Z", "ses_old", "/srv/a"),
            line("2026-11-30T19:49:56.289Z", "ses_other", "/srv/b"),
            line("2026-11-30T19:49:57.100Z", "ses_mine", "/srv/a"),
            "timestamp=2026-11-30T19:49:58.000Z level=INFO message=loop session.id=ses_mine step=0\n".to_string(),
        ];
        std::fs::write(&log, text.concat()).unwrap();
        let pattern = crate::harness::builtin()["opencode"]
            .discover
            .clone()
            .unwrap()
            .log
            .unwrap()
            .pattern
            .replace(WORKDIR, &regex::escape("/srv/a"));
        let since = "2026-11-30T19:49:50Z".parse::<k8s_openapi::jiff::Timestamp>().unwrap().as_second();
        let found = announced(dir.path(), &log, &Regex::new(&pattern).unwrap(), since);
        assert_eq!(found.iter().map(|(_, id)| id.as_str()).collect::<Vec<_>>(), ["ses_mine"]);
    }
}
