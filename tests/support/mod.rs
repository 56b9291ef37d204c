//! Test support: a real control plane per test binary and a fresh namespace per test.
//!
//! The control plane is the one named by `KUBECONFIG` when `WORKSESSION_TESTENV_DIR` says it is a testenv (as
//! `scripts/test` sets up), or the cluster of `WORKSESSION_TEST_KUBECONFIG` when that is set explicitly; otherwise
//! one is started for this test binary through `scripts/testenv up --owner-pid`, which stops it when the binary
//! exits.
#![allow(dead_code)] // each test binary uses a different part of this module

pub mod claude;
pub mod clis;
pub mod model;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// Where the control plane of this test binary is.
pub struct ControlPlane {
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// State folder of `scripts/testenv up` (certificates, for `kubeconfig-for`).
    pub testenv_dir: Option<PathBuf>,
}

/// The repository root (where `scripts/testenv` lives).
/// A benchmark's size: `full`, or `short` when `WORKSESSION_BENCH_SHORT` is set (the test command runs every
/// benchmark that way, to know they still run to completion; their figures come from full runs).
#[allow(dead_code)]
pub fn bench_size(full: usize, short: usize) -> usize {
    if std::env::var_os("WORKSESSION_BENCH_SHORT").is_some() { short } else { full }
}

pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn testenv() -> Command {
    Command::new(repo_root().join("scripts/testenv"))
}

/// The control plane, started on first use.
pub fn control_plane() -> &'static ControlPlane {
    static CP: OnceLock<ControlPlane> = OnceLock::new();
    CP.get_or_init(|| {
        // Reuse a running testenv, never an arbitrary cluster a developer's KUBECONFIG happens to name.
        if let (Some(kubeconfig), Some(dir)) =
            (std::env::var_os("KUBECONFIG"), std::env::var_os("WORKSESSION_TESTENV_DIR"))
        {
            return ControlPlane { kubeconfig: kubeconfig.into(), testenv_dir: Some(dir.into()) };
        }
        if let Some(kubeconfig) = std::env::var_os("WORKSESSION_TEST_KUBECONFIG") {
            return ControlPlane { kubeconfig: kubeconfig.into(), testenv_dir: None };
        }
        let out = testenv()
            .args(["up", "--owner-pid", &std::process::id().to_string()])
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("run scripts/testenv up");
        assert!(out.status.success(), "scripts/testenv up failed (run `scripts/testenv install` first?)");
        let exports = String::from_utf8(out.stdout).expect("utf-8 exports");
        let var = |name: &str| PathBuf::from(exported(&exports, name));
        ControlPlane { kubeconfig: var("KUBECONFIG"), testenv_dir: Some(var("WORKSESSION_TESTENV_DIR")) }
    })
}

/// The value of `name` in the `export NAME=value` lines `scripts/testenv up` prints.
pub fn exported(exports: &str, name: &str) -> String {
    exports
        .lines()
        .find_map(|l| l.strip_prefix(&format!("export {name}=")))
        .map(|v| v.trim_matches('\'').to_string())
        .unwrap_or_else(|| panic!("scripts/testenv up printed no {name}"))
}

/// A kube client for the kubeconfig at `path`, bound to the calling test's runtime.
pub async fn client_for(path: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).expect("read kubeconfig");
    let config =
        Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.expect("kubeconfig to config");
    Client::try_from(config).expect("client")
}

/// An admin client for the control plane.
pub async fn admin_client() -> Client {
    client_for(&control_plane().kubeconfig).await
}

/// The path of a kubeconfig for a non-admin identity: a client certificate from the control plane's client CA.
pub fn kubeconfig_for(user: &str, groups: &[&str]) -> PathBuf {
    let dir =
        control_plane().testenv_dir.as_ref().expect("non-admin identities need a testenv (WORKSESSION_TESTENV_DIR)");
    let out = testenv()
        .arg("kubeconfig-for")
        .arg(user)
        .args(groups)
        .env("WORKSESSION_TESTENV_DIR", dir)
        .output()
        .expect("run scripts/testenv kubeconfig-for");
    assert!(out.status.success(), "kubeconfig-for {user}: {} {}", out.status, String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).expect("utf-8 path").trim())
}

/// A namespace with a random name for one test, deleted when dropped.
///
/// The test control plane runs no namespace controller, so a deleted namespace stays `Terminating`; its name is
/// never reused, which is all the isolation the tests need.
pub struct TestNamespace {
    /// An admin client bound to the test's runtime.
    pub client: Client,
    /// The namespace's name.
    pub name: String,
}

impl TestNamespace {
    /// Creates `ws-test-<random>`.
    pub async fn new() -> Self {
        let client = admin_client().await;
        let name = format!("ws-test-{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("create test namespace");
        Self { client, name }
    }

    /// A namespaced API for `K` in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Drop cannot await on the test's runtime (it may be shutting down): delete from a thread of our own.
        let (path, name) = (control_plane().kubeconfig.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let client = client_for(&path).await;
                let _ = Api::<Namespace>::all(client).delete(&name, &DeleteParams::background()).await;
            })
        })
        .join();
    }
}

