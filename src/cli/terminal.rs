//! What a local run shows the person at the terminal — a live table redrawn in
//! place, plain lines for logs and pipes, JSON lines for programs — and the exit
//! statuses `supervise run` ends with. The runner reports through [`Screen`];
//! everything about how it looks lives here.

use crate::engine::{self, OperationState, OverallStatus};
use crate::place::local::screen::Screen;
use crate::place::local::supervisor::Ending;
use crate::report;
use crate::text;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// How the run reports to the person at the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// A live table redrawn in place.
    Live,
    /// Plain lines, for logs and pipes.
    Lines,
    /// One JSON object per event, on standard output.
    Json,
    Quiet,
}

/// The exit statuses of `supervise run`, documented in `--help` and the README.
pub mod exit {
    pub const COMPLETED: i32 = 0;
    pub const USAGE: i32 = 1;
    pub const VERIFICATION_FAILED: i32 = 2;
    pub const BLOCKED: i32 = 3;
    pub const STOPPED: i32 = 4;
    pub const AWAITING_PERSON: i32 = 5;
}

pub fn default_output(json: bool) -> OutputMode {
    if json {
        OutputMode::Json
    } else if std::io::stdout().is_terminal() {
        OutputMode::Live
    } else {
        OutputMode::Lines
    }
}

/// The [`Screen`] of a terminal in one of the output modes.
pub struct Terminal {
    out: OutputMode,
    last_draw: Option<Instant>,
    /// A live view's latest notices, drawn under every frame: a redraw
    /// clears the screen, and a BLOCKED notice or the final summary must
    /// not vanish with it.
    notices: Vec<String>,
    /// How a person goes on with this operation, when it is not
    /// `supervise resume` (work without a plan: `supervise solve`).
    resume: Option<String>,
    /// Lines on screen since the last frame began (the frame and the
    /// notices under it): the next frame is drawn over them, not below a
    /// cleared screen, so the scrollback keeps what was there before.
    drawn_lines: usize,
    /// States in colour (a live terminal, unless `NO_COLOR` is set or the
    /// terminal is `dumb`).
    colour: bool,
    /// Every reason of every decision (`--verbose`), not the person's line.
    verbose: bool,
}

/// The sequence that starts every live frame: the cursor back up over the
/// lines the last one drew, and everything below it erased.
pub const REDRAW: &str = "\x1b[J";

/// Notices a live frame keeps under the table.
const LIVE_NOTICES: usize = 4;

impl Terminal {
    pub fn new(out: OutputMode) -> Terminal {
        let colour = out == OutputMode::Live
            && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            && std::env::var("TERM").map_or(true, |t| t != "dumb");
        Terminal {
            out,
            last_draw: None,
            notices: Vec::new(),
            resume: None,
            drawn_lines: 0,
            colour,
            verbose: false,
        }
    }

    /// Each decision with all its reasons, as the decision log has it.
    pub fn verbose(mut self, verbose: bool) -> Terminal {
        self.verbose = verbose;
        self
    }

    fn decision(&self, d: &engine::DecisionEntry) -> String {
        match self.verbose {
            true => report::decision_line(d),
            false => report::person_line(d),
        }
    }

    /// `text` with its next steps said as this operation's command.
    fn said(&self, text: &str) -> String {
        match &self.resume {
            Some(command) => report::resume_as(text, command),
            None => text.to_string(),
        }
    }

    /// Next steps that say `supervise resume` are said as `command`.
    pub fn resuming_with(mut self, command: impl Into<String>) -> Terminal {
        self.resume = Some(command.into());
        self
    }

