//! What an agent command (`--agent`, `agent:`) would run first, read as
//! `sh -c` reads it: quotes, `$(…)` and backquotes, assignments before the
//! program, redirections, `env`/`exec`/`nohup`/`time` in front. The
//! preflight checks that program before anything is paid for; a command
//! whose first program cannot be known without running it (a subshell, a
//! compound command, a program that is itself a substitution) is not
//! checked, and said so — never refused for a word that is not a program.

/// What the first simple command of an agent command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstProgram {
    /// A program named plainly (`claude`, `./agent.sh`, `env`).
    Named(String),
    /// Known only when the shell runs it; why.
    Unknown(&'static str),
    /// No command at all.
    Empty,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A word as the shell would see it once quotes are removed, and
    /// whether it holds an expansion (`$X`, `$(…)`, backquotes).
    Word { text: String, expands: bool },
    /// A control or redirection operator.
    Op(String),
}

/// The shell's tokens of `command`, far enough to find its first program.
fn tokens(command: &str) -> Vec<Token> {
    let chars: Vec<char> = command.chars().collect();
    let mut out = Vec::new();
    let mut word = String::new();
    let mut expands = false;
    let mut in_word = false;
    let mut i = 0;
    let end_word =
        |out: &mut Vec<Token>, word: &mut String, expands: &mut bool, in_word: &mut bool| {
            if *in_word {
                out.push(Token::Word {
                    text: std::mem::take(word),
                    expands: std::mem::take(expands),
                });
                *in_word = false;
            }
        };
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => end_word(&mut out, &mut word, &mut expands, &mut in_word),
            '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>' => {
                // `2>file`: the digits before a redirection are its number.
                if matches!(c, '<' | '>')
                    && in_word
                    && !word.is_empty()
                    && word.chars().all(|d| d.is_ascii_digit())
                {
                    word.clear();
                    in_word = false;
                }
                end_word(&mut out, &mut word, &mut expands, &mut in_word);
                let mut op = c.to_string();
                if let Some(&next) = chars.get(i + 1) {
                    let two: String = [c, next].iter().collect();
                    if matches!(
                        two.as_str(),
                        "&&" | "||" | ";;" | ">>" | "<<" | ">&" | "<&" | "&>" | "<>" | ">|"
                    ) {
                        op = two;
                        i += 1;
                    }
                }
                out.push(Token::Op(op));
            }
            '\'' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '"' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    match chars[i] {
                        '\\' if i + 1 < chars.len() => {
                            i += 1;
                            word.push(chars[i]);
                        }
                        '$' | '`' => {
                            expands = true;
                            word.push(chars[i]);
                        }
                        other => word.push(other),
                    }
                    i += 1;
                }
            }
            '\\' => {
                in_word = true;
                if let Some(&next) = chars.get(i + 1) {
                    if next != '\n' {
                        word.push(next);
                    }
                    i += 1;
                }
            }
            '`' => {
                in_word = true;
                expands = true;
                word.push('`');
                i += 1;
                while i < chars.len() && chars[i] != '`' {
                    word.push(chars[i]);
                    i += 1;
                }
                word.push('`');
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                // `$(…)` (and `$((…))`): to its matching parenthesis, quotes
                // inside it kept whole.
                in_word = true;
                expands = true;
                let mut depth = 0usize;
                let mut quote: Option<char> = None;
                while i < chars.len() {
                    let ch = chars[i];
                    word.push(ch);
                    match (quote, ch) {
                        (Some(q), ch) if ch == q => quote = None,
                        (Some(_), _) => {}
                        (None, '\'' | '"') => quote = Some(ch),
                        (None, '(') => depth += 1,
                        (None, ')') => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
            }
            '$' => {
                in_word = true;
                expands = true;
                word.push('$');
            }
            other => {
                in_word = true;
                word.push(other);
            }
        }
        i += 1;
    }
    end_word(&mut out, &mut word, &mut expands, &mut in_word);
    out
}

/// `NAME=value`, an assignment before a command.
fn assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            let mut chars = name.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

const RESERVED: &[&str] = &[
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "{",
    "}", "!", "[[", "function", "select",
];

