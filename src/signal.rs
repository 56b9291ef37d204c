//! Process signals: the agent, the bridge and local mode stop on SIGTERM (what kubelet sends) or Ctrl-C.

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown() {
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
