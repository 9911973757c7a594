//! GitHub's request economy, as its REST documentation describes it:
//!
//! - **Conditional requests.** Every successful GET answers with an `ETag`
//!   (weak, `W/"…"`, as GitHub's are), and a GET whose `If-None-Match` names
//!   the current one is answered `304 Not Modified` with no body.
//! - **The primary rate limit per installation.** Each installation token has
//!   `limit` requests per window (5,000 an hour by default); every answer
//!   carries `x-ratelimit-limit`, `-remaining`, `-used`, `-reset` and
//!   `-resource`. A 304 is not charged. Once the window is spent, calls are
//!   refused with 403 and `x-ratelimit-remaining: 0` until the reset.
//!
//! The request log notes a 304 as such, so tests count charged requests and
//! free ones apart (`FakeGitHub::charged`, `FakeGitHub::not_modified`).

use crate::{record, Shared};
use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::time::{Duration, Instant};

/// The request header by which this layer tells [`crate::gate`] which request
/// a log line belongs to, so a 304 decided after the handler can be noted.
pub(crate) const SEQ: &str = "x-fake-seq";

/// One installation's window of the primary rate limit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub(crate) used: u64,
    pub(crate) reset: Instant,
    /// The same reset as a Unix time, for the `x-ratelimit-reset` header.
    pub(crate) reset_unix: i64,
}

/// The rate limit's settings: requests per window, and the window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limit {
    pub(crate) per_window: u64,
    pub(crate) window: Duration,
}

impl Default for Limit {
    fn default() -> Self {
        Limit {
            per_window: 5000,
            window: Duration::from_secs(3600),
        }
    }
}

/// A weak ETag over a body: FNV-1a, which is all a test double needs.
fn etag_of(body: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in body {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
    }
    format!("W/\"{h:016x}\"")
}

/// Whether an `If-None-Match` value names `etag` (a list, `*`, weak or strong:
/// GitHub compares weakly for GETs).
fn matches(if_none_match: &str, etag: &str) -> bool {
    let bare = |t: &str| t.trim().trim_start_matches("W/").to_string();
    let want = bare(etag);
    if_none_match
        .split(',')
        .any(|t| t.trim() == "*" || bare(t) == want)
}

fn installation_of(f: &Shared, headers: &HeaderMap) -> Option<u64> {
    let token = headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .or_else(|| {
            headers
                .get(header::AUTHORIZATION)?
                .to_str()
                .ok()?
                .strip_prefix("token ")
        })?
        .to_string();
    f.inner.lock().tokens.get(&token).map(|t| t.installation)
}

fn rate_headers(h: &mut HeaderMap, limit: u64, w: &Window) {
    h.insert("x-ratelimit-limit", HeaderValue::from(limit));
    h.insert(
        "x-ratelimit-remaining",
        HeaderValue::from(limit.saturating_sub(w.used)),
    );
    h.insert("x-ratelimit-used", HeaderValue::from(w.used));
    h.insert("x-ratelimit-reset", HeaderValue::from(w.reset_unix));
    h.insert("x-ratelimit-resource", HeaderValue::from_static("core"));
}

pub(crate) async fn layer(State(f): State<Shared>, mut req: Request, next: Next) -> Response {
    if req.uri().path().starts_with("/_fake") {
        return next.run(req).await;
    }
    let installation = installation_of(&f, req.headers());
    let now = Instant::now();
    // A spent window refuses the call before it does anything.
    if let Some(id) = installation {
        let mut s = f.inner.lock();
        let limit = s.limit;
        let w = *s.windows.entry(id).or_insert_with(|| fresh(limit, now));
        if now >= w.reset {
            s.windows.insert(id, fresh(limit, now));
        } else if w.used >= limit.per_window {
            match s.rate_limited {
                Some((from, until))
                    if until == w.reset && now > from + Duration::from_millis(100) =>
                {
                    s.early_calls += 1
                }
                Some((_, until)) if until == w.reset => {}
                _ => s.rate_limited = Some((now, w.reset)),
            }
            s.refused_for_rate += 1;
            drop(s);
            let mut resp = crate::error(
                StatusCode::FORBIDDEN,
                &format!("API rate limit exceeded for installation ID {id}."),
            );
            rate_headers(resp.headers_mut(), limit.per_window, &w);
            resp.headers_mut()
                .insert(record::INJECTED, HeaderValue::from(1));
            return resp;
        }
    }
    let seq = {
        let mut s = f.inner.lock();
        s.next_seq += 1;
        s.next_seq
    };
    req.headers_mut().insert(SEQ, HeaderValue::from(seq));
    let conditional = (req.method() == Method::GET)
        .then(|| req.headers().get(header::IF_NONE_MATCH).cloned())
        .flatten();
    let is_get = req.method() == Method::GET;
    let res = next.run(req).await;
    let mut res = if is_get && res.status() == StatusCode::OK {
        let (mut parts, body) = res.into_parts();
        let Ok(bytes) = to_bytes(body, usize::MAX).await else {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        let etag = etag_of(&bytes);
        let unchanged = conditional
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| matches(v, &etag));
        let etag = HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("W/\"0\""));
        if unchanged {
            let mut r = StatusCode::NOT_MODIFIED.into_response();
            r.headers_mut().insert(header::ETAG, etag);
            r
        } else {
            parts.headers.insert(header::ETAG, etag);
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(bytes))
        }
    } else {
        res
    };
    let not_modified = res.status() == StatusCode::NOT_MODIFIED;
    let mut s = f.inner.lock();
    if not_modified {
        if let Some(i) = s.log_of_seq.remove(&seq) {
            s.log[i].2 = 304;
            let endpoint = s.log[i].1.clone();
            *s.not_modified.entry(endpoint).or_default() += 1;
        }
    } else {
        s.log_of_seq.remove(&seq);
    }
    if let Some(id) = installation {
        let limit = s.limit;
        let w = s.windows.entry(id).or_insert_with(|| fresh(limit, now));
        // GitHub does not charge a 304 against the primary rate limit.
        if !not_modified {
            w.used += 1;
        }
        let w = *w;
        drop(s);
        // A rate limit a test injected speaks for itself.
        if !res.headers().contains_key("x-ratelimit-remaining") {
            rate_headers(res.headers_mut(), limit.per_window, &w);
        }
    }
    res
}

pub(crate) fn fresh(limit: Limit, now: Instant) -> Window {
    Window {
        used: 0,
        reset: now + limit.window,
        reset_unix: chrono::Utc::now().timestamp() + limit.window.as_secs() as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_is_compared_weakly_and_as_a_list() {
        let e = etag_of(b"[1,2]");
        assert!(e.starts_with("W/\""));
        assert!(matches(&e, &e));
        assert!(matches(e.trim_start_matches("W/"), &e), "strong form");
        assert!(matches(&format!("\"x\", {e}"), &e), "in a list");
        assert!(matches("*", &e));
        assert!(!matches(&etag_of(b"[1,3]"), &e));
    }
}
