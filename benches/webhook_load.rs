//! Load on the webhook intake, from this (second) process over loopback: signed
//! `issue_comment` deliveries at a fixed rate and at the maximum rate, against
//! `supervise serve` (signature check + durable SQLite insert + 202) and, side by
//! side, a minimal Node receiver on @octokit/webhooks (signature check + 202, no
//! storage). At the fixed rate an answer is timed from its request's *scheduled*
//! send time whenever its connection was still waiting on the answer before,
//! so a slow server cannot hide its queueing, and from the send itself when the
//! connection was free (the generator's own timer lateness is not charged).
//! Run: `cargo bench --bench webhook_load` (needs node and target/npm, which
//! scripts/test installs; `npm install --prefix target/npm @octokit/webhooks`).
//! `BENCH_DATABASE_URL=postgres://…` stores in PostgreSQL instead of SQLite;
//! `BENCH_WORKERS` sets the service's processing workers (default 4);
//! `BENCH_PAYLOAD_KB=10` pads each delivery to GitHub's usual size;
//! `BENCH_EVENT=workflow_run` sends deliveries a worker must look at (a run
//! the service did not start: one read of the store each) instead of comments
//! without a command, which intake settles itself (stored done, not queued);
//! `BENCH_MAX_CONNS=16,64` the connection counts of the maximum-rate runs;
//! `BENCH_SUPERVISE=path` measures another build of `supervise`.

#[path = "../tests/support/signed_request.rs"]
mod signed_request;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SECRET: &str = "load-secret";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `BENCH_PAYLOAD_KB`: pad each delivery to about this size (GitHub's own
/// `issue_comment` payloads, with their repository and user objects, are
/// 8-12 KB); default: a minimal body of about 250 bytes.
fn padding() -> String {
    let kb: usize = std::env::var("BENCH_PAYLOAD_KB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    "x".repeat(kb * 1024)
}

/// `BENCH_EVENT`: `workflow_run`, or (default) `issue_comment`.
/// Read once: `request` runs for every delivery sent, in the load
/// generator, whose CPU the service shares.
fn event() -> &'static str {
    static EVENT: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    EVENT.get_or_init(|| match std::env::var("BENCH_EVENT").as_deref() {
        Ok("workflow_run") => "workflow_run",
        _ => "issue_comment",
    })
}

fn request(n: u64) -> Vec<u8> {
    static PAD: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let pad = PAD.get_or_init(padding);
    let body = match event() {
        // Another workflow's run (the repository's CI, say): the worker
        // looks it up among the service's runs and finds nothing to do.
        "workflow_run" => format!(
            r#"{{"action":"completed","workflow_run":{{"id":{n},"name":"CI","display_title":"CI on main","status":"completed","conclusion":"success","html_url":"https://github.com/acme/shop/actions/runs/{n}"}},"repository":{{"full_name":"acme/shop","description":"{pad}"}},"installation":{{"id":7}}}}"#
        ),
        _ => format!(
            r#"{{"action":"created","issue":{{"number":1}},"comment":{{"id":{n},"body":"Looks good to me, thanks!","user":{{"login":"mia","type":"User"}}}},"repository":{{"full_name":"acme/shop","description":"{pad}"}},"installation":{{"id":7}}}}"#
        ),
    };
    signed_request::signed_request(SECRET, event(), &delivery_id(n), body.as_bytes())
}

/// A delivery id shaped as GitHub's: a time-based (version 1) UUID, as in
/// its API description's examples (`58474f00-b361-11eb-836d-0e4f3503ccbe`).
/// Time comes first in one, so ids sent one after another sort in sending
/// order (wrapping every seven minutes or so) and land near one another in
/// the store's index — as the store's own probes found, random ids cost
/// SQLite four to five times as much per delivery. `n` keeps each unique.
fn delivery_id(n: u64) -> String {
    // 100 ns ticks since 1582-10-15, the UUID epoch.
    let ticks = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        / 100
        + 0x01b2_1dd2_1381_4000;
    format!(
        "{:08x}-{:04x}-1{:03x}-{:04x}-{:012x}",
        ticks as u32,
        (ticks >> 32) as u16,
        (ticks >> 48) & 0xfff,
        0x8000 | ((n >> 48) & 0x3fff),
        n & 0xffff_ffff_ffff
    )
}

/// Sends one request on a keep-alive connection and reads the whole response.
async fn roundtrip(s: &mut TcpStream, req: &[u8], buf: &mut Vec<u8>) -> u16 {
    s.write_all(req).await.unwrap();
    buf.clear();
    let mut chunk = [0u8; 1024];
    loop {
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = s.read(&mut chunk).await.unwrap();
                buf.extend_from_slice(&chunk[..n]);
            }
            return head
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
        }
    }
}

struct Result {
    sent: usize,
    secs: f64,
    lat_ms: Vec<f64>,
}

impl Result {
    fn line(&self, name: &str, mode: &str) -> String {
        let mut l = self.lat_ms.clone();
        l.sort_by(f64::total_cmp);
        let p = |q: f64| l[((l.len() - 1) as f64 * q).round() as usize];
        format!(
            "| {name} | {mode} | {:.0}/s | {:.2} ms | {:.2} ms |",
            self.sent as f64 / self.secs,
            p(0.5),
            p(0.99)
        )
    }
}

