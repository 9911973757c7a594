//! What an operation has spent, over time, against its dollar budget, as
//! SVG drawn on the server: a step up at each priced attempt's end, the
//! budget as a line across. Pure, like the timeline: the same state and
//! clock give the same bytes.

use crate::engine::usage::Usd;
use crate::engine::OperationState;
use chrono::{DateTime, Utc};
use std::fmt::Write as _;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 160.0;
const LEFT: f64 = 64.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 24.0;

/// The burn-down, or `None` while no attempt has a dollar figure.
pub fn burn_svg(st: &OperationState, now: DateTime<Utc>) -> Option<String> {
    let mut steps: Vec<(DateTime<Utc>, Usd)> = st
        .units
        .iter()
        .flat_map(|u| &u.sprints)
        .flat_map(|s| &s.history)
        .filter_map(|h| Some((h.finished_at, st.attempt_dollars(h)?)))
        .collect();
    if steps.is_empty() {
        return None;
    }
    steps.sort_by_key(|s| s.0);
    let start = st.started_at;
    let end = st.finished_at.unwrap_or(now).max(start);
    let span = (end - start).num_milliseconds().max(1000) as f64;
    let spent: Usd = steps.iter().map(|s| s.1).sum();
    let top = st
        .config
        .budget_usd
        .unwrap_or(spent)
        .max(spent)
        .max(Usd::from_micros(1));
    let x = |t: DateTime<Utc>| {
        let at = (t - start).num_milliseconds().clamp(0, span as i64) as f64;
        LEFT + (WIDTH - LEFT - 8.0) * at / span
    };
    let y =
        |d: Usd| TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - d.micros() as f64 / top.micros() as f64);
    let budget = st
        .config
        .budget_usd
        .map_or_else(String::new, |b| format!(" of a {b} budget"));
    let mut out = format!(
        r#"<svg class="burn" role="img" aria-labelledby="burn-title" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}"><title id="burn-title">Spent {spent}{budget} over {n}</title>"#,
        n = crate::text::count(steps.len(), "priced attempt")
    );
    let floor = y(Usd::ZERO);
    let _ = write!(
        out,
        r#"<line class="tick" x1="{LEFT}" y1="{floor:.1}" x2="{WIDTH}" y2="{floor:.1}"/><text class="axis" x="{:.1}" y="{:.1}" text-anchor="end">$0</text><text class="axis" x="{:.1}" y="{:.1}" text-anchor="end">{top}</text>"#,
        LEFT - 6.0,
        floor + 4.0,
        LEFT - 6.0,
        y(top) + 4.0,
    );
    if let Some(b) = st.config.budget_usd {
        let by = y(b);
        let _ = write!(
            out,
            r#"<line class="budget" x1="{LEFT}" y1="{by:.1}" x2="{WIDTH}" y2="{by:.1}"><title>budget {b}</title></line>"#
        );
    }
    let mut points = format!("{LEFT:.1},{floor:.1}");
    let mut total = Usd::ZERO;
    for (at, usd) in &steps {
        let px = x(*at);
        let _ = write!(points, " {px:.1},{:.1}", y(total));
        total = total + *usd;
        let _ = write!(points, " {px:.1},{:.1}", y(total));
    }
    let _ = write!(points, " {:.1},{:.1}", x(end), y(total));
    let _ = write!(
        out,
        r#"<polyline class="spent" points="{points}"/><text class="axis" x="{:.1}" y="{:.1}" text-anchor="end">{total}</text></svg>"#,
        x(end),
        (y(total) - 4.0).max(TOP + 8.0)
    );
    Some(out)
}
