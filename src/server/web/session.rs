//! Who looks at the web view: sessions of people signed in with GitHub.
//! A session lives in this process only (a restart signs everyone out);
//! the browser holds its id in a signed cookie — `HttpOnly`, `Secure`,
//! `SameSite=Lax` — and the person's GitHub token stays here. What each
//! person may read is asked of GitHub with their token and kept briefly.

use crate::github::signin::SignIn;
use crate::sync::LockExt;
use hmac::{Hmac, KeyInit, Mac};
use secrecy::SecretString;
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const SESSION_COOKIE: &str = "supervise_session";
pub const STATE_COOKIE: &str = "supervise_signin";
/// How long a sign-in lasts.
const SESSION_LIFE: Duration = Duration::from_secs(8 * 3600);
/// How long GitHub's word on a repository's access is kept.
const ACCESS_TTL: Duration = Duration::from_secs(60);
/// Sessions kept at most; the oldest go first.
const MAX_SESSIONS: usize = 10_000;
/// Repositories remembered per session.
const MAX_REPOS_PER_SESSION: usize = 256;

struct Session {
    login: String,
    token: SecretString,
    readable: HashMap<String, (bool, Instant)>,
    since: Instant,
}

/// The sessions, the sign-in settings and the key cookies are signed with.
pub struct Sessions {
    pub signin: SignIn,
    /// Where people reach this service (`https://supervise.example.com`):
    /// GitHub sends them back to its `/login/callback`.
    pub public_url: String,
    key: [u8; 32],
    map: Mutex<HashMap<String, Session>>,
    /// Code exchanges with GitHub at once: an unsigned client can start one
    /// per request, so they are few and the rest are refused at once.
    pub exchanges: tokio::sync::Semaphore,
}

/// Random bytes from the kernel.
pub fn random_hex(n: usize) -> String {
    use std::io::Read;
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("the kernel's random source");
    hex::encode(buf)
}

fn sign(key: &[u8], value: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(value.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// A cookie's value with its signature: `value.signature`.
fn signed(key: &[u8], value: &str) -> String {
    format!("{value}.{}", sign(key, value))
}

/// The value of a signed cookie value, if its signature holds.
fn verified(key: &[u8], text: &str) -> Option<String> {
    let (value, sig) = text.rsplit_once('.')?;
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).ok()?;
    mac.update(value.as_bytes());
    mac.verify_slice(&hex::decode(sig).ok()?).ok()?;
    Some(value.to_string())
}

/// A cookie's value from a request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value with the attributes every cookie here carries.
pub fn set_cookie(name: &str, value: &str, max_age: Option<u64>) -> String {
    let age = max_age
        .map(|s| format!("; Max-Age={s}"))
        .unwrap_or_default();
    format!("{name}={value}; Path=/; HttpOnly; Secure; SameSite=Lax{age}")
}

impl Sessions {
    pub fn new(signin: SignIn, public_url: &str, key: Option<&[u8]>) -> Sessions {
        let mut k = [0u8; 32];
        match key {
            Some(given) => {
                let digest = <Sha256 as sha2::Digest>::digest(given);
                k.copy_from_slice(&digest);
            }
            None => k.copy_from_slice(&hex::decode(random_hex(32)).expect("hex")),
        }
        Sessions {
            signin,
            public_url: public_url.trim_end_matches('/').to_string(),
            key: k,
            map: Mutex::new(HashMap::new()),
            exchanges: tokio::sync::Semaphore::new(8),
        }
    }

    pub fn callback_url(&self) -> String {
        format!("{}/login/callback", self.public_url)
    }

    /// A new sign-in's state: the value for GitHub and the cookie that
    /// proves this browser started it.
    pub fn new_state(&self) -> (String, String) {
        let state = random_hex(16);
        let cookie = signed(&self.key, &state);
        (state, cookie)
    }

    /// Whether `state` from GitHub is the one this browser's cookie holds.
    pub fn state_matches(&self, headers: &http::HeaderMap, state: &str) -> bool {
        cookie(headers, STATE_COOKIE)
            .and_then(|c| verified(&self.key, c))
            .is_some_and(|s| !s.is_empty() && s == state)
    }

    /// Records a signed-in person; the cookie value to set.
    pub fn start(&self, login: String, token: SecretString) -> String {
        let id = random_hex(24);
        let mut map = self.map.locked();
        map.retain(|_, s| s.since.elapsed() < SESSION_LIFE);
        if map.len() >= MAX_SESSIONS {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.since)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(
            id.clone(),
            Session {
                login,
                token,
                readable: HashMap::new(),
                since: Instant::now(),
            },
        );
        signed(&self.key, &id)
    }

    /// The session id a request's cookie names, if it is signed and alive.
    pub fn session_of(&self, headers: &http::HeaderMap) -> Option<(String, String)> {
        let id = verified(&self.key, cookie(headers, SESSION_COOKIE)?)?;
        let map = self.map.locked();
        let s = map.get(&id).filter(|s| s.since.elapsed() < SESSION_LIFE)?;
        Some((id, s.login.clone()))
    }

    /// The token a sign-out form carries: tied to the session, so another
    /// site cannot make one.
    pub fn csrf(&self, session: &str) -> String {
        sign(&self.key, &format!("csrf:{session}"))
    }

    /// Whether `given` is the session's sign-out token, compared in
    /// constant time (a forged token learns nothing from how long it took).
    pub fn csrf_ok(&self, session: &str, given: &str) -> bool {
        let Ok(sig) = hex::decode(given) else {
            return false;
        };
        let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key) else {
            return false;
        };
        mac.update(format!("csrf:{session}").as_bytes());
        mac.verify_slice(&sig).is_ok()
    }

    pub fn end(&self, session: &str) {
        self.map.locked().remove(session);
    }

    /// Whether the session's person may read `repo`: GitHub's answer,
    /// kept for a minute. An error from GitHub is a no (and not kept).
    pub async fn may_read(&self, session: &str, repo: &str) -> bool {
        let token = {
            let map = self.map.locked();
            // A session that ended (signed out, or past its life) reads
            // nothing, also for a stream opened while it lasted.
            let Some(s) = map
                .get(session)
                .filter(|s| s.since.elapsed() < SESSION_LIFE)
            else {
                return false;
            };
            if let Some((ok, at)) = s.readable.get(repo) {
                if at.elapsed() < ACCESS_TTL {
                    return *ok;
                }
            }
            s.token.clone()
        };
        let ok = match self.signin.can_read(&token, repo).await {
            Ok(ok) => ok,
            Err(e) => {
                tracing::warn!(repo, error = %e, "cannot ask GitHub whether a viewer may read a repository");
                return false;
            }
        };
        if let Some(s) = self.map.locked().get_mut(session) {
            if s.readable.len() >= MAX_REPOS_PER_SESSION {
                s.readable.clear();
            }
            s.readable.insert(repo.to_string(), (ok, Instant::now()));
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::{signed, verified};

    #[test]
    fn a_cookie_verifies_only_with_its_own_signature_and_key() {
        let key = [7u8; 32];
        let c = signed(&key, "abc");
        assert_eq!(verified(&key, &c).as_deref(), Some("abc"));
        assert_eq!(verified(&[8u8; 32], &c), None, "another key");
        assert_eq!(
            verified(&key, &c.replace("abc", "abd")),
            None,
            "another value"
        );
        assert_eq!(verified(&key, "abc"), None, "no signature");
        assert_eq!(verified(&key, "abc.zz"), None, "not hex");
    }
}
