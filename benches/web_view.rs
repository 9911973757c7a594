//! The web view's costs, measured on `supervise web` (the real binary, as a
//! person runs it) over an operation of 100 units × 10 sprints whose log
//! holds 2,000 events, and on the rendering alone:
//! - the first byte of the operation's page (50 requests);
//! - an event's way to an open page: from the log's append to the update
//!   arriving on the page's event stream (100 events);
//! - 500 viewers watching the operation while 20 events arrive over 10 s:
//!   the CPU the server spends, as a share of one core.
//!
//! `cargo bench --bench web_view` prints the figures, then criterion times
//! the rendering.

use criterion::{criterion_group, criterion_main, Criterion};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use supervise::engine::{Event, OperationState};
use supervise::report::web;
use supervise::store::FileLedger;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "support/ops.rs"]
mod ops;
use ops::{layered_text, operation};

const HISTORY: usize = 2000;
const VIEWERS: usize = 500;

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// CPU seconds a process has used (user + system), from `/proc`.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

async fn get_first_byte(port: u16, path: &str) -> Duration {
    let start = Instant::now();
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut one = [0u8; 1];
    s.read_exact(&mut one).await.unwrap();
    let first = start.elapsed();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    first
}

/// An open event stream: reads until `n` updates have arrived.
struct Stream(tokio::net::TcpStream, Vec<u8>);

impl Stream {
    async fn open(port: u16, path: &str) -> Stream {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        Stream(s, Vec::new())
    }

    /// Waits for the next `event: update`.
    async fn next_update(&mut self) {
        let mut buf = [0u8; 65536];
        loop {
            if let Some(i) = find(&self.1, b"event: update") {
                // Keep what follows this update's marker.
                self.1.drain(..i + 13);
                return;
            }
            let n = self.0.read(&mut buf).await.unwrap();
            assert!(n > 0, "the stream closed");
            self.1.extend_from_slice(&buf[..n]);
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn measure_server(plan_text: &str, log: &[Event]) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("EXECUTION_PLAN.md"), plan_text).unwrap();
    std::fs::create_dir_all(dir.path().join(".supervise")).unwrap();
    let mut ledger = FileLedger::new(&dir.path().join(".supervise"));
    for chunk in log[..HISTORY].chunks(4) {
        ledger.append(chunk, &[], None).unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_supervise"))
        .args(["web", "--port", "0", "--plan"])
        .arg(dir.path().join("EXECUTION_PLAN.md"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let port: u16 = first
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let id = OperationState::replay(&log[..HISTORY]).unwrap().id.0;
    let mut next = HISTORY;
    rt.block_on(async {
        // The page exists once the log has been read.
        while get_first_byte(port, &format!("/api/v1/operations/{id}")).await > Duration::from_secs(5) {}
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut firsts = Vec::new();
        for _ in 0..50 {
            firsts.push(get_first_byte(port, &format!("/ops/{id}")).await);
        }
        println!(
            "first byte of the operation page (100 units × 10 sprints, {HISTORY} events): median {:?}, p95 {:?}",
            percentile(firsts.clone(), 0.5),
            percentile(firsts, 0.95)
        );
        let mut s = Stream::open(port, &format!("/api/v1/operations/{id}/events?z=gzip")).await;
        s.next_update().await;
        let mut lat = Vec::new();
        for _ in 0..100 {
            let start = Instant::now();
            ledger.append(&log[next..next + 1], &[], None).unwrap();
            next += 1;
            s.next_update().await;
            lat.push(start.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!(
            "event to page update (append to the log → update on the stream): median {:?}, p95 {:?}",
            percentile(lat.clone(), 0.5),
            percentile(lat, 0.95)
        );
        let mut viewers = Vec::new();
        for _ in 0..VIEWERS {
            let mut s = Stream::open(port, &format!("/api/v1/operations/{id}/events?z=gzip")).await;
            viewers.push(tokio::spawn(async move {
                loop {
                    s.next_update().await;
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (cpu0, t0) = (cpu_secs(child.id()), Instant::now());
        for _ in 0..20 {
            ledger.append(&log[next..next + 1], &[], None).unwrap();
            next += 1;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let (cpu, wall) = (cpu_secs(child.id()) - cpu0, t0.elapsed().as_secs_f64());
        println!(
            "{VIEWERS} viewers, 20 events in {wall:.1} s: the server used {cpu:.2} s of CPU, {:.1}% of one core",
            100.0 * cpu / wall
        );
        for v in viewers {
            v.abort();
        }
    });
    let _ = child.kill();
    let _ = child.wait();
}

fn bench(c: &mut Criterion) {
    let text = layered_text("Pages", 100, 10, 10);
    let plan = supervise::plan::parse(&text, "pages").unwrap();
    let mut log = Vec::new();
    operation(&plan, 3, Some(&mut log));
    assert!(log.len() > HISTORY + 200, "{} events", log.len());
    measure_server(&text, &log);
    let st = OperationState::replay(&log[..HISTORY]).unwrap();
    let now = st.updated_at;
    let origin = web::Origin::local();
    let live = web::live_fragment(&st, &origin, now);
    println!(
        "the page's live part: {} bytes, of which the timeline {} and the decision log {}",
        live.len(),
        web::gantt::gantt_svg(&st, now).len(),
        live.len() - live.find("id=\"log\"").unwrap_or(live.len())
    );
    let mut g = c.benchmark_group("web_view");
    g.bench_function("operation_page_100x10_2000_events", |b| {
        b.iter(|| web::operation_page(&st, &origin, &web::Viewer::default(), now).len())
    });
    g.bench_function("gantt_svg_100x10", |b| {
        b.iter(|| web::gantt::gantt_svg(&st, now).len())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
