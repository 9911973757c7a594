//! `/supervise` commands: the one table of command words, the parser for
//! comments, who may say what ([`auth`]), and what is done with them
//! ([`handle`]), shared by both GitHub doors. Comment text is
//! untrusted: only lines that start with `/supervise` outside code (fenced,
//! indented or inline) and outside block quotes count, arguments are checked, and
//! a mistake is answered with the nearest valid command.

pub mod auth;

use crate::engine::Input;
use crate::text::code_span;
use auth::Permission;
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use std::fmt;
use std::ops::Range;

pub const PREFIX: &str = "/supervise";

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// A bare `/supervise`: resume if an operation exists, else start (§3).
    Default,
    Start {
        plan: Option<String>,
    },
    /// A command that acts on the issue's running operation (`resume`,
    /// `stop`, …): the engine input its table entry made of it.
    Operation {
        word: &'static str,
        /// Boxed: the engine's input is large beside the other commands.
        input: Box<Input>,
    },
    Status,
    Breakdown {
        doc: Option<String>,
        /// `offline`: the heuristics' plan, at once and free, instead of a
        /// planning agent's in Actions.
        offline: bool,
    },
    Analyze,
    Prioritize,
    Evaluate,
    Version,
    Spend,
    /// Seed 002's phase workflow on the issue's text (and what follows the
    /// command on its line), in the scope named first or the one detected.
    Solve {
        scope: Option<crate::engine::workflow::Scope>,
        extra: String,
    },
    /// Seed 004's manager loop on the issue's text (and what follows).
    Manage {
        extra: String,
    },
    Help,
}

/// The most of a command line's free text that is kept (`solve`, `manage`).
const MAX_EXTRA: usize = 2000;

/// One comment command: its word, the argument it takes, what it does (the
/// help text), the least role it needs unless a repository says otherwise,
/// whether a workflow run may carry it (`workflow_dispatch` input `command`),
/// and how it acts. The parser, the help, the authorisation, the Action and a
/// local supervisor's control files all read this table.
#[derive(Debug, Clone, Copy)]
pub struct CommandSpec {
    pub name: &'static str,
    pub argument: Option<&'static str>,
    pub help: &'static str,
    pub needs: Permission,
    pub from_workflow: bool,
    pub acts: Acts,
}

/// How a command acts.
#[derive(Debug, Clone, Copy)]
pub enum Acts {
    /// On the issue's running operation, through the engine: the whole of
    /// such a command is this entry, its [`Input`], and the engine's handling
    /// of the input (`src/engine/decide/commands.rs`).
    OnOperation(OnOperation),
    /// In its own way: an arm in `parse_line` and in the GitHub place's
    /// `Handler::answer`.
    Itself,
}

/// What a command on the operation becomes and says.
#[derive(Debug, Clone, Copy)]
pub struct OnOperation {
    /// The engine input its argument (if it takes one) makes; the argument
    /// is checked here.
    pub input: fn(Option<String>) -> Result<Input, ParseError>,
    /// The reply once the engine has taken it.
    pub done: &'static str,
    /// The reply on an issue without an operation; `None`: the usual
    /// "nothing started here".
    pub without: Option<&'static str>,
}

const fn spec(
    name: &'static str,
    argument: Option<&'static str>,
    help: &'static str,
    needs: Permission,
    from_workflow: bool,
) -> CommandSpec {
    CommandSpec {
        name,
        argument,
        help,
        needs,
        from_workflow,
        acts: Acts::Itself,
    }
}

/// A command that acts on the operation (see [`Acts::OnOperation`]).
const fn on_operation(
    name: &'static str,
    argument: Option<&'static str>,
    help: &'static str,
    needs: Permission,
    on: OnOperation,
) -> CommandSpec {
    CommandSpec {
        acts: Acts::OnOperation(on),
        ..spec(name, argument, help, needs, true)
    }
}

