//! The memory for webhook bodies whose signature is not yet checked: who
//! holds how much of it, and who gives way when it is all taken.
//!
//! A body holds memory only for the bytes that have arrived. When a body
//! needs more than is free, room is made by cutting off the *slowest* body
//! that began arriving before it: GitHub sends a payload at once, so the
//! bodies that linger — just above the rate floor, on hundreds of sockets —
//! are an attacker's, and a real delivery never waits behind their bytes.
//! Only a body that is itself the oldest and slowest waits for room.

use crate::sync::LockExt;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A pool of memory, in KiB, shared by the bodies being read.
pub struct BodyBudget {
    state: Mutex<Pool>,
    /// Told whenever memory is given back.
    freed: Notify,
    next: AtomicU64,
}

struct Pool {
    free_kib: u64,
    /// The bodies being read, by arrival.
    readers: BTreeMap<u64, Holder>,
}

struct Holder {
    began: Instant,
    held_kib: u64,
    /// Told when this body is cut off to make room.
    cut: Arc<Notify>,
}

/// Why a body was given no more memory.
#[derive(Debug, PartialEq, Eq)]
pub enum NoRoom {
    /// Nothing could be freed within the wait.
    Busy,
    /// This body was cut off for a faster one.
    Cut,
}

impl BodyBudget {
    pub fn new(kib: u64) -> BodyBudget {
        BodyBudget {
            state: Mutex::new(Pool {
                free_kib: kib,
                readers: BTreeMap::new(),
            }),
            freed: Notify::new(),
            next: AtomicU64::new(0),
        }
    }

    /// Memory held by bodies being read now, in KiB.
    pub fn held_kib(&self) -> u64 {
        self.state
            .locked()
            .readers
            .values()
            .map(|h| h.held_kib)
            .sum()
    }

    /// A body begins to arrive.
    pub fn enter(&self) -> Reader<'_> {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let cut = Arc::new(Notify::new());
        self.state.locked().readers.insert(
            seq,
            Holder {
                began: Instant::now(),
                held_kib: 0,
                cut: cut.clone(),
            },
        );
        Reader {
            budget: self,
            seq,
            cut,
        }
    }
}

/// One body's share of a [`BodyBudget`], given back when it is dropped.
pub struct Reader<'a> {
    budget: &'a BodyBudget,
    seq: u64,
    cut: Arc<Notify>,
}

