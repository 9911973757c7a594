//! OpenTelemetry traces over OTLP/HTTP (JSON): the span type, the ids
//! every process working for an operation derives alike (the operation's
//! trace, an attempt's span, the W3C `traceparent` an agent joins with),
//! the encoding, and the exporter. Tracing is off unless
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! is set, and then costs a channel send per recorded decision; spans are
//! posted in batches from a thread of their own, never in the way of the
//! operation (a collector that is down loses spans, nothing else).
//! What the spans say is read from the decision log (`drive::spans`).

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use std::sync::mpsc;
use std::time::Duration;

pub type TraceId = [u8; 16];
pub type SpanId = [u8; 8];

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Float(f64),
}

/// A finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent: Option<SpanId>,
    pub name: String,
    /// A call to another service (GitHub's API), not work of its own.
    pub client: bool,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub attributes: Vec<(&'static str, Value)>,
    /// Set when the span ended in failure (an operation that failed).
    pub error: Option<String>,
}

/// The operation's trace.
pub fn trace_id(operation: &str) -> TraceId {
    let d = Sha256::digest(format!("supervise trace {operation}").as_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&d[..16]);
    id
}

/// The operation's root span.
pub fn root_span(operation: &str) -> SpanId {
    span_id(&format!("operation {operation}"))
}

/// A dispatch's attempt span.
pub fn attempt_span(dispatch: &str) -> SpanId {
    span_id(&format!("attempt {dispatch}"))
}

pub fn span_id(seed: &str) -> SpanId {
    let d = Sha256::digest(seed.as_bytes());
    let mut id = [0u8; 8];
    id.copy_from_slice(&d[..8]);
    id
}

/// The W3C `traceparent` an attempt's agent (and its workflow's jobs)
/// join the trace with: the operation's trace, the attempt's span.
pub fn traceparent(operation: &str, dispatch: &str) -> String {
    format!(
        "00-{}-{}-01",
        hex::encode(trace_id(operation)),
        hex::encode(attempt_span(dispatch))
    )
}

/// The operation a dispatch id belongs to (`op/unit/sprint/attempt`).
pub fn operation_of(dispatch: &str) -> &str {
    dispatch.split('/').next().unwrap_or(dispatch)
}

