//! Outgoing webhooks: telling whoever must act. The engine's notices — a
//! unit BLOCKED, work held by a cap, a manual sprint that waits for a
//! person's check, the operation completed — go, besides the issue or the terminal,
//! to the addresses configured (`--notify`, `SUPERVISE_NOTIFY_URL`,
//! `notify:` in the settings), as JSON signed like GitHub signs its webhooks
//! (HMAC-SHA256 over the body, `X-Supervise-Signature-256: sha256=…`), or as
//! a Slack-compatible body.
//!
//! Sending never holds an operation up: a notice is put on a bounded queue
//! (when it is full the notice is dropped, logged and counted) and a thread
//! of its own posts it, retrying with backoff. Each notice carries a
//! delivery id that stays the same across retries and restarts (the
//! operation and the notice's effect key), so a receiver that has seen one
//! can drop it again.

use crate::engine::NoticeKind;
use hmac::{Hmac, KeyInit, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::time::Duration;

/// The notices waiting to be sent, at most; beyond, a notice is dropped.
const QUEUE: usize = 256;
/// Tries per notice and receiver, the first included.
const TRIES: u32 = 5;
/// How long one try may take.
const TRY_TIMEOUT: Duration = Duration::from_secs(10);

/// How a receiver wants its body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// The notice as JSON (see [`Notice`]).
    #[default]
    Json,
    /// `{"text": "…"}`, which Slack's and most chat tools' incoming webhooks take.
    Slack,
}

/// One receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    pub url: http::Uri,
    pub format: Format,
    /// The notices it wants (empty: every kind).
    pub kinds: Vec<NoticeKind>,
}

impl Hook {
    /// A receiver at `url` (http or https, with a host), or why not.
    pub fn new(url: &str, format: Format, kinds: Vec<NoticeKind>) -> Result<Hook, String> {
        let uri: http::Uri = url
            .trim()
            .parse()
            .map_err(|e| format!("`{url}` is not a URL: {e}"))?;
        match (uri.scheme_str(), uri.host()) {
            (Some("http" | "https"), Some(_)) => Ok(Hook {
                url: uri,
                format,
                kinds,
            }),
            _ => Err(format!(
                "`{url}` is not an http:// or https:// URL with a host"
            )),
        }
    }

    fn wants(&self, kind: NoticeKind) -> bool {
        self.kinds.is_empty() || self.kinds.contains(&kind)
    }
}

/// A notice as receivers get it (the JSON body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// Stable across retries and restarts: drop one seen before.
    pub delivery: String,
    /// `blocked`, `held`, `completed`, … (see [`kind_name`]).
    pub event: String,
    pub operation: String,
    /// `owner/name` on GitHub; none locally.
    pub repository: Option<String>,
    pub unit: Option<String>,
    /// What the issue or the terminal says, scrubbed.
    pub text: String,
    /// Where a person acts (the operation's issue), when there is one.
    pub link: Option<String>,
}

impl Notice {
    /// The notice the effect `key` of `operation` gives: `text` is what the
    /// issue or the terminal shows, scrubbed here (it may quote an agent).
    pub fn new(
        operation: &str,
        key: impl std::fmt::Display,
        kind: NoticeKind,
        unit: Option<&str>,
        text: &str,
    ) -> Notice {
        Notice {
            delivery: format!("{operation}:{key}"),
            event: kind_name(kind).to_string(),
            operation: operation.to_string(),
            repository: None,
            unit: unit.map(str::to_string),
            text: crate::scrub::scrub(text).into_owned(),
            link: None,
        }
    }
}

/// A notice kind's name in the `event` field and the settings' `events:`.
pub fn kind_name(kind: NoticeKind) -> &'static str {
    match kind {
        NoticeKind::Blocked => "blocked",
        NoticeKind::DeferredWaiting => "deferred_waiting",
        NoticeKind::ManualCheck => "manual_check",
        NoticeKind::BudgetReached => "budget_reached",
        NoticeKind::Held => "held",
        NoticeKind::Draining => "draining",
        NoticeKind::Killed => "killed",
        NoticeKind::Completed => "completed",
        NoticeKind::WorkLost => "work_lost",
        NoticeKind::VerificationFailed => "verification_failed",
        NoticeKind::AwaitingReview => "awaiting_review",
    }
}

/// Every kind, for reading `events:` and for the schema.
pub const KINDS: &[NoticeKind] = &[
    NoticeKind::Blocked,
    NoticeKind::DeferredWaiting,
    NoticeKind::ManualCheck,
    NoticeKind::BudgetReached,
    NoticeKind::Held,
    NoticeKind::Draining,
    NoticeKind::Killed,
    NoticeKind::Completed,
    NoticeKind::WorkLost,
    NoticeKind::VerificationFailed,
    NoticeKind::AwaitingReview,
];

