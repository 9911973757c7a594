//! What an agent CLI's own report says about how it ended, read from the
//! end of its output (the engine's only view of it, the same in every
//! place): the model provider's trouble (a rate limit, an overload, a 5xx),
//! which is no failure of the agent's, and a stop at the turn limit, which
//! is unfinished work rather than failed work. Claude Code's JSON result
//! (`claude -p --output-format json`) says both: `is_error` with
//! `api_error_status`, and `subtype: error_max_turns`; its plain-text mode
//! prints `API Error: 529 …`.
//!
//! The output is the agent's, so it may lie: a run that says the provider
//! failed is retried on the same model, without counting an attempt, at
//! most [`PROVIDER_RETRIES`] times in a row before it counts as failed.

/// Consecutive runs of one sprint ended by the provider that are retried
/// without counting an attempt.
pub const PROVIDER_RETRIES: u32 = 6;

/// An attempt's outcome when the provider ended its run.
pub const OUTCOME: &str = "ended by the model provider";

/// The longest wait before a retry, whatever `retry-after` says.
pub const LONGEST_WAIT_SECS: u64 = 15 * 60;

/// The provider's error that ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trouble {
    /// The HTTP status the provider answered (429, 529, 5xx); none when
    /// the connection failed (a stream cut off, no answer at all).
    pub status: Option<u16>,
    /// Seconds the provider asked to wait, when it said.
    pub retry_after: Option<u64>,
}

impl Trouble {
    /// What the provider is, for people: "overloaded (HTTP 529)".
    pub fn described(&self) -> String {
        match self.status {
            Some(429) => "rate-limited (HTTP 429)".to_string(),
            Some(529) => "overloaded (HTTP 529)".to_string(),
            Some(s) => format!("failing (HTTP {s})"),
            None => "unreachable (the connection failed)".to_string(),
        }
    }
}

/// Whether a status is the provider's trouble rather than the request's
/// fault: a rate limit, an overload, a server error.
fn transient(status: u16) -> bool {
    status == 429 || status == 529 || (500..=599).contains(&status)
}

/// The provider's trouble that ended the run, if its report says so.
pub fn trouble(tail: &str) -> Option<Trouble> {
    let status = json_number(tail, "api_error_status")
        .filter(|_| tail.contains("\"is_error\":true") || tail.contains("\"is_error\": true"))
        .or_else(|| {
            // Claude Code's text mode: a line of its own, not the words
            // anywhere in what the agent printed.
            let line = tail
                .lines()
                .rev()
                .find_map(|l| l.trim_start().strip_prefix("API Error: "))?;
            // `API Error: 529 {…}`, or `API Error: Request rejected (429) · …`.
            leading_number(line).or_else(|| {
                let before = line.split(" · ").next().unwrap_or(line);
                let (_, rest) = before.rsplit_once('(')?;
                let (number, _) = rest.split_once(')')?;
                leading_number(number).filter(|n| n.to_string() == number)
            })
        })
        .or_else(|| codex_status(tail))
        .and_then(|s| u16::try_from(s).ok());
    let status = match status {
        Some(s) if transient(s) => Some(s),
        Some(_) => return None,
        None if connection_failed(tail) => None,
        None => return None,
    };
    let retry_after = json_number(tail, "retry_after")
        .or_else(|| json_number(tail, "retry-after"))
        .map(|s| s.min(LONGEST_WAIT_SECS));
    Some(Trouble {
        status,
        retry_after,
    })
}

/// Whether the CLI's report says the connection to the provider failed
/// with no status to show for it: Claude Code's result with
/// `terminal_reason: api_error` and no `api_error_status`; Codex's failed
/// turn whose stream was disconnected.
fn connection_failed(tail: &str) -> bool {
    json_lines(tail).rev().any(|v| match v["type"].as_str() {
        Some("result") => {
            v["is_error"] == true
                && v["terminal_reason"] == "api_error"
                && v["api_error_status"].is_null()
        }
        Some("turn.failed") => v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("stream disconnected")),
        _ => false,
    })
}

/// The provider's status in Codex's report of a failed turn (`codex exec
/// --json`'s last `turn.failed` event), which says it in words: the status
/// its retries ended on, or its own wording of an overload or a server
/// error.
fn codex_status(tail: &str) -> Option<u64> {
    let failed = json_lines(tail)
        .rev()
        .find(|v| v["type"] == "turn.failed")?;
    let message = failed["error"]["message"].as_str()?;
    if let Some(at) = message.find("last status: ") {
        return leading_number(&message[at + "last status: ".len()..]);
    }
    if message.contains("model is at capacity") {
        Some(503)
    } else if message.contains("experiencing high demand") {
        Some(500)
    } else {
        None
    }
}

