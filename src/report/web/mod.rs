//! The web view of operations, as text: the JSON the API answers with, and
//! the HTML pages built from the same values (the operations list, one
//! operation with its timeline, status table, spend and decision log).
//! Pure: a page is a function of the states, the clock and who looks — the
//! server (`server::web`) only finds the states and sends the bytes.
//!
//! Everything shown passes through [`escape`] (agents' words reach these
//! pages in failures and decisions) and the page as a whole through the one
//! scrubber, as every text that leaves the supervisor does.

mod burn;
pub mod gantt;

use crate::engine::{OperationState, OverallStatus, SprintStatus, UnitStatus};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::fmt::Write as _;

/// The page's script and style, embedded in the binary.
pub const SCRIPT: &str = include_str!("assets/app.js");
pub const STYLE: &str = include_str!("assets/app.css");

/// Text made safe inside HTML elements and quoted attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Where an operation lives, for its links.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Origin {
    /// `owner/name` on GitHub; `None` for a local run.
    pub repo: Option<String>,
    /// The issue it reports on.
    pub issue: Option<i64>,
    /// The GitHub web address (`https://github.com`), for links.
    pub web: Option<String>,
    /// Each dispatch's Actions run, where one is known: what the decision
    /// log links its entries to.
    #[serde(skip)]
    pub runs: std::collections::BTreeMap<String, String>,
}

impl Origin {
    pub fn local() -> Origin {
        Origin {
            repo: None,
            issue: None,
            web: None,
            runs: Default::default(),
        }
    }

    /// Where a decision about a unit's sprint can be looked at: the last
    /// Actions run of that sprint that is known, else the operation's issue.
    fn link_of(
        &self,
        st: &OperationState,
        unit: Option<&str>,
        sprint: Option<&str>,
    ) -> Option<(String, &'static str)> {
        let run = unit.zip(sprint).and_then(|(u, s)| {
            let u = st.units.iter().find(|x| x.name == u)?;
            let s = u.sprints.iter().find(|x| x.id.as_str() == s)?;
            s.active
                .iter()
                .map(|a| &a.id)
                .chain(s.history.iter().rev().map(|h| &h.dispatch))
                .find_map(|d| self.runs.get(&d.0).cloned())
        });
        match run {
            Some(url) => Some((url, "run")),
            None => self.issue_url().map(|u| (u, "issue")),
        }
    }

    fn issue_url(&self) -> Option<String> {
        Some(format!(
            "{}/{}/issues/{}",
            self.web.as_deref()?,
            self.repo.as_deref()?,
            self.issue?
        ))
    }
}

/// One line of the operations list (`GET /api/v1/operations`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub id: String,
    pub name: String,
    #[serde(flatten)]
    pub origin: Origin,
    pub status: OverallStatus,
    pub sprints_done: usize,
    pub sprints_total: usize,
    pub agents_in_flight: usize,
    pub blocked_units: Vec<String>,
    pub spent: u64,
    pub held: u64,
    pub budget: Option<u64>,
    /// Dollars of the attempts with a figure, when any has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usd_spent: Option<crate::engine::usage::Usd>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usd_budget: Option<crate::engine::usage::Usd>,
    pub started_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Changes with every event: a client refetches when it moves.
    pub version: u64,
}

pub fn summary(st: &OperationState, origin: Origin) -> Summary {
    Summary {
        id: st.id.0.clone(),
        name: st.name.clone(),
        origin,
        status: st.status,
        sprints_done: st.units.iter().map(|u| u.completed_count()).sum(),
        sprints_total: st.units.iter().map(|u| u.sprints.len()).sum(),
        agents_in_flight: st.active_count(),
        blocked_units: st.blocked_units().map(|u| u.name.clone()).collect(),
        spent: st.cost_spent,
        held: st.cost_held,
        budget: st.config.budget,
        usd_spent: st
            .priced_attempts()
            .next()
            .is_some()
            .then(|| st.dollars_spent()),
        usd_budget: st.config.budget_usd,
        started_at: st.started_at,
        updated_at: st.updated_at,
        version: st.version,
    }
}

