//! A scripted model server: the parts of Anthropic's Messages API that a
//! real Claude Code needs (streamed as Server-Sent Events, or whole when
//! asked without `stream`) and of OpenAI's Responses API that a real Codex
//! needs (streamed), so the tests run the CLIs people use with no provider
//! reachable.
//!
//! It plays an agent that reads only its prompt: asked for a turn, it calls
//! the CLI's shell tool (Claude Code's `Bash`, Codex's `exec_command`) to
//! write and commit the first file the prompt's exit criteria say must
//! exist (`` `path` exists ``) that is not there yet, once per such file;
//! then it says it is done. The CLI runs the tool itself, in the checkout it was started
//! in. Each request is recorded (which API, model, tools offered) for the
//! tests; every answer bills 1,000 tokens in and 200 out.
//!
//! Two missteps are scripted. A file whose name holds `flaky` is left out
//! the first time a prompt names it (the model says it is done all the
//! same); the next prompt naming it gets it written: a sprint that fails and
//! is then fixed. And [`ModelServer::fail_next`] answers the next requests
//! with a [`Failure`] as each provider says it: an overload (Anthropic's 529,
//! OpenAI's 503), a rate limit (429), a server error (500) — each asking
//! for a second's wait in `retry-after` — a stream cut off mid-answer, or a
//! prompt too long for the model (400), which is the request's fault.

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Json;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// Tokens each answer bills: in, and out.
pub const BILLED: (u64, u64) = (1000, 200);

/// Which provider's API a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Anthropic's Messages API (`/v1/messages`).
    Messages,
    /// OpenAI's Responses API (`/v1/responses`).
    Responses,
    /// Google's Gemini API (`/v1beta/models/{model}:streamGenerateContent`).
    Gemini,
}

/// One request the server answered.
#[derive(Debug, Clone)]
pub struct Request {
    pub api: Api,
    pub model: String,
    pub tools: usize,
    /// Answered with this failure instead of a turn.
    pub failed: Option<Failure>,
}

/// A scripted failure of the provider's (or of the request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Anthropic's 529 `overloaded_error`; OpenAI's 503 `server_is_overloaded`.
    Overloaded,
    /// 429, a rate limit.
    RateLimited,
    /// 500, the provider's own error.
    ServerError,
    /// The answer's stream starts, then the connection ends mid-way.
    StreamCut,
    /// 400: the prompt is longer than the model's context.
    ContextTooLong,
}

#[derive(Default)]
struct Inner {
    requests: Vec<Request>,
    /// `flaky` files already left out, with the conversation they were
    /// left out of.
    skipped: std::collections::BTreeMap<String, u64>,
    /// Requests still to be answered with a failure, and which.
    failures: usize,
    failure: Option<Failure>,
    /// The key each request presented, as the provider would read it, and
    /// the proxies it says it came through (`Via`).
    keys: Vec<String>,
    via: Vec<String>,
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
                    .route("/v1/responses", post(responses))
                    .route("/v1beta/models/{call}", post(gemini))
                    .layer(axum::middleware::from_fn_with_state(
                        state.clone(),
                        note_key,
                    ))
                    .with_state(state);
                let _ = axum::serve(listener, app).await;
            });
        });
        ModelServer { url, inner }
    }

    /// The next `n` requests, on either API, are answered with `failure`.
    pub fn fail_next(&self, n: usize, failure: Failure) {
        if let Ok(mut i) = self.inner.lock() {
            i.failures = n;
            i.failure = Some(failure);
        }
    }

    /// The key every request presented (`x-api-key`, a bearer token or
    /// `x-goog-api-key`), in order: what reached the provider.
    pub fn keys(&self) -> Vec<String> {
        self.inner
            .lock()
            .map(|i| i.keys.clone())
            .unwrap_or_default()
    }

    /// Each request's `Via` header (empty: it came straight from its client).
    pub fn via(&self) -> Vec<String> {
        self.inner.lock().map(|i| i.via.clone()).unwrap_or_default()
    }

    pub fn requests(&self) -> Vec<Request> {
        self.inner
            .lock()
            .map(|i| i.requests.clone())
            .unwrap_or_default()
    }
}

type Shared = Arc<Mutex<Inner>>;

