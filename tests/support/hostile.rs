//! Hostile HTTP clients against `supervise serve`, shared by the tests that
//! hold it to its promises under attack and the benchmark that measures it
//! there: idle sockets, bodies that trickle in, and the service started with
//! few descriptors.

use super::{free_port, get, wait_listening};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const REPO: &str = "acme/shop";

pub struct Served {
    pub fake: std::sync::Arc<fake_github::FakeGitHub>,
    pub serve: std::process::Child,
    pub port: u16,
    _db: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.serve.kill();
        let _ = self.serve.wait();
    }
}

/// The service on a fresh store, with a repository and a maintainer.
pub async fn start() -> Served {
    start_with_files(None).await
}

/// The service, with at most `open_files` descriptors when given (its soft
/// and hard limit, as `ulimit -n` sets them).
pub async fn start_with_files(open_files: Option<u64>) -> Served {
    use std::os::unix::process::CommandExt;
    let port = free_port();
    let fake = super::fake_github(Some(port), None).await;
    fake.ensure_repo(REPO);
    fake.add_user("mia", "maintain", "User");
    let db = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", db.path().join("s.db").display());
    let mut cmd = super::serve_command(port, &fake.url(), &url, &[]);
    if let Some(n) = open_files {
        // SAFETY: setrlimit only, between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let serve = cmd.spawn().unwrap();
    wait_listening(port).await;
    Served {
        fake,
        serve,
        port,
        _db: db,
    }
}

/// The resident memory of process `pid`, in MiB.
pub fn rss_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

/// Raises this test's own open-file limit so it can hold the flood.
pub fn room_for(sockets: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    sockets.min(lim.rlim_cur.saturating_sub(300))
}

/// The status code of an HTTP answer's first line.
pub fn status_of(answer: &[u8]) -> Option<u16> {
    String::from_utf8_lossy(answer)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A sample's value on `/metrics` (0 when it is not there).
pub async fn metric(port: u16, sample: &str) -> f64 {
    get(port, "/metrics")
        .await
        .1
        .lines()
        .find_map(|l| l.strip_prefix(sample))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// `n` unsigned connections, each declaring a 1 MiB body and sending it at
/// `kib_per_sec`; each ends with the status the service answered (`None`:
/// not connected, or reset before the answer could be read).
pub fn trickle(port: u16, n: u64, kib_per_sec: u64) -> Vec<tokio::task::JoinHandle<Option<u16>>> {
    (0..n)
        .map(|i| {
            tokio::spawn(async move {
                let mut c = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
                let head = format!(
                    "POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: issue_comment\r\n\
                     X-GitHub-Delivery: trickle-{i}\r\nContent-Length: {}\r\n\r\n",
                    1024 * 1024
                );
                c.write_all(head.as_bytes()).await.ok()?;
                let mut every =
                    tokio::time::interval(Duration::from_millis(1000 / kib_per_sec.max(1)));
                let mut buf = [0u8; 64];
                loop {
                    tokio::select! {
                        _ = every.tick() => {
                            if c.write_all(&[b'x'; 1024]).await.is_err() {
                                // Cut off: the answer may still be readable.
                                let n = c.read(&mut buf).await.ok()?;
                                return status_of(&buf[..n]);
                            }
                        }
                        n = c.read(&mut buf) => return status_of(&buf[..n.ok()?]),
                    }
                }
            })
        })
        .collect()
}

/// `n` clients that send a request's headers a byte every half second.
pub fn slow_headers(port: u16, n: usize) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|i| {
            tokio::spawn(async move {
                let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)).await else {
                    return;
                };
                for b in format!("POST /webhook HTTP/1.1\r\nX-Slow: {i}").bytes() {
                    if c.write_all(&[b]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            })
        })
        .collect()
}

/// `n` unsigned connections that declare a 20 MiB body, send 1 MiB of it
/// and stall; each ends with the status the service answered within 40 s.
pub fn stalled_bodies(port: u16, n: usize) -> Vec<tokio::task::JoinHandle<Option<u16>>> {
    (0..n)
        .map(|_| {
            tokio::spawn(async move {
                let mut c = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
                let head = format!(
                    "POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: issue_comment\r\n\
                     X-GitHub-Delivery: big\r\nContent-Length: {}\r\n\r\n",
                    20 * 1024 * 1024
                );
                c.write_all(head.as_bytes()).await.ok()?;
                let _ = c.write_all(&vec![b'x'; 1024 * 1024]).await;
                let mut buf = [0u8; 64];
                let n = tokio::time::timeout(Duration::from_secs(40), c.read(&mut buf))
                    .await
                    .ok()?
                    .ok()?;
                status_of(&buf[..n])
            })
        })
        .collect()
}
