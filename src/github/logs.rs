//! A GitHub Actions job's log, as the bridge reads it for a failing check's prompt: GitHub answers the API's
//! `GET /repos/{owner}/{repo}/actions/jobs/{job}/logs` with a redirect to a short-lived address of the plain text,
//! which is read without the API's credentials (they never leave the API), streamed, and only its end kept.

use http_body_util::BodyExt;
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode, header};

use super::{CALL_TIMEOUT, Github, GithubError, base_url_allowed};

/// The longest log read (its earlier part streams past, only the end is kept); a longer one gives no tail.
pub const MAX_LOG_BYTES: usize = 64 * 1024 * 1024;

impl Github {
    /// The last `keep` bytes of job `job`'s log in `repository` (`owner/name`), with the credentials for it.
    pub async fn job_log_tail(&self, repository: &str, job: u64, keep: usize) -> Result<Vec<u8>, GithubError> {
        let path = format!("/repos/{repository}/actions/jobs/{job}/logs");
        let token = self.token(repository).await?;
        let response = self.get(&format!("{}{path}", self.base), Some(&token), &path).await?;
        let status = response.status();
        if status.is_success() {
            // Served in place (an Enterprise Server may): read as the redirect's target would be.
            return tail_of(response.into_body(), keep).await;
        }
        if !status.is_redirection() {
            return Err(refusal(status, &path));
        }
        let location = response.headers().get(header::LOCATION).and_then(|l| l.to_str().ok()).unwrap_or_default();
        // Plain http only where the API itself is (a test's loopback server); GitHub's storage is https.
        if !location.starts_with("https://") && !self.base.starts_with("http://") {
            let message = format!("the log's address is not https: {location:?}");
            return Err(GithubError::Refused { status: status.as_u16(), message });
        }
        base_url_allowed(location).map_err(|why| GithubError::Refused { status: status.as_u16(), message: why })?;
        // The API's client, with no credentials on this request: it never follows a redirect by itself.
        let response = self.get(location, None, "the log").await?;
        if !response.status().is_success() {
            return Err(refusal(response.status(), "the log"));
        }
        tail_of(response.into_body(), keep).await
    }
}

impl Github {
    /// One GET of `uri` within [`CALL_TIMEOUT`], with the API's headers and `token` when given (never to the log's
    /// storage); `what` names it in errors.
    async fn get(
        &self,
        uri: &str,
        token: Option<&str>,
        what: &str,
    ) -> Result<hyper::Response<hyper::body::Incoming>, GithubError> {
        let mut request = Request::builder()
            .method(Method::GET)
            .uri(uri)
            .header(header::USER_AGENT, concat!("worksession/", env!("CARGO_PKG_VERSION")));
        if let Some(token) = token {
            request = request
                .header(header::ACCEPT, "application/vnd.github+json")
                .header(header::AUTHORIZATION, format!("token {token}"))
                .header("X-GitHub-Api-Version", "2022-11-28");
        }
        let request = request.body(http_body_util::Full::new(Bytes::new())).map_err(|e| GithubError::Refused {
            status: 0,
            message: format!("{what}: cannot make the request: {e}"),
        })?;
        tokio::time::timeout(CALL_TIMEOUT, self.http.request(request))
            .await
            .map_err(|_| GithubError::Unavailable(format!("{what}: no answer within {}s", CALL_TIMEOUT.as_secs())))?
            .map_err(|e| GithubError::Unavailable(e.to_string()))
    }
}

fn refusal(status: StatusCode, what: &str) -> GithubError {
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        GithubError::Unavailable(format!("{what}: {status}"))
    } else {
        GithubError::Refused { status: status.as_u16(), message: format!("{what}: {status}") }
    }
}

/// The last `keep` bytes of `body`, read within [`CALL_TIMEOUT`] and [`MAX_LOG_BYTES`].
async fn tail_of<B>(mut body: B, keep: usize) -> Result<Vec<u8>, GithubError>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let read = async {
        let (mut tail, mut seen) = (Vec::with_capacity(keep * 2), 0usize);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| GithubError::Unavailable(e.to_string()))?;
            let Ok(data) = frame.into_data() else { continue };
            seen += data.len();
            tail.extend_from_slice(&data);
            if tail.len() > keep * 2 {
                tail.drain(..tail.len() - keep);
            }
            if seen > MAX_LOG_BYTES {
                let message = format!("the log is longer than {MAX_LOG_BYTES} bytes");
                return Err(GithubError::Refused { status: 0, message });
            }
        }
        let start = tail.len().saturating_sub(keep);
        Ok(tail.split_off(start))
    };
    tokio::time::timeout(CALL_TIMEOUT, read)
        .await
        .map_err(|_| GithubError::Unavailable(format!("the log: not read within {}s", CALL_TIMEOUT.as_secs())))?
}