/// Spans as OTLP/HTTP's JSON encoding has them (one `resourceSpans`).
pub fn otlp_json(service: &str, spans: &[Span]) -> serde_json::Value {
    use serde_json::json;
    let nanos = |t: &DateTime<Utc>| t.timestamp_nanos_opt().unwrap_or(0).max(0).to_string();
    let spans: Vec<serde_json::Value> = spans
        .iter()
        .map(|s| {
            let attributes: Vec<serde_json::Value> = s
                .attributes
                .iter()
                .map(|(k, v)| {
                    let value = match v {
                        Value::Str(x) => json!({ "stringValue": x }),
                        Value::Int(x) => json!({ "intValue": x.to_string() }),
                        Value::Float(x) => json!({ "doubleValue": x }),
                    };
                    json!({ "key": k, "value": value })
                })
                .collect();
            let mut span = json!({
                "traceId": hex::encode(s.trace_id),
                "spanId": hex::encode(s.span_id),
                "name": s.name,
                "kind": if s.client { 3 } else { 1 },
                "startTimeUnixNano": nanos(&s.start),
                "endTimeUnixNano": nanos(&s.end),
                "attributes": attributes,
                "status": match &s.error {
                    Some(m) => json!({ "code": 2, "message": m }),
                    None => json!({ "code": 0 }),
                },
            });
            if let Some(p) = s.parent {
                span["parentSpanId"] = json!(hex::encode(p));
            }
            span
        })
        .collect();
    json!({
        "resourceSpans": [{
            "resource": { "attributes": [
                { "key": "service.name", "value": { "stringValue": service } },
                { "key": "service.version", "value": { "stringValue": env!("CARGO_PKG_VERSION") } },
            ]},
            "scopeSpans": [{
                "scope": { "name": "sprint-supervisor", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans,
            }],
        }]
    })
}

tokio::task_local! {
    /// The operation the work at hand is for: GitHub's calls made for it
    /// are spans of its trace.
    static OPERATION: String;
}

/// Runs `work` as work for `operation` (see [`github_call`]). A plain
/// function, not an `async` one: the work (an operation's effect, a large
/// future) is polled where it lies, never moved through the stack again.
pub fn in_operation<F: std::future::Future>(
    operation: &str,
    work: F,
) -> tokio::task::futures::TaskLocalFuture<String, F> {
    OPERATION.scope(operation.to_string(), work)
}

/// A call to GitHub's API made for the operation at hand, as a client span
/// under its root, named and described as OpenTelemetry's HTTP conventions
/// say: the method and the route's template (`GET
/// /repos/{owner}/{repo}/issues/{number}`), the status, and the rate
/// limit's headroom GitHub gave.
pub fn github_call(
    method: &str,
    path: &str,
    status: u16,
    remaining: Option<i64>,
    start: DateTime<Utc>,
) {
    let Some(exporter) = global() else {
        return;
    };
    let Ok(op) = OPERATION.try_with(|o| o.clone()) else {
        return;
    };
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let route = route_template(path);
    let end = Utc::now();
    let mut attributes = vec![
        ("http.request.method", Value::Str(method.to_string())),
        ("url.template", Value::Str(route.clone())),
        ("http.response.status_code", Value::Int(i64::from(status))),
        ("server.address", Value::Str("api.github.com".into())),
    ];
    if let Some(r) = remaining {
        attributes.push(("supervise.github.rate_limit.remaining", Value::Int(r)));
    }
    exporter.send(vec![Span {
        trace_id: trace_id(&op),
        span_id: span_id(&format!(
            "github {op} {} {n} {}",
            std::process::id(),
            start.timestamp_nanos_opt().unwrap_or(0)
        )),
        parent: Some(root_span(&op)),
        name: format!("{method} {route}"),
        client: true,
        start,
        end: end.max(start),
        attributes,
        error: (status >= 400).then(|| format!("HTTP {status}")),
    }]);
}

/// One of the agent workflow's trusted jobs (`verify`, `publish`) for the
/// attempt `dispatch`, as a span under the attempt's: the job's runner
/// derives the ids from the dispatch id as the service does, so it joins
/// the operation's trace untold. Sent at once (the job's process ends).
pub fn job_span(job: &str, dispatch: &str, start: DateTime<Utc>, exit_code: i32) {
    let Some(exporter) = global() else {
        return;
    };
    let op = operation_of(dispatch);
    exporter.send(vec![Span {
        trace_id: trace_id(op),
        span_id: span_id(&format!("job {job} {dispatch} {}", std::process::id())),
        parent: Some(attempt_span(dispatch)),
        name: format!("supervise.{job}"),
        client: false,
        start,
        end: Utc::now().max(start),
        attributes: vec![
            ("supervise.dispatch", Value::Str(dispatch.to_string())),
            ("supervise.job", Value::Str(job.to_string())),
            ("process.exit.code", Value::Int(i64::from(exit_code))),
        ],
        error: (exit_code != 0).then(|| format!("exited {exit_code}")),
    }]);
    exporter.flush();
}

/// A REST path as its route's template: the owner, the repository, numbers,
/// commit ids, labels, and the names after `branches/`, `git/ref(s)/`,
/// `contents/` or `compare/` become
/// placeholders, so one route is one span name however many issues it is
/// called for.
pub fn route_template(path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    let segs: Vec<&str> = path.split('/').collect();
    let mut out: Vec<String> = Vec::with_capacity(segs.len());
    for (i, seg) in segs.iter().enumerate() {
        let back = |n: usize| i.checked_sub(n).map(|j| segs[j]);
        let t = if back(1) == Some("repos") {
            "{owner}".to_string()
        } else if back(2) == Some("repos") {
            "{repo}".to_string()
        } else if matches!(back(1), Some("branches" | "ref" | "refs")) {
            // A branch's or ref's name may hold slashes: the rest is it.
            out.push("{ref}".into());
            break;
        } else if back(1) == Some("contents") {
            out.push("{path}".into());
            break;
        } else if back(1) == Some("compare") {
            out.push("{basehead}".into());
            break;
        } else if back(1) == Some("labels") {
            "{name}".to_string()
        } else if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
            "{number}".to_string()
        } else if seg.len() == 40 && seg.bytes().all(|b| b.is_ascii_hexdigit()) {
            "{sha}".to_string()
        } else {
            seg.to_string()
        };
        out.push(t);
    }
    out.join("/")
}

