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
}

/// Notices a live frame keeps under the table.
const LIVE_NOTICES: usize = 4;

impl Terminal {
    pub fn new(out: OutputMode) -> Terminal {
        Terminal {
            out,
            last_draw: None,
            notices: Vec::new(),
            resume: None,
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
            .map(report::decision_line)
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
        print!("\x1b[H\x1b[2J{}", text::for_terminal(&self.said(&frame)));
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
                        let line = self.said(&report::decision_line(d).replacen(' ', "] ", 1));
                        println!("[{}", text::for_terminal(&line));
                    }
                }
                _ => {}
            }
        }
    }

    fn notice(&mut self, text: &str) {
        let said = self.said(text);
        let text = text::for_terminal(&said);
        match self.out {
            OutputMode::Quiet => {}
            OutputMode::Json => eprintln!("{text}"),
            OutputMode::Live => {
                println!("{text}");
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

/// The exit status of a run that ended so.
pub fn exit_code(ending: Ending) -> i32 {
    match ending {
        Ending::Completed { verified: true } => exit::COMPLETED,
        Ending::Completed { verified: false } => exit::VERIFICATION_FAILED,
        Ending::Blocked => exit::BLOCKED,
        Ending::AgentCommandFailed => exit::USAGE,
        Ending::Stopped => exit::STOPPED,
        Ending::AwaitingPerson => exit::AWAITING_PERSON,
    }
}

/// The last lines of a run, whatever the output is: the status table (a live
/// terminal's final frame already shows it; the final summary printed before
/// says what its completion section would) and where the work is, with the
/// commands to look at it and take it.
pub fn farewell(out: OutputMode, ending: Ending, st: &OperationState) {
    let said = |t: &str| match report::resume_command(st) {
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
        println!("\n{}", text::for_terminal(&board));
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