/// One attempt on the timeline.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Bar {
    pub attempt: u32,
    pub tier: &'static str,
    pub kind: &'static str,
    pub from: DateTime<Utc>,
    /// `None` while it runs.
    pub to: Option<DateTime<Utc>>,
    pub outcome: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SprintView {
    pub id: String,
    pub status: SprintStatus,
    pub attempts: Vec<Bar>,
    pub last_failure: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UnitView {
    pub name: String,
    pub status: UnitStatus,
    pub depends_on: Vec<String>,
    pub sprints: Vec<SprintView>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DecisionView {
    pub at: DateTime<Utc>,
    pub unit: Option<String>,
    pub sprint: Option<String>,
    pub decision: String,
    pub rationale: String,
}

/// One operation (`GET /api/v1/operations/{id}`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Detail {
    #[serde(flatten)]
    pub summary: Summary,
    pub status_reason: String,
    pub finished_at: Option<DateTime<Utc>>,
    pub units: Vec<UnitView>,
    pub decisions: Vec<DecisionView>,
}

fn kind_name(k: crate::engine::DispatchKind) -> &'static str {
    match k {
        crate::engine::DispatchKind::Fresh => "fresh",
        crate::engine::DispatchKind::Continuation => "continuation",
        crate::engine::DispatchKind::Retry => "retry",
    }
}

pub fn detail(st: &OperationState, origin: Origin) -> Detail {
    let units = st
        .units
        .iter()
        .enumerate()
        .map(|(i, u)| UnitView {
            name: u.name.clone(),
            status: u.status,
            depends_on: st
                .plan
                .work_units
                .get(i)
                .map(|w| w.depends_on.clone())
                .unwrap_or_default(),
            sprints: u
                .sprints
                .iter()
                .map(|s| SprintView {
                    id: s.id.as_str().to_string(),
                    status: s.status(),
                    attempts: s
                        .history
                        .iter()
                        .map(|h| Bar {
                            attempt: h.attempt,
                            tier: h.tier.as_str(),
                            kind: kind_name(h.kind),
                            from: h.dispatched_at,
                            to: Some(h.finished_at),
                            outcome: Some(h.outcome.clone()),
                        })
                        .chain(s.active.iter().map(|a| Bar {
                            attempt: a.attempt,
                            tier: a.tier.as_str(),
                            kind: kind_name(a.kind),
                            from: a.dispatched_at,
                            to: None,
                            outcome: None,
                        }))
                        .collect(),
                    last_failure: s.last_failure.clone(),
                })
                .collect(),
        })
        .collect();
    Detail {
        summary: summary(st, origin),
        status_reason: st.status_reason.clone(),
        finished_at: st.finished_at,
        units,
        decisions: st
            .decisions
            .iter()
            .map(|d| DecisionView {
                at: d.at,
                unit: d.unit.clone(),
                sprint: d.sprint.as_ref().map(|s| s.as_str().to_string()),
                decision: d.decision.clone(),
                rationale: d.rationale.clone(),
            })
            .collect(),
    }
}

/// Who looks, for the page's header.
#[derive(Debug, Clone, Default)]
pub struct Viewer {
    /// The GitHub login signed in; `None` on the local page.
    pub login: Option<String>,
    /// The token a sign-out form carries (CSRF).
    pub csrf: Option<String>,
}

/// The page around some content: the header, the embedded style and
/// script, and a plain refresh for browsers without JavaScript.
fn page(title: &str, viewer: &Viewer, refresh: bool, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 4096);
    let _ = write!(
        out,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,"><title>{}</title>{}<link rel="stylesheet" href="/assets/app.css"><script src="/assets/app.js" defer></script></head><body><header><a class="home" href="/">Sprint Supervisor</a>"#,
        escape(title),
        if refresh {
            r#"<noscript><meta http-equiv="refresh" content="5"></noscript>"#
        } else {
            ""
        }
    );
    if let Some(login) = &viewer.login {
        let _ = write!(
            out,
            r#"<form class="who" method="post" action="/logout"><span>Signed in as <strong>{}</strong></span><input type="hidden" name="csrf" value="{}"><button type="submit">Sign out</button></form>"#,
            escape(login),
            escape(viewer.csrf.as_deref().unwrap_or(""))
        );
    }
    out.push_str("</header>");
    out.push_str(body);
    out.push_str("</body></html>");
    crate::scrub::scrub(&out).into_owned()
}

/// What `supervise serve` shows when its sign-in is not set up.
pub fn off_page() -> String {
    page(
        "Sprint Supervisor",
        &Viewer::default(),
        false,
        r#"<main id="main" data-static="1"><h1>Sprint Supervisor</h1><p>This service takes GitHub's webhooks. Its web view is off: set <code>GITHUB_CLIENT_ID</code>, <code>GITHUB_CLIENT_SECRET</code> (the App's, from its settings page) and <code>SUPERVISE_PUBLIC_URL</code> (this address, as browsers reach it) to sign people in with GitHub.</p></main>"#,
    )
}

