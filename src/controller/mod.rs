//! The `worksession controller` process, beside the pipeline: the [`labeler`] (a WorkEvent made by hand gets its
//! session's node), the [`budgets`] (what each namespace with a WorkBudget spent) and, unless turned off, the
//! [`placement`] controller (sessions placed on nodes, and placed again when a node is lost), with `/metrics`,
//! `/livez` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::Client;
use prometheus_client::registry::Registry;

use crate::telemetry::Admin;
use labeler::LabelerMetrics;

pub mod budgets;
pub mod labeler;
pub mod placement;

/// Runs until the process is asked to stop; serves the admin endpoints on `admin_addr`, ready once WorkEvents can
/// be listed and the placement's caches are filled.
pub async fn run(
    client: Client,
    admin_addr: Option<SocketAddr>,
    placement: Option<placement::controller::PlacementOptions>,
    namespace: Option<String>,
) -> std::io::Result<()> {
    // The labeler's prefix names the process's metrics, as before the placement joined it.
    let mut registry = Registry::with_prefix("worksession_labeler");
    let metrics = LabelerMetrics::register(&mut registry);
    let ready = Arc::new(AtomicBool::new(false));
    if let Some(addr) = admin_addr {
        Admin::new(registry, ready.clone()).serve(addr).await?;
    }
    labeler::wait_until_listable(&client).await;
    let placed = Arc::new(AtomicBool::new(placement.is_none()));
    let placing = async {
        match placement {
            Some(options) => placement::controller::run(client.clone(), options, placed.clone()).await,
            None => std::future::pending().await,
        }
    };
    let readiness = async {
        while !placed.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ready.store(true, Ordering::Relaxed);
        std::future::pending::<()>().await
    };
    tokio::select! {
        () = labeler::run(client.clone(), metrics) => {}
        () = budgets::run(client.clone(), namespace) => {}
        () = placing => {}
        () = readiness => {}
    }
    Ok(())
}
