//! A GitHub App's credentials: a JWT signed with the App's private key (RS256, ring) proves the App, and buys an
//! installation token for the account a repository belongs to; tokens are kept until [`RENEW_BEFORE`] their expiry
//! and renewed then, so no call ever carries one about to run out.

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hyper::Method;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use rustls_pki_types::PrivateKeyDer;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::{Github, GithubError};

/// An installation token is renewed when it has less than this left (GitHub's last an hour).
pub const RENEW_BEFORE: Duration = Duration::from_secs(5 * 60);

/// A token bought for one installation.
#[derive(Clone)]
struct Token {
    token: String,
    expires: Timestamp,
}

/// A GitHub App.
pub struct App {
    id: u64,
    key: RsaKeyPair,
    /// The installation to use for every repository; `None`: looked up per account (`GET /repos/{o}/{r}/installation`).
    installation: Option<u64>,
    installations: Mutex<HashMap<String, u64>>,
    tokens: Mutex<HashMap<u64, Token>>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").field("id", &self.id).field("installation", &self.installation).finish_non_exhaustive()
    }
}

impl App {
    /// The App `id` with its private key (PEM: GitHub's PKCS#1 `RSA PRIVATE KEY`, or PKCS#8).
    pub fn new(id: u64, pem: &[u8], installation: Option<u64>) -> Result<Self, String> {
        let key = match PrivateKeyDer::from_pem_slice(pem).map_err(|e| format!("not a PEM private key: {e}"))? {
            PrivateKeyDer::Pkcs1(der) => RsaKeyPair::from_der(der.secret_pkcs1_der()),
            PrivateKeyDer::Pkcs8(der) => RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()),
            _ => return Err("not an RSA key (a GitHub App's private key is one)".into()),
        }
        .map_err(|e| format!("not a usable RSA key: {e}"))?;
        Ok(Self { id, key, installation, installations: Mutex::default(), tokens: Mutex::default() })
    }

    /// The App's JWT as of `now`: issued a minute back (clock drift), valid nine minutes (GitHub allows ten).
    pub fn jwt(&self, now: Timestamp) -> Result<String, GithubError> {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        let iat = now.as_second() - 60;
        let claims =
            URL_SAFE_NO_PAD.encode(json!({"iat": iat, "exp": iat + 600 - 60, "iss": self.id.to_string()}).to_string());
        let signing = format!("{header}.{claims}");
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), signing.as_bytes(), &mut signature)
            .map_err(|_| GithubError::Credentials("cannot sign the App's JWT".into()))?;
        Ok(format!("{signing}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }

    /// A token for `repository` (`owner/name`): the installation's kept one, or a new one when it has less than
    /// [`RENEW_BEFORE`] left.
    pub(super) async fn token(&self, github: &Github, repository: &str) -> Result<String, GithubError> {
        let installation = self.installation_of(github, repository).await?;
        let mut tokens = self.tokens.lock().await;
        let now = Timestamp::now();
        if let Some(kept) = tokens.get(&installation).filter(|t| !needs_renewal(t.expires, now)) {
            return Ok(kept.token.clone());
        }
        let jwt = self.jwt(now)?;
        let path = format!("/app/installations/{installation}/access_tokens");
        let (_, answer) = github.send(Method::POST, &path, &format!("Bearer {jwt}"), None).await?;
        let token = answer.get("token").and_then(Value::as_str).filter(|t| !t.is_empty());
        let expires = answer.get("expires_at").and_then(Value::as_str).and_then(|t| t.parse::<Timestamp>().ok());
        let (Some(token), Some(expires)) = (token, expires) else {
            return Err(GithubError::Credentials(format!("{path}: no token and expires_at in the answer")));
        };
        tracing::info!(event = "github.token_minted", installation, expires = %expires, "installation token minted");
        tokens.insert(installation, Token { token: token.to_string(), expires });
        Ok(token.to_string())
    }

    /// A token of its own for `repository` (`owner/name`) alone, with only `permissions` (GitHub's names, such as
    /// `{"contents": "write"}`), and when it expires: never kept, each call mints one (a harness's push credential,
    /// renewed by its caller).
    pub(super) async fn scoped_token(
        &self,
        github: &Github,
        repository: &str,
        permissions: &Value,
    ) -> Result<(String, Timestamp), GithubError> {
        // Looked up by the repository's owner even when configured: a token names the repository without its owner,
        // so another owner's repository of the same name must never be asked of the configured installation.
        let installation = self.installation_of_owner(github, repository).await?;
        if self.installation.is_some_and(|configured| configured != installation) {
            let why =
                format!("{repository} is not in the App's installation {}", self.installation.unwrap_or_default());
            return Err(GithubError::Credentials(why));
        }
        let name = repository.split_once('/').map(|(_, name)| name).unwrap_or(repository);
        let jwt = self.jwt(Timestamp::now())?;
        let path = format!("/app/installations/{installation}/access_tokens");
        let body = json!({"repositories": [name], "permissions": permissions});
        let (_, answer) = github.send(Method::POST, &path, &format!("Bearer {jwt}"), Some(&body)).await?;
        let token = answer.get("token").and_then(Value::as_str).filter(|t| !t.is_empty());
        let expires = answer.get("expires_at").and_then(Value::as_str).and_then(|t| t.parse::<Timestamp>().ok());
        let (Some(token), Some(expires)) = (token, expires) else {
            return Err(GithubError::Credentials(format!("{path}: no token and expires_at in the answer")));
        };
        tracing::info!(event = "github.scoped_token_minted", installation, repository, expires = %expires, "scoped token minted");
        Ok((token.to_string(), expires))
    }

    /// Forgets every token and installation kept (GitHub refused one).
    pub(super) async fn forget(&self) {
        self.tokens.lock().await.clear();
        self.installations.lock().await.clear();
    }

    /// The installation of the App on `repository`'s account: configured, or looked up once per account.
    async fn installation_of(&self, github: &Github, repository: &str) -> Result<u64, GithubError> {
        match self.installation {
            Some(id) => Ok(id),
            None => self.installation_of_owner(github, repository).await,
        }
    }

    /// The installation of the App on `repository`'s account, as GitHub says (looked up once per account).
    async fn installation_of_owner(&self, github: &Github, repository: &str) -> Result<u64, GithubError> {
        let owner = repository.split('/').next().unwrap_or_default().to_string();
        if let Some(id) = self.installations.lock().await.get(&owner) {
            return Ok(*id);
        }
        let jwt = self.jwt(Timestamp::now())?;
        let (_, answer) = github
            .send(Method::GET, &format!("/repos/{repository}/installation"), &format!("Bearer {jwt}"), None)
            .await?;
        let id = answer.get("id").and_then(Value::as_u64).ok_or_else(|| {
            GithubError::Credentials(format!("the App has no installation on {repository}'s account"))
        })?;
        self.installations.lock().await.insert(owner, id);
        Ok(id)
    }
}

/// Whether a token that expires at `expires` is renewed before a use at `now`.
pub fn needs_renewal(expires: Timestamp, now: Timestamp) -> bool {
    let margin = SignedDuration::try_from(RENEW_BEFORE).unwrap_or(SignedDuration::ZERO);
    now.checked_add(margin).is_ok_and(|t| t >= expires)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_renewed_five_minutes_before_it_runs_out() {
        let expires: Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        assert!(!needs_renewal(expires, at("2026-12-01T11:00:00Z")), "an hour left: kept");
        assert!(!needs_renewal(expires, at("2026-12-01T11:54:59Z")));
        assert!(needs_renewal(expires, at("2026-12-01T11:55:00Z")), "five minutes left: renewed");
        assert!(needs_renewal(expires, at("2026-12-01T12:30:00Z")), "expired: renewed");
    }

    #[test]
    fn keys_that_are_not_rsa_pem_are_refused_with_why() {
        assert!(App::new(1, b"not a key", None).unwrap_err().contains("PEM"));
    }
}