    fn draw(&mut self, st: &OperationState) {
        self.last_draw = Some(Instant::now());
        let recent: Vec<String> = st
            .decisions
            .iter()
            .rev()
            .take(8)
            .rev()
            .map(|d| self.decision(d))
            .collect();
        let mut frame = format!(
            "{}\nRecent decisions:\n{}\n",
            report::status_board(st, chrono::Utc::now()),
            recent.join("\n")
        );
        for n in &self.notices {
            frame.push('\n');
            frame.push_str(n);
            frame.push('\n');
        }
        // Agents' words reach the frame (failure reasons): only this
        // module's own escape sequences reach the terminal.
        let shown = aligned(&text::for_terminal(&self.said(&frame)));
        let shown = if self.colour { painted(&shown) } else { shown };
        let up = match self.drawn_lines {
            0 => String::new(),
            n => format!("\x1b[{n}F"),
        };
        print!("{up}{REDRAW}{shown}");
        self.drawn_lines = shown.matches('\n').count();
        let _ = std::io::stdout().flush();
    }
}

impl Screen for Terminal {
    fn events(&mut self, events: &[engine::Event]) {
        for e in events {
            match self.out {
                OutputMode::Json => {
                    if let Ok(s) = serde_json::to_string(e) {
                        println!("{s}");
                    }
                }
                OutputMode::Lines => {
                    if let engine::Event::Decision { entry: d } = e {
                        let line = self.said(&self.decision(d).replacen(' ', "] ", 1));
                        println!("[{}", text::for_terminal(&line));
                    }
                }
                _ => {}
            }
        }
    }

    fn notice(&mut self, text: &str) {
        // Markdown's emphasis is for GitHub; a terminal shows it literally.
        let said = self.said(text).replace("**", "");
        let text = text::for_terminal(&said);
        match self.out {
            OutputMode::Quiet => {}
            OutputMode::Json => eprintln!("{text}"),
            OutputMode::Live => {
                println!("{text}");
                self.drawn_lines += text.matches('\n').count() + 1;
                if self.notices.len() == LIVE_NOTICES {
                    self.notices.remove(0);
                }
                self.notices.push(text.to_string());
            }
            OutputMode::Lines => println!("{text}"),
        }
    }

    fn status(&mut self, st: &OperationState) {
        // Redrawn at most five times a second: a burst of decisions is one frame.
        if self.out != OutputMode::Live
            || self
                .last_draw
                .is_some_and(|t| t.elapsed() < Duration::from_millis(200))
        {
            return;
        }
        self.draw(st);
    }

    fn finish(&mut self, st: &OperationState) {
        if self.out == OutputMode::Live {
            self.draw(st);
        }
    }
}

/// `text` with each run of Markdown table rows padded into columns, for a
/// person reading a terminal (piped output stays plain Markdown).
pub fn aligned(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    let lines: Vec<&str> = text.split('\n').collect();
    let mut i = 0;
    while i < lines.len() {
        let is_row = |l: &str| l.starts_with('|') && l.trim_end().ends_with('|');
        if !is_row(lines[i]) {
            out.push_str(lines[i]);
            i += 1;
            if i < lines.len() {
                out.push('\n');
            }
            continue;
        }
        let start = i;
        while i < lines.len() && is_row(lines[i]) {
            i += 1;
        }
        let rows: Vec<Vec<&str>> = lines[start..i]
            .iter()
            .map(|l| {
                l.trim()
                    .trim_matches('|')
                    .split('|')
                    .map(str::trim)
                    .collect()
            })
            .collect();
        let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
        let width = |c: usize| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .filter(|cell| !is_rule(cell))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(3)
                .max(3)
        };
        let widths: Vec<usize> = (0..columns).map(width).collect();
        for row in &rows {
            out.push('|');
            for (c, w) in widths.iter().enumerate() {
                let cell = row.get(c).copied().unwrap_or("");
                if is_rule(cell) {
                    out.push_str(&format!("-{}-|", "-".repeat(*w)));
                } else {
                    let pad = w - cell.chars().count().min(*w);
                    out.push_str(&format!(" {cell}{} |", " ".repeat(pad)));
                }
            }
            out.push('\n');
        }
        if i == lines.len() {
            out.pop();
        }
    }
    out
}

/// A table's rule cell (`---`, `:--:`).
fn is_rule(cell: &str) -> bool {
    !cell.is_empty() && cell.chars().all(|c| c == '-' || c == ':')
}

