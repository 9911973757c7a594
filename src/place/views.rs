//! What the places show of their operations to whoever watches (the web
//! view): the latest state of each operation, published by the place after
//! every step of its drive loop, read without touching the operation's own
//! lock — a page never waits on an operation that waits on GitHub. A
//! version counter that moves with every publication tells watchers to look.

use crate::engine::OperationState;
use crate::report::web::Origin;
use crate::sync::LockExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// The most operations kept for watchers; beyond it the oldest finished
/// ones are dropped (they are still in the store and in their reports).
const MAX_SHOWN: usize = 1000;

/// One operation as last published.
#[derive(Clone)]
pub struct Shown {
    pub state: Arc<OperationState>,
    pub origin: Origin,
}

#[derive(Default)]
pub struct Views {
    shown: Mutex<HashMap<String, Shown>>,
    changes: watch::Sender<u64>,
}

impl Views {
    pub fn new() -> Arc<Views> {
        Arc::new(Views::default())
    }

    /// Records `state` unless the same version is already shown. The runs
    /// already known for it are kept (see [`Views::set_runs`]).
    pub fn publish(&self, state: &Arc<OperationState>, origin: &Origin) {
        {
            let mut shown = self.shown.locked();
            let mut origin = origin.clone();
            if let Some(old) = shown.get(&state.id.0) {
                if origin.runs.is_empty() {
                    origin.runs = old.origin.runs.clone();
                }
                if old.state.version == state.version && old.origin == origin {
                    return;
                }
            }
            shown.insert(
                state.id.0.clone(),
                Shown {
                    // The operation's own state, shared, not a copy.
                    state: state.clone(),
                    origin,
                },
            );
            if shown.len() > MAX_SHOWN {
                let oldest = shown
                    .values()
                    .filter(|s| s.state.finished_at.is_some())
                    .min_by_key(|s| s.state.updated_at)
                    .map(|s| s.state.id.0.clone());
                if let Some(id) = oldest {
                    shown.remove(&id);
                }
            }
        }
        self.changes.send_modify(|v| *v += 1);
    }

    /// The Actions runs of an operation's dispatches, as the place learns
    /// them (by dispatch id): the decision log links to them.
    pub fn set_runs(&self, op: &str, runs: std::collections::BTreeMap<String, String>) {
        {
            let mut shown = self.shown.locked();
            let Some(s) = shown.get_mut(op) else {
                return;
            };
            if s.origin.runs == runs {
                return;
            }
            s.origin.runs = runs;
        }
        self.changes.send_modify(|v| *v += 1);
    }

    /// Every operation shown, newest first.
    pub fn all(&self) -> Vec<Shown> {
        let mut all: Vec<Shown> = self.shown.locked().values().cloned().collect();
        all.sort_by_key(|s| std::cmp::Reverse(s.state.started_at));
        all
    }

    pub fn get(&self, id: &str) -> Option<Shown> {
        self.shown.locked().get(id).cloned()
    }

    /// Moves with every publication.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}