/// `resume [UNIT]`: a unit's name is at most 100 characters.
fn resume(unit: Option<String>) -> Result<Input, ParseError> {
    match unit {
        Some(u) if u.chars().count() > 100 => Err(ParseError::BadArgument {
            command: "resume",
            argument: u.chars().take(80).collect(),
            why: "unit names are at most 100 characters",
        }),
        unit => Ok(Input::Resume { unit }),
    }
}

/// `budget N` (in ×) or `budget $D` (in dollars): the running operation's
/// budget, raised; `resume` then goes on.
fn budget(amount: Option<String>) -> Result<Input, ParseError> {
    let bad = |a: &str| ParseError::BadArgument {
        command: "budget",
        argument: a.chars().take(80).collect(),
        why: "give the new budget as a whole number of × (like 200) or dollars (like $5)",
    };
    let Some(a) = amount
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
    else {
        return Err(bad(""));
    };
    if a.starts_with('$') {
        let usd = a.parse().map_err(|_| bad(&a))?;
        return Ok(Input::SetBudget {
            budget: None,
            budget_usd: Some(usd),
        });
    }
    let n = a
        .trim_end_matches(['x', '×'])
        .parse::<u64>()
        .map_err(|_| bad(&a))?;
    Ok(Input::SetBudget {
        budget: Some(n),
        budget_usd: None,
    })
}

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "start",
        Some("PLAN"),
        "start the plan (default EXECUTION_PLAN.md)",
        Permission::Write,
        true,
    ),
    on_operation(
        "resume",
        Some("UNIT"),
        "resume stopped, killed or blocked units (all, or one)",
        Permission::Write,
        OnOperation {
            input: resume,
            done: "Resumed.",
            without: None,
        },
    ),
    on_operation(
        "budget",
        Some("N|$D"),
        "raise the operation's budget (× or dollars); then `resume`",
        Permission::Write,
        OnOperation {
            input: budget,
            done: "Budget set. If it drained, `/supervise resume` goes on.",
            without: None,
        },
    ),
    spec(
        "status",
        None,
        "show the status table",
        Permission::Read,
        true,
    ),
    on_operation(
        "stop",
        None,
        "graceful shutdown: drain, wait, then force-cancel",
        Permission::Write,
        OnOperation {
            input: |_| Ok(Input::Stop),
            done: "Stopping: no new sprints; agents in flight finish (or are cancelled after the stop timeout).",
            without: None,
        },
    ),
    on_operation(
        "killall",
        None,
        "emergency stop: cancel every agent now",
        Permission::Maintain,
        OnOperation {
            input: |_| Ok(Input::Killall),
            done: "Killing every agent in flight; unfinished work stays on its branch.",
            without: None,
        },
    ),
    CommandSpec {
        from_workflow: false,
        ..on_operation(
            "name-feature",
            None,
            "rename the operation (the naming ritual)",
            Permission::Write,
            OnOperation {
                input: |_| Ok(Input::NameFeature),
                done: "Done.",
                without: Some(crate::engine::naming::REPROACH),
            },
        )
    },
    spec(
        "breakdown",
        Some("DOC"),
        "turn a requirements document (or this issue) into a plan proposed in a pull request, by a planning agent held to the breakdown's checks; `breakdown offline [DOC]`: by the heuristics, at once",
        Permission::Write,
        false,
    ),
    spec(
        "analyze",
        None,
        "three-pass analysis of the plan",
        Permission::Write,
        false,
    ),
    spec(
        "prioritize",
        None,
        "reorder sprints by priority",
        Permission::Write,
        false,
    ),
    spec(
        "evaluate",
        None,
        "check sprint quality and fix what it can",
        Permission::Write,
        false,
    ),
    spec(
        "solve",
        Some("SCOPE] [TEXT"),
        "work on this issue without a plan: research, plan, build, test, debug and document as its text asks (scope: research-only, research-and-plan, full-implementation or debug-only; detected when not named)",
        Permission::Write,
        true,
    ),
    spec(
        "manage",
        Some("TEXT"),
        "work on this issue without a plan: a manager agent keeps a kanban and hands out one task at a time",
        Permission::Write,
        true,
    ),
    spec(
        "spend",
        None,
        "what this repository's operations dispatched in the last day and week, against the daily budgets",
        Permission::Read,
        true,
    ),
    spec(
        "version",
        None,
        "which version of Sprint Supervisor answers",
        Permission::Read,
        true,
    ),
    spec("help", None, "this list", Permission::Read, false),
];

