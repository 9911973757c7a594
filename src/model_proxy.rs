//! The model proxy: how an agent reaches its model provider without ever
//! holding the provider's key. The trusted side (the supervisor) reads the
//! keys from its own environment, withholds them from every agent, and
//! listens on the loopback interface; each attempt is given the proxy's
//! address and a token of its own, which the proxy swaps for the real key
//! on the way out. A token is worthless anywhere else and dies with its
//! attempt (or at its deadline). What is refused — a request without a live
//! token — is counted.
//!
//! Providers are told apart by the first segment of the path
//! (`/anthropic/…`, `/openai/…`, `/gemini/…`); the rest of the path and the
//! query go to the provider's base address, its body and its answer
//! streamed through untouched.

use anyhow::{Context, Result};
use http::{header, HeaderName, HeaderValue, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::sync::LockExt;

/// A provider the proxy can stand in front of.
struct Provider {
    /// The path segment agents use for it.
    name: &'static str,
    /// Where the supervisor's environment holds its key.
    key_var: &'static str,
    /// Where the supervisor's environment may name another base address
    /// (a gateway, or the scripted model in tests); the agent is given the
    /// proxy's in the same variable.
    base_var: &'static str,
    default_base: &'static str,
    /// How the provider takes its key.
    auth: Auth,
}

#[derive(Clone, Copy)]
enum Auth {
    /// `x-api-key: KEY` (Anthropic).
    ApiKey,
    /// `authorization: Bearer KEY` (OpenAI).
    Bearer,
    /// `x-goog-api-key: KEY` (Gemini).
    Goog,
}

const PROVIDERS: [Provider; 3] = [
    Provider {
        name: "anthropic",
        key_var: "ANTHROPIC_API_KEY",
        base_var: "ANTHROPIC_BASE_URL",
        default_base: "https://api.anthropic.com",
        auth: Auth::ApiKey,
    },
    Provider {
        name: "openai",
        key_var: "OPENAI_API_KEY",
        base_var: "OPENAI_BASE_URL",
        default_base: "https://api.openai.com/v1",
        auth: Auth::Bearer,
    },
    Provider {
        name: "gemini",
        key_var: "GEMINI_API_KEY",
        base_var: "GOOGLE_GEMINI_BASE_URL",
        default_base: "https://generativelanguage.googleapis.com",
        auth: Auth::Goog,
    },
];

/// Every variable that holds a provider's key: never in an agent's
/// environment.
pub const PROVIDER_KEYS: [&str; 3] = [
    PROVIDERS[0].key_var,
    PROVIDERS[1].key_var,
    PROVIDERS[2].key_var,
];

/// A provider the supervisor holds a key for.
struct Upstream {
    provider: &'static Provider,
    base: Uri,
    key: HeaderValue,
}

struct Shared {
    upstreams: Vec<Upstream>,
    /// Live tokens and their deadlines.
    grants: Mutex<HashMap<String, Instant>>,
    refused: AtomicU64,
    forwarded: AtomicU64,
    /// Requests in a row each provider could not be reached for: the first
    /// is said, in words, and the rest only counted until it answers again.
    unreachable: Mutex<HashMap<&'static str, u64>>,
}

/// The proxy, listening on the loopback interface until dropped.
pub struct ModelProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// One attempt's way to its model: the variables to set in its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub token: String,
    pub env: Vec<(String, String)>,
}

type Client = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Incoming,
>;

impl ModelProxy {
    /// Started when `env` holds a provider's key; `None` when it holds none
    /// (the agent brings its own way to a model, or none is needed).
    pub fn from_vars(env: impl Fn(&str) -> Option<String>) -> Result<Option<ModelProxy>> {
        let mut upstreams = Vec::new();
        for provider in &PROVIDERS {
            let Some(key) = env(provider.key_var).filter(|k| !k.trim().is_empty()) else {
                continue;
            };
            let base = env(provider.base_var).unwrap_or_else(|| provider.default_base.into());
            let base: Uri = base
                .trim_end_matches('/')
                .parse()
                .with_context(|| format!("{} is not an address: {base}", provider.base_var))?;
            let key = match provider.auth {
                Auth::Bearer => format!("Bearer {}", key.trim()),
                _ => key.trim().to_string(),
            };
            let mut key = HeaderValue::from_str(&key)
                .with_context(|| format!("{} cannot be sent in a header", provider.key_var))?;
            key.set_sensitive(true);
            upstreams.push(Upstream {
                provider,
                base,
                key,
            });
        }
        if upstreams.is_empty() {
            return Ok(None);
        }
        let shared = Arc::new(Shared {
            upstreams,
            grants: Mutex::new(HashMap::new()),
            refused: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            unreachable: Mutex::new(HashMap::new()),
        });
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").context("binding the model proxy")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let serving = shared.clone();
        let thread = std::thread::Builder::new()
            .name("model-proxy".into())
            .spawn(move || serve(listener, serving, stopped))
            .context("starting the model proxy")?;
        Ok(Some(ModelProxy {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }))
    }

