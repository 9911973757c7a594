//! The end of GitHub's App manifest flow: the code GitHub gave the browser
//! is traded (`POST /app-manifests/{code}/conversions`, no credentials) for
//! the new App's id, webhook secret, client id and secret, and private key.

use super::GitHubError;
use octocrab::Octocrab;
use secrecy::SecretString;
use serde::Deserialize;

/// What the conversion gives; the secrets held as secrets.
pub struct NewApp {
    pub id: u64,
    pub slug: String,
    pub name: String,
    /// The App's page on GitHub (its installation link is below it).
    pub html_url: String,
    pub client_id: String,
    pub client_secret: SecretString,
    pub webhook_secret: Option<SecretString>,
    pub pem: SecretString,
}

#[derive(Deserialize)]
struct Conversion {
    id: u64,
    slug: Option<String>,
    name: String,
    html_url: String,
    client_id: String,
    client_secret: String,
    webhook_secret: Option<String>,
    pem: String,
}

/// Trades the manifest flow's one-time code for the App's credentials.
pub async fn convert(api_url: &str, code: &str) -> Result<NewApp, GitHubError> {
    let what = "POST /app-manifests/{code}/conversions".to_string();
    if !code
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(GitHubError::Config(format!(
            "`{code}` is not a manifest code"
        )));
    }
    let client = Octocrab::builder()
        .base_uri(api_url)
        .map_err(|e| GitHubError::Config(format!("GITHUB_API_URL `{api_url}`: {e}")))?
        .build()
        .map_err(|e| GitHubError::Config(e.to_string()))?;
    let path = format!("/app-manifests/{code}/conversions");
    let (status, body) = super::call_once(&client, "POST", &path, None).await?;
    if status != 201 {
        return Err(GitHubError::Http {
            status,
            what,
            body: body.chars().take(300).collect(),
        });
    }
    let c: Conversion = serde_json::from_str(&body).map_err(|e| GitHubError::Unexpected {
        what,
        message: e.to_string(),
    })?;
    Ok(NewApp {
        id: c.id,
        slug: c
            .slug
            .unwrap_or_else(|| c.name.to_lowercase().replace(' ', "-")),
        name: c.name,
        html_url: c.html_url,
        client_id: c.client_id,
        client_secret: SecretString::from(c.client_secret),
        webhook_secret: c.webhook_secret.map(SecretString::from),
        pem: SecretString::from(c.pem),
    })
}
