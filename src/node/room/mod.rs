//! Rooms, an edge of the executor like [`crate::node::tmux`] and [`crate::node::workspace`]: each WorkSession's harness runs as a
//! Unix user of its own (a *room*), so what one prompted harness can do stops at its own files and processes.
//!
//! A room is a uid from the configured range, a `HOME` of its own (`<root>/<uid>`, mode 0700, owned by the uid) and
//! the session's workdir, handed to the uid before its first spawn. The tmux server runs as root holding only
//! `SETUID` and `SETGID`; a spawn goes through [`enter`] (`worksession room`), which drops every group, takes the
//! room's uid and gid (so no capability is left), sets a private umask, `HOME` and `TMPDIR`, forgets tmux's
//! variables and execs the harness. Ordinary permissions then keep the room: the tmux socket is root's, another
//! room's files are another uid's (0700), and signals or `/proc/<pid>/environ` need the same uid.
//!
//! Which uid is whose lives beside the homes, where only the agent writes: `<root>/.owners/<uid>` holds the
//! WorkSession's `namespace/name`. The agent reads them once at start and writes one when it gives out a uid; with
//! `rooms.shared` they are every node's, read again for a session the agent does not know (it came from another
//! node), and a uid is claimed by making its file only where none is.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustix::fs::FileType;

pub use crate::config::rooms::{DEFAULT_COUNT, DEFAULT_FIRST_UID, MIN_UID, RoomsConfig};
pub use crate::core::Room;
pub use enter::enter;

mod enter;

/// The rooms of this agent's node, by WorkSession (`namespace/name`). With `rooms.shared` the owner files are every
/// node's: a uid is claimed by making its owner file where none is (so two nodes never give one out twice), and a
/// session this agent does not know is looked for there (it may have come from another node, its room with it).
#[derive(Debug, Default)]
pub struct Rooms {
    taken: Mutex<Option<BTreeMap<String, Assignment>>>,
    /// When the owner files were last read again for a session this agent did not know (shared rooms).
    reread: Mutex<Option<std::time::Instant>>,
}

/// When shared owner files are read again for a session this agent does not know.
#[derive(Clone, Copy)]
enum Reread {
    /// Not: what is recorded here is asked about (a preparation, a release).
    Never,
    /// At most every [`REREAD_EVERY`]: a look, made at every decision.
    Throttled,
    /// Each time: a room about to be given, or a session's only chance to be found (it is going).
    Always,
}

/// How often a look reads the shared owner files again for a session not known here.
const REREAD_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A room given out: its uid and the workdir it may be handed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Assignment {
    uid: u32,
    workdir: PathBuf,
    /// The agent prepared the workdir's checkout for this session (so it may be handed over, or moved aside).
    prepared: bool,
}

