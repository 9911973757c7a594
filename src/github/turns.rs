//! How many calls to GitHub may be in flight at once: per installation, and
//! in all.
//!
//! GitHub refuses more than 100 concurrent requests of one client (its
//! secondary rate limit, shared by REST and GraphQL), and a service with many
//! operations of one installation reaches that in a burst: every operation's
//! tick asks at once. In all, each call in flight holds a connection with its
//! read buffer and the answer's body; at 1,000 operations the bursts, not the
//! steady work, set the service's memory. A call waits for its turn instead,
//! which costs it a little latency and no request.

use crate::sync::LockExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The most calls of one installation in flight: well under GitHub's 100,
/// so that two replicas, and the Action's own calls, stay under it too.
pub const PER_INSTALLATION: usize = 16;
/// The most calls in flight in all.
pub const IN_ALL: usize = 64;

pub struct Turns {
    all: Arc<Semaphore>,
    per_installation: usize,
    installations: Mutex<HashMap<u64, Arc<Semaphore>>>,
}

/// One call's turn: it is in flight until this is dropped.
pub struct Turn {
    _installation: Option<OwnedSemaphorePermit>,
    _all: Option<OwnedSemaphorePermit>,
}

impl Turns {
    pub fn new(per_installation: usize, in_all: usize) -> Turns {
        Turns {
            all: Arc::new(Semaphore::new(in_all.max(1))),
            per_installation: per_installation.max(1),
            installations: Mutex::new(HashMap::new()),
        }
    }

    /// Waits until a call of `installation` may go. The installation's turn
    /// is taken first: an installation at its own cap never holds a turn of
    /// the whole service that another installation could use.
    pub async fn take(&self, installation: u64) -> Turn {
        let mine = self
            .installations
            .locked()
            .entry(installation)
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_installation)))
            .clone();
        // The semaphores are never closed, so these never fail; were one
        // to, the call goes without waiting rather than not at all.
        let installation = mine.acquire_owned().await.ok();
        let all = self.all.clone().acquire_owned().await.ok();
        Turn {
            _installation: installation,
            _all: all,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Whether `take` is still waiting after a moment.
    async fn waits(turns: &Turns, installation: u64) -> bool {
        tokio::time::timeout(Duration::from_millis(50), turns.take(installation))
            .await
            .is_err()
    }

    #[tokio::test]
    async fn an_installation_at_its_cap_waits_and_others_go_on() {
        let turns = Turns::new(2, 3);
        let a1 = turns.take(1).await;
        let _a2 = turns.take(1).await;
        assert!(
            waits(&turns, 1).await,
            "a third call of installation 1 went"
        );
        let _b1 = turns.take(2).await;
        drop(a1);
        let _a3 = turns.take(1).await;
    }

    #[tokio::test]
    async fn the_service_cap_holds_across_installations() {
        let turns = Turns::new(2, 3);
        let held: Vec<Turn> = vec![
            turns.take(1).await,
            turns.take(2).await,
            turns.take(3).await,
        ];
        assert!(waits(&turns, 4).await, "a fourth call in all went");
        drop(held);
        let _d = turns.take(4).await;
    }

    #[tokio::test]
    async fn a_turn_given_back_by_a_call_that_gave_up_is_not_lost() {
        let turns = Turns::new(1, 1);
        let held = turns.take(1).await;
        // A call that stops waiting (its caller timed out) takes no turn.
        assert!(waits(&turns, 1).await);
        drop(held);
        let _again = turns.take(1).await;
    }
}
