//! The webhook bridge beside a world, for GitHub: its routes for `octo-org/*` to the world's namespace, node and
//! workdir with the harness a test names, on a fake GitHub API, and its approval commenter (as the bridge runs it).
#![allow(dead_code)] // each test binary uses a different part of this module

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::Value;

use super::World;

/// The webhook secret.
pub const SECRET: &str = "a webhook secret";
/// The repository the routes take.
pub const REPO: &str = "octo-org/hello-world";

/// A bridge serving on loopback, and its approval commenter; both stop when it goes.
pub struct GithubBridge {
    pub addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
    poster: tokio::task::JoinHandle<()>,
}

impl World {
    /// The bridge for `harness`, its feedback off, a comment's body its prompt as it is, talking to the GitHub API at
    /// `base`.
    pub async fn github_bridge(&self, base: &str, harness: &str) -> GithubBridge {
        let dir = self.tmux.dir.path();
        std::fs::write(dir.join("github-secret"), SECRET).unwrap();
        std::fs::write(dir.join("github-token"), "ghp_test\n").unwrap();
        let yaml = format!(
            "github:\n  secretFile: {secret}\n  api: {{baseUrl: '{base}', tokenFile: {token}}}\n  events: {{issue_comment: [created]}}\nroutes:\n  - repository: 'octo-org/*'\n    namespace: {ns}\n    nodeName: {node}\n    harness: {harness}\n    workdir: {workdir}\n    feedback: 'Off'\npromptTemplate: '{{body}}'\n",
            secret = dir.join("github-secret").display(),
            token = dir.join("github-token").display(),
            ns = self.ns.name,
            node = self.node,
            workdir = self.tmux.workdir().display(),
        );
        let path = std::path::Path::new("bridge.yaml");
        let config = Arc::new(worksession::bridge::BridgeConfig::parse(&yaml, path).unwrap());
        let app = crate::support::bridge_router(&yaml, worksession::store::kube::KubeSink::new(self.ns.client.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let api = config.github.as_ref().unwrap().api.clone().unwrap();
        let github = Arc::new(worksession::bridge::feedback::github_of(&api).unwrap());
        let watched = tokio::sync::watch::channel(config).1;
        let poster = tokio::spawn(worksession::bridge::approval_comment::run(self.ns.client.clone(), github, watched));
        GithubBridge { addr, server, poster }
    }
}

impl GithubBridge {
    /// POSTs a signed `issue_comment` delivery; the status and the body.
    pub async fn deliver(&self, delivery: &str, payload: Value) -> (u16, String) {
        let body = serde_json::to_vec(&payload).unwrap();
        let signature = worksession::bridge::github::sign(SECRET.as_bytes(), &body);
        let headers = [
            ("Content-Type", "application/json"),
            ("X-GitHub-Event", "issue_comment"),
            ("X-GitHub-Delivery", delivery),
            ("X-Hub-Signature-256", signature.as_str()),
        ];
        crate::support::http(self.addr, "POST", "/webhooks/github", &headers, &body).await.unwrap()
    }
}

impl Drop for GithubBridge {
    fn drop(&mut self) {
        self.server.abort();
        self.poster.abort();
    }
}

/// A comment `body` on issue `number` of [`REPO`] by `sender`, whose role is `role`.
pub fn comment(number: u64, sender: &str, role: &str, body: &str) -> Value {
    let mut payload = crate::scenarios::fixtures::issue_comment(REPO, number, sender, body);
    payload["comment"]["author_association"] = role.into();
    payload
}