impl Reader<'_> {
    /// Completes when this body has been cut off to make room for another.
    pub async fn cut_off(&self) {
        self.cut.notified().await
    }

    /// Holds enough memory for `bytes` in all, cutting off slower bodies that
    /// began before this one if need be, and waiting at most `wait` for the
    /// rest.
    pub async fn hold(&self, bytes: u64, wait: Duration) -> Result<(), NoRoom> {
        let until = Instant::now() + wait;
        loop {
            // Registered before looking, so a release between the look and
            // the wait is not missed.
            let freed = self.budget.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.try_hold(bytes.div_ceil(1024)) {
                Some(r) => return r,
                None if Instant::now() >= until => return Err(NoRoom::Busy),
                None => {}
            }
            tokio::select! {
                () = freed => {}
                // Cut off while waiting: its memory is given back already.
                () = self.cut_off() => return Err(NoRoom::Cut),
                () = tokio::time::sleep_until(until) => return Err(NoRoom::Busy),
            }
        }
    }

    /// `None`: not enough room yet, and nobody left to cut off.
    fn try_hold(&self, kib: u64) -> Option<Result<(), NoRoom>> {
        let mut pool = self.budget.state.locked();
        let Some(me) = pool.readers.get(&self.seq) else {
            return Some(Err(NoRoom::Cut));
        };
        let need = kib.saturating_sub(me.held_kib);
        let now = Instant::now();
        let mut cut = 0;
        while pool.free_kib < need {
            // The slowest of those that began before this body, by bytes a
            // second so far.
            let rate = |h: &Holder| {
                h.held_kib as f64 / now.duration_since(h.began).as_secs_f64().max(0.001)
            };
            let slowest = pool
                .readers
                .range(..self.seq)
                .filter(|(_, h)| h.held_kib > 0)
                .min_by(|a, b| rate(a.1).total_cmp(&rate(b.1)))
                .map(|(seq, _)| *seq);
            let Some(victim) = slowest else {
                drop(pool);
                // What the cut-off bodies gave back is there for others.
                if cut > 0 {
                    self.budget.freed.notify_waiters();
                }
                return None;
            };
            let gone = pool.readers.remove(&victim).expect("just found");
            pool.free_kib += gone.held_kib;
            gone.cut.notify_one();
            cut += 1;
            metrics::counter!("supervise_unverified_bodies_cut_total").increment(1);
        }
        pool.free_kib -= need;
        pool.readers
            .get_mut(&self.seq)
            .expect("looked up above")
            .held_kib += need;
        let room_left = pool.free_kib > 0;
        drop(pool);
        if cut > 0 && room_left {
            self.budget.freed.notify_waiters();
        }
        Some(Ok(()))
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        let mut pool = self.budget.state.locked();
        // A body cut off gave its memory back when it was cut.
        if let Some(h) = pool.readers.remove(&self.seq) {
            pool.free_kib += h.held_kib;
            drop(pool);
            self.budget.freed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_newer_body_cuts_off_the_slowest_older_one() {
        let budget = BodyBudget::new(100);
        let slow = budget.enter();
        slow.hold(40 * 1024, Duration::ZERO).await.unwrap();
        // 40 KiB over at least 50 ms, against 60 KiB at once.
        std::thread::sleep(Duration::from_millis(50));
        let fast_old = budget.enter();
        fast_old.hold(60 * 1024, Duration::ZERO).await.unwrap();
        assert_eq!(budget.held_kib(), 100);
        let new = budget.enter();
        new.hold(30 * 1024, Duration::ZERO).await.unwrap();
        // The slow one (40 KiB over a second) gave way, not the fast one.
        assert_eq!(slow.hold(41 * 1024, Duration::ZERO).await, Err(NoRoom::Cut));
        assert_eq!(fast_old.hold(60 * 1024, Duration::ZERO).await, Ok(()));
        assert_eq!(budget.held_kib(), 90);
        drop(slow);
        assert_eq!(budget.held_kib(), 90, "a body cut off gave back only once");
    }

    #[tokio::test]
    async fn the_oldest_body_waits_for_room_and_cuts_off_nobody() {
        let budget = BodyBudget::new(10);
        let old = budget.enter();
        let young = budget.enter();
        young.hold(10 * 1024, Duration::ZERO).await.unwrap();
        assert_eq!(
            old.hold(1024, Duration::from_millis(50)).await,
            Err(NoRoom::Busy)
        );
        assert_eq!(young.hold(10 * 1024, Duration::ZERO).await, Ok(()));
        // Room given back reaches the one waiting.
        let (waited, ()) = tokio::join!(old.hold(1024, Duration::from_secs(5)), async move {
            tokio::task::yield_now().await;
            drop(young);
        });
        assert_eq!(waited, Ok(()));
        drop(old);
        assert_eq!(budget.held_kib(), 0);
    }

    #[tokio::test]
    async fn a_body_waiting_for_room_is_told_at_once_when_it_is_cut_off() {
        let budget = BodyBudget::new(10);
        let waiting = budget.enter();
        let big = budget.enter();
        waiting.hold(2 * 1024, Duration::ZERO).await.unwrap();
        big.hold(8 * 1024, Duration::ZERO).await.unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let newest = budget.enter();
        let (waited, ()) = tokio::join!(
            // Oldest: it cuts nobody and waits, up to a minute.
            tokio::time::timeout(
                Duration::from_secs(30),
                waiting.hold(4 * 1024, Duration::from_secs(60))
            ),
            async {
                tokio::task::yield_now().await;
                newest.hold(3 * 1024, Duration::ZERO).await.unwrap();
            }
        );
        assert_eq!(waited.expect("told, not left waiting"), Err(NoRoom::Cut));
        // The slowest (2 KiB over 20 ms) went first; 1 more KiB took the next.
        assert_eq!(budget.held_kib(), 3);
    }
}