/// How the fence (or `--sandbox`) closes an agent's output when its
/// network proxy refused something: this, then `HOST (COUNT), …`. It comes
/// after the agent has ended, so it is always the output's last line.
pub const NETWORK_REFUSED: &str = "supervise: the sandbox refused connections to ";

/// The hosts the agent's sandbox refused, as its output's last line says.
pub fn network_refused(tail: &str) -> Option<&str> {
    tail.lines()
        .rev()
        .find(|l| !l.trim().is_empty())?
        .strip_prefix(NETWORK_REFUSED)
        .map(str::trim)
}

/// Whether the run stopped at its turn limit.
pub fn hit_turn_limit(tail: &str) -> bool {
    tail.contains("\"subtype\":\"error_max_turns\"")
        || tail.contains("\"subtype\": \"error_max_turns\"")
}

/// The turns the CLI reports it took (`num_turns`).
pub fn turns(tail: &str) -> Option<u32> {
    json_number(tail, "num_turns").and_then(|n| u32::try_from(n).ok())
}

/// The lines of `output` that read as JSON objects.
fn json_lines(output: &str) -> impl DoubleEndedIterator<Item = serde_json::Value> + '_ {
    output.lines().filter_map(|l| {
        let l = l.trim();
        l.starts_with('{')
            .then(|| serde_json::from_str::<serde_json::Value>(l).ok())
            .flatten()
    })
}

/// What the run used, as its CLI reported it: Claude Code's JSON result
/// (`--output-format json`, its last line that reads as
/// `{"type":"result",…}`: tokens, and the dollars it priced them at), or
/// Codex's JSON events (`codex exec --json`: each `turn.completed` line's
/// tokens, added up; Codex prices nothing).
pub fn usage(output: &str) -> Option<super::usage::Usage> {
    let Some(result) = json_lines(output).rev().find(|v| v["type"] == "result") else {
        return codex_usage(output).or_else(|| gemini_usage(output));
    };
    let u = &result["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    Some(super::usage::Usage {
        input_tokens: n("input_tokens"),
        output_tokens: n("output_tokens"),
        cache_read_tokens: n("cache_read_input_tokens"),
        cache_write_tokens: n("cache_creation_input_tokens"),
        cost: result["total_cost_usd"]
            .as_f64()
            .map(super::usage::Usd::from_dollars),
    })
}

/// Codex's `turn.completed` events, added up. Its `input_tokens` count the
/// cached ones too; here, as in Claude Code's report, input tokens are
/// those not read from the cache.
fn codex_usage(output: &str) -> Option<super::usage::Usage> {
    // Added up with `Usage`'s saturating sum: the figures are the agent's
    // output, and may be as large as it likes.
    json_lines(output)
        .filter(|v| v["type"] == "turn.completed")
        .map(|turn| {
            let u = &turn["usage"];
            let n = |k: &str| u[k].as_u64().unwrap_or(0);
            super::usage::Usage {
                input_tokens: n("input_tokens").saturating_sub(n("cached_input_tokens")),
                cache_read_tokens: n("cached_input_tokens"),
                cache_write_tokens: n("cache_write_input_tokens"),
                output_tokens: n("output_tokens"),
                cost: None,
            }
        })
        .reduce(|a, b| a + b)
}

/// Gemini CLI's JSON report (`gemini --output-format json`: one document,
/// written over many lines, at the end of its output): the tokens of each
/// model it used (`stats.models.*.tokens`), added up; it prices nothing.
/// Its `prompt` tokens count the cached ones too, and its `thoughts` are
/// billed as output.
fn gemini_usage(output: &str) -> Option<super::usage::Usage> {
    // Gemini CLI's report is the output's last JSON document: the fence's
    // line after it is not the CLI's.
    let output = match output.rfind(NETWORK_REFUSED) {
        Some(i) => &output[..i],
        None => output,
    };
    let start = match output.rfind("\n{\n") {
        Some(i) => i + 1,
        None => output.starts_with("{\n").then_some(0)?,
    };
    let report: serde_json::Value = serde_json::from_str(output[start..].trim_end()).ok()?;
    let models = report["stats"]["models"].as_object()?;
    let each = models.values().map(|m| {
        let t = &m["tokens"];
        let n = |k: &str| t[k].as_u64().unwrap_or(0);
        super::usage::Usage {
            input_tokens: n("prompt").saturating_sub(n("cached")),
            cache_read_tokens: n("cached"),
            output_tokens: n("candidates").saturating_add(n("thoughts")),
            ..Default::default()
        }
    });
    Some(each.fold(super::usage::Usage::default(), |a, b| a + b))
}

