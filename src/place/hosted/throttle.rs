//! How often one person's commands are acted on, decided before any call to
//! GitHub: every command costs calls (the person's role, the repository's
//! rules, a reaction, a reply) charged to the installation's rate limit, so
//! one account saying a thousand commands could pause every repository of
//! the installation for an hour. A bucket per person and repository: a
//! burst of [`BURST`], then one command per [`REFILL`]. What is over is
//! dropped unanswered (logged and counted), never queued.

use crate::sync::LockExt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Commands one person may say at once in one repository.
pub const BURST: f64 = 10.0;
/// Then one more each this long.
pub const REFILL: Duration = Duration::from_secs(6);
/// Buckets kept before the full ones are forgotten (a full bucket is the
/// same as none).
const KEPT: usize = 10_000;

#[derive(Default)]
pub struct CommandThrottle {
    buckets: Mutex<HashMap<(String, String), (f64, Instant)>>,
}

impl CommandThrottle {
    /// Whether `login`'s command in `repo` may be acted on now (taking one
    /// token when it may).
    pub fn admit(&self, repo: &str, login: &str, now: Instant) -> bool {
        let mut buckets = self.buckets.locked();
        if buckets.len() >= KEPT {
            buckets.retain(|_, (tokens, at)| {
                refilled(*tokens, now.saturating_duration_since(*at)) < BURST
            });
        }
        let (tokens, at) = buckets
            .entry((repo.to_string(), login.to_lowercase()))
            .or_insert((BURST, now));
        let have = refilled(*tokens, now.saturating_duration_since(*at));
        *at = now;
        if have >= 1.0 {
            *tokens = have - 1.0;
            true
        } else {
            *tokens = have;
            false
        }
    }
}

fn refilled(tokens: f64, since: Duration) -> f64 {
    (tokens + since.as_secs_f64() / REFILL.as_secs_f64()).min(BURST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_per_refill_per_person_and_repository() {
        let t = CommandThrottle::default();
        let start = Instant::now();
        let admitted = (0..1_249)
            .filter(|_| t.admit("acme/shop", "eve", start))
            .count();
        assert_eq!(admitted, BURST as usize, "a burst, then nothing");
        assert!(
            t.admit("acme/shop", "mia", start),
            "another person is not held"
        );
        assert!(
            t.admit("acme/web", "eve", start),
            "nor the same in another repository"
        );
        assert!(
            !t.admit("acme/shop", "EVE", start + REFILL / 2),
            "logins without case"
        );
        assert!(
            t.admit("acme/shop", "eve", start + REFILL),
            "one more after a refill"
        );
        assert!(!t.admit("acme/shop", "eve", start + REFILL));
    }
}