impl Rooms {
    fn taken(
        &self,
        config: &RoomsConfig,
    ) -> io::Result<std::sync::MutexGuard<'_, Option<BTreeMap<String, Assignment>>>> {
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        if taken.is_none() {
            *taken = Some(load(config)?);
        }
        Ok(taken)
    }

    /// The rooms as recorded, `identity`'s made true to the owner files first with shared rooms: a remembered claim
    /// whose owner file is no longer `identity`'s (the session went on another node and its uid was given again) is
    /// dropped by reading the files again, and a missing one is looked for as `missing` says (it may have come from
    /// another node).
    fn synced(
        &self,
        config: &RoomsConfig,
        identity: &str,
        missing: Reread,
    ) -> io::Result<std::sync::MutexGuard<'_, Option<BTreeMap<String, Assignment>>>> {
        let mut guard = self.taken(config)?;
        if config.shared {
            let known = guard.as_ref().expect("loaded").get(identity).map(|c| c.uid);
            let stale = match (known, missing) {
                (Some(uid), _) => !owned_by(config, uid, identity),
                (None, Reread::Never) => false,
                (None, Reread::Throttled) => self.may_reread(),
                (None, Reread::Always) => true,
            };
            if stale {
                *guard = Some(load(config)?);
            }
        }
        Ok(guard)
    }

    /// The room `identity` has, if any (none is given out).
    pub fn existing(&self, config: &RoomsConfig, identity: &str) -> Option<Room> {
        let taken = self.synced(config, identity, Reread::Always).ok()?;
        let uid = taken.as_ref()?.get(identity)?.uid;
        Some(Room { uid, home: config.root.join(uid.to_string()) })
    }

    /// The room of `identity` (whose workdir is `workdir`) as recorded, changing nothing: `Ok(None)` when one is to be
    /// given ([`Rooms::give`]: none yet, or its record names another workdir), `Err(why)` when it would be refused.
    pub fn look(
        &self,
        config: &RoomsConfig,
        identity: &str,
        workdir: &Path,
        keep: &[&Path],
    ) -> Result<Option<Room>, String> {
        let guard = self.may_give(config, identity, workdir, keep, Reread::Throttled)?;
        let taken = guard.as_ref().expect("loaded");
        match taken.get(identity) {
            Some(claim) if claim.workdir == workdir => {
                Ok(Some(Room { uid: claim.uid, home: config.root.join(claim.uid.to_string()) }))
            }
            Some(_) => Ok(None),
            None => free_uid(config, taken).map(|_| None),
        }
    }

    /// The checks [`Rooms::give`] makes before anything, read only: `workdir` may be a room's ([`place`]: `keep` are
    /// the agent's own directories) and no other room's workdir is, holds or lies in it (a directory is one session's).
    fn may_give(
        &self,
        config: &RoomsConfig,
        identity: &str,
        workdir: &Path,
        keep: &[&Path],
        missing: Reread,
    ) -> Result<std::sync::MutexGuard<'_, Option<BTreeMap<String, Assignment>>>, String> {
        place(config, workdir, keep)?;
        let failed = |e: io::Error| format!("cannot read the rooms in {}: {e}", config.root.display());
        let guard = self.synced(config, identity, missing).map_err(failed)?;
        let taken = guard.as_ref().expect("loaded");
        let overlaps = |other: &Path| other.starts_with(workdir) || workdir.starts_with(other);
        if let Some((other, claim)) = taken.iter().find(|(who, c)| who.as_str() != identity && overlaps(&c.workdir)) {
            return Err(format!(
                "workdir {} overlaps {}, the workdir of {other}",
                workdir.display(),
                claim.workdir.display()
            ));
        }
        Ok(guard)
    }

    /// The room of `identity` (whose workdir is `workdir`), given out now (its owner file written, its home made and
    /// closed to others) if it had none. Refused, before anything is prepared there, as [`Rooms::look`] says.
    pub fn give(&self, config: &RoomsConfig, identity: &str, workdir: &Path, keep: &[&Path]) -> Result<Room, String> {
        // Another node may have given it one (the session moved here), or taken uids since this agent read them.
        let mut guard = self.may_give(config, identity, workdir, keep, Reread::Always)?;
        let taken = guard.as_mut().expect("loaded");
        let uid = match taken.get(identity) {
            Some(claim) if claim.workdir == workdir => claim.uid,
            None if config.shared => {
                let uid = claim_shared(config, identity, workdir, taken)?;
                // Found given by another node meanwhile, the record read with it stays as it is.
                let claim = Assignment { uid, workdir: workdir.to_path_buf(), prepared: false };
                taken.entry(identity.to_string()).or_insert(claim);
                uid
            }
            found => {
                // A new room, or one whose workdir an older release let change: recorded before anything is made.
                let uid = match found {
                    Some(claim) => claim.uid,
                    None => {
                        let uid = free_uid(config, taken)?;
                        // Whatever a home of this uid held before is no one's now.
                        match std::fs::remove_dir_all(config.root.join(uid.to_string())) {
                            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.to_string()),
                            _ => {}
                        }
                        uid
                    }
                };
                let claim = Assignment { uid, workdir: workdir.to_path_buf(), prepared: false };
                write_owner(config, identity, &claim).map_err(|e| format!("cannot give out uid {uid}: {e}"))?;
                taken.insert(identity.to_string(), claim);
                uid
            }
        };
        let home = config.root.join(uid.to_string());
        make_home(&home, uid).map_err(|e| format!("cannot make the room's home {}: {e}", home.display()))?;
        Ok(Room { uid, home })
    }

    /// Forgets the room of `identity` here, changing nothing on disk: its session left this node, and with shared
    /// rooms its room goes with it (every process of its uid here already killed).
    pub fn forget(&self, config: &RoomsConfig, identity: &str) {
        if let Ok(mut guard) = self.taken(config) {
            guard.as_mut().expect("loaded").remove(identity);
        }
    }

    /// Whether a look may read the shared owner files again now (at most every [`REREAD_EVERY`]).
    fn may_reread(&self) -> bool {
        let mut last = self.reread.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        if last.is_some_and(|at| now.duration_since(at) < REREAD_EVERY) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// Records that the agent prepared `identity`'s checkout (not adopted one): that tree may be handed over.
    pub fn prepared(&self, config: &RoomsConfig, identity: &str) -> Result<(), String> {
        let mut guard = self.synced(config, identity, Reread::Never).map_err(|e| e.to_string())?;
        let Some(claim) = guard.as_mut().expect("loaded").get_mut(identity) else { return Ok(()) };
        if !claim.prepared {
            claim.prepared = true;
            write_owner(config, identity, claim).map_err(|e| format!("cannot record the preparation: {e}"))?;
        }
        Ok(())
    }

    /// Gives `workdir` to the room of `uid` before its harness starts: every file in it becomes the room's (never following a
    /// link), the directory closed to others. Only what is this session's is handed over: an empty directory, or the
    /// checkout the agent prepared for it ([`Rooms::prepared`]); and only where [`place`] allows, with nothing in it
    /// of another room's and no file with a second name.
    pub fn hand_over(&self, config: &RoomsConfig, uid: u32, workdir: &Path, keep: &[&Path]) -> Result<(), String> {
        let shown = workdir.display();
        place(config, workdir, keep)?;
        let rooms = config.first_uid..config.first_uid.saturating_add(config.count);
        let prepared = self
            .taken(config)
            .ok()
            .and_then(|t| t.as_ref()?.values().find(|c| c.uid == uid).map(|c| c.prepared && c.workdir == workdir));
        // Done before: the top's owner is changed last, so a top that is the room's has everything in it handed over;
        // only its mode may want closing again (a hand-over cut short before it, or the harness opened it).
        if std::fs::symlink_metadata(workdir).is_ok_and(|m| m.uid() == uid) {
            let close = |dir| rustix::fs::fchmod(&dir, rustix::fs::Mode::from_raw_mode(0o700)).map_err(io::Error::from);
            return open_dir(workdir).and_then(close).map_err(|e| format!("cannot close {shown}: {e}"));
        }
        let empty = std::fs::read_dir(workdir).map_err(|e| format!("{shown}: {e}"))?.next().is_none();
        if !empty && prepared != Some(true) {
            return Err(format!(
                "{shown} holds files the agent did not prepare for this session; only an empty \
                                directory or its own checkout is handed to a room"
            ));
        }
        let handed = open_dir(workdir).and_then(|dir| {
            // Checked whole before anything changes: a tree holding another room's file is refused untouched.
            walk(&dir, &mut |_, stat| match stat.st_uid {
                owner if owner != uid && rooms.contains(&owner) => {
                    Err(io::Error::other(format!("it holds a file of another room (uid {owner})")))
                }
                // Another name of the file may be anywhere: handing it over would hand that over too.
                _ if stat.st_nlink > 1 && FileType::from_raw_mode(stat.st_mode) != FileType::Directory => {
                    Err(io::Error::other("it holds a file with more than one name (a hard link)"))
                }
                _ => Ok(()),
            })?;
            walk(&dir, &mut |at, _| at.chown(uid))?;
            rustix::fs::fchmod(&dir, rustix::fs::Mode::from_raw_mode(0o700)).map_err(io::Error::from)
        });
        handed.map_err(|e| format!("cannot hand {shown} to uid {}: {e}", uid))
    }

    /// Forgets the room of `identity` (its WorkSession is gone; every process of its uid already killed): its
    /// `HOME` and owner file go, so the uid can be given again with nothing of this session's in reach. A workdir
    /// it was handed is moved aside, whole, to `<workspace>/.kept/` (the agent's alone, 0700), where no room reaches
    /// it and no git of the agent's runs in it; returns where, if it moved one.
    pub fn release(&self, config: &RoomsConfig, identity: &str) -> Result<Option<PathBuf>, String> {
        // With shared rooms only a room whose owner file is still this session's: never another's given the uid since.
        let mut guard = self.synced(config, identity, Reread::Never).map_err(|e| e.to_string())?;
        let Some(claim) = guard.as_mut().expect("loaded").get(identity).cloned() else { return Ok(None) };
        let mut kept = None;
        let agent = rustix::process::getuid().as_raw();
        let ours = |m: &std::fs::Metadata| m.uid() == claim.uid || (claim.prepared && m.uid() == agent);
        if std::fs::symlink_metadata(&claim.workdir).is_ok_and(|m| m.is_dir() && ours(&m)) {
            let aside = config.root.parent().unwrap_or(Path::new("/")).join(".kept");
            std::fs::create_dir_all(&aside).map_err(|e| format!("{}: {e}", aside.display()))?;
            std::fs::set_permissions(&aside, std::fs::Permissions::from_mode(0o700)).map_err(|e| e.to_string())?;
            let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            let to = aside.join(format!("{}-{}", identity.replace('/', "_"), since.as_secs()));
            std::fs::rename(&claim.workdir, &to)
                .map_err(|e| format!("cannot move {} aside to {}: {e}", claim.workdir.display(), to.display()))?;
            kept = Some(to);
        }
        let home = config.root.join(claim.uid.to_string());
        match std::fs::remove_dir_all(&home) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(format!("{}: {e}", home.display())),
            _ => {}
        }
        std::fs::remove_file(owner_file(config, claim.uid)).or_else(|e| match e.kind() {
            io::ErrorKind::NotFound => Ok(()),
            _ => Err(format!("cannot free uid {}: {e}", claim.uid)),
        })?;
        guard.as_mut().expect("loaded").remove(identity);
        Ok(kept)
    }
}