/// Spans as a person reads a trace viewer's waterfall: one line each, in
/// order of start, indented under their parent, with when they began (from
/// the first), how long they took, a bar on a common time line, and their
/// chief attributes.
pub fn waterfall(spans: &[Span], width: usize) -> String {
    use std::fmt::Write as _;
    let mut spans: Vec<&Span> = spans.iter().collect();
    spans.sort_by_key(|s| (s.start, s.parent.is_some()));
    let (Some(first), Some(last)) = (
        spans.iter().map(|s| s.start).min(),
        spans.iter().map(|s| s.end).max(),
    ) else {
        return String::new();
    };
    let total = (last - first).num_milliseconds().max(1) as f64;
    let depth = |s: &Span| {
        let mut d = 0;
        let mut at = s.parent;
        while let Some(p) = at {
            d += 1;
            at = spans.iter().find(|x| x.span_id == p).and_then(|x| x.parent);
            if d > 8 {
                break;
            }
        }
        d
    };
    let mut out = String::new();
    for s in &spans {
        let from = (s.start - first).num_milliseconds() as f64;
        let took = (s.end - s.start).num_milliseconds() as f64;
        let a = ((from / total) * width as f64) as usize;
        let b = (((from + took) / total) * width as f64).ceil() as usize;
        let bar: String = (0..width)
            .map(|i| {
                if i >= a && i < b.max(a + 1) {
                    '█'
                } else {
                    '·'
                }
            })
            .collect();
        let said: Vec<String> = s
            .attributes
            .iter()
            .filter(|(k, _)| {
                matches!(
                    *k,
                    "supervise.unit"
                        | "supervise.sprint"
                        | "supervise.attempt"
                        | "gen_ai.request.model"
                        | "supervise.outcome"
                        | "supervise.wait.kind"
                        | "http.response.status_code"
                        | "supervise.operation.status"
                )
            })
            .map(|(k, v)| {
                let v = match v {
                    Value::Str(x) => x.clone(),
                    Value::Int(x) => x.to_string(),
                    Value::Float(x) => x.to_string(),
                };
                format!("{}={v}", k.rsplit('.').next().unwrap_or(k))
            })
            .collect();
        let _ = writeln!(
            out,
            "{bar} {:>9} {:>9}  {}{} {}",
            format_ms(from),
            format_ms(took),
            "  ".repeat(depth(s)),
            s.name,
            said.join(" ")
        );
    }
    out
}