/// `rate`: Some(per second) for an open loop on `conns` connections, None for a
/// closed loop as fast as each connection can go.
async fn load(port: u16, conns: usize, rate: Option<f64>, dur: Duration, base: u64) -> Result {
    let start = Instant::now() + Duration::from_millis(100);
    let mut tasks = Vec::new();
    for c in 0..conns {
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            s.set_nodelay(true).unwrap();
            let mut buf = Vec::with_capacity(1024);
            let mut lat = Vec::new();
            let mut i = 0u64;
            // When this connection's last answer came.
            let mut answered = start;
            loop {
                let scheduled = match rate {
                    Some(r) => {
                        start + Duration::from_secs_f64((i as f64 * conns as f64 + c as f64) / r)
                    }
                    None => Instant::now(),
                };
                if scheduled.duration_since(start) >= dur {
                    break;
                }
                tokio::time::sleep_until(scheduled.into()).await;
                // An answer is timed from when its request was due, so a
                // receiver that falls behind is charged for the wait it
                // causes; but from when it was sent if the connection was
                // free when it was due — the timer's lateness (this runtime
                // wakes at millisecond ticks, on cores the receiver shares)
                // is this generator's, not the receiver's.
                let from = if answered <= scheduled {
                    Instant::now()
                } else {
                    scheduled
                };
                let req = request(base + (i * conns as u64) + c as u64);
                let status = roundtrip(&mut s, &req, &mut buf).await;
                assert!(status == 202 || status == 200, "status {status}");
                answered = Instant::now();
                lat.push((answered - from).as_secs_f64() * 1000.0);
                i += 1;
            }
            lat
        }));
    }
    let mut lat_ms = Vec::new();
    for t in tasks {
        lat_ms.extend(t.await.unwrap());
    }
    let secs = start.elapsed().as_secs_f64();
    Result {
        sent: lat_ms.len(),
        secs,
        lat_ms,
    }
}

/// How much of what it stored the service has processed, from its metrics:
/// by a worker, or settled at intake (stored done, needing nothing).
async fn processed(port: u16) -> (f64, f64) {
    let text = metrics_text(port).await;
    let sum = |prefix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let of = |outcome: &str| {
        sum(&format!(
            "supervise_deliveries_total{{event=\"{}\",outcome=\"{outcome}\"}}",
            event()
        ))
    };
    let settled = of("settled");
    (
        sum("supervise_processing_seconds_count") + settled,
        of("stored") + settled,
    )
}

/// CPU seconds (user and system) a receiver's process and this one (the
/// load generator) have used: what a delivery costs each, and how much of
/// the machine's two cores was left.
#[derive(Clone, Copy)]
struct Cpu {
    receiver: f64,
    generator: f64,
}

impl Cpu {
    fn now(pid: u32) -> Cpu {
        Cpu {
            receiver: cpu_seconds(Some(pid)),
            generator: cpu_seconds(None),
        }
    }

    /// Cores used between `self` and `after`, `secs` apart, and CPU time
    /// per delivery over the `sent` deliveries answered in between.
    fn line(&self, after: &Cpu, secs: f64, sent: usize) -> String {
        let (r, g) = (
            after.receiver - self.receiver,
            after.generator - self.generator,
        );
        let per = |c: f64| 1e6 * c / (sent.max(1) as f64);
        format!(
            "receiver CPU {:.2} cores ({:.1} µs a delivery), load generator {:.2} ({:.1} µs)",
            r / secs,
            per(r),
            g / secs,
            per(g)
        )
    }
}

/// What the service did over one run, from its metrics: what bounds intake
/// (the writer's commits, or the processors).
struct Work {
    batch_sum: f64,
    batches: f64,
    commit_secs: f64,
}

/// CPU seconds a process has used (`None`: this one), from `/proc`.
fn cpu_seconds(pid: Option<u32>) -> f64 {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".into(),
    };
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    // After the command's closing parenthesis, utime and stime are the
    // 12th and 13th fields, in clock ticks (100 a second on Linux).
    let fields: Vec<f64> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    (fields.get(11).unwrap_or(&0.0) + fields.get(12).unwrap_or(&0.0)) / 100.0
}

/// The service's `/metrics` page.
async fn metrics_text(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    text
}

async fn work(port: u16) -> Work {
    let text = metrics_text(port).await;
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    };
    Work {
        batch_sum: value("supervise_intake_batch_sum"),
        batches: value("supervise_intake_batch_count"),
        commit_secs: value("supervise_intake_commit_seconds_sum"),
    }
}

impl Work {
    /// What happened between `self` and `after`, `secs` apart.
    fn line(&self, after: &Work, secs: f64) -> String {
        let commits = after.batches - self.batches;
        format!(
            "{:.0} commits/s of {:.1} writes, the writer busy {:.0}%",
            commits / secs,
            (after.batch_sum - self.batch_sum) / commits.max(1.0),
            100.0 * (after.commit_secs - self.commit_secs) / secs,
        )
    }
}