/// The number after the last `"key":` in `text` (whitespace allowed).
fn json_number(text: &str, key: &str) -> Option<u64> {
    let pat = format!("\"{key}\"");
    let at = text.rfind(&pat)? + pat.len();
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
    leading_number(rest)
}

/// The whole number `text` starts with, if it starts with one (and it fits).
fn leading_number(text: &str) -> Option<u64> {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text[..end].parse().ok()
}

/// How long to wait before the `n`-th retry (from 1): what the provider
/// asked, else 30 s doubling, never more than [`LONGEST_WAIT_SECS`].
pub fn wait_secs(trouble: &Trouble, n: u32) -> u64 {
    trouble
        .retry_after
        .unwrap_or_else(|| 30u64.saturating_mul(1 << n.saturating_sub(1).min(10)))
        .clamp(1, LONGEST_WAIT_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OVERLOADED: &str = r#"{"type":"result","subtype":"success","is_error":true,"duration_ms":812,"num_turns":1,"result":"API Error: 529 {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}","api_error_status":529,"total_cost_usd":0}"#;

    #[test]
    fn claude_codes_result_says_what_the_run_used() {
        let out = "working…\n{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"num_turns\":2,\
            \"result\":\"Done.\",\"total_cost_usd\":0.006015,\"usage\":{\"input_tokens\":2000,\
            \"cache_creation_input_tokens\":10,\"cache_read_input_tokens\":5,\"output_tokens\":402}}\n";
        let u = usage(out).expect("a report");
        assert_eq!((u.input_tokens, u.output_tokens), (2000, 402));
        assert_eq!((u.cache_write_tokens, u.cache_read_tokens), (10, 5));
        assert_eq!(u.cost.map(|c| c.micros()), Some(6015));
        assert_eq!(usage("Done. {\"type\": \"other\"}\nno json here"), None);
    }

    #[test]
    fn codexs_events_say_what_the_run_used_without_a_price() {
        let out = "{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n\
            {\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":2000,\"cached_input_tokens\":400,\
            \"cache_write_input_tokens\":0,\"output_tokens\":100,\"reasoning_output_tokens\":0}}\n\
            {\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}\n";
        let u = usage(out).expect("a report");
        assert_eq!((u.input_tokens, u.cache_read_tokens), (1610, 400));
        assert_eq!(u.output_tokens, 101);
        assert_eq!(u.cost, None);
        assert_eq!(usage("{\"type\":\"turn.started\"}"), None);
    }

    #[test]
    fn codexs_failed_turn_says_the_providers_trouble_in_words() {
        let failed = |m: &str| {
            format!("{{\"type\":\"turn.started\"}}\n{{\"type\":\"turn.failed\",\"error\":{{\"message\":\"{m}\"}}}}\n")
        };
        let status = |m: &str| trouble(&failed(m)).and_then(|t| t.status);
        assert_eq!(
            status("exceeded retry limit, last status: 429 Too Many Requests"),
            Some(429)
        );
        assert_eq!(
            status("Selected model is at capacity. Please try a different model."),
            Some(503)
        );
        assert_eq!(
            status("We're currently experiencing high demand, which may cause temporary errors."),
            Some(500)
        );
        assert_eq!(
            status("exceeded retry limit, last status: 401 Unauthorized"),
            None
        );
        assert_eq!(status("the sandbox refused the command"), None);
        // The words alone, outside a failed turn, are the agent's text.
        assert_eq!(trouble("Selected model is at capacity."), None);
    }

    #[test]
    fn gemini_clis_report_says_the_tokens_of_each_model() {
        let out = "YOLO mode is enabled.\n{\n  \"response\": \"Done.\",\n  \"stats\": {\n    \"models\": {\n\
            \"a\": { \"tokens\": { \"prompt\": 2000, \"candidates\": 400, \"cached\": 500, \"thoughts\": 10 } },\n\
            \"b\": { \"tokens\": { \"prompt\": 100, \"candidates\": 1 } }\n    }\n  }\n}\n";
        let u = usage(out).expect("a report");
        assert_eq!((u.input_tokens, u.cache_read_tokens), (1600, 500));
        assert_eq!(u.output_tokens, 411);
        assert_eq!(u.cost, None);
        assert_eq!(usage("{\n  \"response\": \"no stats\"\n}\n"), None);
        // The fence's line closing the output is not the CLI's.
        let fenced = format!("{out}\n{NETWORK_REFUSED}play.googleapis.com (2)\n");
        assert_eq!(usage(&fenced), Some(u));
        assert_eq!(network_refused(&fenced), Some("play.googleapis.com (2)"));
        assert_eq!(network_refused(out), None);
    }

    #[test]
    fn claude_codes_report_of_an_overload_is_the_providers_trouble() {
        let t = trouble(OVERLOADED).expect("an overload");
        assert_eq!(t.status, Some(529));
        assert_eq!(t.retry_after, None);
        assert_eq!(turns(OVERLOADED), Some(1));
        assert!(!hit_turn_limit(OVERLOADED));
    }

    #[test]
    fn plain_text_and_rate_limits_are_read_and_the_wait_is_bounded() {
        let t =
            trouble("working…\nAPI Error: 429 rate_limit_error \"retry_after\": 99999").unwrap();
        assert_eq!(t.status, Some(429));
        assert_eq!(t.retry_after, Some(LONGEST_WAIT_SECS));
        assert_eq!(wait_secs(&t, 1), LONGEST_WAIT_SECS);
        let plain = Trouble {
            status: Some(500),
            retry_after: None,
        };
        assert_eq!(wait_secs(&plain, 1), 30);
        assert_eq!(wait_secs(&plain, 3), 120);
        assert_eq!(wait_secs(&plain, 40), LONGEST_WAIT_SECS);
    }

    #[test]
    fn the_agents_own_errors_are_not_the_providers() {
        // A request the provider refused as bad is the agent's (or the
        // prompt's) problem; an error without `is_error` is text.
        assert_eq!(trouble(r#"{"is_error":true,"api_error_status":400}"#), None);
        assert_eq!(
            trouble(r#"{"is_error":false,"api_error_status":529}"#),
            None
        );
        assert_eq!(trouble("error: could not build"), None);
        assert_eq!(trouble("API Error: 401 invalid x-api-key"), None);
        // The agent's own words about the code it is working on.
        assert_eq!(
            trouble("the handler returns `API Error: 500` when the key is unset"),
            None
        );
    }

    #[test]
    fn a_connection_that_failed_is_the_providers_trouble_and_a_long_prompt_is_not() {
        let cut = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":null,"terminal_reason":"api_error","result":"API Error: API returned an empty or malformed response (HTTP 200)","num_turns":1}"#;
        let t = trouble(cut).expect("a connection that failed");
        assert_eq!(t.status, None);
        assert_eq!(t.described(), "unreachable (the connection failed)");
        let too_long = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":400,"terminal_reason":"prompt_too_long","result":"Prompt is too long","num_turns":1}"#;
        assert_eq!(trouble(too_long), None);
        // A run that ended well, whatever it printed before.
        let fine = r#"{"type":"result","subtype":"success","is_error":false,"terminal_reason":"api_error"}"#;
        assert_eq!(trouble(fine), None);
    }

    #[test]
    fn claude_codes_text_says_the_status_first_or_in_brackets() {
        let status = |t: &str| trouble(t).and_then(|t| t.status);
        assert_eq!(
            status("working\nAPI Error: 529 {\"type\":\"error\"}"),
            Some(529)
        );
        assert_eq!(
            status("API Error: Request rejected (429) · Number of request tokens has exceeded your rate limit."),
            Some(429)
        );
        assert_eq!(
            status("API Error: Request rejected (401) · invalid x-api-key"),
            None
        );
        // Brackets in the words after the first ` · ` are not the status.
        assert_eq!(status("API Error: Request rejected · see (529)"), None);
        assert_eq!(status("API Error: Request rejected (soon)"), None);
    }

    #[test]
    fn a_stop_at_the_turn_limit_is_read() {
        let tail =
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":51}"#;
        assert!(hit_turn_limit(tail));
        assert_eq!(trouble(tail), None);
        assert_eq!(turns(tail), Some(51));
    }
}
