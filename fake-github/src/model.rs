//! A scripted model server: the part of Anthropic's Messages API that a
//! real agent CLI (Claude Code) needs, streamed as Server-Sent Events, so
//! the tests run the CLI people use with no provider reachable.
//!
//! It plays an agent that reads only its prompt: asked for a turn, it calls
//! the CLI's Bash tool once to write every file the prompt's exit criteria
//! say must exist (`` `path` exists ``) and commit them; given that tool's
//! result, it says it is done. The CLI runs the tool itself, in the
//! checkout it was started in. Each request is recorded (model, tools
//! offered) for the tests.
//!
//! One misstep is scripted, for a sprint that fails and is then fixed: a
//! file whose name holds `flaky` is left out the first time a prompt names
//! it (the model says it is done all the same); the next prompt naming it
//! gets it written.

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::Response;
use axum::routing::post;
use axum::Json;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// One request the server answered.
#[derive(Debug, Clone)]
pub struct Request {
    pub model: String,
    pub tools: usize,
}

#[derive(Default)]
struct Inner {
    requests: Vec<Request>,
    /// `flaky` files already left out once.
    skipped: std::collections::BTreeSet<String>,
}

/// The server, listening until the process ends.
#[derive(Clone)]
pub struct ModelServer {
    pub url: String,
    inner: Arc<Mutex<Inner>>,
}

impl ModelServer {
    /// Starts the server on a thread of its own (usable from tests without
    /// a runtime).
    pub fn start() -> ModelServer {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        std_listener.set_nonblocking(true).expect("non-blocking");
        let url = format!("http://{}", std_listener.local_addr().expect("an address"));
        let state = inner.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
                let app = axum::Router::new()
                    .route("/v1/messages", post(messages))
                    .route("/v1/messages/count_tokens", post(count_tokens))
                    .with_state(state);
                let _ = axum::serve(listener, app).await;
            });
        });
        ModelServer { url, inner }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.inner
            .lock()
            .map(|i| i.requests.clone())
            .unwrap_or_default()
    }
}

type Shared = Arc<Mutex<Inner>>;

async fn count_tokens() -> Json<Value> {
    Json(json!({ "input_tokens": 100 }))
}

/// The text of a message's content (a string, or blocks of text).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The files the prompt's criteria say must exist (`- [ ] path exists`,
/// the path in backticks or not).
fn files_named(prompt: &str) -> Vec<String> {
    prompt
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("- [ ] ")?;
            let path = rest.strip_suffix(" exists")?.trim_matches('`');
            (!path.is_empty()
                && path
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c)))
            .then(|| path.to_string())
        })
        .collect()
}

async fn messages(State(s): State<Shared>, Json(body): Json<Value>) -> Response {
    let model = body["model"].as_str().unwrap_or("").to_string();
    let tools = body["tools"].as_array().map_or(0, |t| t.len());
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    // One tool call per conversation: once any result of it came back,
    // the turn is the final answer.
    let answered_tool = messages.iter().any(|m| {
        m["content"]
            .as_array()
            .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
    });
    let prompt = messages
        .iter()
        .map(|m| text_of(&m["content"]))
        .collect::<Vec<_>>()
        .join("\n");
    let mut files = files_named(&prompt);
    files.sort();
    files.dedup();
    let n = {
        let mut inner = s.lock().expect("the model server's state");
        inner.requests.push(Request {
            model: model.clone(),
            tools,
        });
        if !answered_tool {
            files.retain(|f| !f.contains("flaky") || !inner.skipped.insert(f.clone()));
        }
        inner.requests.len()
    };
    let block = if answered_tool || tools == 0 || files.is_empty() {
        json!({ "type": "text", "text": "Done: the sprint's files are written and committed." })
    } else {
        let mut cmd = String::new();
        for f in &files {
            cmd.push_str(&format!(
                "mkdir -p \"$(dirname '{f}')\" && echo 'made by the scripted model' > '{f}' && "
            ));
        }
        cmd.push_str("git add -A && git commit -qm 'The sprint, by the scripted model'");
        json!({ "type": "tool_use", "id": format!("toolu_{n}"), "name": "Bash", "input": { "command": cmd, "description": "Write and commit the files" } })
    };
    stream(&model, n, block)
}

/// One assistant message holding `block`, as the Messages API streams it.
fn stream(model: &str, n: usize, block: Value) -> Response {
    let tool = block["type"] == "tool_use";
    let (start, delta) = if tool {
        let mut start = block.clone();
        let input = start["input"].take();
        start["input"] = json!({});
        (
            start,
            json!({ "type": "input_json_delta", "partial_json": input.to_string() }),
        )
    } else {
        (
            json!({ "type": "text", "text": "" }),
            json!({ "type": "text_delta", "text": block["text"] }),
        )
    };
    let events = [
        (
            "message_start",
            json!({ "type": "message_start", "message": {
            "id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": { "input_tokens": 1000, "output_tokens": 1 } } }),
        ),
        (
            "content_block_start",
            json!({ "type": "content_block_start", "index": 0, "content_block": start }),
        ),
        (
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": 0, "delta": delta }),
        ),
        (
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": 0 }),
        ),
        (
            "message_delta",
            json!({ "type": "message_delta",
            "delta": { "stop_reason": if tool { "tool_use" } else { "end_turn" }, "stop_sequence": null },
            "usage": { "output_tokens": 200 } }),
        ),
        ("message_stop", json!({ "type": "message_stop" })),
    ];
    let text: String = events
        .iter()
        .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
        .collect();
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from(text))
        .expect("a response")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_files_a_prompt_names_are_those_its_criteria_say_exist() {
        let prompt = "Exit criteria:\n- [ ] `solo/a.txt` exists\n- [ ] make test passes — run: `make test`\n- [ ] `x; rm -rf /` exists\n  - [ ] b/c.md exists\n";
        assert_eq!(super::files_named(prompt), ["solo/a.txt", "b/c.md"]);
    }
}
