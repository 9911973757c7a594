//! One operation's trace, read from its log as it is written: a root span
//! for the operation, a span per attempt (unit, sprint, model, attempt,
//! outcome, turns, tokens, dollars) and a span per wait (a cap above the
//! operation, the model provider). The ids come from [`crate::otlp`], so
//! each replica of the service, the agent workflow's jobs and an agent that
//! reads `TRACEPARENT` name the same trace and parent without being told.
//! Names follow OpenTelemetry's conventions where one exists (`gen_ai.*`
//! for the model an agent ran on); the rest are `supervise.*` (see the
//! guide's Observability page).

use crate::engine::{Event, HoldKind, ModelTier, OverallStatus};
use crate::otlp::{attempt_span, root_span, span_id, trace_id, Span, Value};
use chrono::{DateTime, Utc};
use std::collections::HashMap;

/// Reads events in order and gives each span once it has ended.
#[derive(Debug, Default)]
pub struct Spans {
    operation: Option<(String, String, DateTime<Utc>)>,
    config: Option<crate::engine::EngineConfig>,
    /// Unit names and their sprints' ids, by index.
    units: Vec<(String, Vec<String>)>,
    /// Waits begun and not yet over, by (unit, sprint).
    held: HashMap<(usize, usize), (DateTime<Utc>, HoldKind, String)>,
}

impl Spans {
    /// Following an operation already under way (loaded from its log).
    pub fn from_state(st: &crate::engine::OperationState) -> Spans {
        Spans {
            operation: Some((st.id.to_string(), st.name.clone(), st.started_at)),
            config: Some(st.config.clone()),
            units: units_of(&st.plan.work_units),
            held: HashMap::new(),
        }
    }

    pub fn push(&mut self, event: &Event) -> Vec<Span> {
        let mut out = Vec::new();
        match event {
            Event::OperationStarted {
                operation,
                name,
                plan,
                config,
                at,
                ..
            } => {
                self.operation = Some((operation.to_string(), name.clone(), *at));
                self.config = Some(config.clone());
                self.units = units_of(&plan.work_units);
            }
            Event::WorkAdded { units, .. } => {
                self.units.extend(units_of(units));
            }
            Event::Renamed { name, .. } => {
                if let Some(op) = &mut self.operation {
                    op.1 = name.clone();
                }
            }
            Event::DispatchHeld {
                unit,
                sprint,
                hold,
                at,
            } => {
                self.held
                    .entry((*unit, *sprint))
                    .or_insert((*at, hold.kind, hold.reason.clone()));
            }
            Event::DispatchReleased { unit, sprint, at } => {
                if let Some((from, kind, reason)) = self.held.remove(&(*unit, *sprint)) {
                    let kind = format!("{kind:?}").to_lowercase();
                    out.extend(self.wait(*unit, *sprint, from, *at, kind, reason));
                }
            }
            Event::ProviderWait {
                unit,
                sprint,
                status,
                until,
                at,
            } => {
                let why = status.map_or("no answer".to_string(), |s| format!("HTTP {s}"));
                out.extend(self.wait(*unit, *sprint, *at, *until, "provider".into(), why));
            }
            Event::AttemptClosed {
                unit,
                sprint,
                record,
            } => {
                if let Some(span) = self.attempt(*unit, *sprint, record) {
                    out.push(span);
                }
            }
            Event::Overall { to, reason, at } => {
                if let (Some((op, name, started)), true) = (&self.operation, ended(*to)) {
                    out.push(Span {
                        trace_id: trace_id(op),
                        span_id: root_span(op),
                        parent: None,
                        name: "supervise.operation".into(),
                        client: false,
                        start: *started,
                        end: *at,
                        attributes: vec![
                            ("supervise.operation.id", Value::Str(op.clone())),
                            ("supervise.operation.name", Value::Str(name.clone())),
                            ("supervise.operation.status", Value::Str(to.to_string())),
                        ],
                        error: matches!(to, OverallStatus::Blocked | OverallStatus::Killed)
                            .then(|| reason.clone()),
                    });
                }
            }
            _ => {}
        }
        out
    }

    fn names(&self, unit: usize, sprint: usize) -> (String, String) {
        let u = self.units.get(unit);
        (
            u.map_or(unit.to_string(), |u| u.0.clone()),
            u.and_then(|u| u.1.get(sprint))
                .cloned()
                .unwrap_or_else(|| (sprint + 1).to_string()),
        )
    }

    fn wait(
        &self,
        unit: usize,
        sprint: usize,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        kind: String,
        reason: String,
    ) -> Option<Span> {
        let (op, _, _) = self.operation.as_ref()?;
        let (u, s) = self.names(unit, sprint);
        Some(Span {
            trace_id: trace_id(op),
            span_id: span_id(&format!("wait {op} {unit} {sprint} {from}")),
            parent: Some(root_span(op)),
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
        })
    }

    fn attempt(
        &self,
        unit: usize,
        sprint: usize,
        r: &crate::engine::AttemptRecord,
    ) -> Option<Span> {
        let (op, _, _) = self.operation.as_ref()?;
        let (u, s) = self.names(unit, sprint);
        let config = self.config.as_ref()?;
        let mut attributes = vec![
            ("gen_ai.operation.name", Value::Str("invoke_agent".into())),
            (
                "gen_ai.request.model",
                Value::Str(config.model_id(r.tier).to_string()),
            ),
            ("supervise.unit", Value::Str(u)),
            ("supervise.sprint", Value::Str(s)),
            ("supervise.attempt", Value::Int(i64::from(r.attempt))),
            ("supervise.dispatch", Value::Str(r.dispatch.to_string())),
            ("supervise.tier", Value::Str(tier(r.tier).into())),
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
            if r.charged {
                if let Some(usd) = u.dollars(config.price(r.tier)) {
                    attributes.push((
                        "supervise.cost_usd",
                        Value::Float(usd.micros() as f64 / 1e6),
                    ));
                }
            }
        }
        Some(Span {
            trace_id: trace_id(op),
            span_id: attempt_span(&r.dispatch.0),
            parent: Some(root_span(op)),
            name: "invoke_agent".into(),
            client: false,
            start: r.dispatched_at,
            end: r.finished_at.max(r.dispatched_at),
            attributes,
            error: None,
        })
    }
}

fn units_of(units: &[crate::plan::WorkUnit]) -> Vec<(String, Vec<String>)> {
    units
        .iter()
        .map(|u| {
            (
                u.name.clone(),
                u.sprints.iter().map(|s| s.id.to_string()).collect(),
            )
        })
        .collect()
}

fn tier(t: ModelTier) -> &'static str {
    t.as_str()
}

fn ended(to: OverallStatus) -> bool {
    !matches!(to, OverallStatus::Running | OverallStatus::Stopping)
}