/// The table's entry for a command word.
pub fn spec_of(name: &str) -> Option<&'static CommandSpec> {
    COMMANDS.iter().find(|c| c.name == name)
}

impl Command {
    /// The engine input a command that acts on a running operation becomes
    /// (the same on GitHub and for a local supervisor's control files).
    pub fn operation_input(&self) -> Option<Input> {
        match self {
            Command::Operation { input, .. } => Some(*input.clone()),
            _ => None,
        }
    }

    /// A command on the operation with its table entry: the input and what to
    /// reply.
    pub fn on_operation(&self) -> Option<(Input, OnOperation)> {
        let Command::Operation { word, input } = self else {
            return None;
        };
        match spec_of(word)?.acts {
            Acts::OnOperation(on) => Some((*input.clone(), on)),
            Acts::Itself => None,
        }
    }

    /// `resume` of every unit: what a bare `/supervise` is on an issue with
    /// an operation.
    pub fn resume_all() -> Command {
        Command::Operation {
            word: "resume",
            input: Box::new(Input::Resume { unit: None }),
        }
    }

    /// What the command was given, as said: recorded with the command.
    pub fn argument(&self) -> Option<String> {
        match self {
            Command::Start { plan } => plan.clone(),
            Command::Operation { input, .. } => match input.as_ref() {
                Input::Resume { unit } => unit.clone(),
                _ => None,
            },
            Command::Breakdown { doc, .. } => doc.clone(),
            Command::Solve { scope, extra } => {
                let scope = scope.map_or("", |s| s.as_str());
                Some(format!("{scope} {extra}").trim().to_string()).filter(|s| !s.is_empty())
            }
            Command::Manage { extra } => Some(extra.clone()).filter(|s| !s.is_empty()),
            _ => None,
        }
    }

    /// Reads one command said without the prefix (`stop`, `resume api`), as a
    /// local supervisor's control files hold them.
    pub fn parse_bare(text: &str) -> Option<Command> {
        parse_comment(&format!("{PREFIX} {}", text.trim()))
            .into_iter()
            .next()?
            .ok()
    }

    pub fn name(&self) -> &'static str {
        match self {
            Command::Default => "",
            Command::Start { .. } => "start",
            Command::Operation { word, .. } => word,
            Command::Status => "status",
            Command::Breakdown { .. } => "breakdown",
            Command::Analyze => "analyze",
            Command::Prioritize => "prioritize",
            Command::Evaluate => "evaluate",
            Command::Version => "version",
            Command::Spend => "spend",
            Command::Solve { .. } => "solve",
            Command::Manage { .. } => "manage",
            Command::Help => "help",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    Unknown {
        word: String,
        suggestion: Option<&'static str>,
    },
    ExtraArguments {
        command: &'static str,
        extra: String,
    },
    BadArgument {
        command: &'static str,
        argument: String,
        why: &'static str,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Unknown {
                word,
                suggestion: Some(s),
            } => write!(
                f,
                "{} is not a command. Did you mean `{PREFIX} {s}`?",
                code_span(word)
            ),
            ParseError::Unknown {
                word,
                suggestion: None,
            } => write!(f, "{} is not a command.", code_span(word)),
            ParseError::ExtraArguments { command, extra } => {
                write!(f, "`{command}` does not take {}.", code_span(extra))
            }
            ParseError::BadArgument {
                command,
                argument,
                why,
            } => write!(
                f,
                "{} is not a valid argument of `{command}`: {why}.",
                code_span(argument)
            ),
        }
    }
}