/// Who has `uid`, in a directory only the agent reads: `<root>/.owners/<uid>`.
pub fn owner_file(config: &RoomsConfig, uid: u32) -> PathBuf {
    config.root.join(OWNERS).join(uid.to_string())
}

fn write_owner(config: &RoomsConfig, identity: &str, claim: &Assignment) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(owner_file(config, claim.uid))?;
    let prepared = if claim.prepared { "prepared\n" } else { "" };
    std::io::Write::write_all(&mut file, format!("{identity}\n{}\n{prepared}", claim.workdir.display()).as_bytes())
}

/// Claims a free uid for `identity` in shared rooms: its owner file made only where none is (`O_EXCL`, atomic on
/// the shared storage), so two nodes giving rooms at once never give one uid twice; a uid another node took since
/// `taken` was read is skipped (and `taken` read again). Whatever a home of the uid held before is no one's now.
fn claim_shared(
    config: &RoomsConfig,
    identity: &str,
    workdir: &Path,
    taken: &mut BTreeMap<String, Assignment>,
) -> Result<u32, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let claim = |uid: u32| {
        let mut file =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(owner_file(config, uid))?;
        std::io::Write::write_all(&mut file, format!("{identity}\n{}\n", workdir.display()).as_bytes())
    };
    for _ in 0..8 {
        let uid = free_uid(config, taken)?;
        match claim(uid) {
            Ok(()) => {
                let home = config.root.join(uid.to_string());
                if let Err(e) = std::fs::remove_dir_all(&home).or_else(|e| match e.kind() {
                    io::ErrorKind::NotFound => Ok(()),
                    _ => Err(e),
                }) {
                    let _ = std::fs::remove_file(owner_file(config, uid));
                    return Err(format!("{}: {e}", home.display()));
                }
                return Ok(uid);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                *taken =
                    load(config).map_err(|e| format!("cannot read the rooms in {}: {e}", config.root.display()))?;
                if let Some(found) = taken.get(identity) {
                    return Ok(found.uid);
                }
            }
            Err(e) => return Err(format!("cannot give out uid {uid}: {e}")),
        }
    }
    Err("another node kept taking the free uids; tried again on the next reconcile".into())
}

