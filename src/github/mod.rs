//! GitHub's REST API, as the bridge and the agent call it (beside the pipeline: the feedback on a WorkEvent's
//! comment, the status comment, redeliveries and a failing job's log in [`crate::bridge`]; a harness's push token in
//! [`crate::agent`]). A small client over the hyper and rustls already linked through kube: a few calls each, and a
//! general client crate would bring a second HTTP stack, its own retry layer and a JWT crate for what [`app`] does in
//! a page. Credentials are a token
//! file (read at each use, so a rotated Secret takes effect) or a GitHub App ([`app`]); the base URL may name a
//! GitHub Enterprise Server.

pub mod app;
mod logs;

pub use crate::config::base_url_allowed;

use std::path::PathBuf;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode, header};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// GitHub.com's API.
pub const DEFAULT_BASE_URL: &str = crate::config::DEFAULT_GITHUB_API;

/// How long one call may take (a stalled GitHub is a failed call, retried later; it never holds anything else up).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest answer read (GitHub's pages of comments are well under it).
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// A call that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum GithubError {
    /// No answer (connection, TLS, timeout) or a 5xx, 429 or rate-limit 403: worth trying again later.
    #[error("GitHub did not answer: {0}")]
    Unavailable(String),
    /// GitHub refused it for good (401, 404, 422, ...): retrying changes nothing.
    #[error("GitHub refused: {status}: {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// GitHub's `message`, or the body's first words.
        message: String,
    },
    /// The credentials could not be read or used.
    #[error("GitHub credentials: {0}")]
    Credentials(String),
}

impl GithubError {
    /// Whether a later try may succeed: no answer, and credentials that failed (a token file being rotated, a
    /// revoked token renewed), unlike a refusal of the call itself.
    pub fn retryable(&self) -> bool {
        matches!(self, GithubError::Unavailable(_) | GithubError::Credentials(_))
    }
}

/// How the bridge proves who it is.
pub enum Auth {
    /// A token (personal, fine-grained, or an installation's), read from this file at each use.
    TokenFile(PathBuf),
    /// A GitHub App: installation tokens minted from its private key and renewed before they expire.
    App(Box<app::App>),
}

/// A GitHub API endpoint with its credentials.
pub struct Github {
    base: String,
    http: HttpClient<Https, Full<Bytes>>,
    auth: Auth,
}