/// Notes the key a request presented, as a provider reads it.
async fn note_key(
    State(s): State<Shared>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // Read before the await: a borrow of the request held across it would
    // make the future not `Send`.
    let key = {
        let h = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let key = h("x-api-key")
            .or_else(|| h("x-goog-api-key"))
            .or_else(|| h("authorization").map(|a| a.trim_start_matches("Bearer ").to_string()))
            .unwrap_or_default();
        (key, h("via").unwrap_or_default())
    };
    if let Ok(mut i) = s.lock() {
        i.keys.push(key.0);
        i.via.push(key.1);
    }
    next.run(req).await
}

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

/// What the scripted model does with a turn.
enum Turn {
    /// A failure, instead of an answer.
    Fail(Failure),
    /// Run this shell command (the tool call that does the sprint).
    Run(String),
    /// Say the work is done.
    Done,
}

/// The model's next turn in a conversation on `api`, recorded: `prompt` is
/// its text (the same at every turn of one conversation: tool results are
/// not in it), `answered` how many tool results came back already.
///
/// Each tool call writes and commits the first of the prompt's files that
/// is not there yet, so a sprint of two files takes two turns (and a CLI
/// held to one turn stops half-way); after as many calls as files, the
/// model says it is done.
fn next_turn(
    s: &Shared,
    api: Api,
    model: &str,
    tools: usize,
    prompt: &str,
    answered: usize,
) -> (Turn, usize) {
    let mut files = files_named(prompt);
    files.sort();
    files.dedup();
    let conversation = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        prompt.hash(&mut h);
        h.finish()
    };
    let mut inner = s.lock().expect("the model server's state");
    let failed = inner.failure.filter(|_| inner.failures > 0);
    inner.failures = inner.failures.saturating_sub(1);
    inner.requests.push(Request {
        api,
        model: model.to_string(),
        tools,
        failed,
    });
    let n = inner.requests.len();
    if let Some(f) = failed {
        return (Turn::Fail(f), n);
    }
    // A `flaky` file is left out of the first conversation that names it.
    files.retain(|f| {
        !f.contains("flaky")
            || *inner.skipped.entry(f.clone()).or_insert(conversation) != conversation
    });
    if tools == 0 || answered >= files.len() {
        return (Turn::Done, n);
    }
    // No command substitution: Gemini CLI refuses a command that has one.
    let quoted: Vec<String> = files.iter().map(|f| format!("'{f}'")).collect();
    let cmd = format!(
        "for f in {}; do if [ ! -e \"$f\" ]; then case \"$f\" in */*) mkdir -p \"${{f%/*}}\" ;; esac; \
         echo 'made by the scripted model' > \"$f\" && git add -A && \
         git commit -qm 'The sprint, by the scripted model'; break; fi; done",
        quoted.join(" ")
    );
    (Turn::Run(cmd), n)
}

const DONE: &str = "Done: the sprint's files are written and committed.";