/// Whether the owner file of `uid` names `identity` (its first line).
fn owned_by(config: &RoomsConfig, uid: u32, identity: &str) -> bool {
    std::fs::read_to_string(owner_file(config, uid)).is_ok_and(|text| text.lines().next() == Some(identity))
}

/// The owner files (the root, 0711, and the owners' directory, 0700, made if missing).
fn load(config: &RoomsConfig) -> io::Result<BTreeMap<String, Assignment>> {
    let owners = config.root.join(OWNERS);
    std::fs::create_dir_all(&owners)?;
    // Others may pass through to their own home, never list whose rooms there are.
    std::fs::set_permissions(&config.root, std::fs::Permissions::from_mode(0o711))?;
    std::fs::set_permissions(&owners, std::fs::Permissions::from_mode(0o700))?;
    let mut taken = BTreeMap::new();
    let range = config.first_uid..config.first_uid.saturating_add(config.count);
    for entry in std::fs::read_dir(&owners)? {
        let entry = entry?;
        let name = entry.file_name();
        // Only the files the agent writes: a uid in its own spelling and range, a regular file.
        let Some(uid) = name.to_str().and_then(|n| n.parse::<u32>().ok().filter(|u| u.to_string() == n)) else {
            continue;
        };
        if !range.contains(&uid) || !entry.file_type()?.is_file() {
            continue;
        }
        // Another node may free a uid while this one reads: a file gone is no one's.
        let text = match std::fs::read_to_string(entry.path()) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            read => read?,
        };
        let mut lines = text.lines();
        let (Some(identity), Some(workdir)) = (lines.next(), lines.next()) else { continue };
        let prepared = lines.next() == Some("prepared");
        taken.insert(identity.to_string(), Assignment { uid, workdir: workdir.into(), prepared });
    }
    Ok(taken)
}

