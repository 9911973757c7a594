//! Deciding a recorded operation again. Each record of the log keeps, with
//! the events the engine decided, what it decided them from (the input and
//! the time it was given: the [`Cause`]). The engine being pure, the same
//! cause on the same state must give the same events; a replay shows each
//! decision with its reason, and says where today's engine would have
//! decided otherwise (after an upgrade, say). The state always goes on from
//! the recorded events, which are what happened.

use super::decide::decide;
use super::events::{Event, Input, Refusal};
use super::state::{apply, DecisionEntry, OperationState};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a record was decided from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cause {
    pub input: Input,
    pub at: DateTime<Utc>,
}

/// One record of a log, as replay reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    pub seq: u64,
    /// Absent in logs written before causes were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    pub events: Vec<Event>,
}

/// How deciding a record again went.
#[derive(Debug, Clone, PartialEq)]
pub enum Again {
    /// The same events.
    Same,
    /// Other events, or a refusal where the record has events.
    Differs {
        replayed: Result<Vec<Event>, Refusal>,
    },
    /// No cause was kept: only applied.
    Unknown,
}

/// One step of a replay.
#[derive(Debug, Clone)]
pub struct Step {
    pub seq: u64,
    pub cause: Option<Cause>,
    pub again: Again,
    /// The decisions (with their reasons) this record logged.
    pub decisions: Vec<DecisionEntry>,
}

/// Replays `records` in order; `until` stops after that record (its
/// `seq`), leaving the state as it was then.
pub fn replay(records: &[Recorded], until: Option<u64>) -> (Vec<Step>, Option<OperationState>) {
    let mut state: Option<OperationState> = None;
    let mut steps = Vec::with_capacity(records.len());
    for r in records {
        if until.is_some_and(|u| r.seq > u) {
            break;
        }
        let again = match &r.cause {
            None => Again::Unknown,
            Some(c) => match decide(state.as_ref(), c.input.clone(), c.at) {
                Ok(d) if d.events == r.events => Again::Same,
                Ok(d) => Again::Differs {
                    replayed: Ok(d.events),
                },
                Err(refused) => Again::Differs {
                    replayed: Err(refused),
                },
            },
        };
        for e in &r.events {
            apply(&mut state, e);
        }
        steps.push(Step {
            seq: r.seq,
            cause: r.cause.clone(),
            again,
            decisions: r
                .events
                .iter()
                .filter_map(|e| match e {
                    Event::Decision { entry } => Some(entry.clone()),
                    _ => None,
                })
                .collect(),
        });
    }
    (steps, state)
}

impl Input {
    /// The input's kind, as its record names it (`agent_finished`, `tick`…).
    pub fn kind(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.get("input").and_then(|k| k.as_str()).map(String::from))
            .unwrap_or_else(|| "input".into())
    }
}