impl Github {
    /// A client of the API at `base` (`https://api.github.com`, or `https://HOST/api/v3` for GitHub Enterprise
    /// Server; plain `http://` only to a loopback address, as tests serve it).
    pub fn new(base: &str, auth: Auth) -> std::io::Result<Self> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(rustls::crypto::ring::default_provider())?
            .https_or_http()
            .enable_http1()
            .build();
        let http = HttpClient::builder(TokioExecutor::new()).build(https);
        Ok(Self { base: base.trim_end_matches('/').to_string(), http, auth })
    }

    /// The API's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// One call with the credentials for `repository` (`owner/name`): `path` is under the base URL.
    pub async fn call(
        &self,
        method: Method,
        repository: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), GithubError> {
        let (status, value, _) = self.call_as(method, Some(repository), path, body).await?;
        Ok((status, value))
    }

    /// One page of a list, GET with the credentials for `repository`, or as the App itself when `repository` is
    /// `None` (its JWT: what the App owns, such as its own webhook's deliveries).
    pub async fn page(&self, repository: Option<&str>, path: &str) -> Result<Page, GithubError> {
        let (_, items, next) = self.call_as(Method::GET, repository, path, None).await?;
        Ok(Page { items, next })
    }

    /// One POST without a body, authenticated as [`Github::page`] is.
    pub async fn post(&self, repository: Option<&str>, path: &str) -> Result<(), GithubError> {
        self.call_as(Method::POST, repository, path, None).await.map(drop)
    }

    /// One call with the credentials for `repository`, or the App's JWT (`None`); a token GitHub refused is
    /// forgotten, so the next call mints another.
    async fn call_as(
        &self,
        method: Method,
        repository: Option<&str>,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value, Option<String>), GithubError> {
        let authorization = match (repository, &self.auth) {
            (Some(repository), _) => format!("token {}", self.token(repository).await?),
            (None, Auth::App(app)) => format!("Bearer {}", app.jwt(k8s_openapi::jiff::Timestamp::now())?),
            (None, Auth::TokenFile(_)) => {
                return Err(GithubError::Credentials("only a GitHub App can act as itself (its own webhook)".into()));
            }
        };
        let result = self.send_paged(method, path, &authorization, body).await;
        if let (Some(_), Err(GithubError::Refused { status: 401, message }), Auth::App(app)) =
            (repository, &result, &self.auth)
        {
            // A token GitHub no longer takes (revoked, the App reinstalled): the next try mints a new one.
            app.forget().await;
            return Err(GithubError::Credentials(format!("the installation token was refused: {message}")));
        }
        result
    }

    /// A token for `repository` (`owner/name`) alone, with only `permissions`, and when it expires: a GitHub App's
    /// installation token minted for it (a token file cannot be narrowed, so it is refused).
    pub async fn scoped_token(
        &self,
        repository: &str,
        permissions: &Value,
    ) -> Result<(String, k8s_openapi::jiff::Timestamp), GithubError> {
        match &self.auth {
            Auth::App(app) => app.scoped_token(self, repository, permissions).await,
            Auth::TokenFile(_) => {
                Err(GithubError::Credentials("only a GitHub App mints a token for one repository".into()))
            }
        }
    }

    async fn token(&self, repository: &str) -> Result<String, GithubError> {
        Ok(match &self.auth {
            Auth::TokenFile(file) => {
                let token = tokio::fs::read_to_string(file)
                    .await
                    .map_err(|e| GithubError::Credentials(format!("cannot read {}: {e}", file.display())))?;
                token.trim().to_string()
            }
            Auth::App(app) => app.token(self, repository).await?,
        })
    }

    /// One call with `authorization` as given (an App's JWT, or a token).
    async fn send(
        &self,
        method: Method,
        path: &str,
        authorization: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), GithubError> {
        self.send_paged(method, path, authorization, body).await.map(|(status, value, _)| (status, value))
    }

    /// [`Github::send`], with the path of the next page where the answer's `Link` header names one.
    async fn send_paged(
        &self,
        method: Method,
        path: &str,
        authorization: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value, Option<String>), GithubError> {
        let bytes = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(header::ACCEPT, "application/vnd.github+json")
            .header(header::USER_AGENT, concat!("worksession/", env!("CARGO_PKG_VERSION")))
            .header(header::AUTHORIZATION, authorization)
            .header("X-GitHub-Api-Version", "2022-11-28")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(bytes))
            .map_err(|e| GithubError::Refused { status: 0, message: format!("cannot make the request: {e}") })?;
        let call = async {
            let response = self.http.request(request).await.map_err(|e| GithubError::Unavailable(e.to_string()))?;
            let status = response.status();
            let link = response.headers().get(header::LINK).and_then(|l| l.to_str().ok()).map(str::to_string);
            let limited = http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES);
            let body = limited.collect().await.map_err(|e| GithubError::Unavailable(e.to_string()))?.to_bytes();
            Ok::<_, GithubError>((status, body, link))
        };
        let (status, body, link) = tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| GithubError::Unavailable(format!("no answer within {}s", CALL_TIMEOUT.as_secs())))??;
        let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok((status, value, link.and_then(|l| next_page(&l, &self.base))));
        }
        let message = value
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
        // GitHub's rate limits answer 429, or 403 saying so: both pass.
        let limited = status == StatusCode::FORBIDDEN && message.to_lowercase().contains("rate limit");
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS || limited {
            return Err(GithubError::Unavailable(format!("{status}: {message}")));
        }
        Err(GithubError::Refused { status: status.as_u16(), message })
    }
}

/// One page of a list, and the path of the next (under the base URL), if there is one.
#[derive(Debug)]
pub struct Page {
    /// The page's answer (an array for a list).
    pub items: Value,
    /// The next page's path and query, from the `Link` header's `rel="next"`.
    pub next: Option<String>,
}

/// The path (under `base`) of the `rel="next"` URL of a `Link` header; `None` when there is none, or it points
/// elsewhere than `base` (the credentials never follow a link off the API).
fn next_page(link: &str, base: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (url, params) = part.trim().split_once(';')?;
        params.split(';').any(|p| p.trim() == r#"rel="next""#).then_some(())?;
        let url = url.trim().strip_prefix('<')?.strip_suffix('>')?;
        let path = url.strip_prefix(base)?;
        path.starts_with('/').then(|| path.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_is_followed_only_on_the_api() {
        let base = "https://api.github.com";
        let link = r#"<https://api.github.com/app/hook/deliveries?per_page=100&cursor=v1_9>; rel="next", <https://api.github.com/app/hook/deliveries?per_page=100>; rel="first""#;
        assert_eq!(next_page(link, base).as_deref(), Some("/app/hook/deliveries?per_page=100&cursor=v1_9"));
        assert_eq!(next_page(r#"<https://api.github.com/x>; rel="prev""#, base), None);
        assert_eq!(next_page(r#"<https://evil.example/steal>; rel="next""#, base), None, "never off the API");
        assert_eq!(next_page(r#"<https://api.github.com.evil.example/x>; rel="next""#, base), None);
    }

    #[test]
    fn tokens_go_only_over_tls_or_to_loopback() {
        assert!(base_url_allowed("https://api.github.com").is_ok());
        assert!(base_url_allowed("https://ghe.example.com/api/v3").is_ok());
        assert!(base_url_allowed("http://127.0.0.1:8080").is_ok());
        assert!(base_url_allowed("http://localhost:1/api/v3").is_ok());
        assert!(base_url_allowed("http://[::1]:9").is_ok());
        assert!(base_url_allowed("http://ghe.example.com").is_err());
        assert!(base_url_allowed("http://127.0.0.1.evil.example:80").is_err());
        assert!(base_url_allowed("ftp://x").is_err());
    }
}