    /// From the process's own environment.
    pub fn from_env() -> Result<Option<ModelProxy>> {
        ModelProxy::from_vars(|name| std::env::var(name).ok())
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A token for one attempt, live for `ttl`, and the environment that
    /// sends the attempt's agent through the proxy with it.
    pub fn grant(&self, ttl: Duration) -> Grant {
        let token = format!("supervise-attempt-{}", random_hex());
        let now = Instant::now();
        {
            let mut grants = self.shared.grants.locked();
            grants.retain(|_, until| *until > now);
            grants.insert(token.clone(), now + ttl);
        }
        let mut env = Vec::new();
        for u in &self.shared.upstreams {
            env.push((u.provider.key_var.to_string(), token.clone()));
            env.push((
                u.provider.base_var.to_string(),
                format!("http://{}/{}", self.addr, u.provider.name),
            ));
        }
        Grant { token, env }
    }

    /// The attempt is over: its token opens nothing any more.
    pub fn revoke(&self, token: &str) {
        self.shared.grants.locked().remove(token);
    }

    /// Requests refused so far (no live token), and forwarded.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.refused.load(Ordering::Relaxed),
            self.shared.forwarded.load(Ordering::Relaxed),
        )
    }
}

impl Drop for ModelProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// 128 bits from the kernel, as hex.
fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    // SAFETY: the kernel writes at most 16 bytes into a buffer of 16; a
    // request this small is never cut short once the pool is ready.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    assert_eq!(got, 16, "the kernel gives random bytes");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("the model proxy could not start: {e}");
            return;
        }
    };
    runtime.block_on(async move {
        let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
            return;
        };
        let connector = match hyper_rustls::HttpsConnectorBuilder::new().with_native_roots() {
            Ok(b) => b.https_or_http().enable_http1().build(),
            Err(e) => {
                tracing::error!("the model proxy has no TLS roots: {e}");
                return;
            }
        };
        let client: Client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector);
        let mut stopped = stopped;
        loop {
            let (stream, _) = tokio::select! {
                _ = &mut stopped => return,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(_) => continue,
                },
            };
            let shared = shared.clone();
            let client = client.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let shared = shared.clone();
                    let client = client.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(forward(&shared, &client, req).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}

type Answer = Response<http_body_util::Either<Incoming, http_body_util::Full<hyper::body::Bytes>>>;

fn refuse(status: StatusCode, why: &str) -> Answer {
    let mut r = Response::new(http_body_util::Either::Right(http_body_util::Full::new(
        hyper::body::Bytes::from(format!("supervise model proxy: {why}\n")),
    )));
    *r.status_mut() = status;
    r
}

/// The token a request carries, however its provider takes a key.
fn presented(req: &Request<Incoming>) -> Option<String> {
    let h = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .map(str::to_string)
    };
    h("x-api-key")
        .or_else(|| h("x-goog-api-key"))
        .or_else(|| h("authorization").map(|a| a.trim_start_matches("Bearer ").trim().to_string()))
        .or_else(|| {
            req.uri().query().and_then(|q| {
                q.split('&')
                    .find_map(|kv| kv.strip_prefix("key=").map(str::to_string))
            })
        })
}

/// Headers never passed on: the key the agent presented, and what belongs
/// to one connection.
const DROPPED: [&str; 8] = [
    "x-api-key",
    "x-goog-api-key",
    "authorization",
    "host",
    "connection",
    "proxy-connection",
    "keep-alive",
    "upgrade",
];

