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
        what: what.clone(),
        message: e.to_string(),
    })?;
    // Every credential is checked before anything is written: a file that
    // holds no key would be reported as set up, and fail at the first start.
    if let Err(why) = usable(&c) {
        return Err(GitHubError::Unexpected {
            what,
            message: format!(
                "{why}; nothing was written. The App {} (id {}) exists: on its page ({}) generate a private key (and a client secret if missing), save the key, and set GITHUB_APP_ID={} and GITHUB_PRIVATE_KEY_PATH to it; or delete the App and run `supervise setup` again",
                c.name, c.id, c.html_url, c.id
            ),
        });
    }
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

/// Whether a conversion's credentials can be used: a private key that reads
/// as an RSA key (GitHub signs the App's JWTs with it), a client id and
/// secret, and a webhook secret if one is given.
fn usable(c: &Conversion) -> Result<(), String> {
    if jsonwebtoken::EncodingKey::from_rsa_pem(c.pem.as_bytes()).is_err() {
        return Err(if c.pem.trim().is_empty() {
            "GitHub's answer holds no private key".to_string()
        } else {
            "GitHub's answer holds a private key that does not read as an RSA key in PEM"
                .to_string()
        });
    }
    if c.client_id.trim().is_empty() || c.client_secret.trim().is_empty() {
        return Err(
            "GitHub's answer holds no client id or secret (the web view's sign-in needs them)"
                .into(),
        );
    }
    if c.webhook_secret
        .as_deref()
        .is_some_and(|s| s.trim().is_empty())
    {
        return Err("GitHub's answer holds an empty webhook secret".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversion(pem: &str) -> Conversion {
        Conversion {
            id: 42,
            slug: None,
            name: "Supervise".into(),
            html_url: "https://github.com/apps/supervise".into(),
            client_id: "Iv1.x".into(),
            client_secret: "secret".into(),
            webhook_secret: Some("hook".into()),
            pem: pem.into(),
        }
    }

    #[test]
    fn a_conversion_without_a_usable_key_is_refused_before_anything_is_written() {
        let key = include_str!("../../tests/fixtures/app/test-app-key.pem");
        assert_eq!(usable(&conversion(key)), Ok(()));
        assert!(usable(&conversion(""))
            .unwrap_err()
            .contains("no private key"));
        assert!(usable(&conversion(
            "-----BEGIN RSA PRIVATE KEY-----\nnot a key\n-----END RSA PRIVATE KEY-----\n"
        ))
        .unwrap_err()
        .contains("does not read"));
        let mut c = conversion(key);
        c.client_secret = String::new();
        assert!(usable(&c).unwrap_err().contains("client id or secret"));
        c = conversion(key);
        c.webhook_secret = Some(" ".into());
        assert!(usable(&c).unwrap_err().contains("webhook secret"));
    }
}