/// `failure` as `api` says it: an error status with the provider's body
/// (and a `retry-after` of a second where the provider would ask for a
/// wait), or a stream that starts and is cut off.
fn failed(api: Api, failure: Failure, model: &str) -> Response {
    let anthropic = |kind: &str, message: &str| json!({ "type": "error", "error": { "type": kind, "message": message } });
    let openai = |kind: &str, code: &str, message: &str| json!({ "error": { "type": kind, "code": code, "message": message } });
    let google = |code: u16, status: &str, message: &str| json!({ "error": { "code": code, "status": status, "message": message } });
    let (status, body) = match (failure, api) {
        (Failure::StreamCut, Api::Messages) => {
            return sse(&[(
                "message_start",
                json!({ "type": "message_start", "message": { "id": "msg_cut", "type": "message",
                "role": "assistant", "model": model, "content": [], "stop_reason": null,
                "usage": { "input_tokens": BILLED.0, "output_tokens": 1 } } }),
            )])
        }
        (Failure::StreamCut, Api::Responses) => {
            return sse(&[(
                "response.created",
                json!({ "type": "response.created", "response": { "id": "resp_cut", "model": model } }),
            )])
        }
        (Failure::StreamCut, Api::Gemini) => {
            return sse(&[("", json!({ "candidates": [{ "content": { "role": "model", "parts": [{ "text": "Wr" }] } }] }))])
        }
        (Failure::Overloaded, Api::Gemini) => (503, google(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")),
        (Failure::RateLimited, Api::Gemini) => (429, google(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).")),
        (Failure::ServerError, Api::Gemini) => (500, google(500, "INTERNAL", "An internal error has occurred.")),
        (Failure::ContextTooLong, Api::Gemini) => (
            400,
            google(400, "INVALID_ARGUMENT", "The input token count (2500000) exceeds the maximum number of tokens allowed (1048576)."),
        ),
        (Failure::Overloaded, Api::Messages) => (529, anthropic("overloaded_error", "Overloaded")),
        (Failure::Overloaded, Api::Responses) => (
            503,
            openai(
                "server_error",
                "server_is_overloaded",
                "The server is overloaded.",
            ),
        ),
        (Failure::RateLimited, Api::Messages) => (
            429,
            anthropic(
                "rate_limit_error",
                "Number of request tokens has exceeded your rate limit.",
            ),
        ),
        (Failure::RateLimited, Api::Responses) => (
            429,
            openai(
                "requests",
                "rate_limit_exceeded",
                "Rate limit reached. Please try again in 1s.",
            ),
        ),
        (Failure::ServerError, Api::Messages) => {
            (500, anthropic("api_error", "Internal server error"))
        }
        (Failure::ServerError, Api::Responses) => (
            500,
            openai(
                "server_error",
                "server_error",
                "The server had an error processing your request.",
            ),
        ),
        (Failure::ContextTooLong, Api::Messages) => (
            400,
            anthropic(
                "invalid_request_error",
                "prompt is too long: 250000 tokens > 200000 maximum",
            ),
        ),
        (Failure::ContextTooLong, Api::Responses) => (
            400,
            openai(
                "invalid_request_error",
                "context_length_exceeded",
                "Your input exceeds the context window of this model.",
            ),
        ),
    };
    let mut r = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json");
    if status != 400 {
        r = r.header(header::RETRY_AFTER, "1");
    }
    r.body(Body::from(body.to_string())).expect("a response")
}

async fn messages(State(s): State<Shared>, Json(body): Json<Value>) -> Response {
    let model = body["model"].as_str().unwrap_or("").to_string();
    let tools = body["tools"].as_array().map_or(0, |t| t.len());
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let answered = messages
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .count();
    let prompt = messages
        .iter()
        .map(|m| text_of(&m["content"]))
        .collect::<Vec<_>>()
        .join("\n");
    let (turn, n) = next_turn(&s, Api::Messages, &model, tools, &prompt, answered);
    let block = match turn {
        Turn::Fail(f) => return failed(Api::Messages, f, &model),
        Turn::Done => json!({ "type": "text", "text": DONE }),
        Turn::Run(cmd) => {
            json!({ "type": "tool_use", "id": format!("toolu_{n}"), "name": "Bash", "input": { "command": cmd, "description": "Write and commit the files" } })
        }
    };
    if body["stream"] == true {
        return stream(&model, n, block);
    }
    // Not streamed (Claude Code asks so when a stream broke): the message
    // whole.
    let stop = if block["type"] == "tool_use" {
        "tool_use"
    } else {
        "end_turn"
    };
    Json(json!({
        "id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": model,
        "content": [block], "stop_reason": stop, "stop_sequence": null,
        "usage": { "input_tokens": BILLED.0, "output_tokens": BILLED.1 },
    }))
    .into_response()
}

/// A turn of the Responses API, as Codex asks for it: its input items
/// (messages, and the results of earlier function calls), streamed back as
/// one output item and the response's usage.
async fn responses(State(s): State<Shared>, Json(body): Json<Value>) -> Response {
    let model = body["model"].as_str().unwrap_or("").to_string();
    let tools = body["tools"].as_array().map_or(0, |t| t.len());
    let input = body["input"].as_array().cloned().unwrap_or_default();
    let answered = input
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .count();
    let prompt = input
        .iter()
        .filter(|i| i["type"] == "message")
        .map(|i| text_of(&i["content"]))
        .collect::<Vec<_>>()
        .join("\n");
    let (turn, n) = next_turn(&s, Api::Responses, &model, tools, &prompt, answered);
    let item = match turn {
        Turn::Fail(f) => return failed(Api::Responses, f, &model),
        Turn::Done => json!({ "type": "message", "id": format!("msg_{n}"), "role": "assistant",
            "content": [{ "type": "output_text", "text": DONE }] }),
        Turn::Run(cmd) => json!({ "type": "function_call", "id": format!("fc_{n}"),
            "call_id": format!("call_{n}"), "name": "exec_command",
            "arguments": json!({ "cmd": cmd }).to_string() }),
    };
    let id = format!("resp_{n}");
    let (input_tokens, output_tokens) = BILLED;
    let events = [
        (
            "response.created",
            json!({ "type": "response.created", "response": { "id": id, "model": model } }),
        ),
        (
            "response.output_item.added",
            json!({ "type": "response.output_item.added", "output_index": 0, "item": item }),
        ),
        (
            "response.output_item.done",
            json!({ "type": "response.output_item.done", "output_index": 0, "item": item }),
        ),
        (
            "response.completed",
            json!({ "type": "response.completed", "response": { "id": id, "model": model,
            "usage": { "input_tokens": input_tokens, "input_tokens_details": { "cached_tokens": 0 },
            "output_tokens": output_tokens, "output_tokens_details": { "reasoning_tokens": 0 },
            "total_tokens": input_tokens + output_tokens } } }),
        ),
    ];
    sse(&events)
}

/// A turn of the Gemini API, as Gemini CLI asks for it: its contents (the
/// user's text, the model's function calls and their responses), answered
/// as one candidate with the turn's usage; streamed for
/// `:streamGenerateContent`, whole for `:generateContent`.
async fn gemini(
    State(s): State<Shared>,
    axum::extract::Path(call): axum::extract::Path<String>,
    Json(body): Json<Value>,
) -> Response {
    let Some((model, method)) = call.split_once(':') else {
        return Response::builder()
            .status(404)
            .body(Body::empty())
            .expect("a response");
    };
    if method == "countTokens" {
        return Json(json!({ "totalTokens": BILLED.0 })).into_response();
    }
    let tools = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["functionDeclarations"].as_array())
        .map(Vec::len)
        .sum();
    let contents = body["contents"].as_array().cloned().unwrap_or_default();
    let answered = contents
        .iter()
        .filter_map(|c| c["parts"].as_array())
        .flatten()
        .filter(|p| p.get("functionResponse").is_some())
        .count();
    let prompt = contents
        .iter()
        .filter(|c| c["role"] == "user")
        .filter_map(|c| c["parts"].as_array())
        .flatten()
        .filter_map(|p| p["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let (turn, n) = next_turn(&s, Api::Gemini, model, tools, &prompt, answered);
    let part = match turn {
        Turn::Fail(f) => return failed(Api::Gemini, f, model),
        Turn::Done => json!({ "text": DONE }),
        Turn::Run(cmd) => {
            json!({ "functionCall": { "id": format!("call_{n}"), "name": "run_shell_command",
            "args": { "command": cmd, "description": "Write and commit the files" } } })
        }
    };
    let answer = json!({
        "candidates": [{ "content": { "role": "model", "parts": [part] }, "finishReason": "STOP", "index": 0 }],
        "usageMetadata": { "promptTokenCount": BILLED.0, "candidatesTokenCount": BILLED.1,
            "totalTokenCount": BILLED.0 + BILLED.1 },
        "modelVersion": model,
        "responseId": format!("resp_{n}"),
    });
    if method == "streamGenerateContent" {
        sse(&[("", answer)])
    } else {
        Json(answer).into_response()
    }
}

/// Server-Sent Events, each with its name.
fn sse(events: &[(&str, Value)]) -> Response {
    let text: String = events
        .iter()
        .map(|(e, d)| match e {
            // Google's streams name no events.
            &"" => format!("data: {d}\n\n"),
            e => format!("event: {e}\ndata: {d}\n\n"),
        })
        .collect();
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from(text))
        .expect("a response")
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
            "usage": { "input_tokens": BILLED.0, "output_tokens": 1 } } }),
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
            "usage": { "output_tokens": BILLED.1 } }),
        ),
        ("message_stop", json!({ "type": "message_stop" })),
    ];
    sse(&events)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_files_a_prompt_names_are_those_its_criteria_say_exist() {
        let prompt = "Exit criteria:\n- [ ] `solo/a.txt` exists\n- [ ] make test passes — run: `make test`\n- [ ] `x; rm -rf /` exists\n  - [ ] b/c.md exists\n";
        assert_eq!(super::files_named(prompt), ["solo/a.txt", "b/c.md"]);
    }
}