/// Applies the CRDs from `crds/` (server-side, idempotent across tests) and waits until they are served.
pub async fn install_crds(client: Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::ResourceExt;
    use kube::api::{ListParams, Patch, PatchParams};
    use kube::runtime::wait::{await_condition, conditions};
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let yaml = std::fs::read_to_string(repo_root().join("crds/worksession.dev.yaml")).unwrap();
    for doc in serde_yaml_ng::Deserializer::from_str(&yaml) {
        let crd: CustomResourceDefinition = serde::Deserialize::deserialize(doc).unwrap();
        let name = crd.name_any();
        crds.patch(&name, &PatchParams::apply("worksession-tests").force(), &Patch::Apply(&crd)).await.unwrap();
        let established = await_condition(crds.clone(), &name, conditions::is_crd_established());
        tokio::time::timeout(WAIT, established).await.expect("Established in time").unwrap();
    }
    let sessions: Api<worksession::api::WorkSession> = Api::all(client.clone());
    let events: Api<worksession::api::WorkEvent> = Api::all(client);
    eventually("the CRDs to be served", || async {
        let ok = sessions.list(&ListParams::default().limit(1)).await.is_ok()
            && events.list(&ListParams::default().fields("spec.session=x").limit(1)).await.is_ok();
        ok.then_some(())
    })
    .await;
}

/// The bridge's router for config `yaml`, writing to `sink` (its metrics registered in a throwaway registry).
pub fn bridge_router<S: worksession::store::Sink>(yaml: &str, sink: S) -> axum::Router {
    use worksession::bridge::{Bridge, BridgeConfig, BridgeMetrics};
    let config =
        std::sync::Arc::new(BridgeConfig::parse(yaml, Path::new("bridge.yaml")).expect("a valid bridge config"));
    let metrics = BridgeMetrics::register(&mut prometheus_client::registry::Registry::default());
    Bridge::new(tokio::sync::watch::channel(config).1, sink, metrics).router()
}

/// How long a test waits for anything before it fails: the one timeout of the suite. Generous, since a passing test
/// never waits it out: a real CLI boots in 5-40 s alone, several times that beside a build on two cores.
pub const WAIT: Duration = Duration::from_secs(120);
/// How often a waiting test looks again.
pub const POLL: Duration = Duration::from_millis(20);

/// The one polling loop of the suite: awaits `check` until it returns `Ok`, looking every [`POLL`], for at most
/// `limit`; then fails naming `what` and the last thing `check` saw (its `Err`).
pub async fn poll<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let last = match check().await {
            Ok(v) => return v,
            Err(last) => last,
        };
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}; last seen: {last}");
        tokio::time::sleep(POLL).await;
    }
}

/// Awaits `check` returning `Some`, for at most [`WAIT`].
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_within(what, WAIT, check).await
}

/// Awaits `check` returning `Some`, for at most `limit` (benchmarks wait for longer than tests).
pub async fn eventually_within<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    poll(what, limit, || {
        let fut = check();
        async move { fut.await.ok_or_else(|| "nothing yet".to_string()) }
    })
    .await
}

/// Awaits `check` returning true, for at most [`WAIT`].
pub async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually(what, || {
        let fut = check();
        async move { fut.await.then_some(()) }
    })
    .await
}

/// The one HTTP client of the suite: `method path` with `headers` and `body`, over HTTP/1.1 on a fresh connection
/// to `addr` (as a webhook sender or a metrics scraper would). Returns the status code and the body.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// A pinned tool of the test control plane (`kubectl`, `helm`), talking to this binary's control plane.
pub fn tool(name: &str) -> Command {
    let out = Command::new(repo_root().join("scripts/testenv")).arg("bin-dir").output().unwrap();
    let bin = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join(name);
    let mut cmd = Command::new(bin);
    cmd.env("KUBECONFIG", &control_plane().kubeconfig);
    cmd
}

/// The value of the series `series` (name and labels, as exposed) in the admin endpoint at `addr`.
pub async fn metric(addr: std::net::SocketAddr, series: &str) -> f64 {
    let (_, metrics) = http(addr, "GET", "/metrics", &[], b"").await.expect("the metrics");
    let prefix = format!("{series} ");
    let value = metrics.lines().find_map(|l| l.strip_prefix(&prefix));
    value.unwrap_or_else(|| panic!("{series} is not in\n{metrics}")).parse().expect("a number")
}

/// The work item the bridge's default `workItem` (`{owner}-{repo}-{number}`) makes of issue `number` of
/// `repository`: with a dash in the owner or the name, it carries a hash of the parts.
pub fn work_item(repository: &str, number: u64) -> String {
    let (owner, repo) = repository.split_once('/').expect("owner/name");
    let number = number.to_string();
    worksession::api::slug_of_parts(&format!("{owner}-{repo}-{number}"), &[owner, repo, &number])
}
