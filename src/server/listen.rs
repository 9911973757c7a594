//! The HTTP listener of `supervise serve`: it owns what a hostile client could
//! exhaust. Connections are capped below the descriptor limit; at the cap a
//! new connection is still accepted and the connection idle longest (one
//! between requests, or one that has not finished sending its headers) is
//! closed for it, so idle sockets cannot keep a real delivery out — only
//! when every connection is in the middle of a request does the listener
//! wait, and then what waits is the kernel's backlog, not our memory. One
//! that has begun no request is dropped at once, half-sent headers and all. A
//! client has `header_timeout` to send a request's headers — which also
//! closes a keep-alive connection idle that long; and on shutdown the
//! listener stops accepting, lets requests in progress finish within a grace
//! period, and returns.

use crate::sync::LockExt;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Time to send a request's headers, and the longest keep-alive idle.
    pub header_timeout: Duration,
    /// How long requests in progress may take to finish after shutdown begins.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// Raises this process's soft limit on open files to its hard limit (as Go's
/// runtime does) and returns the connection cap that leaves room under it for
/// the database, GitHub calls and files.
pub fn connection_cap() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    let soft = usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX);
    soft.saturating_sub(256).clamp(64, 16_384)
}

/// One open connection, as the listener sees it: whether a request is in
/// progress on it, and since when it has been idle.
struct Conn {
    /// Requests in progress (HTTP/1.1: 0 or 1).
    busy: AtomicUsize,
    /// When it last became idle (accepted, or a request answered), in
    /// milliseconds since the listener started.
    idle_since: AtomicU64,
    /// Told to close (it is the idle one a new connection replaces).
    close: Notify,
}

/// The open connections, for choosing one to close at the cap.
#[derive(Default)]
struct Conns {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
}

impl Conns {
    /// Tells the connection idle longest to close; false if every one is busy.
    fn close_idlest(&self) -> bool {
        let open = self.open.locked();
        let idlest = open
            .values()
            .filter(|c| c.busy.load(Ordering::SeqCst) == 0)
            .min_by_key(|c| c.idle_since.load(Ordering::SeqCst));
        match idlest {
            Some(c) => {
                // Marked busy so the next choice is another one.
                c.busy.fetch_add(1, Ordering::SeqCst);
                c.close.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Serves `app` until `shutdown` completes, then drains within the grace period.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let cap = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(cap));
    // Told to every connection when shutdown begins.
    let (stopping, stop_seen) = tokio::sync::watch::channel(false);
    let conns = Arc::new(Conns::default());
    let epoch = std::time::Instant::now();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors (EMFILE) or a connection reset before
                    // accept: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed; pausing briefly");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // A free place, or — at the cap — the place of the connection idle
        // longest, which is told to close; with every connection busy, the
        // new one waits for a place (and the next ones in the backlog).
        let slot = loop {
            if let Ok(s) = slots.clone().try_acquire_owned() {
                break Some(s);
            }
            if conns.close_idlest() {
                metrics::counter!("supervise_connections_replaced_total").increment(1);
            }
            tokio::select! {
                s = slots.clone().acquire_owned() => break s.ok(),
                // Another may have become idle meanwhile.
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
                () = &mut shutdown => break None,
            }
        };
        let Some(slot) = slot else { break };
        let _ = stream.set_nodelay(true);
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_buf_size(64 * 1024);
        let id = conns.next.fetch_add(1, Ordering::SeqCst);
        let now_ms = |e: std::time::Instant| e.elapsed().as_millis() as u64;
        let state = Arc::new(Conn {
            busy: AtomicUsize::new(0),
            idle_since: AtomicU64::new(now_ms(epoch)),
            close: Notify::new(),
        });
        conns.open.locked().insert(id, state.clone());
        let service = TrackIdle {
            inner: app.clone(),
            state: state.clone(),
            epoch,
        };
        let conn =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let conns = conns.clone();
        let mut stop_seen = stop_seen.clone();
        tokio::spawn(async move {
            tokio::pin!(conn);
            // Replaced at the cap, or shutdown: a request in progress
            // finishes first, an idle connection closes at once.
            let ended = tokio::select! {
                r = conn.as_mut() => Ended::Done(r),
                () = state.close.notified() => Ended::Replaced,
                _ = stop_seen.wait_for(|s| *s) => Ended::Stopping,
            };
            let result = match ended {
                Ended::Done(r) => r,
                // Replaced with no request begun since it was chosen (the
                // only mark on it is the chooser's): dropped now. A graceful
                // shutdown would wait out the header timeout of a socket
                // that sent half a request's headers, and an attacker who
                // keeps a cap's worth of those would keep deliveries out.
                Ended::Replaced if state.busy.load(Ordering::SeqCst) == 1 => Ok(()),
                Ended::Replaced | Ended::Stopping => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            conns.open.locked().remove(&id);
            drop(slot);
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    // Every connection's place back means every connection has ended.
    tokio::select! {
        _ = slots.acquire_many(cap as u32) => {}
        () = tokio::time::sleep(limits.shutdown_grace) => {
            tracing::warn!("connections still open after the shutdown grace; closing them");
        }
    }
}

/// How a connection's task came to end it.
enum Ended<R> {
    /// It ended by itself (the client closed, or an error).
    Done(R),
    /// Chosen to make room at the cap.
    Replaced,
    /// The listener is shutting down.
    Stopping,
}

/// The app, noting on its connection that a request is in progress, until
/// its answer is ready: the connection is idle again from then.
#[derive(Clone)]
struct TrackIdle<S> {
    inner: S,
    state: Arc<Conn>,
    epoch: std::time::Instant,
}

impl<S, B> tower::Service<http::Request<B>> for TrackIdle<S>
where
    S: tower::Service<http::Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        self.state.busy.fetch_add(1, Ordering::SeqCst);
        let fut = self.inner.call(req);
        let (state, epoch) = (self.state.clone(), self.epoch);
        Box::pin(async move {
            let r = fut.await;
            state
                .idle_since
                .store(epoch.elapsed().as_millis() as u64, Ordering::SeqCst);
            state.busy.fetch_sub(1, Ordering::SeqCst);
            r
        })
    }
}
