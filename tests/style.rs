//! The source stays readable: no line of `src/` runs past 120 characters
//! outside string literals (a long message or a JSON example may, as
//! breaking it would only make it harder to search for), and every file
//! says what it owns.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each line's width counting a string literal's content as nothing: the
/// code's own width. Reads Rust's literals as the lexer does — `"…"` with
/// escapes, raw `r#"…"#` with any number of `#`, byte strings, and char
/// literals (`'"'` opens no string) — across lines; comments count.
fn code_widths(text: &str) -> Vec<usize> {
    let chars: Vec<char> = text.chars().collect();
    let mut widths = vec![0usize];
    // None: code; Some(n): inside a string closed by `"` and n `#`s
    // (n = usize::MAX: a plain string, closed by an unescaped `"`).
    let mut inside: Option<usize> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            widths.push(0);
            i += 1;
            continue;
        }
        match inside {
            Some(usize::MAX) => {
                if c == '\\' {
                    // An escaped newline is still a new line.
                    if chars.get(i + 1) == Some(&'\n') {
                        i += 1;
                        continue;
                    }
                    i += 2;
                    continue;
                }
                if c == '"' {
                    inside = None;
                    *widths.last_mut().unwrap() += 1;
                }
            }
            Some(hashes) => {
                let closes = c == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#'));
                if closes {
                    inside = None;
                    *widths.last_mut().unwrap() += 1 + hashes;
                    i += 1 + hashes;
                    continue;
                }
            }
            None => {
                let w = widths.last_mut().unwrap();
                if c == '/' && chars.get(i + 1) == Some(&'/') {
                    // A comment: counted to the end of its line, read as text.
                    while i < chars.len() && chars[i] != '\n' {
                        *w += 1;
                        i += 1;
                    }
                    continue;
                }
                if c == '\'' {
                    // A char literal ('"', '\'', '\\') or a lifetime.
                    let lit = match (chars.get(i + 1), chars.get(i + 2), chars.get(i + 3)) {
                        (Some('\\'), _, _) => chars[i + 3..]
                            .iter()
                            .position(|&c| c == '\'')
                            .map(|p| p + 4),
                        (Some(_), Some('\''), _) => Some(3),
                        _ => None,
                    };
                    let len = lit.unwrap_or(1);
                    *w += len;
                    i += len;
                    continue;
                }
                let raw_start = (c == 'r' || (c == 'b' && chars.get(i + 1) == Some(&'r')))
                    && !chars
                        .get(i.wrapping_sub(1))
                        .is_some_and(|p| p.is_alphanumeric() || *p == '_');
                if raw_start {
                    let from = if c == 'b' { i + 2 } else { i + 1 };
                    let hashes = chars[from..].iter().take_while(|&&h| h == '#').count();
                    if chars.get(from + hashes) == Some(&'"') {
                        inside = Some(hashes);
                        *w += from + hashes + 1 - i;
                        i = from + hashes + 1;
                        continue;
                    }
                }
                if c == '"' {
                    inside = Some(usize::MAX);
                }
                *w += 1;
            }
        }
        i += 1;
    }
    widths
}

#[test]
fn no_line_of_code_runs_past_120_characters() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    files.sort();
    let mut long = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (n, w) in code_widths(&text).into_iter().enumerate() {
            if w > 120 {
                long.push(format!("{}:{} ({w})", f.display(), n + 1));
            }
        }
    }
    assert!(
        long.is_empty(),
        "lines past 120 characters of code:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_width_counts_code_and_not_what_a_literal_holds() {
    let w = |t: &str| code_widths(t);
    assert_eq!(w("let a = \"xyz\";"), vec![11]);
    assert_eq!(w("f(r#\"a \"b\" c\"#, 'x', '\"', b)"), vec![21]);
    assert_eq!(w("let s = \"one\n  two\";\nx"), vec![9, 2, 1]);
    assert_eq!(w("fn f<'a>(x: &'a str) {} // \"not a string"), vec![40]);
    assert_eq!(w("br\"x\" '\\\\' '\\''"), vec![14]);
}
