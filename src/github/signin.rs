//! Signing people in with GitHub, as an App's user sign-in works: the
//! browser is sent to GitHub's authorize page, comes back with a code, the
//! code is exchanged (with the App's client secret) for a user token, and
//! that token asks GitHub who the person is and which repositories they
//! may read. The token never leaves the server: not in a URL, a cookie or
//! a log.

use super::{GitHub, GitHubError};
use http::header::ACCEPT;
use octocrab::Octocrab;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// The App's sign-in settings.
pub struct SignIn {
    /// GitHub's web address (`https://github.com`; the fake's in tests).
    pub web_url: String,
    pub api_url: String,
    pub client_id: String,
    pub client_secret: SecretString,
    web: Octocrab,
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

#[derive(Deserialize)]
struct UserAnswer {
    login: String,
}

/// Percent-encodes a query value.
fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

impl SignIn {
    pub fn new(
        web_url: &str,
        api_url: &str,
        client_id: &str,
        client_secret: SecretString,
    ) -> Result<SignIn, GitHubError> {
        let web_url = web_url.trim_end_matches('/').to_string();
        let web = Octocrab::builder()
            .base_uri(web_url.as_str())
            .map_err(|e| GitHubError::Config(format!("the GitHub web address `{web_url}`: {e}")))?
            .add_header(ACCEPT, "application/json".into())
            .build()
            .map_err(|e| GitHubError::Config(e.to_string()))?;
        Ok(SignIn {
            web_url,
            api_url: api_url.to_string(),
            client_id: client_id.to_string(),
            client_secret,
            web,
        })
    }

    /// Where the browser goes to sign in; GitHub sends it back to
    /// `redirect` with a code and `state`.
    pub fn authorize_url(&self, redirect: &str, state: &str) -> String {
        format!(
            "{}/login/oauth/authorize?client_id={}&redirect_uri={}&state={}&allow_signup=false",
            self.web_url,
            enc(&self.client_id),
            enc(redirect),
            enc(state)
        )
    }

    /// The user token for a code GitHub gave the browser.
    pub async fn exchange(&self, code: &str, redirect: &str) -> Result<SecretString, GitHubError> {
        let what = "POST /login/oauth/access_token".to_string();
        let body = serde_json::json!({
            "client_id": self.client_id,
            "client_secret": self.client_secret.expose_secret(),
            "code": code,
            "redirect_uri": redirect,
        });
        let (status, text) =
            super::call_once(&self.web, "POST", "/login/oauth/access_token", Some(&body)).await?;
        if status != 200 {
            return Err(GitHubError::Http {
                status,
                what,
                body: text.chars().take(200).collect(),
            });
        }
        let read: TokenAnswer =
            serde_json::from_str(&text).map_err(|e| GitHubError::Unexpected {
                what: what.clone(),
                message: e.to_string(),
            })?;
        match (read.access_token, read.error) {
            (Some(t), None) if !t.is_empty() => Ok(SecretString::from(t)),
            (_, e) => Err(GitHubError::Http {
                status,
                what,
                body: format!(
                    "{}: {}",
                    e.unwrap_or_else(|| "no token".into()),
                    read.error_description.unwrap_or_default()
                ),
            }),
        }
    }

    fn as_user(&self, token: &SecretString) -> Result<GitHub, GitHubError> {
        GitHub::with_token(&self.api_url, token)
    }

    /// Who the token's person is (`GET /user`).
    pub async fn login(&self, token: &SecretString) -> Result<String, GitHubError> {
        let reply = self.as_user(token)?.get(0, "/user").await?;
        let user: UserAnswer =
            serde_json::from_str(&reply.body).map_err(|e| GitHubError::Unexpected {
                what: "GET /user".into(),
                message: e.to_string(),
            })?;
        Ok(user.login)
    }

    /// Whether the token's person may read `owner/name`: GitHub shows a
    /// repository to a user token only then (404 otherwise, private or not).
    pub async fn can_read(&self, token: &SecretString, repo: &str) -> Result<bool, GitHubError> {
        match self.as_user(token)?.get(0, &format!("/repos/{repo}")).await {
            Ok(_) => Ok(true),
            Err(GitHubError::Http {
                status: 404 | 403 | 401,
                ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
