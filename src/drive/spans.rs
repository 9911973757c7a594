//! One operation's trace, read from its log as it is written: a root span
//! for the operation, a span per attempt (unit, sprint, model, attempt,
//! outcome, turns, tokens, dollars) and a span per wait (a cap above the
//! operation, the model provider). The ids come from [`crate::otlp`], so
//! each replica of the service, the agent workflow's jobs and an agent that
//! reads `TRACEPARENT` name the same trace and parent without being told.
//! Names follow OpenTelemetry's conventions where one exists (`gen_ai.*`
//! for the model an agent ran on); the rest are `supervise.*` (see the
//! guide's Observability page).

use crate::engine::{AttemptRecord, Event, HoldKind, OperationState, OverallStatus};
use crate::otlp::{attempt_span, root_span, span_id, trace_id, Span, Value};
use chrono::{DateTime, Utc};
use std::collections::HashMap;

/// Reads events in order and gives each span once it has ended. The
/// operation's names, models and prices are read from its state, as it is
/// once the event is applied; only the waits under way are kept here.
#[derive(Debug, Default)]
pub struct Spans {
    /// Waits begun and not yet over, by (unit, sprint).
    held: HashMap<(usize, usize), (DateTime<Utc>, HoldKind, String)>,
}

impl Spans {
    /// The spans `event` ends; `st` is the operation with it applied.
    pub fn push(&mut self, st: &OperationState, event: &Event) -> Vec<Span> {
        match event {
            Event::DispatchHeld {
                unit,
                sprint,
                hold,
                at,
            } => {
                self.held
                    .entry((*unit, *sprint))
                    .or_insert((*at, hold.kind, hold.reason.clone()));
                Vec::new()
            }
            Event::DispatchReleased { unit, sprint, at } => self
                .held
                .remove(&(*unit, *sprint))
                .map(|(from, kind, reason)| {
                    let kind = format!("{kind:?}").to_lowercase();
                    wait(st, *unit, *sprint, from, *at, kind, reason)
                })
                .into_iter()
                .collect(),
            Event::ProviderWait {
                unit,
                sprint,
                status,
                until,
                at,
            } => {
                let why = status.map_or("no answer".to_string(), |s| format!("HTTP {s}"));
                vec![wait(
                    st,
                    *unit,
                    *sprint,
                    *at,
                    *until,
                    "provider".into(),
                    why,
                )]
            }
            Event::AttemptClosed {
                unit,
                sprint,
                record,
            } => vec![attempt(st, *unit, *sprint, record)],
            Event::Overall { to, reason, at } if ended(*to) => {
                let op = st.id.to_string();
                vec![Span {
                    trace_id: trace_id(&op),
                    span_id: root_span(&op),
                    parent: None,
                    name: "supervise.operation".into(),
                    client: false,
                    start: st.started_at,
                    end: *at,
                    attributes: vec![
                        ("supervise.operation.id", Value::Str(op.clone())),
                        ("supervise.operation.name", Value::Str(st.name.clone())),
                        ("supervise.operation.status", Value::Str(to.to_string())),
                    ],
                    error: matches!(to, OverallStatus::Blocked | OverallStatus::Killed)
                        .then(|| reason.clone()),
                }]
            }
            _ => Vec::new(),
        }
    }
}

/// A unit's name and a sprint's id, by their indices.
fn names(st: &OperationState, unit: usize, sprint: usize) -> (String, String) {
    let u = st.plan.work_units.get(unit);
    (
        u.map_or(unit.to_string(), |u| u.name.clone()),
        u.and_then(|u| u.sprints.get(sprint))
            .map_or((sprint + 1).to_string(), |s| s.id.to_string()),
    )
}

fn wait(
    st: &OperationState,
    unit: usize,
    sprint: usize,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    kind: String,
    reason: String,
) -> Span {
    let op = st.id.to_string();
    let (u, s) = names(st, unit, sprint);
    Span {
        trace_id: trace_id(&op),
        span_id: span_id(&format!("wait {op} {unit} {sprint} {from}")),
        parent: Some(root_span(&op)),
        name: "supervise.wait".into(),
        client: false,
        start: from,
        end: to.max(from),
        attributes: vec![
            ("supervise.unit", Value::Str(u)),
            ("supervise.sprint", Value::Str(s)),
            ("supervise.wait.kind", Value::Str(kind)),
            ("supervise.wait.reason", Value::Str(reason)),
        ],
        error: None,
    }
}

fn attempt(st: &OperationState, unit: usize, sprint: usize, r: &AttemptRecord) -> Span {
    let op = st.id.to_string();
    let (u, s) = names(st, unit, sprint);
    let mut attributes = vec![
        ("gen_ai.operation.name", Value::Str("invoke_agent".into())),
        (
            "gen_ai.request.model",
            Value::Str(st.config.model_id(r.tier).to_string()),
        ),
        ("supervise.unit", Value::Str(u)),
        ("supervise.sprint", Value::Str(s)),
        ("supervise.attempt", Value::Int(i64::from(r.attempt))),
        ("supervise.dispatch", Value::Str(r.dispatch.to_string())),
        ("supervise.tier", Value::Str(r.tier.as_str().into())),
        (
            "supervise.dispatch.kind",
            Value::Str(format!("{:?}", r.kind).to_lowercase()),
        ),
        ("supervise.outcome", Value::Str(r.outcome.clone())),
    ];
    if let Some(t) = r.turns {
        attributes.push(("supervise.turns", Value::Int(i64::from(t))));
    }
    if let Some(u) = &r.usage {
        let n = |v: u64| Value::Int(i64::try_from(v).unwrap_or(i64::MAX));
        attributes.push(("gen_ai.usage.input_tokens", n(u.tokens_in())));
        attributes.push(("gen_ai.usage.output_tokens", n(u.output_tokens)));
    }
    // The figure every other view of the money shows.
    if let Some(usd) = st.attempt_dollars(r) {
        attributes.push((
            "supervise.cost_usd",
            Value::Float(usd.micros() as f64 / 1e6),
        ));
    }
    Span {
        trace_id: trace_id(&op),
        span_id: attempt_span(&r.dispatch.0),
        parent: Some(root_span(&op)),
        name: "invoke_agent".into(),
        client: false,
        start: r.dispatched_at,
        end: r.finished_at.max(r.dispatched_at),
        attributes,
        error: None,
    }
}

fn ended(to: OverallStatus) -> bool {
    !matches!(to, OverallStatus::Running | OverallStatus::Stopping)
}