/// `text` with the states a person looks for in colour: done in green,
/// stuck in red, under way in yellow.
pub fn painted(text: &str) -> String {
    static STATES: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let states = STATES.get_or_init(|| {
        regex::Regex::new(
            r"\b(COMPLETED|BLOCKED|FATAL|KILLED|RUNNING|DISPATCHED|PARTIAL|BACKOFF)\b|[✓✗]",
        )
        .expect("valid")
    });
    states
        .replace_all(text, |c: &regex::Captures<'_>| {
            let colour = match &c[0] {
                "COMPLETED" | "✓" => "32",
                "BLOCKED" | "FATAL" | "KILLED" | "✗" => "31",
                _ => "33",
            };
            format!("\x1b[{colour}m{}\x1b[0m", &c[0])
        })
        .into_owned()
}

/// The exit status of a run that ended so.
pub fn exit_code(ending: Ending) -> i32 {
    match ending {
        Ending::Completed { verified: true } => exit::COMPLETED,
        Ending::Completed { verified: false } => exit::VERIFICATION_FAILED,
        Ending::Blocked => exit::BLOCKED,
        Ending::AgentCommandFailed => exit::USAGE,
        Ending::Stopped => exit::STOPPED,
        Ending::AwaitingPerson => exit::AWAITING_PERSON,
        Ending::Interrupted => exit::STOPPED,
    }
}

/// What an interrupted run says last: the agents it left running, or that
/// none was.
pub fn interrupted(state_dir: &std::path::Path) {
    match crate::place::local::supervisor::unwatched_agents(state_dir) {
        Some(line) => eprintln!("\nInterrupted. {line}"),
        None => {
            eprintln!("\nInterrupted; no agent was running. `supervise run` goes on from here.")
        }
    }
}

/// The last lines of a run, whatever the output is: the status table (a live
/// terminal's final frame already shows it; the final summary printed before
/// says what its completion section would) and where the work is, with the
/// commands to look at it and take it.
/// `resume` names how this operation goes on when it is not `supervise
/// resume` (`supervise solve`, `supervise plan evaluate`).
pub fn farewell(out: OutputMode, ending: Ending, st: &OperationState, resume: Option<&str>) {
    let said = |t: &str| match resume {
        Some(command) => report::resume_as(t, command),
        None => t.to_string(),
    };
    if ending == Ending::AwaitingPerson {
        Terminal::new(out).notice(&said("Waiting for a person: a manual sprint needs confirming. Review it, then run `supervise resume`."));
    }
    if matches!(out, OutputMode::Quiet | OutputMode::Json) {
        return;
    }
    if out == OutputMode::Lines {
        let board = report::status_board(st, chrono::Utc::now());
        println!("\n{}", text::for_terminal(&said(&board)));
    }
    if st.status == OverallStatus::Killed {
        println!("\n{}", text::for_terminal(&said(&report::kill_summary(st))));
    }
    let merged = st.units.iter().flat_map(|u| &u.sprints).any(|s| {
        s.completion
            .as_ref()
            .is_some_and(|c| c.already_done.is_none())
    });
    if merged {
        let branch = crate::contract::integration_branch(&st.id.0);
        println!(
            "\nThe work is on branch {branch} (your own branch and checkout are untouched):\n  git log --oneline {branch}   # what the agents did\n  git diff HEAD...{branch}     # all of it as one change\n  git merge {branch}           # take it into your branch"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{aligned, painted};

    #[test]
    fn tables_are_aligned_and_the_rest_is_left_alone() {
        let text = "title\n| Unit | State |\n|---|---|\n| api | COMPLETED |\n| a-long-name | RUNNING |\nafter";
        assert_eq!(
            aligned(text),
            "title\n| Unit        | State     |\n|-------------|-----------|\n| api         | COMPLETED |\n| a-long-name | RUNNING   |\nafter"
        );
        assert_eq!(aligned("no table\n"), "no table\n");
    }

    #[test]
    fn states_are_painted_and_nothing_else() {
        assert_eq!(
            painted("| api | COMPLETED | BLOCKEDX | ✗ |"),
            "| api | \x1b[32mCOMPLETED\x1b[0m | BLOCKEDX | \x1b[31m✗\x1b[0m |"
        );
    }
}
