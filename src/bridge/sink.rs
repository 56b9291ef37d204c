//! Where the bridge writes: WorkSessions (created when missing) and WorkEvents (created once per delivery).

use std::future::Future;

use kube::api::PostParams;
use kube::{Api, Client, Resource};

use crate::api::{WorkEvent, WorkSession};

/// A write that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The API server is unreachable or refused for a reason a retry can fix: answer 503.
    #[error("API server unavailable: {0}")]
    Unavailable(String),
    /// The API server refused the object itself: answer 422.
    #[error("refused by the API server: {0}")]
    Rejected(String),
}

impl From<kube::Error> for SinkError {
    fn from(e: kube::Error) -> Self {
        match &e {
            kube::Error::Api(s) if s.code == 400 || s.code == 422 => SinkError::Rejected(s.message.clone()),
            _ => SinkError::Unavailable(e.to_string()),
        }
    }
}

/// The bridge's edge to the object store.
pub trait Sink: Send + Sync + 'static {
    /// The WorkSession `namespace/name`; when missing, `create` is created (if given). `None`: missing and not
    /// created.
    fn session(
        &self,
        namespace: &str,
        name: &str,
        create: Option<WorkSession>,
    ) -> impl Future<Output = Result<Option<WorkSession>, SinkError>> + Send;
    /// Creates `event`; `Ok(false)` when it already exists (a redelivery).
    fn create_event(&self, namespace: &str, event: &WorkEvent) -> impl Future<Output = Result<bool, SinkError>> + Send;
    /// Whether the API server answers (for `/readyz`).
    fn ready(&self) -> impl Future<Output = bool> + Send;
}

/// The Kubernetes sink.
#[derive(Clone)]
pub struct KubeSink {
    client: Client,
}

impl KubeSink {
    /// Writes through `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

fn post() -> PostParams {
    PostParams { field_manager: Some("worksession-bridge".into()), ..Default::default() }
}

impl Sink for KubeSink {
    async fn session(
        &self,
        namespace: &str,
        name: &str,
        create: Option<WorkSession>,
    ) -> Result<Option<WorkSession>, SinkError> {
        let api = Api::<WorkSession>::namespaced(self.client.clone(), namespace);
        if let Some(ws) = api.get_opt(name).await? {
            return Ok(Some(ws));
        }
        let Some(ws) = create else { return Ok(None) };
        match api.create(&post(), &ws).await {
            Ok(ws) => Ok(Some(ws)),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(api.get_opt(name).await?), // made meanwhile
            Err(e) => Err(e.into()),
        }
    }

    async fn create_event(&self, namespace: &str, event: &WorkEvent) -> Result<bool, SinkError> {
        let api = Api::<WorkEvent>::namespaced(self.client.clone(), namespace);
        match api.create(&post(), event).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn ready(&self) -> bool {
        self.client.apiserver_version().await.is_ok()
    }
}

/// The owner reference that ties a WorkEvent to its WorkSession.
pub fn owner_of(ws: &WorkSession) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    ws.controller_owner_ref(&()).map(|mut o| {
        o.controller = Some(false);
        o.block_owner_deletion = None;
        o
    })
}
