//! GitHub's pagination, applied to every list the fake answers: `per_page`
//! (default 30, at most 100) and `page` (from 1) slice a JSON array — or the one
//! array of a `{ "total_count": …, "<items>": [...] }` object — and a `Link`
//! header names the `next`, `last`, `prev` and `first` pages, as GitHub does.
//! The ETag is computed afterwards (see `quota.rs`), per page: a conditional
//! request for a page answers 304 only when that page is unchanged.

use axum::body::{to_bytes, Body};
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

fn query_num(query: &str, key: &str) -> Option<usize> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.parse().ok()).flatten()
    })
}

fn with_page(path: &str, query: &str, page: usize) -> String {
    let mut parts: Vec<String> = query
        .split('&')
        .filter(|kv| !kv.is_empty() && !kv.starts_with("page="))
        .map(str::to_string)
        .collect();
    parts.push(format!("page={page}"));
    format!("{path}?{}", parts.join("&"))
}

pub async fn paginate(req: Request, next: Next) -> Response {
    if req.method() != Method::GET || req.uri().path().starts_with("/_fake") {
        return next.run(req).await;
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let res = next.run(req).await;
    if res.status() != StatusCode::OK {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let Ok(bytes) = to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let Ok(mut value) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let per_page = query_num(&query, "per_page").unwrap_or(30).clamp(1, 100);
    let page = query_num(&query, "page").unwrap_or(1).max(1);
    let items = match &mut value {
        Value::Array(a) => Some(a),
        Value::Object(o) if o.contains_key("total_count") => {
            o.values_mut().find_map(|v| v.as_array_mut())
        }
        _ => None,
    };
    let Some(items) = items else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let total = items.len();
    let last = total.div_ceil(per_page).max(1);
    let start = ((page - 1) * per_page).min(total);
    let end = (start + per_page).min(total);
    *items = items[start..end].to_vec();
    let mut links = Vec::new();
    let url = |p: usize| format!("<http://{host}{}>", with_page(&path, &query, p));
    if page < last {
        links.push(format!("{}; rel=\"next\"", url(page + 1)));
        links.push(format!("{}; rel=\"last\"", url(last)));
    }
    if page > 1 {
        links.push(format!("{}; rel=\"first\"", url(1)));
        links.push(format!("{}; rel=\"prev\"", url(page - 1)));
    }
    let body = serde_json::to_vec(&value).unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    if !links.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&links.join(", ")) {
            parts.headers.insert(header::LINK, v);
        }
    }
    Response::from_parts(parts, Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_links_keep_the_other_parameters() {
        assert_eq!(
            with_page("/x", "per_page=2&page=1&state=all", 3),
            "/x?per_page=2&state=all&page=3"
        );
        assert_eq!(query_num("a=1&per_page=7", "per_page"), Some(7));
    }
}
