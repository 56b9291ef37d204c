//! Finding the ids of conversations that harnesses show after their start (beside the reconcile, for the core's
//! [`crate::core::discover`]): a file of the harness's store created since the spawn, whose name holds the id (and,
//! where the profile says so, whose first line names the workdir), or a pattern on its screen. An id another session
//! of this agent runs is never taken, and the workdirs with a discovery in flight are known, so that a second fresh
//! harness in one of them waits.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use regex::Regex;

use crate::api::WorkSessionStatus;
use crate::core::Claim;
use crate::core::discover::discovering;
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
            // The registry of limits takes a wake.
            Claim::Wake(_) => Ok(()),
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

    /// The first of `candidates` (as [`candidates`] orders them) that no other session than `owner` runs or records.
    pub fn first_free(&self, candidates: Vec<String>, owner: &str) -> Option<String> {
        candidates.into_iter().find(|id| self.conversation_holder(id, owner).is_none())
    }
}

/// How much of a harness's folders one look reads: the harness writes them, and a million files or a deep tree must
/// not hold the agent (what is found within the bounds still counts).
const MAX_ENTRIES: usize = 20_000;
/// The same in time.
const MAX_TIME: Duration = Duration::from_secs(2);
/// How many of the files a look found are read (the newest): a log's last MiB each, a store file's first line.
const MAX_READ: usize = 64;

/// The newest [`MAX_READ`] of `found` changed since `since`.
fn newest(mut found: Vec<Match>, since: i64) -> Vec<Match> {
    found.retain(|m| m.modified >= since);
    found.sort_by_key(|m| std::cmp::Reverse(m.modified));
    found.truncate(MAX_READ);
    found
}