pub fn help_text() -> String {
    let mut s = format!("Commands (one per line, at the start of the line):\n\n- `{PREFIX}` — resume the operation if there is one, else start\n");
    for c in COMMANDS {
        let arg = c.argument.map(|a| format!(" [{a}]")).unwrap_or_default();
        s.push_str(&format!("- `{PREFIX} {}{arg}` — {}\n", c.name, c.help));
    }
    s
}

/// Byte ranges of code and quotes, where commands are never read.
fn ignored_ranges(body: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    for (ev, r) in Parser::new_ext(body, Options::empty()).into_offset_iter() {
        match ev {
            Event::Start(Tag::CodeBlock(_) | Tag::BlockQuote(_)) => open.push(r.start),
            Event::End(TagEnd::CodeBlock | TagEnd::BlockQuote(_)) => {
                if let Some(start) = open.pop() {
                    out.push(start..r.end);
                }
            }
            Event::Code(_) | Event::Html(_) | Event::InlineHtml(_) => out.push(r),
            _ => {}
        }
    }
    out
}

/// A repository path argument: relative, no `..`, no odd characters.
fn check_path(command: &'static str, p: &str) -> Result<String, ParseError> {
    let bad = |why| {
        Err(ParseError::BadArgument {
            command,
            argument: p.chars().take(80).collect(),
            why,
        })
    };
    if p.len() > 200 {
        return bad("it is longer than 200 characters");
    }
    if p.starts_with('/') || p.split('/').any(|c| c == "..") {
        return bad("use a path relative to the repository root, without `..`");
    }
    if !p
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
    {
        return bad("use letters, digits and . _ - / only");
    }
    Ok(p.to_string())
}

fn parse_line(rest: &str) -> Result<Command, ParseError> {
    let mut words = rest.split_whitespace();
    let Some(word) = words.next() else {
        return Ok(Command::Default);
    };
    // The two that take free text: the rest of the line adds to the issue's.
    let text = || rest.trim_start()[word.len()..].trim();
    let clip = |t: &str| t.chars().take(MAX_EXTRA).collect::<String>();
    if word.eq_ignore_ascii_case("manage") {
        return Ok(Command::Manage {
            extra: clip(text()),
        });
    }
    if word.eq_ignore_ascii_case("solve") {
        let text = text();
        let first = text.split_whitespace().next().unwrap_or("");
        let scope = crate::engine::workflow::Scope::parse(first);
        let extra = if scope.is_some() {
            &text[first.len()..]
        } else {
            text
        };
        return Ok(Command::Solve {
            scope,
            extra: clip(extra.trim()),
        });
    }
    // `breakdown offline [DOC]`: the one command with a mode word.
    let offline = word.eq_ignore_ascii_case("breakdown")
        && words
            .clone()
            .next()
            .is_some_and(|w| w.eq_ignore_ascii_case("offline") || w == "--offline");
    if offline {
        words.next();
    }
    let arg = words.next().map(str::to_string);
    let extra: Vec<&str> = words.collect();
    let Some(spec) = COMMANDS.iter().find(|c| c.name.eq_ignore_ascii_case(word)) else {
        let suggestion = crate::text::nearest(word, COMMANDS.iter().map(|c| c.name));
        return Err(ParseError::Unknown {
            word: word.chars().take(40).collect(),
            suggestion,
        });
    };
    let (name, takes_arg) = (spec.name, spec.argument.is_some());
    let too_many = |e: String| ParseError::ExtraArguments {
        command: name,
        extra: e.chars().take(80).collect(),
    };
    if !takes_arg && arg.is_some() {
        let mut all = vec![arg.clone().unwrap_or_default()];
        all.extend(extra.iter().map(|s| s.to_string()));
        return Err(too_many(all.join(" ")));
    }
    if !extra.is_empty() {
        return Err(too_many(extra.join(" ")));
    }
    if let Acts::OnOperation(on) = spec.acts {
        return (on.input)(arg).map(|input| Command::Operation {
            word: name,
            input: Box::new(input),
        });
    }
    Ok(match name {
        "start" => Command::Start {
            plan: arg.map(|a| check_path("start", &a)).transpose()?,
        },
        "status" => Command::Status,
        "breakdown" => Command::Breakdown {
            doc: arg.map(|a| check_path("breakdown", &a)).transpose()?,
            offline,
        },
        "analyze" => Command::Analyze,
        "prioritize" => Command::Prioritize,
        "evaluate" => Command::Evaluate,
        "version" => Command::Version,
        "spend" => Command::Spend,
        "help" => Command::Help,
        // A word in the table without its arm here: never silently `help`
        // (the table test below catches it before it ships).
        _ => {
            return Err(ParseError::Unknown {
                word: name.to_string(),
                suggestion: None,
            })
        }
    })
}