async fn forward(shared: &Shared, client: &Client, req: Request<Incoming>) -> Answer {
    let path = req.uri().path().to_string();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let name = parts.next().unwrap_or_default();
    let rest = parts.next().unwrap_or_default();
    let Some(up) = shared.upstreams.iter().find(|u| u.provider.name == name) else {
        shared.refused.fetch_add(1, Ordering::Relaxed);
        return refuse(StatusCode::NOT_FOUND, "no such provider here");
    };
    let live = presented(&req).is_some_and(|t| {
        shared
            .grants
            .locked()
            .get(&t)
            .is_some_and(|until| *until > Instant::now())
    });
    if !live {
        shared.refused.fetch_add(1, Ordering::Relaxed);
        return refuse(StatusCode::UNAUTHORIZED, "no live attempt token");
    }
    let query = req
        .uri()
        .query()
        .map(|q| {
            q.split('&')
                .filter(|kv| !kv.starts_with("key="))
                .collect::<Vec<_>>()
                .join("&")
        })
        .filter(|q| !q.is_empty())
        .map_or_else(String::new, |q| format!("?{q}"));
    let base_path = up.base.path().trim_end_matches('/');
    let target = format!(
        "{}://{}{base_path}/{rest}{query}",
        up.base.scheme_str().unwrap_or("https"),
        up.base.authority().map(|a| a.as_str()).unwrap_or_default(),
    );
    let Ok(uri) = target.parse::<Uri>() else {
        return refuse(StatusCode::BAD_REQUEST, "not a path the provider takes");
    };
    let (mut head, body) = req.into_parts();
    head.uri = uri;
    for name in DROPPED {
        head.headers.remove(name);
    }
    let auth: HeaderName = match up.provider.auth {
        Auth::ApiKey => HeaderName::from_static("x-api-key"),
        Auth::Bearer => header::AUTHORIZATION,
        Auth::Goog => HeaderName::from_static("x-goog-api-key"),
    };
    head.headers.insert(auth, up.key.clone());
    // As a proxy says it was one (RFC 9110 §7.6.3).
    head.headers.append(
        header::VIA,
        HeaderValue::from_static("1.1 supervise-model-proxy"),
    );
    shared.forwarded.fetch_add(1, Ordering::Relaxed);
    match client.request(Request::from_parts(head, body)).await {
        Ok(answer) => {
            let failed = shared.unreachable.locked().remove(up.provider.name);
            if let Some(n) = failed {
                tracing::info!(
                    provider = up.provider.name,
                    "the model provider answers again, after {n} requests that could not reach it"
                );
            }
            answer.map(http_body_util::Either::Left)
        }
        Err(e) => {
            let first = {
                let mut counts = shared.unreachable.locked();
                let n = counts.entry(up.provider.name).or_default();
                *n += 1;
                *n == 1
            };
            if first {
                tracing::warn!(
                    provider = up.provider.name,
                    "The model provider at {} could not be reached ({}). Agents' requests to it fail until it can be; check this machine's network, HTTPS_PROXY if it needs one, and {}. An attempt that ends on it is provider trouble: waited out, not counted as a failure. (Said once until it answers again.)",
                    up.base,
                    error_chain(&e),
                    up.provider.base_var
                );
            }
            refuse(StatusCode::BAD_GATEWAY, "the provider could not be reached")
        }
    }
}

/// An error and its causes in plain words (`tcp connect error: Connection
/// refused (os error 111)`), not the client's own `client error (Connect)`.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut words = Vec::new();
    let mut at = e.source();
    while let Some(cause) = at {
        words.push(cause.to_string());
        at = cause.source();
    }
    match words.is_empty() {
        true => e.to_string(),
        false => words.join(": "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_key_no_proxy_and_a_grant_names_only_the_providers_held() {
        assert!(ModelProxy::from_vars(|_| None).unwrap().is_none());
        let p = ModelProxy::from_vars(|n| match n {
            "ANTHROPIC_API_KEY" => Some("sk-ant-real".into()),
            _ => None,
        })
        .unwrap()
        .unwrap();
        let g = p.grant(Duration::from_secs(60));
        let names: Vec<&str> = g.env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]);
        assert!(g.env.iter().all(|(_, v)| !v.contains("sk-ant-real")));
        assert_ne!(
            p.grant(Duration::from_secs(60)).token,
            g.token,
            "one token an attempt"
        );
    }
}