/// The ids a harness shows for a conversation it started since `since` (seconds since the epoch), best first: its
/// screen's, then its log's (oldest first), then its store's (oldest first). Reads the harness's files beneath its
/// `home` alone, without following a link, within [`MAX_ENTRIES`] and [`MAX_TIME`], and of what it finds the newest
/// [`MAX_READ`] files only: blocking, so run off the async workers.
pub fn candidates(discover: &Discover, since: i64, place: (Option<&Path>, &str), screen: Option<&str>) -> Vec<String> {
    let mut ids = Vec::new();
    if let (Some(pattern), Some(screen)) = (&discover.screen_pattern, screen)
        && let Some(id) = pattern.captures(screen).and_then(|c| c.get(1))
    {
        ids.push(id.as_str().to_string());
    }
    let (Some(home), workdir) = place else { return ids };
    let expand = |t: &str| t.replace(HOME, &home.to_string_lossy()).replace(CWD_SLUG, &cwd_slug(workdir));
    if let Some(log) = &discover.log
        && let Ok(pattern) = Regex::new(&log.pattern.replace(WORKDIR, &regex::escape(workdir)))
    {
        let mut found: Vec<(i64, String)> = newest(matches(home, &expand(&log.path)).0, since)
            .into_iter()
            .flat_map(|m| announced(home, &m.path, &pattern, since))
            .collect();
        found.sort();
        ids.extend(found.into_iter().map(|(_, id)| id));
    }
    if let Some(template) = &discover.path {
        let mut found: Vec<(i64, String)> = newest(matches(home, &expand(template)).0, since)
            .into_iter()
            .filter(|m| !discover.names_workdir || names_workdir(home, &m.path, workdir))
            .filter_map(|m| Some((m.modified, m.id?)))
            .collect();
        found.sort();
        ids.extend(found.into_iter().map(|(_, id)| id));
    }
    ids
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

/// Of `ids`, those the harness keeps in the store `template` names (`{home}`, `{cwdSlug}`, `*` and `{sessionId}`),
/// for a harness run in `workdir`: one look, as [`candidates`] reads (blocking).
pub fn stored(template: &str, home: &Path, workdir: &str, ids: &[String]) -> Vec<String> {
    let expanded = template.replace(HOME, &home.to_string_lossy()).replace(CWD_SLUG, &cwd_slug(workdir));
    let (kept, _) = matches(home, &expanded);
    ids.iter().filter(|id| kept.iter().any(|m| m.id.as_deref() == Some(id.as_str()))).cloned().collect()
}

/// The file matching `template` whose name holds `id` (the newest, if several do): a record the harness names by the
/// conversation in a folder of its choosing (Codex's rollouts by day).
pub fn located(template: &str, home: &Path, workdir: &str, id: &str) -> Option<PathBuf> {
    let expanded = template.replace(HOME, &home.to_string_lossy()).replace(CWD_SLUG, &cwd_slug(workdir));
    let (found, _) = matches(home, &expanded);
    found.into_iter().filter(|m| m.id.as_deref() == Some(id)).max_by_key(|m| m.modified).map(|m| m.path)
}

/// A file that matches a template.
#[derive(Debug)]
struct Match {
    path: PathBuf,
    /// The id its name holds, if the template names one.
    id: Option<String>,
    /// Seconds since the epoch of its last change.
    modified: i64,
}

/// The regular files matching `template` (an absolute path of segments with `*` and `{sessionId}`). Below `home`,
/// every step is opened beneath it with no link on the way (`openat2`, as [`crate::node::transcript::open`] opens a
/// harness's file): a link the harness planted (its sessions folder to `/`, say) is never followed. Bounded by
/// [`MAX_ENTRIES`] and [`MAX_TIME`]: what is found until then is returned, and whether the look was cut short.
fn matches(home: &Path, template: &str) -> (Vec<Match>, bool) {
    use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
    let (base, rest) = match Path::new(template).strip_prefix(home) {
        Ok(rest) => (home, rest),
        Err(_) => (Path::new("/"), Path::new(template).strip_prefix("/").unwrap_or(Path::new(template))),
    };
    let Ok(root) = rustix::fs::open(base, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()) else {
        return (Vec::new(), false);
    };
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let open = |below: &Path, flags: OFlags| {
        let below = if below.as_os_str().is_empty() { Path::new(".") } else { below };
        rustix::fs::openat2(&root, below, flags | OFlags::CLOEXEC | OFlags::NOFOLLOW, Mode::empty(), resolve).ok()
    };
    let (started, mut budget, mut cut) = (Instant::now(), MAX_ENTRIES, false);
    let mut current: Vec<(PathBuf, Option<String>)> = vec![(PathBuf::new(), None)];
    'segments: for segment in rest.to_string_lossy().split('/').filter(|s| !s.is_empty()) {
        let literal = !segment.contains('*') && !segment.contains(SESSION_ID);
        let pattern = (!literal).then(|| segment_regex(segment));
        let mut next = Vec::new();
        for (dir, id) in current {
            let Some(pattern) = &pattern else {
                next.push((dir.join(segment), id));
                continue;
            };
            let Some(mut entries) =
                open(&dir, OFlags::RDONLY | OFlags::DIRECTORY).and_then(|fd| rustix::fs::Dir::read_from(fd).ok())
            else {
                continue;
            };
            while let Some(Ok(entry)) = entries.read() {
                if budget == 0 || started.elapsed() > MAX_TIME {
                    tracing::warn!(
                        home = %home.display(), template,
                        "a harness's folders hold more than one look reads ({MAX_ENTRIES} entries, {MAX_TIME:?}): \
                         what lies beyond is not looked at"
                    );
                    (current, cut) = (next, true);
                    break 'segments;
                }
                budget -= 1;
                let name = entry.file_name().to_string_lossy().into_owned();
                // A link is never followed into (the open below would refuse it anyway); `*` never means `..`.
                if entry.file_type() == FileType::Symlink || name == "." || name == ".." {
                    continue;
                }
                let Some(caps) = pattern.captures(&name) else { continue };
                let id = caps.name("id").map(|m| m.as_str().to_string()).or_else(|| id.clone());
                next.push((dir.join(name), id));
            }
        }
        current = next;
    }
    let found = current
        .into_iter()
        .filter_map(|(below, id)| {
            let stat = rustix::fs::fstat(open(&below, OFlags::PATH)?).ok()?;
            (FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile).then(|| Match {
                path: base.join(&below),
                id,
                modified: stat.st_mtime,
            })
        })
        .collect();
    (found, cut)
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
        let (found, cut) = matches(home.path(), &template);
        let mut ids: Vec<&str> = found.iter().filter_map(|m| m.id.as_deref()).collect();
        ids.sort();
        assert_eq!((ids, cut), (vec![other, id], false));
        let path = &found.iter().find(|m| m.id.as_deref() == Some(id)).unwrap().path;
        assert!(names_workdir(home.path(), path, "/srv/a") && !names_workdir(home.path(), path, "/srv/b"));
        let codex = crate::harness::builtin()["codex"].discover.clone().unwrap();
        let look = |workdir| candidates(&codex, 0, (Some(home.path()), workdir), None);
        assert_eq!((look("/srv/a"), look("/srv/c")), (vec![id.to_string()], vec![]));
    }

    /// A harness writes its HOME: a link it plants there, on the template's way or among its matches, is never
    /// followed, whatever it points at (another room's store, `/`).
    #[test]
    fn a_link_in_the_harness_folders_is_never_followed() {
        let (home, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let id = "0199a213-81c0-7800-8aa1-bbab2a035a53";
        let day = elsewhere.path().join("2026/11/30");
        std::fs::create_dir_all(&day).unwrap();
        std::fs::write(day.join(format!("rollout-x-{id}.jsonl")), "{}\n").unwrap();
        let template = format!("{}/.codex/sessions/*/*/*/rollout-*-{{sessionId}}.jsonl", home.path().display());
        std::fs::create_dir_all(home.path().join(".codex")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), home.path().join(".codex/sessions")).unwrap();
        assert!(matches(home.path(), &template).0.is_empty(), "a link on the template's way");
        std::fs::remove_file(home.path().join(".codex/sessions")).unwrap();
        std::fs::create_dir_all(home.path().join(".codex/sessions/2026/11")).unwrap();
        std::os::unix::fs::symlink(&day, home.path().join(".codex/sessions/2026/11/30")).unwrap();
        assert!(matches(home.path(), &template).0.is_empty(), "a link at a `*`");
        let real = home.path().join(".codex/sessions/2026/11/29");
        std::fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(
            day.join(format!("rollout-x-{id}.jsonl")),
            real.join(format!("rollout-y-{id}.jsonl")),
        )
        .unwrap();
        assert!(matches(home.path(), &template).0.is_empty(), "a linked file");
        assert_eq!(stored(&template, home.path(), "/w", &[id.to_string()]), Vec::<String>::new());
    }

    /// A harness that makes a million files in its store does not hold the agent: one look reads at most
    /// [`MAX_ENTRIES`] of them and says it was cut short.
    #[test]
    fn a_look_at_a_harness_folders_is_bounded() {
        let home = tempfile::tempdir().unwrap();
        let sessions = home.path().join("sessions");
        std::fs::create_dir_all(&sessions).unwrap();
        for i in 0..MAX_ENTRIES + 10 {
            std::fs::File::create(sessions.join(format!("f{i}"))).unwrap();
        }
        let template = format!("{}/sessions/*", home.path().display());
        let (found, cut) = matches(home.path(), &template);
        assert!(cut, "cut short");
        assert!(found.len() <= MAX_ENTRIES, "{}", found.len());
        let (found, cut) = matches(home.path(), &format!("{}/sessions/f1*", home.path().display()));
        assert!(cut && found.len() < MAX_ENTRIES, "what is found within the bound still counts: {}", found.len());
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
