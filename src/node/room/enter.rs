//! Entering a room, the tmux server's side of [`super`]: `worksession room` becomes the room's user and execs the
//! harness, held (with egress) to the egress proxy's port, and kept from other rooms' abstract sockets.

use std::io;
use std::path::Path;

use super::{MIN_UID, TMP};

/// `worksession room`: becomes `uid` (and gid, with no other group) and execs `argv` in `workdir` with `HOME` and
/// `TMPDIR` in the room and a private umask. Returns only on failure; run by the tmux server (root holding only
/// `SETUID`/`SETGID`, so it could not even enter the room's 0700 directories before it became the room's user).
/// With `egress`, the harness may open TCP connections to that port alone (the egress proxy on loopback, named in
/// its proxy variables): held by the kernel (Landlock, inherited by every process it starts), or not started at all.
pub fn enter(uid: u32, home: &Path, workdir: &Path, egress: Option<u16>, argv: &[std::ffi::OsString]) -> io::Error {
    use std::os::unix::process::CommandExt;
    let Some((program, args)) = argv.split_first() else { return io::Error::other("nothing to run") };
    if uid < MIN_UID {
        // Never root or a system or image account, whatever asked: a room is a uid of its own.
        return io::Error::other(format!("refused: uid {uid} is not a room's (rooms take uids from {MIN_UID} on)"));
    }
    let tmp = home.join(TMP);
    // What the harness makes is its own alone; inherited across exec.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        // tmux's own variables would lead a harness to the server's socket (it could not connect; it need not know).
        .env_remove("TMUX")
        .env_remove("TMUX_PANE")
        .env("HOME", home)
        .env("TMPDIR", &tmp)
        .env("USER", uid.to_string())
        .env("LOGNAME", uid.to_string())
        // std drops every supplementary group (as root), then takes the gid and the uid, failing the exec if it
        // cannot; leaving uid 0 this way clears every capability (the harness tests that it cannot become root).
        .uid(uid)
        .gid(uid)
        // Entered after the uid is taken (std changes directory after it switches users).
        .current_dir(workdir);
    if let Some(port) = egress {
        // No other way out than the egress proxy: whatever the harness or a tool it runs was told before.
        let proxy = format!("http://127.0.0.1:{port}");
        for name in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
            cmd.env(name, &proxy);
        }
        cmd.env_remove("NO_PROXY").env_remove("no_proxy");
        if let Err(e) = hold_connects_to(port) {
            return io::Error::other(format!(
                "refused: the harness's connections cannot be held to the egress proxy: {e}"
            ));
        }
    } else {
        scope_abstract_sockets();
    }
    cmd.exec()
}

/// Keeps this process and everything it starts from connecting to an abstract UNIX socket made outside it (another
/// room's: a name in the network namespace the rooms share, which no file permission guards), where the kernel can
/// (Landlock ABI 6, Linux 6.12); elsewhere nothing changes. With egress, [`hold_connects_to`] does it too.
fn scope_abstract_sockets() {
    use landlock::{CompatLevel, Compatible, Ruleset, RulesetAttr, Scope};
    let _ = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .scope(Scope::AbstractUnixSocket)
        .and_then(|r| r.create())
        .and_then(|r| r.restrict_self());
}

/// Holds this process and everything it starts to TCP connections to `port` alone, and to no TCP bind at all
/// (Landlock's network rules, ABI 4 and later: a kernel without them refuses, so no harness runs with a way out it was
/// not meant to have); and, by seccomp, to no socket those rules do not see: any family but local, netlink and the
/// Internet's, and of the Internet's any but TCP (UDP, DNS's way out included, MPTCP, SCTP, DCCP, ...), a TCP Fast
/// Open send (which connects without `connect`), and io_uring. The harness needs no name resolved itself: the proxy
/// resolves the names it is asked for. Landlock holds the port, not the address: a server of the harness's choosing
/// on that port elsewhere is reachable (docs/security.md).
fn hold_connects_to(port: u16) -> Result<(), String> {
    use landlock::{AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope};
    use seccompiler::{SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule};
    // Bind is held too, with no rule: a room that took the proxy's port while the agent restarts would be every
    // room's proxy (and it could connect to no listener of its own anyway).
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::ConnectTcp | AccessNet::BindTcp)
        // Another room's abstract UNIX socket (a name in the network namespace the rooms share, beyond every file
        // permission) is out of reach too, where the kernel can scope them (ABI 6, Linux 6.12).
        .map(|r| r.set_compatibility(CompatLevel::BestEffort))
        .and_then(|r| r.scope(Scope::AbstractUnixSocket))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rule(NetPort::new(port, AccessNet::ConnectTcp)))
        .and_then(|r| r.restrict_self())
        .map_err(|e| format!("Landlock: {e}"))?;
    let arg = |n, op, value| SeccompCondition::new(n, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string());
    let rule = |conditions| SeccompRule::new(conditions).map_err(|e| e.to_string());
    let fast_open = |n| -> Result<Vec<SeccompRule>, String> {
        let flag = libc::MSG_FASTOPEN as u64;
        Ok(vec![rule(vec![arg(n, SeccompCmpOp::MaskedEq(flag), flag)?])?])
    };
    // A socket is TCP or local, or none: no other family (SMC, VSOCK, RDS, TIPC, ...), and of the Internet's only
    // the stream type with its default or TCP protocol (no UDP, which Landlock does not hold and which carries data
    // out through any resolver; no MPTCP, SCTP, DCCP, ICMP).
    let mut sockets = vec![rule(
        [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK]
            .into_iter()
            .map(|family| arg(0, SeccompCmpOp::Ne, family as u64))
            .collect::<Result<_, _>>()?,
    )?];
    for family in [libc::AF_INET, libc::AF_INET6] {
        let family = arg(0, SeccompCmpOp::Eq, family as u64)?;
        let protocols = [0, libc::IPPROTO_TCP].map(|p| arg(2, SeccompCmpOp::Ne, p as u64));
        sockets.push(rule([Ok(family.clone())].into_iter().chain(protocols).collect::<Result<_, _>>()?)?);
        // The type's low bits (its flags above them): every kind but a stream.
        // (10: SOCK_PACKET, which libc marks deprecated.)
        for kind in [libc::SOCK_DGRAM, libc::SOCK_RAW, libc::SOCK_RDM, libc::SOCK_SEQPACKET, libc::SOCK_DCCP, 10] {
            sockets.push(rule(vec![family.clone(), arg(1, SeccompCmpOp::MaskedEq(0xf), kind as u64)?])?);
        }
    }
    let rules = [
        (libc::SYS_socket, sockets),
        (libc::SYS_sendto, fast_open(3)?),
        (libc::SYS_sendmsg, fast_open(2)?),
        (libc::SYS_sendmmsg, fast_open(3)?),
        (libc::SYS_io_uring_setup, vec![]),
    ];
    let arch = std::env::consts::ARCH.try_into().map_err(|e: seccompiler::BackendError| e.to_string())?;
    let filter = SeccompFilter::new(
        rules.into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let program: seccompiler::BpfProgram = filter.try_into().map_err(|e: seccompiler::BackendError| e.to_string())?;
    seccompiler::apply_filter(&program).map_err(|e| format!("seccomp: {e}"))
}