/// The sign-in page: all an unsigned viewer sees.
pub fn signin_page(error: Option<&str>) -> String {
    let mut body = String::from(
        r#"<main id="main" class="signin"><h1>Sign in</h1><p>Operations are shown to people who can read their repository on GitHub.</p>"#,
    );
    if let Some(e) = error {
        let _ = write!(body, r#"<p class="error" role="alert">{}</p>"#, escape(e));
    }
    body.push_str(r#"<p><a class="button" href="/login">Sign in with GitHub</a></p></main>"#);
    page(
        "Sign in — Sprint Supervisor",
        &Viewer::default(),
        false,
        &body,
    )
}

fn progress(s: &Summary) -> String {
    format!(
        r#"<progress max="{}" value="{}" aria-label="sprints done">{}/{}</progress> {}/{}"#,
        s.sprints_total.max(1),
        s.sprints_done,
        s.sprints_done,
        s.sprints_total,
        s.sprints_done,
        s.sprints_total
    )
}

fn spend(s: &Summary) -> String {
    let units = match s.budget {
        Some(b) => format!("{} of {} budget", s.spent, b),
        None => format!("{} (no budget)", s.spent),
    };
    match (s.usd_spent, s.usd_budget) {
        (Some(spent), Some(cap)) => format!("{units} · {spent} of a {cap} budget"),
        (Some(spent), None) => format!("{units} · {spent}"),
        (None, Some(cap)) => format!("{units} · nothing of a {cap} budget yet"),
        (None, None) => units,
    }
}

fn status_badge(status: OverallStatus) -> String {
    format!(
        r#"<span class="badge s-{}">{}</span>"#,
        status.as_str(),
        status.as_str()
    )
}

/// The operations list, with its filters (repository, state) applied.
pub fn list_page(
    all: &[Summary],
    viewer: &Viewer,
    repo: Option<&str>,
    state: Option<&str>,
) -> String {
    let shown: Vec<&Summary> = all
        .iter()
        .filter(|s| repo.is_none_or(|r| s.origin.repo.as_deref() == Some(r)))
        .filter(|s| state.is_none_or(|st| s.status.as_str() == st))
        .collect();
    let mut body = String::from(r#"<main id="main"><h1>Operations</h1>"#);
    let mut repos: Vec<&str> = all
        .iter()
        .filter_map(|s| s.origin.repo.as_deref())
        .collect();
    repos.sort_unstable();
    repos.dedup();
    body.push_str(r#"<form class="filters" method="get" action="/"><label>Repository <select name="repo"><option value="">all</option>"#);
    for r in &repos {
        let _ = write!(
            body,
            r#"<option{}>{}</option>"#,
            if Some(*r) == repo { " selected" } else { "" },
            escape(r)
        );
    }
    body.push_str(
        r#"</select></label> <label>State <select name="state"><option value="">all</option>"#,
    );
    for st in OverallStatus::ALL {
        let _ = write!(
            body,
            r#"<option{}>{}</option>"#,
            if Some(st.as_str()) == state {
                " selected"
            } else {
                ""
            },
            st.as_str()
        );
    }
    body.push_str(r#"</select></label> <button type="submit">Filter</button></form>"#);
    if shown.is_empty() {
        body.push_str(r#"<p class="empty">No operations to show.</p>"#);
    } else {
        body.push_str(r#"<table class="ops"><caption>Operations you may see</caption><thead><tr><th scope="col">Operation</th><th scope="col">Repository</th><th scope="col">State</th><th scope="col">Progress</th><th scope="col">Agents</th><th scope="col">Spend</th><th scope="col">Started</th><th scope="col">Last event</th></tr></thead><tbody>"#);
        for s in shown {
            let _ = write!(
                body,
                r#"<tr data-op="{id}"><td><a href="/ops/{id}">{name}</a></td><td>{repo}</td><td>{badge}</td><td>{progress}</td><td>{agents}</td><td>{spend}</td><td>{started}</td><td>{updated}</td></tr>"#,
                id = escape(&s.id),
                name = escape(&s.name),
                repo = escape(s.origin.repo.as_deref().unwrap_or("local")),
                badge = status_badge(s.status),
                progress = progress(s),
                agents = s.agents_in_flight,
                spend = spend(s),
                started = s.started_at.format("%Y-%m-%d %H:%M"),
                updated = s.updated_at.format("%Y-%m-%d %H:%M:%S"),
            );
        }
        body.push_str("</tbody></table>");
    }
    body.push_str("</main>");
    page("Operations — Sprint Supervisor", viewer, true, &body)
}

/// Markdown from the reports as HTML, with any raw HTML in it shown as
/// text: an agent's words in a failure must not become markup.
fn markdown(md: &str) -> String {
    use pulldown_cmark::{html, Event, Options, Parser};
    let parser = Parser::new_ext(md, Options::ENABLE_TABLES).map(|e| match e {
        Event::Html(t) | Event::InlineHtml(t) => Event::Text(t),
        e => e,
    });
    let mut out = String::new();
    html::push_html(&mut out, parser);
    out
}

/// A line with `code` spans, escaped, the spans as `<code>`.
fn markdown_inline(text: &str) -> String {
    text.split('`')
        .enumerate()
        .map(|(i, part)| match i % 2 {
            1 => format!("<code>{}</code>", escape(part)),
            _ => escape(part),
        })
        .collect()
}

/// What changes as the operation goes: sent whole on every event, so the
/// page needs no client-side rendering.
pub fn live_fragment(st: &OperationState, origin: &Origin, now: DateTime<Utc>) -> String {
    let s = summary(st, origin.clone());
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<section class="facts" aria-label="summary"><p>{badge} {progress} · <span class="agents">{agents} agent{plural} in flight</span> · spend {spend}{held}</p>"#,
        badge = status_badge(st.status),
        progress = progress(&s),
        agents = s.agents_in_flight,
        plural = if s.agents_in_flight == 1 { "" } else { "s" },
        spend = spend(&s),
        held = if s.held > 0 {
            format!(" ({} held by a cap)", s.held)
        } else {
            String::new()
        },
    );
    if !st.status_reason.is_empty() {
        let _ = write!(
            out,
            r#"<p class="reason">{}</p>"#,
            escape(&st.status_reason)
        );
    }
    out.push_str("</section>");
    // Work without a plan: where the workflow stands (its phase, its scope
    // and why, or the manager's task list).
    if let Some(w) = &st.workflow {
        out.push_str(r#"<section class="workflow" aria-labelledby="phases"><h2 id="phases">Work without a plan</h2><ul>"#);
        for line in w.summary(st) {
            let _ = write!(out, "<li>{}</li>", escape(&line));
        }
        out.push_str("</ul></section>");
    }
    // The BLOCKED notice's parts, its commands as this page's operation
    // takes them: a comment on GitHub, the command line locally.
    let said = |text: String| match origin.repo {
        Some(_) => crate::report::posts::as_comment_commands(&text),
        None => text,
    };
    for (i, u) in st.units.iter().enumerate() {
        if u.status != UnitStatus::Blocked || st.superseded(&u.name) {
            continue;
        }
        let Some(s) = u
            .sprints
            .iter()
            .position(|s| s.status() == SprintStatus::Fatal)
        else {
            let _ = write!(
                out,
                r#"<section class="blocked-notice" role="alert" data-unit="{0}"><h2>BLOCKED: {0}</h2><p>Stopped by a failure it cannot go past.</p></section>"#,
                escape(&u.name),
            );
            continue;
        };
        let b = st.blocked(
            i,
            s,
            crate::report::status::fatal_why(u.sprints[s].failures),
            None,
        );
        let _ = write!(
            out,
            r#"<section class="blocked-notice" role="alert" data-unit="{0}"><h2>BLOCKED: {0}</h2><p>Sprint {1} {2}.</p>"#,
            escape(&u.name),
            escape(b.sprint.as_str()),
            escape(&b.why),
        );
        if let Some(f) = b.last_failure {
            let f: Vec<&str> = f.lines().take(6).collect();
            let _ = write!(out, "<pre>{}</pre>", escape(&f.join("\n")));
        }
        if let Some(c) = b.check {
            let _ = write!(
                out,
                r#"<p>The failing check, {}, printed (last lines):</p><pre class="check-output">{}</pre>"#,
                escape(&c.criterion),
                escape(&c.output)
            );
        }
        let _ = write!(
            out,
            r#"<p>The sprint's work: branch <code>{}</code>.</p><p class="next-step">{}</p></section>"#,
            escape(&b.branch),
            markdown_inline(&said(b.hand_back()))
        );
    }
    out.push_str(r#"<section aria-labelledby="timeline"><h2 id="timeline">Timeline</h2><div class="legend"><span class="key t-haiku">haiku</span><span class="key t-sonnet">sonnet</span><span class="key t-opus">opus</span><span class="key running">running</span><span class="key wait">waiting</span><span>◆ critical path</span></div><div class="scroll">"#);
    out.push_str(&gantt::gantt_svg(st, now));
    out.push_str("</div></section>");
    if let Some(svg) = burn::burn_svg(st, now) {
        let _ = write!(
            out,
            r#"<section aria-labelledby="spend"><h2 id="spend">Spend</h2><p class="spend-line">{}</p><div class="scroll">{svg}</div></section>"#,
            escape(&crate::report::money::footer(st).unwrap_or_default())
        );
    }
    out.push_str(r#"<section aria-labelledby="status"><h2 id="status">Status</h2><table class="units"><thead><tr><th scope="col">Unit</th><th scope="col">State</th><th scope="col">Sprint</th><th scope="col">Attempt</th><th scope="col">Model</th></tr></thead><tbody>"#);
    for u in &st.units {
        let current = u
            .current()
            .and_then(|i| u.sprints.get(i))
            .or(u.sprints.last());
        let _ = write!(
            out,
            r#"<tr data-unit="{name}" data-status="{status}"><th scope="row">{name}</th><td class="u-{status}">{status}</td><td>{sprint}</td><td>{attempt}</td><td>{tier}</td></tr>"#,
            name = escape(&u.name),
            status = u.status,
            sprint = current
                .map(|s| format!("{} {}", escape(s.id.as_str()), s.status()))
                .unwrap_or_default(),
            attempt = current
                .map(|s| s.shown_attempt(st.config.max_retries).to_string())
                .unwrap_or_default(),
            tier = current
                .and_then(|s| s.tier())
                .map(|t| t.as_str())
                .unwrap_or("—"),
        );
    }
    out.push_str("</tbody></table></section>");
    let _ = write!(
        out,
        r#"<details class="report"><summary>The status comment's table</summary>{}</details>"#,
        markdown(&crate::report::status_table(st, now))
    );
    out.push_str(r#"<section aria-labelledby="log"><h2 id="log">Decision log</h2><label>Filter <input id="log-filter" type="search" placeholder="unit, decision or word"></label><table class="log"><thead><tr><th scope="col">Time</th><th scope="col">Unit</th><th scope="col">Sprint</th><th scope="col">Decision</th><th scope="col">Why</th><th scope="col">See</th></tr></thead><tbody>"#);
    for d in st.decisions.iter().rev().take(500) {
        let sprint = d.sprint.as_ref().map(|s| s.as_str());
        let see = origin
            .link_of(st, d.unit.as_deref(), sprint)
            .map(|(url, what)| format!(r#"<a href="{}">{what}</a>"#, escape(&url)))
            .unwrap_or_default();
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{see}</td></tr>",
            d.at.format("%H:%M:%S"),
            escape(d.unit.as_deref().unwrap_or("")),
            escape(sprint.unwrap_or("")),
            escape(&d.decision),
            escape(&d.rationale),
        );
    }
    out.push_str("</tbody></table></section>");
    crate::scrub::scrub(&out).into_owned()
}

/// One operation's page.
pub fn operation_page(
    st: &OperationState,
    origin: &Origin,
    viewer: &Viewer,
    now: DateTime<Utc>,
) -> String {
    let mut body = String::new();
    let _ = write!(
        body,
        r#"<main id="main" data-op="{id}" data-version="{version}"><h1>{name}</h1><p class="where">{where_}</p><div id="live" aria-live="polite">{live}</div></main>"#,
        id = escape(&st.id.0),
        version = st.version,
        name = escape(&st.name),
        where_ = match (origin.repo.as_deref(), origin.issue_url()) {
            (Some(r), Some(url)) => format!(
                r#"{} · <a href="{}">issue #{}</a>"#,
                escape(r),
                escape(&url),
                origin.issue.unwrap_or_default()
            ),
            (Some(r), None) => escape(r),
            _ => String::from("a local run"),
        },
        live = live_fragment(st, origin, now),
    );
    page(
        &format!("{} — Sprint Supervisor", st.name),
        viewer,
        true,
        &body,
    )
}

/// The page for an operation the viewer may not see or that does not
/// exist: the same either way, so it tells nothing.
pub fn not_found_page(viewer: &Viewer) -> String {
    page(
        "Not found — Sprint Supervisor",
        viewer,
        false,
        r#"<main id="main" data-static="1"><h1>Not found</h1><p>There is no operation here that you may see.</p><p><a href="/">All operations</a></p></main>"#,
    )
}
