//! How long a real delivery waits, and how much memory the service holds,
//! while hostile clients do their worst — the figures the tests in
//! `tests/serve_hostile.rs` only print, since a test asserts what happens,
//! not how fast. Three attacks, each on a fresh `supervise serve` against the
//! fake GitHub, each with `BENCH_DELIVERIES` real deliveries (8) sent one
//! after another while it goes on:
//!
//! 1. **Idle flood** — 1,100 idle sockets (as many as this process's
//!    descriptors allow), five clients sending headers a byte every half
//!    second, ten unsigned 20 MiB bodies that send 1 MiB and stall.
//! 2. **Trickle** — `BENCH_TRICKLE` unsigned connections (800) each sending
//!    a 1 MiB body at 20 KiB a second, just above the rate floor, from when
//!    they hold the whole 32 MiB pool for bodies not yet verified.
//! 3. **At the connection cap** — the service with a soft limit of 320
//!    descriptors (a cap of 64 connections) and 300 idle sockets.
//!
//! For each: the median and slowest acknowledgement, how many were refused,
//! and the service's resident memory at the end.
//!
//! Run: `cargo bench --bench hostile_clients`.

use std::time::{Duration, Instant};
use support::hostile::{
    metric, room_for, rss_mib, slow_headers, stalled_bodies, start, start_with_files, trickle,
    Served, REPO,
};
use tokio::net::TcpStream;

#[path = "../tests/support/mod.rs"]
mod support;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Sends the real deliveries one after another; prints how they fared.
async fn deliveries(s: &Served, attack: &str) {
    let mut took = Vec::new();
    let mut refused = 0;
    for _ in 0..env_or("BENCH_DELIVERIES", 8) {
        let began = Instant::now();
        let (_, statuses) = s
            .fake
            .comment(REPO, 1, "mia", "/supervise status", false)
            .await;
        took.push(began.elapsed());
        refused += statuses.iter().filter(|c| **c != 202).count();
    }
    took.sort();
    println!(
        "{attack:<24} acknowledged: median {:>8.1?}  slowest {:>8.1?}  refused {refused}/{}  serve RSS {} MiB",
        took[took.len() / 2],
        took[took.len() - 1],
        took.len(),
        rss_mib(s.serve.id())
    );
}

async fn idle(port: u16, n: u64) -> Vec<TcpStream> {
    let mut open = Vec::new();
    for _ in 0..n {
        if let Ok(c) = TcpStream::connect(("127.0.0.1", port)).await {
            open.push(c);
        }
    }
    open
}

async fn idle_flood() {
    let s = start().await;
    let port = s.port;
    let sockets = idle(port, room_for(1100)).await;
    let slow = slow_headers(port, 5);
    let stalled = stalled_bodies(port, 10);
    deliveries(&s, &format!("idle flood ({})", sockets.len())).await;
    slow.iter().for_each(|t| t.abort());
    stalled.iter().for_each(|t| t.abort());
}

async fn trickling() {
    let s = start().await;
    let n = room_for(env_or("BENCH_TRICKLE", 800));
    let bodies = trickle(s.port, n, 20);
    let began = Instant::now();
    while metric(s.port, "supervise_unverified_body_kib{pool=\"small\"}").await < 31.0 * 1024.0 {
        if began.elapsed() > Duration::from_secs(30) {
            println!("trickle: the pool never filled; these figures are not of a full pool");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    deliveries(&s, &format!("trickle ({n} × 20 KiB/s)")).await;
    let cut = metric(s.port, "supervise_unverified_bodies_cut_total").await;
    println!("{:<24} trickling bodies cut off for faster ones: {cut}", "");
    for b in bodies {
        b.abort();
    }
}

async fn at_the_cap() {
    let s = start_with_files(Some(320)).await;
    let sockets = idle(s.port, 300).await;
    deliveries(&s, &format!("cap 64, {} idle", sockets.len())).await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    idle_flood().await;
    trickling().await;
    at_the_cap().await;
}
