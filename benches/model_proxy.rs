//! What keeping the model key outside the agent costs an attempt: a request
//! to the scripted model server straight and through the model proxy
//! (latency, median and 99th percentile, on one keep-alive-less connection
//! each, as an agent's CLI makes them), the proxy's memory, and what
//! `--sandbox` adds before an agent starts (a network namespace, its
//! loopback, the bridge and the allow-list proxy), and what `supervise
//! fence` adds to an agent step on a runner. The namespaces need root;
//! without it those parts are skipped. Run: `cargo bench --bench model_proxy`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const BODY: &str =
    r#"{"model":"scripted","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}"#;

/// One POST to `/v1/messages` at `base` (`http://host:port/prefix`), the
/// answer read to its end; its time.
fn one(base: &str, key: &str) -> Duration {
    let rest = base.trim_start_matches("http://");
    let (authority, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let path = if prefix.is_empty() {
        "/v1/messages".to_string()
    } else {
        format!("/{prefix}/v1/messages")
    };
    let start = Instant::now();
    let mut c = TcpStream::connect(authority).expect("connect");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nx-api-key: {key}\r\nanthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    c.write_all(request.as_bytes()).expect("send");
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).expect("answer");
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer[..answer.len().min(200)])
    );
    start.elapsed()
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn quantiles(mut xs: Vec<Duration>) -> (f64, f64) {
    xs.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(xs[xs.len() / 2]), ms(xs[xs.len() * 99 / 100]))
}

fn main() {
    let model = fake_github::model::ModelServer::start();
    let n = 400;
    for _ in 0..20 {
        one(&model.url, "k");
    }
    let straight: Vec<Duration> = (0..n).map(|_| one(&model.url, "k")).collect();
    let before = rss_kib();
    let url = model.url.clone();
    let proxy = supervise::model_proxy::ModelProxy::from_vars(|name| match name {
        "ANTHROPIC_API_KEY" => Some("sk-ant-bench".into()),
        "ANTHROPIC_BASE_URL" => Some(url.clone()),
        _ => None,
    })
    .expect("a proxy")
    .expect("a key");
    let grant = proxy.grant(Duration::from_secs(600));
    let base = grant
        .env
        .iter()
        .find(|(k, _)| k == "ANTHROPIC_BASE_URL")
        .map(|(_, v)| v.clone())
        .unwrap();
    for _ in 0..20 {
        one(&base, &grant.token);
    }
    let proxied: Vec<Duration> = (0..n).map(|_| one(&base, &grant.token)).collect();
    let after = rss_kib();
    let (s50, s99) = quantiles(straight);
    let (p50, p99) = quantiles(proxied);
    println!("model request, straight: p50 {s50:.3} ms, p99 {s99:.3} ms ({n} requests)");
    println!("model request, through the proxy: p50 {p50:.3} ms, p99 {p99:.3} ms; added at the median {:.3} ms", p50 - s50);
    println!(
        "the proxy's memory: {} KiB more resident after starting it and {n} requests",
        after.saturating_sub(before)
    );
    let mut setups = Vec::new();
    for _ in 0..50 {
        let start = Instant::now();
        match supervise::sandbox::open(&Default::default(), &grant.env) {
            Ok(s) => {
                setups.push(start.elapsed());
                drop(s);
            }
            Err(e) => {
                println!("--sandbox set-up: skipped ({e:#})");
                return;
            }
        }
    }
    let (o50, o99) = quantiles(setups);
    println!(
        "--sandbox set-up before an agent starts: p50 {o50:.3} ms, p99 {o99:.3} ms (50 namespaces)"
    );
    fence();
}

/// What `supervise fence` adds to an agent step: `true` started straight,
/// and through the fence (the model proxy with a key, the namespaces, the
/// fence's init, the job's user), each started and waited for.
fn fence() {
    let exe = env!("CARGO_BIN_EXE_supervise");
    let dir = std::env::temp_dir().join(format!("fence-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let time = |fenced: bool| {
        let start = Instant::now();
        let status = if fenced {
            let keys = dir.join("keys");
            std::fs::write(&keys, "ANTHROPIC_API_KEY=sk-ant-bench\n").expect("keys");
            std::process::Command::new(exe)
                .arg("fence")
                .arg("--keys")
                .arg(&keys)
                .args(["--user", "65534:65534", "--", "true"])
                .stderr(std::process::Stdio::null())
                .status()
        } else {
            std::process::Command::new("true").status()
        };
        assert!(status.expect("started").success());
        start.elapsed()
    };
    let straight: Vec<Duration> = (0..50).map(|_| time(false)).collect();
    let fenced: Vec<Duration> = (0..50).map(|_| time(true)).collect();
    let _ = std::fs::remove_dir_all(&dir);
    let (s50, s99) = quantiles(straight);
    let (f50, f99) = quantiles(fenced);
    println!("an agent step's command, straight: p50 {s50:.3} ms, p99 {s99:.3} ms (50 starts)");
    println!("the same through supervise fence: p50 {f50:.3} ms, p99 {f99:.3} ms");
}
