//! The one scrubber every text that leaves the process passes through:
//! comments, issues, pull requests and check runs (at the GitHub adapter's
//! one door for bodies, `github::repo::fit`), the results record a runner
//! commits, and every log line. It replaces with `***`:
//!
//! - the values of every secret this process knows: those it was given (the
//!   webhook secrets, the App's private key, the database URL's password),
//!   every environment variable whose name says KEY, TOKEN, SECRET, PASS,
//!   CRED or PRIVATE (in a runner: the agent's API keys, the workflow's
//!   token), and each line of `SUPERVISE_SECRETS`, for secrets whose names
//!   say nothing;
//! - the well-known shapes of secrets, whoever's: GitHub tokens, PEM and PGP
//!   private keys, cloud and model-provider API keys, even glued to a word;
//! - either of those written so that a pattern would not see it but a reader
//!   or a program would get it back ([`reveal`]): split by invisible
//!   characters, spelled in HTML entities, or base64-encoded.
//!
//! GitHub masks secrets in an Actions log only, never in a comment, a check
//! run or a committed file: an agent that prints its environment must not
//! publish a key through us.

mod reveal;

use regex::Regex;
use std::borrow::Cow;
use std::sync::{OnceLock, RwLock};

/// What a secret becomes.
pub const MASK: &str = "***";

/// Secrets shorter than this are not known by value: replacing every
/// occurrence of a short common word would garble text and protect little.
const MIN_SECRET_LEN: usize = 8;

fn known() -> &'static RwLock<Vec<String>> {
    static KNOWN: OnceLock<RwLock<Vec<String>>> = OnceLock::new();
    KNOWN.get_or_init(|| RwLock::new(Vec::new()))
}

/// Makes `secret` (and each of its lines, for a multi-line key) one that is
/// never let out.
pub fn register(secret: &str) {
    let mut k = known().write().unwrap_or_else(|p| p.into_inner());
    for s in std::iter::once(secret.trim()).chain(secret.lines().map(str::trim)) {
        if s.len() >= MIN_SECRET_LEN && !k.iter().any(|x| x == s) {
            k.push(s.to_string());
        }
    }
    // Longest first, so a secret that contains another is masked whole.
    k.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// Whether an environment variable's name says it holds a secret
/// (`DB_PASS`, `MY_DEPLOY_CRED` and `SSH_PRIVATE` as well as `API_KEY`).
pub fn secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASS", "CRED", "PRIVATE"]
        .iter()
        .any(|w| n.contains(w))
}

/// The variable whose every line is a secret, whatever it is called where
/// it came from: the agent workflow lists the job's secrets in it.
pub const SECRETS_VAR: &str = "SUPERVISE_SECRETS";

/// Registers the value of every environment variable whose name says it is
/// a secret, each line of [`SECRETS_VAR`], and the password of a URL in
/// `DATABASE_URL`.
pub fn register_environment() {
    for (name, value) in std::env::vars_os() {
        let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
            continue;
        };
        if name == SECRETS_VAR {
            value.lines().for_each(register);
        } else if secret_name(name) {
            register(value);
        }
        if name.ends_with("DATABASE_URL") {
            if let Some(password) = url_password(value) {
                register(password);
            }
        }
    }
}

/// The password of `scheme://user:password@host…`, if it has one.
fn url_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let userinfo = rest.split('@').next().filter(|_| rest.contains('@'))?;
    userinfo.split_once(':').map(|(_, p)| p)
}

/// The well-known shapes of secrets.
fn shapes() -> &'static Regex {
    static SHAPES: OnceLock<Regex> = OnceLock::new();
    SHAPES.get_or_init(|| {
        Regex::new(concat!(
            // PEM and PGP private keys, whole blocks (or what is left of one).
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----(?s:.*?)(-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|\z)",
            // GitHub: classic and fine-grained tokens of every kind, glued
            // to what precedes them or not (`xghp_…` is still a token).
            r"|(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{22,})",
            // Anthropic and OpenAI keys wherever they stand; other sk- keys
            // at a word's start (so `task-…` in a branch name is not one).
            r"|sk-(ant|proj|svcacct|admin)-[A-Za-z0-9_\-]{20,}",
            r"|\bsk-[A-Za-z0-9_\-]{20,}",
            // AWS access key ids; Google API keys; Slack tokens.
            r"|(AKIA|ASIA)[0-9A-Z]{16}\b",
            r"|AIza[0-9A-Za-z_\-]{35}",
            r"|xox[abprs]-[A-Za-z0-9\-]{10,}",
            // A bearer token in a pasted header.
            r"|(?i:authorization:\s*(bearer|token)\s+)[A-Za-z0-9._\-]{16,}",
        ))
        .expect("valid secret shapes")
    })
}

/// `text` with every known secret and every secret shape replaced by
/// [`MASK`], however it was written ([`reveal`]); borrowed when there was
/// nothing to hide.
pub fn scrub(text: &str) -> Cow<'_, str> {
    reveal::unhide(mask(text))
}

/// Whether `text` holds a secret, in any form [`scrub`] masks.
pub fn holds_secret(text: &str) -> bool {
    matches!(scrub(text), Cow::Owned(_))
}

/// `text` with the known secrets and the shapes masked as written;
/// borrowed (and only then) when it holds none.
fn mask(text: &str) -> Cow<'_, str> {
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    {
        let k = known().read().unwrap_or_else(|p| p.into_inner());
        for secret in k.iter() {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), MASK));
            }
        }
    }
    if shapes().is_match(&out) {
        out = Cow::Owned(shapes().replace_all(&out, MASK).into_owned());
    }
    out
}

/// A log writer that scrubs each write before it reaches standard error.
pub struct ScrubbedStderr;

impl std::io::Write for ScrubbedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(scrub(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn secret_shapes_are_masked_wherever_they_stand() {
        for secret in [
            "ghs_16C7e42F292c6912E7710c838347Ae178B4a",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
            "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345",
            "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz",
            "AKIAIOSFODNN7EXAMPLE",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----",
        ] {
            let text = format!("env: X={secret} done");
            let out = scrub(&text);
            assert!(!out.contains(secret), "{out}");
            assert!(out.contains("***") && out.ends_with(" done"), "{out}");
        }
        assert_eq!(scrub("nothing to hide"), "nothing to hide");
    }

    #[test]
    fn known_values_are_masked_and_names_say_what_is_secret() {
        register("canary-7f3a9c1e5b2d");
        assert_eq!(scrub("said canary-7f3a9c1e5b2d!"), "said ***!");
        assert!(secret_name("ANTHROPIC_API_KEY") && secret_name("github_token"));
        assert!(!secret_name("HOME") && !secret_name("SUPERVISE_UNIT"));
        assert_eq!(url_password("postgres://u:p4ss@db:5432/x"), Some("p4ss"));
        assert_eq!(url_password("sqlite://x.db"), None);
    }

    proptest! {
        /// A registered secret never survives, whatever surrounds it.
        #[test]
        fn a_registered_secret_never_survives(
            before in "\\PC{0,30}",
            after in "\\PC{0,30}",
            secret in "[A-Za-z0-9]{12,24}",
        ) {
            register(&secret);
            let text = format!("{before}{secret}{after}");
            prop_assert!(!scrub(&text).contains(&secret));
        }
    }
}