/// A kind by its name, or the list of names.
pub fn kind_by_name(name: &str) -> Result<NoticeKind, String> {
    KINDS
        .iter()
        .copied()
        .find(|k| kind_name(*k) == name.trim())
        .ok_or_else(|| {
            let names: Vec<&str> = KINDS.iter().map(|k| kind_name(*k)).collect();
            format!("`{name}` is not a notice; use one of {}", names.join(", "))
        })
}

/// The signature of `body` with `secret`, as GitHub writes its own
/// (`sha256=` and the hex of HMAC-SHA256).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The key notices are signed with: `SUPERVISE_NOTIFY_SECRET` on the
/// supervisor's side, never in a file an agent could read.
pub fn secret_from_env() -> Option<SecretString> {
    std::env::var("SUPERVISE_NOTIFY_SECRET")
        .ok()
        .filter(|s| !s.is_empty())
        .map(SecretString::from)
}

/// Sends notices to the receivers; cheap to clone, and nothing at all
/// without receivers.
#[derive(Clone, Default)]
pub struct Notifier {
    inner: Option<std::sync::Arc<Inner>>,
}

struct Inner {
    hooks: Vec<Hook>,
    queue: tokio::sync::mpsc::Sender<Notice>,
    /// The sending thread, joined by [`Notifier::finish`].
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hooks = self.inner.as_ref().map_or(0, |i| i.hooks.len());
        write!(f, "Notifier({hooks} receivers)")
    }
}

impl Notifier {
    /// A notifier for these receivers, signing with `secret` when there is
    /// one. Its thread runs its own small runtime, so a caller with or
    /// without one never waits for a receiver.
    pub fn start(hooks: Vec<Hook>, secret: Option<SecretString>) -> Notifier {
        if hooks.is_empty() {
            return Notifier::default();
        }
        let (tx, rx) = tokio::sync::mpsc::channel(QUEUE);
        let targets = hooks.clone();
        let thread = std::thread::Builder::new()
            .name("notify".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match rt {
                    Ok(rt) => rt.block_on(deliver_all(targets, secret, rx)),
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start the notifier; no notice is sent")
                    }
                }
            })
            .ok();
        Notifier {
            inner: Some(std::sync::Arc::new(Inner {
                hooks,
                queue: tx,
                thread: std::sync::Mutex::new(thread),
            })),
        }
    }

    /// The operator's receiver, from the environment: `SUPERVISE_NOTIFY_URL`,
    /// `SUPERVISE_NOTIFY_FORMAT` (`json` or `slack`), `SUPERVISE_NOTIFY_EVENTS`
    /// (names, comma-separated; default every notice) and the signing key
    /// `SUPERVISE_NOTIFY_SECRET`. Nothing is sent without a URL; a wrong
    /// value is an error that names the variable.
    pub fn from_env() -> Result<Notifier, String> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let Some(url) = var("SUPERVISE_NOTIFY_URL") else {
            return Ok(Notifier::default());
        };
        let format = match var("SUPERVISE_NOTIFY_FORMAT").as_deref().map(str::trim) {
            None | Some("json") => Format::Json,
            Some("slack") => Format::Slack,
            Some(other) => {
                return Err(format!(
                    "SUPERVISE_NOTIFY_FORMAT `{other}`: use `json` or `slack`"
                ))
            }
        };
        let kinds = var("SUPERVISE_NOTIFY_EVENTS")
            .iter()
            .flat_map(|v| v.split(',').map(str::to_string).collect::<Vec<_>>())
            .map(|name| kind_by_name(&name))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("SUPERVISE_NOTIFY_EVENTS: {e}"))?;
        let hook =
            Hook::new(&url, format, kinds).map_err(|e| format!("SUPERVISE_NOTIFY_URL: {e}"))?;
        Ok(Notifier::start(vec![hook], secret_from_env()))
    }

    /// Queues a notice for the receivers that want its kind; never waits.
    pub fn tell(&self, kind: NoticeKind, notice: Notice) {
        let Some(inner) = &self.inner else { return };
        if !inner.hooks.iter().any(|h| h.wants(kind)) {
            return;
        }
        if inner.queue.try_send(notice).is_err() {
            metrics::counter!("supervise_notices_dropped_total").increment(1);
            tracing::warn!("the notice queue is full; a notice was dropped");
        }
    }

    /// Sends what is queued, waiting at most `within` (a command that ends
    /// should not take its last notices with it, nor wait long for a
    /// receiver that is down).
    pub fn finish(self, within: Duration) {
        let Some(inner) = self.inner else { return };
        let Ok(inner) = std::sync::Arc::try_unwrap(inner) else {
            return;
        };
        let Inner { queue, thread, .. } = inner;
        drop(queue);
        let Some(thread) = thread.into_inner().ok().flatten() else {
            return;
        };
        let until = std::time::Instant::now() + within;
        while !thread.is_finished() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        if thread.is_finished() {
            let _ = thread.join();
        } else {
            tracing::warn!("notices still unsent at exit were given up");
        }
    }
}

