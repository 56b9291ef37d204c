//! The driver for a store without watches that reports its changes (local mode's directory): like the Kubernetes driver it reconciles
//! a session only when something woke it: a change the store reports ([`Changes`]: a file-system notification, or
//! the slow rescan), its own requeue (verification deadlines, back-off), or the tmux [`poll`](super::poll) that
//! notices panes dying. The reconciles one cause wakes run concurrently and share one tmux observation.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use tokio::time::Instant;

use super::AgentOptions;
use super::controller::{ERROR_REQUEUE, RECONCILE_CONCURRENCY};
use super::poll::{POLL_INTERVAL, Wakes};
use crate::api::spent_in;
use crate::store::Changes;
use crate::store::DEFAULT_NAMESPACE as NAMESPACE;

/// Runs the agent over every session of `store` until the process is asked to stop.
pub async fn run_on_changes<S: Changes>(store: S, options: AgentOptions) -> std::io::Result<()> {
    let ready = Arc::new(AtomicBool::new(true));
    let ctx = super::reconciler(store, None, options, ready).await?;
    if let Err(e) = ctx.seed_claims().await {
        tracing::warn!(event = "agent.seed_failed", error = %e, "cannot list the sessions' conversations");
    }
    tracing::info!(event = "agent.started", "reconciling every WorkSession of the store");
    let mut due: HashMap<String, Instant> = HashMap::new();
    let mut wakes = Wakes::default();
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = crate::signal::shutdown();
    tokio::pin!(stop);
    loop {
        let next_due = due.values().min().copied();
        let polled = tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => true,
            () = ctx.store.changed() => false,
            () = sleep_until(next_due) => false,
        };
        let woke = Instant::now();
        let mut wake: BTreeSet<String> = match ctx.store.touched() {
            Ok(touched) => touched.into_iter().collect(),
            Err(e) => {
                tracing::warn!(event = "store.list_failed", error = %e, "cannot read the store");
                continue;
            }
        };
        // Requeues that are due.
        due.retain(|name, at| {
            let waiting = *at > woke;
            if !waiting {
                wake.insert(name.clone());
            }
            waiting
        });
        let sessions = match ctx.store.sessions().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(event = "store.list_failed", error = %e, "cannot list the sessions");
                continue;
            }
        };
        // The namespaces' budgets, summed here (no controller does): a change that matters wakes their sessions.
        match ctx.store.budgets() {
            Ok(mut budgets) => {
                for budget in &mut budgets {
                    budget.status = Some(spent_in(budget.namespace().as_deref(), &sessions));
                }
                let changed = ctx.registries.budgets.replace(&budgets);
                let of = |ws: &&crate::api::WorkSession| changed.iter().any(|ns| ws.namespace().as_ref() == Some(ns));
                wake.extend(sessions.iter().filter(of).map(ResourceExt::name_any));
            }
            Err(e) => tracing::warn!(event = "store.list_failed", error = %e, "cannot read the budgets"),
        }
        if polled {
            ctx.metrics.count_sessions(sessions.iter().map(|ws| ws.status.as_ref().and_then(|s| s.phase)));
            ctx.metrics.count_usage(&sessions);
            match ctx.observer.since(woke.into_std()).await {
                Ok(obs) => {
                    let config = ctx.config.borrow().clone();
                    let server_changes = ctx.observer.server_changes();
                    let records_len =
                        |ws: &crate::api::WorkSession| super::evidence::records_len(&ctx.registries, ws, &config);
                    wake.extend(
                        wakes
                            .after(&obs, server_changes, &sessions, &config, records_len)
                            .into_iter()
                            .map(|key| key.name),
                    );
                }
                Err(e) => tracing::warn!(event = "tmux.observe_failed", error = %e, "cannot observe tmux"),
            }
        }
        let namespaces: HashMap<String, String> =
            sessions.iter().map(|ws| (ws.name_any(), ws.namespace().unwrap_or_else(|| NAMESPACE.into()))).collect();
        let results: Vec<(String, Option<Duration>)> = futures::stream::iter(wake)
            .map(|name| {
                let (ctx, namespace) = (&ctx, namespaces.get(&name).map_or(NAMESPACE, String::as_str));
                async move {
                    match ctx.reconcile_observed_after(namespace, &name, woke.into_std()).await {
                        Ok(after) => (name, after),
                        Err(e) => {
                            tracing::warn!(event = "reconcile.failed", name, category = e.category().as_str(), error = %e, "reconcile failed; retrying");
                            (name, Some(ERROR_REQUEUE))
                        }
                    }
                }
            })
            .buffer_unordered(RECONCILE_CONCURRENCY.into())
            .collect()
            .await;
        for (name, after) in results {
            match after {
                Some(after) => due.insert(name, Instant::now() + after),
                None => due.remove(&name),
            };
        }
    }
    tracing::info!(event = "agent.stopped", "agent stopped");
    Ok(())
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
