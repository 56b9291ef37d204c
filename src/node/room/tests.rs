//! The tests of [`super`].

use super::*;

fn nix_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

fn config(root: &Path, count: u32) -> RoomsConfig {
    RoomsConfig {
        root: root.to_path_buf(),
        first_uid: 4_000_000,
        count,
        helper: "worksession".into(),
        egress: None,
        shared: false,
        namespace_keys: None,
    }
}

#[test]
fn each_session_gets_a_uid_of_its_own_kept_across_restarts_and_freed_when_it_goes() {
    if nix_uid() != 0 {
        return; // giving a home to another uid needs CHOWN; the tests run as root
    }
    let dir = std::env::temp_dir().join(format!("rooms-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let c = config(&dir.join(".rooms"), 2);
    let rooms = Rooms::default();
    let work = dir.join("work");
    let (wa, wb, wc) = (work.join("a"), work.join("b"), work.join("c"));
    let a = rooms.give(&c, "ns/a", &wa, &[]).unwrap();
    let b = rooms.give(&c, "ns/b", &wb, &[]).unwrap();
    assert_eq!((a.uid, b.uid), (4_000_000, 4_000_001));
    assert_eq!(rooms.give(&c, "ns/a", &wa, &[]).unwrap(), a, "the same room again");
    let taken = |w: &Path| rooms.give(&c, "ns/x", w, &[]).unwrap_err();
    assert!(taken(&wa.join("in")).contains("ns/a"), "a workdir is one session's");
    assert!(taken(&work).contains("overlaps"), "nor may one hold another's");
    for (bad, why) in [
        (dir.clone(), "not in the workspace"),
        (dir.join(".rooms/4000000/x"), "overlaps"),
        (dir.join(".kept/x"), "overlaps"),
        (a.home.clone(), "overlaps"),
        (work.join(".a.worksession-partial"), "being made"),
    ] {
        assert!(taken(&bad).contains(why), "{}: {}", bad.display(), taken(&bad));
    }
    let meta = std::fs::metadata(&a.home).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (a.uid, 0o700));
    assert!(rooms.give(&c, "ns/c", &wc, &[]).unwrap_err().contains("all 2 rooms"));
    assert_eq!(Rooms::default().give(&c, "ns/b", &wb, &[]).unwrap(), b, "a restarted agent reads who has which");
    std::fs::create_dir(c.root.join(OWNERS).join("04000001")).unwrap();
    assert_eq!(Rooms::default().give(&c, "ns/b", &wb, &[]).unwrap(), b, "what the agent did not write is skipped");
    let owners = std::fs::metadata(c.root.join(OWNERS)).unwrap();
    assert_eq!((owners.uid(), owners.mode() & 0o777), (0, 0o700), "who has which is the agent's to read");
    assert_eq!(rooms.release(&c, "ns/a").unwrap(), None, "no workdir was handed over");
    assert!(!a.home.exists());
    assert_eq!(rooms.give(&c, "ns/c", &wc, &[]).unwrap().uid, a.uid, "a freed uid is given again");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Rooms on storage every node mounts travel with their sessions: two nodes' agents, each with its own (stale)
/// view, never give one uid twice (a uid is claimed by making its owner file where none is); a session that comes
/// to the other node finds its room there, the same uid and home; the node it left forgets it and changes nothing;
/// a remembered room whose uid went to another session since is never taken for it.
#[test]
fn shared_rooms_are_given_once_for_every_node_and_travel_with_their_session() {
    if nix_uid() != 0 {
        return; // giving a home to another uid needs CHOWN; the tests run as root
    }
    let dir = std::env::temp_dir().join(format!("shared-rooms-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let c = RoomsConfig { shared: true, ..config(&dir.join(".rooms"), 3) };
    let (node_a, node_b) = (Rooms::default(), Rooms::default());
    let work = dir.join("work");
    let (wa, wb) = (work.join("a"), work.join("b"));
    // Both have read the (empty) owner files before either gives a room.
    assert_eq!(node_a.look(&c, "ns/a", &wa, &[]).unwrap(), None);
    assert_eq!(node_b.look(&c, "ns/b", &wb, &[]).unwrap(), None);
    let a = node_a.give(&c, "ns/a", &wa, &[]).unwrap();
    let b = node_b.give(&c, "ns/b", &wb, &[]).unwrap();
    assert_ne!(a.uid, b.uid, "node b's view was stale: the uid node a took is skipped");
    // ns/a moves to node b: node a forgets it, node b finds it as it was.
    node_a.forget(&c, "ns/a");
    assert!(a.home.is_dir() && owned_by(&c, a.uid, "ns/a"), "nothing on the shared storage changed");
    assert_eq!(node_b.give(&c, "ns/a", &wa, &[]).unwrap(), a, "the same room on the node it came to");
    assert_eq!(node_b.existing(&c, "ns/a"), Some(a.clone()));
    // A third node remembers ns/a; ns/a is deleted on node b and its uid given to ns/x: the third node's memory is
    // checked against the owner file, and its release of ns/a touches nothing of ns/x's.
    let node_c = Rooms::default();
    assert_eq!(node_c.existing(&c, "ns/a"), Some(a.clone()));
    assert_eq!(node_b.release(&c, "ns/a").unwrap(), None);
    let x = node_b.give(&c, "ns/x", &work.join("x"), &[]).unwrap();
    assert_eq!(x.uid, a.uid, "the freed uid given again");
    assert_eq!(node_c.existing(&c, "ns/a"), None, "not ns/x's room under ns/a's name");
    assert_eq!(node_c.release(&c, "ns/a").unwrap(), None);
    assert!(x.home.is_dir() && owned_by(&c, x.uid, "ns/x"), "ns/x's room untouched");
    // Each of them still counts the other's: the last uid goes to one new session only.
    let c3 = node_a.give(&c, "ns/c", &work.join("c"), &[]).unwrap();
    assert!(![a.uid, b.uid].contains(&c3.uid));
    assert!(node_b.give(&c, "ns/d", &work.join("d"), &[]).unwrap_err().contains("all 3 rooms"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Looking changes nothing, and says what giving would do: nothing for a room as recorded (whatever its harness
/// did to its home, which is closed again before the next harness starts), a room to give for a session without
/// one, and the same refusals.
#[test]
fn looking_at_a_room_changes_nothing_and_says_what_giving_would() {
    if nix_uid() != 0 {
        return;
    }
    let dir = std::env::temp_dir().join(format!("rooms-look-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let c = config(&dir.join(".rooms"), 1);
    let rooms = Rooms::default();
    let (wa, wb) = (dir.join("work/a"), dir.join("work/b"));
    assert_eq!(rooms.look(&c, "ns/a", &wa, &[]), Ok(None), "none yet: one to give");
    assert!(!c.root.join("4000000").exists(), "and nothing made for it");
    let a = rooms.give(&c, "ns/a", &wa, &[]).unwrap();
    assert_eq!(rooms.look(&c, "ns/a", &wa, &[]), Ok(Some(a.clone())));
    std::fs::set_permissions(&a.home, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(rooms.look(&c, "ns/a", &wa, &[]), Ok(Some(a.clone())), "its harness opened it: still its room");
    assert_eq!(std::fs::metadata(&a.home).unwrap().mode() & 0o777, 0o755, "looking changed nothing");
    close_home(a.uid, &a.home).unwrap();
    assert_eq!(std::fs::metadata(&a.home).unwrap().mode() & 0o777, 0o700, "closed before its next harness");
    std::fs::remove_dir(a.home.join(TMP)).unwrap();
    std::os::unix::fs::symlink("/etc", a.home.join(TMP)).unwrap();
    assert!(close_home(a.uid, &a.home).is_err(), "a TMPDIR made a link is refused, never followed");
    assert!(rooms.look(&c, "ns/b", &wb, &[]).unwrap_err().contains("all 1 rooms"));
    assert!(rooms.look(&c, "ns/b", &wa.join("in"), &[]).unwrap_err().contains("overlaps"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_workdir_is_handed_over_whole_or_not_at_all() {
    use std::os::unix::fs::symlink;
    if nix_uid() != 0 {
        return;
    }
    let dir = std::env::temp_dir().join(format!("rooms-hand-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let c = config(&dir.join(".rooms"), 10);
    let rooms = Rooms::default();
    let owner = |p: &Path| std::fs::symlink_metadata(p).unwrap().uid();
    // A room whose workdir holds `files` (relative paths), prepared for it or not.
    let room = |name: &str, files: &[&str], prepared: bool| {
        let work = dir.join(name);
        for f in files {
            std::fs::create_dir_all(work.join(f).parent().unwrap()).unwrap();
            std::fs::write(work.join(f), "x").unwrap();
        }
        std::fs::create_dir_all(&work).unwrap();
        let room = rooms.give(&c, &format!("ns/{name}"), &work, &[]).unwrap();
        if prepared {
            rooms.prepared(&c, &format!("ns/{name}")).unwrap();
        }
        (room, work)
    };
    let (a, work) = room("w", &["sub/f"], true);
    symlink("/etc/hostname", work.join("link")).unwrap();
    rooms.hand_over(&c, a.uid, &work, &[]).unwrap();
    assert_eq!((owner(&work), owner(&work.join("sub/f")), owner(&work.join("link"))), (a.uid, a.uid, a.uid));
    assert_eq!(owner(Path::new("/etc/hostname")), 0, "a link is never followed");
    assert_eq!(std::fs::metadata(&work).unwrap().mode() & 0o777, 0o700);
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o755)).unwrap();
    rooms.hand_over(&c, a.uid, &work, &[]).unwrap();
    assert_eq!(std::fs::metadata(&work).unwrap().mode() & 0o777, 0o700, "opened again (by its harness): closed");
    let (e, empty) = room("empty", &[], false);
    rooms.hand_over(&c, e.uid, &empty, &[]).unwrap();
    assert_eq!(owner(&empty), e.uid, "an empty directory is handed over");

    let (b, theirs) = room("theirs", &["precious"], false);
    let err = rooms.hand_over(&c, b.uid, &theirs, &[]).unwrap_err();
    assert!(err.contains("did not prepare"), "{err}");
    assert_eq!(owner(&theirs.join("precious")), 0, "files nobody prepared for it stay where they are");
    let (m, mixed) = room("mixed", &["mine", "theirs"], true);
    std::os::unix::fs::lchown(mixed.join("theirs"), Some(a.uid), Some(a.uid)).unwrap();
    assert!(rooms.hand_over(&c, m.uid, &mixed, &[]).unwrap_err().contains("another room"));
    assert_eq!(owner(&mixed.join("mine")), 0, "nothing changed");
    let (l, linked) = room("linked", &[], true);
    std::fs::hard_link(mixed.join("mine"), linked.join("same")).unwrap();
    assert!(rooms.hand_over(&c, l.uid, &linked, &[]).unwrap_err().contains("hard link"), "a second name elsewhere");
    symlink(&empty, dir.join("via-link")).unwrap();
    assert!(rooms.hand_over(&c, l.uid, &dir.join("via-link"), &[]).unwrap_err().contains("link"));

    let aside = rooms.release(&c, "ns/w").unwrap().expect("moved aside");
    assert!(!work.exists() && aside.join("sub/f").exists(), "moved aside whole");
    assert!(aside.starts_with(dir.join(".kept")));
    let kept = std::fs::metadata(dir.join(".kept")).unwrap();
    assert_eq!((kept.uid(), kept.mode() & 0o777), (0, 0o700), "out of every room's reach");
    std::fs::remove_dir_all(&dir).unwrap();
}
