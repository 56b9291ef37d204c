//! The periodic driver, for a store without watches (local mode's directory): every [`PERIODIC_INTERVAL`], every
//! session the store lists is reconciled (a reconcile that changes nothing writes nothing).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use kube::ResourceExt;

use super::Options;
use crate::store::Store;

/// How often the periodic driver looks at its store and tmux (changes are picked up within this).
pub const PERIODIC_INTERVAL: Duration = Duration::from_millis(250);

/// Runs the agent over every session of `store` until the process is asked to stop.
pub async fn run_periodic<S: Store>(store: S, options: Options) -> std::io::Result<()> {
    let ready = Arc::new(AtomicBool::new(true));
    let ctx = super::reconciler(store, None, options, ready).await?;
    tracing::info!(event = "agent.started", "reconciling every WorkSession of the store");
    let mut tick = tokio::time::interval(PERIODIC_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = crate::signal::shutdown();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {}
        }
        let sessions = match ctx.store.sessions().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(event = "store.list_failed", error = %e, "cannot list the sessions");
                continue;
            }
        };
        ctx.metrics.count_sessions(sessions.iter().map(|ws| ws.status.as_ref().and_then(|s| s.phase)));
        for ws in sessions {
            let (namespace, name) = (ws.namespace().unwrap_or_default(), ws.name_any());
            if let Err(e) = ctx.reconcile(&namespace, &name).await {
                tracing::warn!(event = "reconcile.failed", name, category = e.category(), error = %e, "reconcile failed; retrying");
            }
        }
    }
    tracing::info!(event = "agent.stopped", "agent stopped");
    Ok(())
}