/// The first program `command` runs under `sh -c`.
pub fn first_program(command: &str) -> FirstProgram {
    let tokens = tokens(command);
    if tokens.is_empty() {
        return FirstProgram::Empty;
    }
    let mut redirect_target = false;
    let mut wrapper: Option<&str> = None;
    let mut assigned = false;
    for t in &tokens {
        match t {
            Token::Op(op) if op.contains('<') || op.contains('>') => redirect_target = true,
            Token::Op(op) if op == "(" => return FirstProgram::Unknown("a subshell"),
            Token::Op(_) => {
                // The first command ends before a program word.
                return match wrapper {
                    Some(w) => FirstProgram::Named(w.to_string()),
                    None if assigned => FirstProgram::Unknown("assignments only"),
                    None => FirstProgram::Unknown("an operator"),
                };
            }
            Token::Word { .. } if redirect_target => redirect_target = false,
            Token::Word { text, .. } if wrapper.is_none() && assignment(text) => assigned = true,
            Token::Word { text, .. }
                if wrapper == Some("env") && (text.starts_with('-') || assignment(text)) => {}
            Token::Word {
                text,
                expands: false,
            } if matches!(text.as_str(), "exec" | "env" | "nohup" | "time") => {
                wrapper = Some(match text.as_str() {
                    "exec" => "exec",
                    "env" => "env",
                    "nohup" => "nohup",
                    _ => "time",
                });
            }
            Token::Word { text, expands } => {
                if RESERVED.contains(&text.as_str()) {
                    return FirstProgram::Unknown("a compound command");
                }
                if *expands {
                    return FirstProgram::Unknown("a program given by a substitution");
                }
                return FirstProgram::Named(text.clone());
            }
        }
    }
    match wrapper {
        // `env` and `time` alone run themselves; `exec` and `nohup` alone do nothing.
        Some(w @ ("env" | "time" | "nohup")) => FirstProgram::Named(w.to_string()),
        _ if assigned => FirstProgram::Unknown("assignments only"),
        _ => FirstProgram::Empty,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn named(c: &str) -> FirstProgram {
        FirstProgram::Named(c.to_string())
    }

    #[test]
    fn the_program_is_what_the_shell_would_run_first() {
        for (command, first) in [
            (
                "claude -p \"$(cat $SUPERVISE_PROMPT_FILE)\"",
                named("claude"),
            ),
            (
                "X=$(echo hi); echo $X",
                FirstProgram::Unknown("assignments only"),
            ),
            (
                "f=$(grep -o 'a b' \"$SUPERVISE_PROMPT_FILE\" | head -1); cat \"$f\"",
                FirstProgram::Unknown("assignments only"),
            ),
            ("MODEL=x claude -p hi", named("claude")),
            ("env > /tmp/x; exit 1", named("env")),
            ("env | sort > /tmp/env.txt", named("env")),
            ("env -i PATH=/bin codex exec", named("codex")),
            ("2>/dev/null claude", named("claude")),
            ("claude 2>err.log", named("claude")),
            (
                "(cd sub && ./agent.sh)",
                FirstProgram::Unknown("a subshell"),
            ),
            ("{ claude; }", FirstProgram::Unknown("a compound command")),
            (
                "if true; then claude; fi",
                FirstProgram::Unknown("a compound command"),
            ),
            (
                "$AGENT --go",
                FirstProgram::Unknown("a program given by a substitution"),
            ),
            ("'./my agent.sh' --go", named("./my agent.sh")),
            ("exec nohup ./agent.sh", named("./agent.sh")),
            ("   ", FirstProgram::Empty),
        ] {
            assert_eq!(first_program(command), first, "{command}");
        }
    }

    /// Words that are never programs: what follows an assignment, an
    /// operator, a redirection.
    fn word() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9_.-]{0,8}"
    }

    proptest! {
        /// Whatever comes before it — assignments, redirections, wrappers,
        /// substitutions with spaces and quotes in them — the program named
        /// is the one the command runs, and no word of an assignment's value,
        /// a redirection's target or a substitution is ever taken for it.
        #[test]
        fn the_named_program_is_the_one_run(
            program in word().prop_filter("not a wrapper or reserved word", |w| {
                !matches!(w.as_str(), "exec" | "env" | "nohup" | "time") && !RESERVED.contains(&w.as_str())
            }),
            assignments in proptest::collection::vec(
                ("[a-z_][a-z0-9_]{0,6}", prop_oneof![
                    word(),
                    word().prop_map(|w| format!("$(echo {w} | head -1)")),
                    word().prop_map(|w| format!("\"{w} {w}\"")),
                    word().prop_map(|w| format!("'{w}; {w}'")),
                ]),
                0..3,
            ),
            redirects in proptest::collection::vec((prop_oneof![Just(">"), Just("2>"), Just("<"), Just(">>")], word()), 0..2),
            wrapper in prop_oneof![Just(""), Just("env "), Just("exec "), Just("nohup "), Just("env -i A=1 ")],
            args in proptest::collection::vec(word(), 0..3),
        ) {
            let mut command = String::new();
            for (name, value) in &assignments {
                command.push_str(&format!("V{name}={value} "));
            }
            for (op, target) in &redirects {
                command.push_str(&format!("{op} {target} "));
            }
            command.push_str(wrapper);
            command.push_str(&program);
            for a in &args {
                command.push(' ');
                command.push_str(a);
            }
            prop_assert_eq!(first_program(&command), FirstProgram::Named(program.clone()), "{}", command);
        }

        /// A command of assignments and then another command is never
        /// refused for a word of an assignment's value.
        #[test]
        fn assignments_alone_are_never_taken_for_a_program(
            name in "[A-Z][A-Z0-9_]{0,5}",
            value in word(),
            then in word(),
        ) {
            let command = format!("{name}=$(grep -o {value} \"$F\" | head -1); {then} \"${name}\"");
            prop_assert_eq!(first_program(&command), FirstProgram::Unknown("assignments only"));
        }
    }
}
