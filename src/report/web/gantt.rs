//! The timeline of an operation as SVG, drawn on the server: one row per
//! sprint, one bar per attempt coloured by its model tier, the attempt in
//! flight striped up to "now", the wait before a sprint's first dispatch
//! drawn as a wait, BLOCKED rows in red, the units on the critical path
//! (the longest chain of sprints still to do) marked. Pure: the same state
//! and clock give the same bytes, so it is tested by snapshot.

use super::escape;
use crate::engine::{ModelTier, OperationState, SprintStatus, UnitStatus};
use chrono::{DateTime, Utc};
use std::fmt::Write as _;

const WIDTH: f64 = 960.0;
const LABEL: f64 = 220.0;
const ROW: f64 = 20.0;
const TOP: f64 = 24.0;

fn tier_class(t: ModelTier) -> &'static str {
    match t {
        ModelTier::Haiku => "t-haiku",
        ModelTier::Sonnet => "t-sonnet",
        ModelTier::Opus => "t-opus",
    }
}

/// Units on the critical path: those whose remaining chain is the longest.
fn critical(st: &OperationState) -> Vec<bool> {
    let paths = st.remaining_paths();
    let longest = paths.iter().copied().max().unwrap_or(0);
    paths.iter().map(|&p| longest > 0 && p == longest).collect()
}

/// `"12m 5s"` for a bar's tooltip.
fn span(from: DateTime<Utc>, to: DateTime<Utc>) -> String {
    let s = (to - from).num_seconds().max(0);
    if s >= 3600 {
        format!("{}h {}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m {}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// The SVG of the operation's timeline at `now`.
pub fn gantt_svg(st: &OperationState, now: DateTime<Utc>) -> String {
    let start = st.started_at;
    let end = st.finished_at.unwrap_or(now).max(start);
    let total = ((end - start).num_milliseconds().max(1000)) as f64;
    let x = |t: DateTime<Utc>| {
        let at = (t - start).num_milliseconds().clamp(0, total as i64) as f64;
        LABEL + (WIDTH - LABEL - 8.0) * at / total
    };
    let rows: usize = st.units.iter().map(|u| u.sprints.len()).sum();
    let height = TOP + ROW * rows as f64 + 8.0;
    let crit = critical(st);
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg class="gantt" role="img" aria-labelledby="gantt-title" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}"><title id="gantt-title">Timeline of {} sprints from {} to {}</title>"#,
        rows,
        start.format("%H:%M:%S"),
        end.format("%H:%M:%S"),
    );
    // The time axis: five ticks.
    for i in 0..=4 {
        let t = start + chrono::Duration::milliseconds((total * i as f64 / 4.0) as i64);
        let tx = x(t);
        let _ = write!(
            out,
            r#"<line class="tick" x1="{tx:.1}" y1="{}" x2="{tx:.1}" y2="{height}"/><text class="axis" x="{tx:.1}" y="14" text-anchor="{}">{}</text>"#,
            TOP - 4.0,
            match i {
                0 => "start",
                4 => "end",
                _ => "middle",
            },
            t.format("%H:%M:%S")
        );
    }
    let mut row = 0usize;
    for (ui, u) in st.units.iter().enumerate() {
        for s in &u.sprints {
            let y = TOP + ROW * row as f64;
            row += 1;
            let blocked = s.status() == SprintStatus::Fatal || u.status == UnitStatus::Blocked;
            let mut class = String::from("row");
            if blocked {
                class.push_str(" blocked");
            }
            if crit.get(ui).copied().unwrap_or(false) {
                class.push_str(" critical");
            }
            let _ = write!(
                out,
                r#"<g class="{class}" data-unit="{}" data-sprint="{}" data-status="{}"><text class="label" x="4" y="{:.1}">{}{} · {}</text>"#,
                escape(&u.name),
                escape(s.id.as_str()),
                s.status(),
                y + 14.0,
                if crit.get(ui).copied().unwrap_or(false) {
                    "◆ "
                } else {
                    ""
                },
                escape(&u.name),
                escape(s.id.as_str()),
            );
            // The wait before the first dispatch: dependencies, gates, caps.
            if let Some(first) = s.first_dispatched_at() {
                if first > start {
                    let _ = write!(
                        out,
                        r#"<rect class="wait" x="{:.1}" y="{:.1}" width="{:.1}" height="4"><title>waited {} before its first dispatch</title></rect>"#,
                        x(start),
                        y + 8.0,
                        (x(first) - x(start)).max(0.5),
                        span(start, first)
                    );
                }
            }
            for h in &s.history {
                let (x0, x1) = (x(h.dispatched_at), x(h.finished_at));
                let _ = write!(
                    out,
                    r#"<rect class="bar {} k-{}" x="{x0:.1}" y="{:.1}" width="{:.1}" height="14" rx="2"><title>attempt {} · {} · {} · {} · {}</title></rect>"#,
                    tier_class(h.tier),
                    kind_class(h.kind),
                    y + 3.0,
                    (x1 - x0).max(1.5),
                    h.attempt,
                    h.tier.as_str(),
                    kind_class(h.kind),
                    escape(h.outcome.lines().next().unwrap_or("")),
                    span(h.dispatched_at, h.finished_at)
                );
            }
            if let Some(a) = &s.active {
                let (x0, x1) = (x(a.dispatched_at), x(end));
                let _ = write!(
                    out,
                    r#"<rect class="bar running {}" x="{x0:.1}" y="{:.1}" width="{:.1}" height="14" rx="2"><title>attempt {} · {} · running for {}</title></rect>"#,
                    tier_class(a.tier),
                    y + 3.0,
                    (x1 - x0).max(1.5),
                    a.attempt,
                    a.tier.as_str(),
                    span(a.dispatched_at, end)
                );
            }
            if blocked {
                let _ = write!(
                    out,
                    r#"<text class="mark" x="{:.1}" y="{:.1}" text-anchor="end">BLOCKED</text>"#,
                    LABEL - 6.0,
                    y + 14.0
                );
            }
            out.push_str("</g>");
        }
    }
    if st.finished_at.is_none() {
        let nx = x(now);
        let _ = write!(
            out,
            r#"<line class="now" x1="{nx:.1}" y1="{}" x2="{nx:.1}" y2="{height}"><title>now</title></line>"#,
            TOP - 6.0
        );
    }
    out.push_str("</svg>");
    out
}

fn kind_class(k: crate::engine::DispatchKind) -> &'static str {
    match k {
        crate::engine::DispatchKind::Fresh => "fresh",
        crate::engine::DispatchKind::Continuation => "continuation",
        crate::engine::DispatchKind::Retry => "retry",
    }
}
