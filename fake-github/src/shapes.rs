//! Every success answer carries the fields GitHub always sends. The least body
//! GitHub's description requires of each endpoint the fake serves is generated
//! into `github_shapes.json` (by `shapes/generate.py`); this layer lays the
//! fake's own answer over it, field by field, and each item of a list over
//! the list's item shape.

use axum::body::{to_bytes, Body};
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::sync::OnceLock;

struct Shape {
    method: String,
    segments: Vec<Segment>,
    body: Value,
}

enum Segment {
    Literal(String),
    /// A parameter; `true` when it may hold slashes (a path, a ref).
    Param(bool),
}

fn shapes() -> &'static [Shape] {
    static SHAPES: OnceLock<Vec<Shape>> = OnceLock::new();
    SHAPES.get_or_init(|| {
        let all: serde_json::Map<String, Value> =
            serde_json::from_str(include_str!("github_shapes.json")).expect("valid shapes");
        all.into_iter()
            .filter_map(|(key, body)| {
                let (method, template) = key.split_once(' ')?;
                let segments = template
                    .trim_start_matches('/')
                    .split('/')
                    .map(
                        |s| match s.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                            Some(name) => {
                                Segment::Param(matches!(name, "path" | "ref" | "basehead"))
                            }
                            None => Segment::Literal(s.to_string()),
                        },
                    )
                    .collect();
                Some(Shape {
                    method: method.to_string(),
                    segments,
                    body,
                })
            })
            .collect()
    })
}

fn matches(segments: &[Segment], parts: &[&str]) -> bool {
    match (segments.first(), parts.first()) {
        (None, None) => true,
        (Some(Segment::Literal(l)), Some(p)) => l == p && matches(&segments[1..], &parts[1..]),
        (Some(Segment::Param(false)), Some(_)) => matches(&segments[1..], &parts[1..]),
        // A slashed parameter takes one or more parts.
        (Some(Segment::Param(true)), Some(_)) => {
            (1..=parts.len()).any(|n| matches(&segments[1..], &parts[n..]))
        }
        _ => false,
    }
}

fn shape_for(method: &str, path: &str) -> Option<&'static Value> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    // The most literal template wins: `/pulls/{n}/merge` over a slashed `{path}`.
    shapes()
        .iter()
        .filter(|s| s.method == method && matches(&s.segments, &parts))
        .max_by_key(|s| {
            s.segments
                .iter()
                .filter(|g| matches!(g, Segment::Literal(_)))
                .count()
        })
        .map(|s| &s.body)
}

/// Of a `$oneOf` shape's options, the one that fits `data`: the same kind
/// (object or list), and of objects the one naming most of its fields.
fn pick<'a>(options: &'a [Value], data: &Value) -> Option<&'a Value> {
    options
        .iter()
        .filter(|o| o.is_object() == data.is_object() && o.is_array() == data.is_array())
        .max_by_key(|o| match (o, data) {
            (Value::Object(o), Value::Object(d)) => d.keys().filter(|k| o.contains_key(*k)).count(),
            _ => 0,
        })
}

/// `data` laid over `shape`: the fake's fields win; the shape fills the rest.
pub fn overlay(shape: &Value, data: Value) -> Value {
    if let Some(Value::Array(options)) = shape.get("$oneOf") {
        return match pick(options, &data) {
            Some(s) => overlay(s, data),
            None => data,
        };
    }
    match (shape, data) {
        (Value::Object(s), Value::Object(d)) => {
            let mut out: serde_json::Map<String, Value> =
                s.iter().map(|(k, v)| (k.clone(), plain(v))).collect();
            for (k, v) in d {
                let merged = match s.get(&k) {
                    Some(sv) => overlay(sv, v),
                    None => v,
                };
                out.insert(k, merged);
            }
            Value::Object(out)
        }
        (Value::Array(s), Value::Array(d)) if s.len() == 1 => {
            Value::Array(d.into_iter().map(|e| overlay(&s[0], e)).collect())
        }
        (_, d) => d,
    }
}

/// A shape as a value where the fake gave none: `$oneOf` takes its first option.
fn plain(shape: &Value) -> Value {
    match shape {
        Value::Object(o) => match o.get("$oneOf") {
            Some(Value::Array(options)) => options.first().map(plain).unwrap_or(Value::Null),
            _ => Value::Object(o.iter().map(|(k, v)| (k.clone(), plain(v))).collect()),
        },
        Value::Array(a) if a.len() == 1 => Value::Array(Vec::new()),
        other => other.clone(),
    }
}

pub async fn complete(req: Request, next: Next) -> Response {
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let res = next.run(req).await;
    if !res.status().is_success() || path.starts_with("/_fake") {
        return res;
    }
    let Some(shape) = shape_for(&method, &path) else {
        return res;
    };
    let (mut parts, body) = res.into_parts();
    let Ok(bytes) = to_bytes(body, usize::MAX).await else {
        return axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let Ok(data) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let full = serde_json::to_vec(&overlay(shape, data)).unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(full))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_fakes_fields_win_and_the_shape_fills_the_rest() {
        let shape = json!([{ "id": 0, "user": { "login": "", "id": 0 }, "locked": false }]);
        let data = json!([{ "id": 7, "user": { "login": "mia" } }]);
        assert_eq!(
            overlay(&shape, data),
            json!([{ "id": 7, "user": { "login": "mia", "id": 0 }, "locked": false }])
        );
        assert!(shape_for("GET", "/repos/a/b/pulls").is_some());
        assert!(shape_for("PUT", "/repos/a/b/contents/dir/file.md").is_some());
        assert!(shape_for("GET", "/repos/a/b/git/ref/heads/supervise/x/y").is_some());
    }
}