type Client = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

/// The sending thread's loop: each notice to each receiver that wants it,
/// one after the other (a notice's receivers in parallel would let one slow
/// receiver hold the others' notices no less).
async fn deliver_all(
    hooks: Vec<Hook>,
    secret: Option<SecretString>,
    mut rx: tokio::sync::mpsc::Receiver<Notice>,
) {
    let connector = match hyper_rustls::HttpsConnectorBuilder::new().with_native_roots() {
        Ok(b) => b.https_or_http().enable_http1().build(),
        Err(e) => {
            tracing::error!(error = %e, "no TLS roots; notices are not sent");
            return;
        }
    };
    let client: Client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    while let Some(notice) = rx.recv().await {
        let kind = kind_by_name(&notice.event).ok();
        for hook in hooks.iter().filter(|h| kind.is_none_or(|k| h.wants(k))) {
            deliver(&client, hook, secret.as_ref(), &notice).await;
        }
    }
}

/// One notice to one receiver, retried with backoff on a failure that may
/// pass (no answer, a 5xx, a 429); given up after [`TRIES`].
async fn deliver(client: &Client, hook: &Hook, secret: Option<&SecretString>, n: &Notice) {
    let body = match hook.format {
        Format::Json => serde_json::to_vec(n).unwrap_or_default(),
        Format::Slack => {
            serde_json::to_vec(&serde_json::json!({ "text": slack_text(n) })).unwrap_or_default()
        }
    };
    let signature = secret.map(|s| sign(s.expose_secret().as_bytes(), &body));
    let mut wait = Duration::from_millis(500);
    for attempt in 1..=TRIES {
        let mut req = http::Request::post(hook.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(
                http::header::USER_AGENT,
                concat!("sprint-supervisor/", env!("CARGO_PKG_VERSION")),
            )
            .header("x-supervise-event", n.event.as_str())
            .header("x-supervise-delivery", n.delivery.as_str());
        if let Some(sig) = &signature {
            req = req.header("x-supervise-signature-256", sig.as_str());
        }
        let Ok(req) = req.body(Full::new(Bytes::from(body.clone()))) else {
            return;
        };
        let answer = tokio::time::timeout(TRY_TIMEOUT, client.request(req)).await;
        let retry = match answer {
            Ok(Ok(res)) => {
                let status = res.status();
                // The body is read so the connection can be kept.
                let _ = tokio::time::timeout(TRY_TIMEOUT, res.into_body().collect()).await;
                if status.is_success() {
                    metrics::counter!("supervise_notices_total", "outcome" => "sent").increment(1);
                    return;
                }
                status.is_server_error() || status == http::StatusCode::TOO_MANY_REQUESTS
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, attempt, "a notice's receiver did not answer");
                true
            }
            Err(_) => true,
        };
        if !retry {
            break;
        }
        if attempt < TRIES {
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
    }
    metrics::counter!("supervise_notices_total", "outcome" => "failed").increment(1);
    tracing::warn!(host = ?hook.url.host(), delivery = %n.delivery, "a notice could not be delivered");
}

/// The one line a chat shows.
fn slack_text(n: &Notice) -> String {
    let mut t = n.text.clone();
    if let Some(link) = &n.link {
        t.push_str(&format!("\n{link}"));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receiver_is_an_http_url_with_a_host() {
        assert!(Hook::new("https://hooks.example.com/x", Format::Json, vec![]).is_ok());
        assert!(Hook::new("http://127.0.0.1:9/x", Format::Slack, vec![]).is_ok());
        for bad in [
            "hooks.example.com",
            "file:///etc/passwd",
            "ftp://x/y",
            "https://",
        ] {
            assert!(Hook::new(bad, Format::Json, vec![]).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_kind_has_a_name_that_reads_back() {
        for k in KINDS {
            assert_eq!(kind_by_name(kind_name(*k)), Ok(*k));
        }
        let e = kind_by_name("blockd").unwrap_err();
        assert!(e.contains("blocked") && e.contains("completed"), "{e}");
    }

    /// The signature is GitHub's scheme, so a receiver can check it with the
    /// code it has for GitHub's webhooks (GitHub's published test vector).
    #[test]
    fn the_signature_is_githubs_scheme() {
        assert_eq!(
            sign(b"It's a Secret to Everybody", b"Hello, World!"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
    }
}