/// Every `/supervise` line of a comment, in order, parsed or with its mistake.
pub fn parse_comment(body: &str) -> Vec<Result<Command, ParseError>> {
    // Code and quotes are found by reading the Markdown, which most comments
    // (no command line at all) are spared.
    let mut ignored = None;
    let mut out = Vec::new();
    let mut offset = 0;
    for line in body.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let trimmed = line.trim_start();
        let at = start + (line.len() - trimmed.len());
        let Some(rest) = trimmed.strip_prefix(PREFIX) else {
            continue;
        };
        // `/supervisor` or `/supervise-me` are other words, not this command.
        if rest.chars().next().is_some_and(|c| !c.is_whitespace()) {
            continue;
        }
        if ignored
            .get_or_insert_with(|| ignored_ranges(body))
            .iter()
            .any(|r| r.contains(&at))
        {
            continue;
        }
        out.push(parse_line(rest.trim_end()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every word of the table parses to its own command, with and without
    /// its argument: a word added to `COMMANDS` but not to the parser's match
    /// is caught here, not answered with help.
    #[test]
    fn every_word_of_the_table_parses_to_its_own_command() {
        for spec in COMMANDS {
            let mut lines = vec![format!("{PREFIX} {}", spec.name)];
            if spec.argument.is_some() {
                lines.push(format!("{PREFIX} {} some-arg.md", spec.name));
            }
            for line in lines {
                let parsed = parse_comment(&line).remove(0);
                match parsed {
                    Ok(c) => assert_eq!(c.name(), spec.name, "{line}"),
                    // Its own refusal of a missing or wrong amount is its own too.
                    Err(ParseError::BadArgument { command, .. }) if command == spec.name => {}
                    Err(e) => panic!("{line}: {e:?}"),
                }
            }
        }
    }

    /// A command on the operation is whole from its table entry: the
    /// comment parser, the reply, a local supervisor's control file and the
    /// help all get it from there (the recipe in CONTRIBUTING.md).
    #[test]
    fn a_command_on_the_operation_is_whole_from_its_table_entry() {
        let mut seen = 0;
        for spec in COMMANDS {
            let Acts::OnOperation(on) = spec.acts else {
                continue;
            };
            seen += 1;
            // `budget` needs its amount; the others read with none.
            let arg = (spec.name == "budget").then(|| "200".to_string());
            let typed = match &arg {
                Some(a) => format!("{} {a}", spec.name),
                None => spec.name.to_string(),
            };
            let parsed = parse_comment(&format!("{PREFIX} {typed}"))
                .remove(0)
                .unwrap();
            let (input, said) = parsed.on_operation().expect(spec.name);
            assert_eq!(Some(input.clone()), (on.input)(arg).ok(), "{}", spec.name);
            assert_eq!(said.done, on.done);
            let bare = Command::parse_bare(&typed).and_then(|c| c.operation_input());
            assert_eq!(bare, Some(input), "a control file saying `{}`", spec.name);
            assert!(help_text().contains(&format!("`{PREFIX} {}", spec.name)));
        }
        assert_eq!(seen, 5, "resume, budget, stop, killall, name-feature");
        assert!(Command::Status.on_operation().is_none());
    }

    #[test]
    fn breakdown_takes_offline_then_a_document() {
        let one = |t: &str| parse_comment(t).remove(0);
        let b = |doc: Option<&str>, offline| {
            Ok(Command::Breakdown {
                doc: doc.map(str::to_string),
                offline,
            })
        };
        assert_eq!(one("/supervise breakdown"), b(None, false));
        assert_eq!(
            one("/supervise breakdown docs/PRD.md"),
            b(Some("docs/PRD.md"), false)
        );
        assert_eq!(one("/supervise breakdown offline"), b(None, true));
        assert_eq!(
            one("/supervise breakdown --offline docs/PRD.md"),
            b(Some("docs/PRD.md"), true)
        );
        assert!(one("/supervise breakdown offline a.md b.md").is_err());
    }

    #[test]
    fn solve_and_manage_take_the_rest_of_their_line_as_text() {
        use crate::engine::workflow::Scope;
        let one = |t: &str| parse_comment(t).remove(0);
        assert_eq!(
            one("/supervise solve"),
            Ok(Command::Solve {
                scope: None,
                extra: String::new()
            })
        );
        assert_eq!(
            one("/supervise SOLVE debug-only  the crash on empty input \nthanks"),
            Ok(Command::Solve {
                scope: Some(Scope::DebugOnly),
                extra: "the crash on empty input".into()
            })
        );
        // A first word that is no scope is text, and a scope later is too.
        assert_eq!(
            one("/supervise solve research the options, research-only"),
            Ok(Command::Solve {
                scope: None,
                extra: "research the options, research-only".into()
            })
        );
        assert_eq!(
            one("/supervise manage one task per page"),
            Ok(Command::Manage {
                extra: "one task per page".into()
            })
        );
        let long = format!("/supervise manage {}", "x".repeat(5000));
        assert!(matches!(one(&long), Ok(Command::Manage { extra }) if extra.len() == MAX_EXTRA));
        // Not a command: another word that starts the same.
        assert!(matches!(
            one("/supervise solved"),
            Err(ParseError::Unknown { .. })
        ));
    }

    #[test]
    fn control_words_read_like_comment_commands() {
        use crate::engine::Input;
        let input = |t: &str| Command::parse_bare(t).and_then(|c| c.operation_input());
        assert_eq!(input("stop"), Some(Input::Stop));
        assert_eq!(input("killall\n"), Some(Input::Killall));
        assert_eq!(
            input("resume api"),
            Some(Input::Resume {
                unit: Some("api".into())
            })
        );
        assert_eq!(input("resume"), Some(Input::Resume { unit: None }));
        // The next step a drained budget prints, typed as it says.
        assert_eq!(
            input("budget 200"),
            Some(Input::SetBudget {
                budget: Some(200),
                budget_usd: None
            })
        );
        assert_eq!(
            input("budget $5"),
            Some(Input::SetBudget {
                budget: None,
                budget_usd: Some("5".parse().unwrap())
            })
        );
        assert_eq!(input("budget lots"), None);
        assert!(matches!(
            one("/supervise budget"),
            Err(ParseError::BadArgument {
                command: "budget",
                ..
            })
        ));
        assert_eq!(input("name-feature"), Some(Input::NameFeature));
        assert_eq!(
            input("status"),
            None,
            "status does not change the operation"
        );
        assert_eq!(input("stpo"), None);
        assert_eq!(input(""), None);
    }

    fn one(body: &str) -> Result<Command, ParseError> {
        let mut v = parse_comment(body);
        assert_eq!(v.len(), 1, "{body:?} gave {v:?}");
        v.remove(0)
    }

    #[test]
    fn commands_and_arguments() {
        assert_eq!(one("/supervise"), Ok(Command::Default));
        assert_eq!(one("/supervise start"), Ok(Command::Start { plan: None }));
        assert_eq!(
            one("/supervise start docs/EXECUTION_PLAN.md"),
            Ok(Command::Start {
                plan: Some("docs/EXECUTION_PLAN.md".into())
            })
        );
        assert_eq!(
            one("  /supervise RESUME parser\r\n"),
            Ok(Command::Operation {
                word: "resume",
                input: Box::new(Input::Resume {
                    unit: Some("parser".into())
                })
            })
        );
        assert_eq!(
            one("Please\n/supervise killall\nthanks"),
            Ok(Command::Operation {
                word: "killall",
                input: Box::new(Input::Killall)
            })
        );
        assert_eq!(
            one("/supervise name-feature").map(|c| c.operation_input()),
            Ok(Some(Input::NameFeature))
        );
    }

    #[test]
    fn code_quotes_and_other_words_are_ignored() {
        assert!(parse_comment("```\n/supervise start\n```").is_empty());
        assert!(parse_comment("~~~sh\n/supervise killall\n~~~\n").is_empty());
        assert!(
            parse_comment("    /supervise stop\n").is_empty(),
            "indented code"
        );
        assert!(parse_comment("> /supervise start\n").is_empty());
        assert!(parse_comment("> quoted\n> /supervise killall\n").is_empty());
        assert!(parse_comment("run `/supervise start` to begin").is_empty());
        assert!(parse_comment("/supervisor start").is_empty());
        assert!(
            parse_comment("text /supervise start").is_empty(),
            "only at the start of a line"
        );
        assert_eq!(
            parse_comment("```\n/supervise stop\n```\n/supervise status").len(),
            1
        );
    }

    #[test]
    fn an_echoed_word_cannot_mention_link_or_close_its_code_span() {
        let said = one("/supervise a`@alice`![x](https://evil.example/x.png)")
            .unwrap_err()
            .to_string();
        assert!(said.starts_with("``a`@alice`"), "{said}");
        let outside: String = pulldown_cmark::Parser::new(&said)
            .filter_map(|e| match e {
                pulldown_cmark::Event::Text(t) => Some(t.to_string()),
                pulldown_cmark::Event::Code(_) => None,
                other => Some(format!("{other:?}")),
            })
            .collect();
        assert!(
            !outside.contains('@') && !outside.contains("http"),
            "{outside}"
        );
    }

    #[test]
    fn mistakes_get_the_nearest_command() {
        assert_eq!(
            one("/supervise stauts"),
            Err(ParseError::Unknown {
                word: "stauts".into(),
                suggestion: Some("status")
            })
        );
        assert_eq!(
            one("/supervise stauts").unwrap_err().to_string(),
            "`stauts` is not a command. Did you mean `/supervise status`?"
        );
        assert!(matches!(
            one("/supervise status now"),
            Err(ParseError::ExtraArguments {
                command: "status",
                ..
            })
        ));
        assert!(matches!(
            one("/supervise start ../../etc/passwd"),
            Err(ParseError::BadArgument {
                command: "start",
                ..
            })
        ));
        assert!(matches!(
            one("/supervise start /abs/plan.md"),
            Err(ParseError::BadArgument { .. })
        ));
        assert!(matches!(
            one("/supervise start plan.md;rm"),
            Err(ParseError::BadArgument { .. })
        ));
        assert!(matches!(
            one("/supervise resume a b"),
            Err(ParseError::ExtraArguments { .. })
        ));
    }

    #[test]
    fn help_lists_every_command() {
        let h = help_text();
        for CommandSpec { name: n, .. } in COMMANDS {
            assert!(h.contains(&format!("`{PREFIX} {n}")), "{n} missing");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_comment_parses_without_panic(body in "(/supervise|```|> |`| |\\n|solve|manage|debug-only|[a-z-]{1,8}|\\PC){0,40}") {
            for r in parse_comment(&body) {
                if let Err(e) = r { proptest::prop_assert!(!e.to_string().is_empty()); }
            }
        }
    }
}