/// The directory of the owner files, in the rooms' root.
const OWNERS: &str = ".owners";

/// Makes `home` (0700) and its private temporary directory, both the room's; the tmux server, which enters the
/// room, can change no file's owner. By file descriptors: the harness owns its home and could swap `.tmp` for a
/// link to something the agent would then change.
fn make_home(home: &Path, uid: u32) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    match std::fs::create_dir(home) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    // The rooms' root is the agent's: the home is what the agent made, not a link a harness put there.
    let dir = open_dir(home)?;
    settle(&dir, uid)?;
    match rustix::fs::mkdirat(&dir, TMP, Mode::from_raw_mode(0o700)) {
        Err(e) if e != rustix::io::Errno::EXIST => return Err(e.into()),
        _ => {}
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    settle(&rustix::fs::openat(&dir, TMP, flags, Mode::empty())?, uid)
}

/// Makes the home of the room of `uid` again where it is missing, and closes it (and its `TMPDIR`) to others, before
/// its harness starts: its last harness may have opened it, or replaced its `TMPDIR` with a link.
pub fn close_home(uid: u32, home: &Path) -> Result<(), String> {
    make_home(home, uid).map_err(|e| format!("cannot make the room's home {}: {e}", home.display()))
}

/// The lowest uid no room has.
fn free_uid(config: &RoomsConfig, taken: &BTreeMap<String, Assignment>) -> Result<u32, String> {
    let used: std::collections::BTreeSet<u32> = taken.values().map(|c| c.uid).collect();
    let range = config.first_uid..config.first_uid.saturating_add(config.count);
    let Some(uid) = range.clone().find(|uid| !used.contains(uid)) else {
        let last = range.end - 1;
        return Err(format!("all {} rooms ({}-{last}) are taken", config.count, range.start));
    };
    Ok(uid)
}

