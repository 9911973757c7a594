//! What the benchmarks read of a process they started, and their settings
//! from the environment.
#![allow(dead_code)] // each benchmark uses what it needs

use std::time::Duration;

/// `name` from the environment, parsed, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The process's CPU time so far (user + system) and its resident memory
/// in bytes, from `/proc`.
pub fn usage(pid: u32) -> (Duration, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime: the 14th and 15th fields, 12th and 13th after ')';
    // USER_HZ is 100 on Linux.
    let cpu = Duration::from_millis((tick(11) + tick(12)) * 10);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (cpu, rss_kb * 1024)
}