/// `BENCH_MAX_CONNS`: the numbers of connections the maximum rate is
/// measured at, comma-separated (default 16 and 64).
fn max_conns() -> Vec<usize> {
    std::env::var("BENCH_MAX_CONNS")
        .unwrap_or_else(|_| "16,64".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect()
}

/// Kills the servers however the benchmark ends.
struct Servers(Vec<Child>);

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn wait_port(port: u16) {
    let t = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "server on {port} did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn start_serve(port: u16, db: &Path) -> Child {
    let key = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/app/test-app-key.pem");
    // `BENCH_SUPERVISE`: another build to measure (an older one, side by side).
    Command::new(std::env::var("BENCH_SUPERVISE").unwrap_or(env!("CARGO_BIN_EXE_supervise").into()))
        .arg("serve")
        .env("SUPERVISE_LISTEN", format!("127.0.0.1:{port}"))
        .env("GITHUB_APP_ID", "1")
        .env("GITHUB_PRIVATE_KEY_PATH", key)
        .env("GITHUB_WEBHOOK_SECRET", SECRET)
        .env("GITHUB_API_URL", "http://127.0.0.1:9")
        .env(
            "SUPERVISE_WORKERS",
            std::env::var("BENCH_WORKERS").unwrap_or("4".into()),
        )
        .env(
            "DATABASE_URL",
            std::env::var("BENCH_DATABASE_URL")
                .unwrap_or_else(|_| format!("sqlite://{}?mode=rwc", db.display())),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn start_node(port: u16) -> Option<Child> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/npm");
    if !dir.join("node_modules/@octokit/webhooks").exists() {
        eprintln!("skipping the Node receiver: npm install --prefix target/npm @octokit/webhooks");
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/node-receiver/receiver.mjs");
    std::fs::copy(&script, dir.join("receiver.mjs")).ok()?;
    Command::new("node")
        .arg("receiver.mjs")
        .current_dir(&dir)
        .env("PORT", port.to_string())
        .env("SECRET", SECRET)
        .stdout(Stdio::null())
        .spawn()
        .ok()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (sp, np) = (free_port(), free_port());
    let dur = Duration::from_secs(5);
    println!("| receiver | load | throughput | p50 ack | p99 ack |\n|---|---|---|---|---|");
    let mut base = 0;
    let store = if std::env::var("BENCH_DATABASE_URL").is_ok_and(|u| u.starts_with("postgres")) {
        "supervise serve (PostgreSQL)"
    } else {
        "supervise serve (SQLite, fsync)"
    };
    // One receiver at a time: the service may still be working through what
    // it stored when its runs end, and must not take the machine from the
    // next receiver's runs.
    type Start<'a> = Box<dyn Fn() -> Option<Child> + 'a>;
    let targets: [(&str, u16, Start); 2] = [
        (
            store,
            sp,
            Box::new(|| Some(start_serve(sp, &tmp.path().join("load.db")))),
        ),
        (
            "Node @octokit/webhooks (no storage)",
            np,
            Box::new(move || start_node(np)),
        ),
    ];
    for (name, port, start) in targets {
        let Some(server) = start() else { continue };
        let pid = server.id();
        let _server = Servers(vec![server]);
        wait_port(port).await;
        load(
            port,
            4,
            Some(200.0),
            Duration::from_secs(1),
            9_000_000 + base,
        )
        .await; // warm-up
        base += 100_000;
        let fixed = load(port, 8, Some(500.0), dur, base).await;
        println!("{}", fixed.line(name, "500/s fixed, 8 conns"));
        base += 100_000;
        // A receiver's maximum rate is its best at any number of clients: a
        // single-threaded one tops out with few, one that batches its
        // commits needs more in flight to fill a batch.
        for conns in max_conns() {
            // The service's own figures, around its run.
            let before = if port == sp {
                Some(work(port).await)
            } else {
                None
            };
            let cpu = Cpu::now(pid);
            let max = load(port, conns, None, dur, base).await;
            println!("{}", max.line(name, &format!("max, {conns} conns")));
            let mut said = cpu.line(&Cpu::now(pid), max.secs, max.sent);
            if let Some(before) = before {
                said = format!("{said}; {}", before.line(&work(port).await, max.secs));
            }
            println!("|  | {said} |  |  |");
            base += 1_000_000;
        }
        if port == sp {
            // What was stored beyond what the workers could keep up with
            // waits in the store; how long it takes them to catch up.
            let ended = Instant::now();
            let (done, stored) = processed(port).await;
            println!("|  | processed by the end of its runs | {done:.0} of {stored:.0} |  |  |");
            if done < stored {
                let mut left = stored - done;
                while left > 0.0 && ended.elapsed() < Duration::from_secs(120) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let (done, stored) = processed(port).await;
                    left = stored - done;
                }
                println!(
                    "|  | {} | {:.1} s after |  |  |",
                    if left > 0.0 {
                        "still not all processed"
                    } else {
                        "all processed"
                    },
                    ended.elapsed().as_secs_f64()
                );
            }
        }
    }
}