/// The room's, 0700.
fn settle(dir: &std::os::fd::OwnedFd, uid: u32) -> io::Result<()> {
    let stat = rustix::fs::fstat(dir)?;
    if stat.st_uid != uid || stat.st_gid != uid {
        rustix::fs::fchown(dir, Some(rustix::fs::Uid::from_raw(uid)), Some(rustix::fs::Gid::from_raw(uid)))?;
    }
    if stat.st_mode & 0o7777 != 0o700 {
        rustix::fs::fchmod(dir, rustix::fs::Mode::from_raw_mode(0o700))?;
    }
    Ok(())
}

/// A room's `TMPDIR`, in its home.
const TMP: &str = ".tmp";

/// Where a room's workdir may be: in the workspace (the directory holding the rooms), by a path whose existing part
/// has no link (its real path is its path), overlapping none of `keep` (the agent's own directories), the rooms or
/// `.kept`, and under no directory a room owns (a harness could swap what is made there, its own room's included).
/// Checked when the room is given out, before anything is prepared there, and again at the hand-over.
fn place(config: &RoomsConfig, workdir: &Path, keep: &[&Path]) -> Result<(), String> {
    let shown = workdir.display();
    let workspace = config.root.parent().unwrap_or(Path::new("/"));
    if !workdir.starts_with(workspace) || workdir == workspace {
        return Err(format!("{shown} is not in the workspace {}", workspace.display()));
    }
    if workdir.to_string_lossy().ends_with(".worksession-partial") {
        return Err(format!("{shown} is the name of a checkout being made"));
    }
    let kept = workspace.join(".kept");
    let keep = keep.iter().copied().chain([config.root.as_path(), kept.as_path()]);
    if let Some(kept) = keep.into_iter().find(|k| k.starts_with(workdir) || workdir.starts_with(k)) {
        return Err(format!("{shown} overlaps {}; a workdir cannot", kept.display()));
    }
    let existing = workdir.ancestors().find(|a| std::fs::symlink_metadata(a).is_ok()).unwrap_or(workspace);
    if std::fs::canonicalize(existing).map_err(|e| format!("{}: {e}", existing.display()))? != existing {
        return Err(format!("{shown} is reached through a link"));
    }
    let rooms = config.first_uid..config.first_uid.saturating_add(config.count);
    for ancestor in workdir.ancestors().skip(1).take_while(|a| a.starts_with(workspace)) {
        let Ok(meta) = std::fs::symlink_metadata(ancestor) else { continue };
        if rooms.contains(&meta.uid()) {
            return Err(format!("{shown} is inside {}, a room's (uid {})", ancestor.display(), meta.uid()));
        }
    }
    Ok(())
}

/// A directory opened without following a link.
fn open_dir(path: &Path) -> io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(rustix::fs::CWD, path, flags, Mode::empty())?)
}

/// A file met by [`walk`]: the directory holding it and its name (or the directory itself).
struct At<'a> {
    dir: &'a std::os::fd::OwnedFd,
    name: Option<&'a std::ffi::CStr>,
}

impl At<'_> {
    fn chown(&self, uid: u32) -> io::Result<()> {
        let id = (Some(rustix::fs::Uid::from_raw(uid)), Some(rustix::fs::Gid::from_raw(uid)));
        match self.name {
            None => rustix::fs::fchown(self.dir, id.0, id.1)?,
            Some(name) => rustix::fs::chownat(self.dir, name, id.0, id.1, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?,
        }
        Ok(())
    }
}

/// Calls `visit` on everything beneath `dir`, then on `dir`, by file descriptors: a directory is entered only as what it
/// was when opened, never through a link, so a harness that swaps a directory for a link meanwhile changes nothing.
fn walk(dir: &std::os::fd::OwnedFd, visit: &mut dyn FnMut(At, &rustix::fs::Stat) -> io::Result<()>) -> io::Result<()> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
        if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            match rustix::fs::openat(dir, name, flags, Mode::empty()) {
                Ok(child) => {
                    walk(&child, visit)?;
                    continue;
                }
                // Swapped for a link or a file since the stat: taken as what it is now, not followed.
                Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        visit(At { dir, name: Some(name) }, &stat)?;
    }
    // The directory itself last: a hand-over stopped half-way leaves its top as it was, so it is done again.
    visit(At { dir, name: None }, &rustix::fs::fstat(dir)?)
}

#[cfg(test)]
mod tests;