fn format_ms(ms: f64) -> String {
    if ms >= 60_000.0 {
        format!("{:.1} min", ms / 60_000.0)
    } else if ms >= 1_000.0 {
        format!("{:.1} s", ms / 1_000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

/// Where and how spans are sent, from the standard `OTEL_*` variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The traces endpoint (`…/v1/traces`).
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub service: String,
}

impl Target {
    /// `None` when tracing is off: no endpoint, `OTEL_SDK_DISABLED=true`,
    /// or `OTEL_TRACES_EXPORTER=none`.
    pub fn from_vars(env: impl Fn(&str) -> Option<String>) -> Option<Target> {
        let set = |n: &str| env(n).filter(|v| !v.trim().is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
        {
            return None;
        }
        let url = match set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(u) => u,
            None => format!(
                "{}/v1/traces",
                set("OTEL_EXPORTER_OTLP_ENDPOINT")?.trim_end_matches('/')
            ),
        };
        let headers = set("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            .or_else(|| set("OTEL_EXPORTER_OTLP_HEADERS"))
            .map(|h| {
                h.split(',')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        Some(Target {
            url,
            headers,
            service: set("OTEL_SERVICE_NAME").unwrap_or_else(|| "sprint-supervisor".into()),
        })
    }
}

/// Sends spans to the collector from a thread of its own, in batches.
pub struct Exporter {
    tx: Option<mpsc::Sender<Message>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

enum Message {
    Spans(Vec<Span>),
    /// Send what is queued now, then say so.
    Flush(mpsc::Sender<()>),
}

/// How many spans go in one request at most, and how long a span waits
/// for others to go with it.
const BATCH: usize = 256;
const LINGER: Duration = Duration::from_millis(500);

impl Exporter {
    pub fn start(target: Target) -> Exporter {
        let (tx, rx) = mpsc::channel::<Message>();
        let thread = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || export_loop(&target, &rx))
            .ok();
        Exporter {
            tx: Some(tx),
            thread,
        }
    }

    pub fn send(&self, spans: Vec<Span>) {
        if spans.is_empty() {
            return;
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send(Message::Spans(spans));
        }
    }

    /// Waits (10 s at most) until what was sent so far has been posted.
    pub fn flush(&self) {
        let (ack, done) = mpsc::channel();
        if let Some(tx) = &self.tx {
            if tx.send(Message::Flush(ack)).is_ok() {
                let _ = done.recv_timeout(Duration::from_secs(10));
            }
        }
    }
}

/// Before the process exits: the spans of its last decisions are posted.
pub fn flush() {
    // Only an exporter that was made: a command that traced nothing starts none.
    if let Some(Some(e)) = GLOBAL.get() {
        e.flush();
    }
}

/// What is still queued is sent before the exporter goes.
impl Drop for Exporter {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The process's exporter, from its environment, made on first use.
static GLOBAL: std::sync::OnceLock<Option<Exporter>> = std::sync::OnceLock::new();

pub fn global() -> Option<&'static Exporter> {
    GLOBAL
        .get_or_init(|| Target::from_vars(|n| std::env::var(n).ok()).map(Exporter::start))
        .as_ref()
}

fn export_loop(target: &Target, rx: &mpsc::Receiver<Message>) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let connector = match hyper_rustls::HttpsConnectorBuilder::new().with_native_roots() {
        Ok(b) => b.https_or_http().enable_http1().build(),
        Err(e) => {
            tracing::warn!("no traces exported: no TLS roots ({e})");
            return;
        }
    };
    let client: HttpClient =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    let mut open = true;
    while open {
        let mut batch: Vec<Span> = Vec::new();
        let mut acks = Vec::new();
        match rx.recv() {
            Ok(Message::Spans(s)) => batch = s,
            Ok(Message::Flush(ack)) => acks.push(ack),
            Err(_) => break,
        }
        let until = std::time::Instant::now() + LINGER;
        while batch.len() < BATCH && acks.is_empty() {
            match rx.recv_timeout(until.saturating_duration_since(std::time::Instant::now())) {
                Ok(Message::Spans(more)) => batch.extend(more),
                Ok(Message::Flush(ack)) => acks.push(ack),
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        if !batch.is_empty() {
            post(&rt, &client, target, &batch);
        }
        for ack in acks {
            let _ = ack.send(());
        }
    }
}

type HttpClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    http_body_util::Full<hyper::body::Bytes>,
>;

fn post(rt: &tokio::runtime::Runtime, client: &HttpClient, target: &Target, batch: &[Span]) {
    // One scrubber for all that leaves: an operation's reason or an
    // attempt's outcome may quote an agent.
    let body = crate::scrub::scrub(&otlp_json(&target.service, batch).to_string()).into_owned();
    let mut req = http::Request::post(&target.url).header("content-type", "application/json");
    for (k, v) in &target.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let Ok(req) = req.body(http_body_util::Full::new(hyper::body::Bytes::from(body))) else {
        tracing::warn!(url = %target.url, "no traces exported: the endpoint is not an address");
        return;
    };
    let sent = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), client.request(req)).await
    });
    match sent {
        Ok(Ok(answer)) if answer.status().is_success() => {}
        Ok(Ok(answer)) => {
            tracing::warn!(status = %answer.status(), spans = batch.len(), "the trace collector refused spans")
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, spans = batch.len(), "the trace collector is out of reach")
        }
        Err(_) => tracing::warn!(
            spans = batch.len(),
            "the trace collector did not answer in 10 s"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_becomes_its_routes_template() {
        for (path, template) in [
            (
                "/repos/acme/shop/issues/12/comments?per_page=100",
                "/repos/{owner}/{repo}/issues/{number}/comments",
            ),
            (
                "/repos/acme/shop/commits/0123456789abcdef0123456789abcdef01234567/check-runs",
                "/repos/{owner}/{repo}/commits/{sha}/check-runs",
            ),
            (
                "/repos/acme/shop/git/refs/heads/supervise/one/solo/sprint-1",
                "/repos/{owner}/{repo}/git/refs/{ref}",
            ),
            (
                "/repos/acme/shop/branches/main/protection",
                "/repos/{owner}/{repo}/branches/{ref}",
            ),
            (
                "/app/installations/7/access_tokens",
                "/app/installations/{number}/access_tokens",
            ),
            (
                "/repos/acme/shop/contents/.supervise/results/shop-1.json",
                "/repos/{owner}/{repo}/contents/{path}",
            ),
            (
                "/repos/acme/shop/compare/main...supervise/shop-1/integration",
                "/repos/{owner}/{repo}/compare/{basehead}",
            ),
            (
                "/repos/acme/shop/issues/3/labels/blocked",
                "/repos/{owner}/{repo}/issues/{number}/labels/{name}",
            ),
        ] {
            assert_eq!(route_template(path), template, "{path}");
        }
    }

    #[test]
    fn tracing_is_off_unless_an_endpoint_is_given() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |n: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(Target::from_vars(vars(&[])), None);
        let t = Target::from_vars(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=abc, team=7"),
        ]))
        .unwrap();
        assert_eq!(t.url, "http://collector:4318/v1/traces");
        assert_eq!(
            t.headers,
            [
                ("x-api-key".into(), "abc".into()),
                ("team".into(), "7".into())
            ]
        );
        assert_eq!(t.service, "sprint-supervisor");
        let off = vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ]);
        assert_eq!(Target::from_vars(off), None);
    }
}
