//! Small text helpers shared by the plan reader, the command parsers and
//! what is published.

/// Edit distance between two short strings (for "did you mean …" answers), with
/// a swap of two neighbouring letters counted as one edit — the commonest typo.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// The candidate nearest to `word`, if it is near enough to be a plausible typo.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let w = word.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (edit_distance(&w, &c.to_lowercase()), c))
        .filter(|(d, c)| *d <= (c.chars().count() / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Whether `hay`, lowercased, contains `needle` (lowercase). ASCII text is
/// searched in place; other text is lowercased first, as some characters
/// lowercase to ASCII letters (the Kelvin sign to `k`).
pub fn contains_lowercase(hay: &str, needle: &str) -> bool {
    if !hay.is_ascii() {
        return hay.to_lowercase().contains(needle);
    }
    let (hay, needle) = (hay.as_bytes(), needle.as_bytes());
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    let Some(last_start) = hay.len().checked_sub(needle.len()) else {
        return false;
    };
    // Plan reading asks this of every heading, for several words: jump
    // from one place the needle's first letter (either case) could start
    // to the next, instead of comparing at every byte.
    let mut from = 0;
    while let Some(i) = memchr::memchr2(first, first.to_ascii_uppercase(), &hay[from..=last_start])
    {
        let at = from + i;
        if hay[at + 1..at + needle.len()].eq_ignore_ascii_case(rest) {
            return true;
        }
        from = at + 1;
    }
    false
}

/// Whether `needle` occurs in `hay` (both lower-case) with no letter, digit, `-` or `_`
/// on either side, so that `validation` does not match inside `validation-profiles`.
pub fn contains_word(hay: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return false;
    }
    let is_word = |c: char| c.is_alphanumeric() || c == '-' || c == '_';
    hay.match_indices(needle).any(|(i, _)| {
        let before = hay[..i].chars().next_back();
        let after = hay[i + needle.len()..].chars().next();
        !before.is_some_and(is_word) && !after.is_some_and(is_word)
    })
}

/// "1 agent", "3 agents": a number and its noun, agreeing (the nouns the
/// product counts all take an `s`).
/// A commit's short id, as evidence and reports show it.
pub fn short_id(sha: &str) -> String {
    sha.get(..7).unwrap_or(sha).to_string()
}

/// `s` as one word for a POSIX shell: as it is when nothing in it is
/// special, else in single quotes. A next step printed with a name in it
/// (a unit called `API v1`) must work when typed.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// `text` as the start of a sentence: its first letter a capital.
pub fn sentence(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Names joined with commas, or `none` when there are none (a table cell).
pub fn names_or(names: &[String], none: &str) -> String {
    if names.is_empty() {
        none.to_string()
    } else {
        names.join(", ")
    }
}

/// A file- and branch-safe slug: lower-case ASCII letters, digits and `-`.
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.truncate(48);
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        out.push_str("unit");
    }
    out
}

/// One slug per unit name, unique within the list: the readable [`slug`]
/// where it is unambiguous, else the slug (shortened) with a short stable hash
/// of the full name — for names that lose their meaning in ASCII (`Ядро`),
/// differ only in punctuation (`API v1` / `API-v1`) or share their first 48
/// characters. A numeric suffix settles the (unlikely) hash collision.
pub fn unit_slugs(names: &[&str]) -> Vec<String> {
    let base: Vec<String> = names.iter().map(|n| slug(n)).collect();
    let lossy = |i: usize| {
        let ascii: String = names[i]
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect();
        ascii.is_empty() || names[i].chars().filter(|c| c.is_alphanumeric()).count() > ascii.len()
    };
    let mut out: Vec<String> = (0..names.len())
        .map(|i| {
            let shared = base.iter().filter(|b| **b == base[i]).count() > 1;
            if shared || lossy(i) {
                let mut b = base[i].clone();
                b.truncate(40);
                let b = b.trim_end_matches('-');
                let b = if b == "unit" || b.is_empty() {
                    "unit"
                } else {
                    b
                };
                format!("{b}-{:06x}", fnv1a(names[i]) & 0xff_ffff)
            } else {
                base[i].clone()
            }
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    for o in out.iter_mut() {
        if !seen.insert(o.clone()) {
            let n = (2..)
                .find(|n| !seen.contains(&format!("{o}-{n}")))
                .unwrap_or(2);
            *o = format!("{o}-{n}");
            seen.insert(o.clone());
        }
    }
    out
}

/// FNV-1a: a small hash that is the same in every build and on every machine.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The most characters of untrusted text echoed in one code span.
const ECHO_MAX: usize = 80;

/// `text` (untrusted: from a comment) as a Markdown code span that no content
/// can close: the fence is one backtick longer than the longest run inside,
/// control characters and line breaks become spaces, and it is cut at
/// [`ECHO_MAX`] characters. Nothing inside a code span renders — no link, image,
/// HTML or @mention.
pub fn code_span(text: &str) -> String {
    let mut t: String = text
        .chars()
        .take(ECHO_MAX)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(ECHO_MAX).is_some() {
        t.push('…');
    }
    let (mut longest, mut run) = (0, 0);
    for c in t.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    // A space keeps a backtick at either end from joining the fence; CommonMark
    // strips one space on each side when both are there.
    let pad = if t.starts_with('`') || t.ends_with('`') || t.trim().is_empty() {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{t}{pad}{fence}")
}

/// `text` as a fenced code block no line inside can close: the fence is
/// longer than the longest run of backticks in it.
pub fn code_block(text: &str) -> String {
    let (mut longest, mut run) = (0, 0);
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}\n{}\n{fence}", text.trim_end_matches('\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_login_is_what_github_could_have_given_a_person() {
        for ok in ["mia", "a-b", "A1", &"x".repeat(39)] {
            assert!(super::is_user_login(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a--b",
            "renovate[bot]",
            "a b",
            "@mia",
            &"x".repeat(40),
        ] {
            assert!(!super::is_user_login(bad), "{bad}");
        }
    }

    #[test]
    fn nearest_finds_typos_only() {
        assert_eq!(nearest("stat", ["start", "status", "stop"]), Some("start"));
        assert_eq!(nearest("stauts", ["start", "status"]), Some("status"));
        assert_eq!(edit_distance("ab", "ba"), 1);
        assert_eq!(nearest("killal", ["killall", "resume"]), Some("killall"));
        assert_eq!(nearest("zebra", ["start", "resume"]), None);
    }

    #[test]
    fn words_have_boundaries() {
        assert!(contains_word("needs validation first", "validation"));
        assert!(!contains_word("needs validation-profiles", "validation"));
        assert!(contains_word("(parser)", "parser"));
    }

    #[test]
    fn slugs_are_safe() {
        assert_eq!(slug("Swift Verificar / Parser"), "swift-verificar-parser");
        assert_eq!(slug("Ünïcode ☃"), "n-code");
        assert_eq!(slug("!!!"), "unit");
    }

    #[test]
    fn colliding_names_get_distinct_readable_slugs() {
        let long = "a".repeat(60);
        let long2 = format!("{}b", "a".repeat(59));
        let names = [
            "API v1", "API-v1", "Parser", "Parser!", "Ядро", "Узел", &long, &long2, "web",
        ];
        let slugs = unit_slugs(&names);
        let unique: std::collections::HashSet<_> = slugs.iter().collect();
        assert_eq!(unique.len(), names.len(), "{slugs:?}");
        assert_eq!(slugs[8], "web", "an unambiguous name keeps its plain slug");
        assert!(
            slugs[0].starts_with("api-v1-") && slugs[2].starts_with("parser-"),
            "{slugs:?}"
        );
        assert_eq!(slugs, unit_slugs(&names), "stable");
    }

    proptest::proptest! {
        /// Any set of distinct names gets distinct slugs that git accepts in a
        /// branch name, whatever script or punctuation the names use.
        #[test]
        fn unit_slugs_are_unique_and_branch_safe(names in proptest::collection::hash_set("[a-zA-Z0-9 !._/-]{1,60}|\\PC{1,12}", 1..12)) {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let slugs = unit_slugs(&names);
            let unique: std::collections::HashSet<_> = slugs.iter().collect();
            proptest::prop_assert_eq!(unique.len(), names.len());
            for s in &slugs {
                proptest::prop_assert!(!s.is_empty() && s.len() <= 56, "{}", s);
                let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
                proptest::prop_assert!(s.chars().all(allowed), "{}", s);
                proptest::prop_assert!(!s.starts_with('-') && !s.ends_with('-'), "{}", s);
            }
        }
    }

    proptest::proptest! {
        /// Whatever a commenter writes, its echo renders as one code span and
        /// nothing else: no link, image, HTML or text outside it.
        #[test]
        fn an_echoed_argument_is_always_one_inert_code_span(s in "[a-z@`\\[\\]()<>!*_ \n\t]{0,100}") {
            let md = format!("Echo: {} done", code_span(&s));
            let events: Vec<_> = pulldown_cmark::Parser::new(&md).collect();
            let codes = events.iter().filter(|e| matches!(e, pulldown_cmark::Event::Code(_))).count();
            proptest::prop_assert_eq!(codes, 1, "{}", md);
            for e in &events {
                let inert = matches!(
                    e,
                    pulldown_cmark::Event::Code(_)
                        | pulldown_cmark::Event::Text(_)
                        | pulldown_cmark::Event::Start(pulldown_cmark::Tag::Paragraph)
                        | pulldown_cmark::Event::End(pulldown_cmark::TagEnd::Paragraph)
                );
                proptest::prop_assert!(inert, "{:?} in {}", e, md);
            }
            let text: String = events.iter().filter_map(|e| match e {
                pulldown_cmark::Event::Text(t) => Some(t.to_string()),
                _ => None,
            }).collect();
            proptest::prop_assert_eq!(text, "Echo:  done");
        }
    }

    proptest::proptest! {
        /// The jumping search says what lowercasing the text and looking
        /// for the needle says, for needles opening with a letter or not,
        /// and for text that is not ASCII.
        #[test]
        fn contains_lowercase_is_lowercasing_then_searching(
            hay in "[aAbB K\u{212a}é-]{0,24}",
            needle in "[ab k-]{0,4}",
        ) {
            proptest::prop_assert_eq!(
                contains_lowercase(&hay, &needle),
                hay.to_lowercase().contains(needle.as_str()),
                "{:?} in {:?}", needle, hay
            );
        }
    }
}

/// Whether `login` is a person's name as GitHub gives them: letters, digits
/// and single hyphens inside, at most 39 characters. A bot's (`name[bot]`)
/// or anything else is not, so it is never mentioned.
pub fn is_user_login(login: &str) -> bool {
    (1..=39).contains(&login.len())
        && login
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !login.starts_with('-')
        && !login.ends_with('-')
        && !login.contains("--")
}

/// `text` with every `@name` outside code made inert: a word joiner after
/// the `@` keeps GitHub from notifying `name` (or a team), while the text
/// reads the same. Every body and title the App writes passes through it:
/// a plan's unit names, an agent's output or an issue's words must never
/// ping people. Code (fenced blocks, inline spans) is left as it is — GitHub
/// does not notify from code, and code is shown verbatim.
pub fn inert_mentions(text: &str) -> String {
    use pulldown_cmark::{Event, Parser, Tag, TagEnd};
    if !text.contains('@') {
        return text.to_string();
    }
    // Where the text is prose, as GitHub's Markdown reader sees it: code
    // spans and code blocks are not, and a hand-made scanner of backticks
    // gets CommonMark's rules for them wrong.
    let mut at = Vec::new();
    let mut in_block = false;
    for (e, range) in Parser::new(text).into_offset_iter() {
        match e {
            Event::Start(Tag::CodeBlock(_)) => in_block = true,
            Event::End(TagEnd::CodeBlock) => in_block = false,
            Event::Text(_) if !in_block => {
                let prose = &text[range.clone()];
                let mut prev: Option<char> = text[..range.start].chars().next_back();
                let mut chars = prose.char_indices().peekable();
                while let Some((i, c)) = chars.next() {
                    if c == '@'
                        && !prev.is_some_and(char::is_alphanumeric)
                        && chars.peek().is_some_and(|(_, n)| n.is_alphanumeric())
                    {
                        at.push(range.start + i + 1);
                    }
                    prev = Some(c);
                }
            }
            _ => {}
        }
    }
    let mut out = String::with_capacity(text.len() + 3 * at.len());
    let mut from = 0;
    for i in at {
        out.push_str(&text[from..i]);
        out.push('\u{2060}');
        from = i;
    }
    out.push_str(&text[from..]);
    out
}

#[cfg(test)]
mod mention_tests {
    use super::inert_mentions;
    use proptest::prelude::*;

    /// A mention GitHub would notify: `@` then a letter or digit, in text
    /// outside code, not part of a word (an e-mail address is not one).
    fn live_mentions(markdown: &str) -> Vec<String> {
        use pulldown_cmark::{Event, Tag, TagEnd};
        let mut found = Vec::new();
        let mut in_block = false;
        for e in pulldown_cmark::Parser::new(markdown) {
            match &e {
                Event::Start(Tag::CodeBlock(_)) => in_block = true,
                Event::End(TagEnd::CodeBlock) => in_block = false,
                _ => {}
            }
            if let (Event::Text(t), false) = (e, in_block) {
                let chars: Vec<char> = t.chars().collect();
                for (i, c) in chars.iter().enumerate() {
                    let before_ok = i == 0 || !chars[i - 1].is_alphanumeric();
                    if *c == '@'
                        && before_ok
                        && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric())
                    {
                        found.push(t.to_string());
                    }
                }
            }
        }
        found
    }

    proptest! {
        /// Whatever the text, nothing in it can notify anyone afterwards, and
        /// it reads the same (only word joiners were added).
        #[test]
        fn no_mention_survives_and_nothing_else_changes(
            text in "(@[a-z]{1,6}|`[^`\n]{0,6}`|\n```\n|[ a-z.@|\n-]{0,5}){0,12}"
        ) {
            let out = inert_mentions(&text);
            prop_assert!(live_mentions(&out).is_empty(), "{:?} → {:?}", text, out);
            prop_assert_eq!(out.replace('\u{2060}', ""), text);
        }
    }

    #[test]
    fn unit_names_and_agent_words_ping_nobody_but_code_is_kept() {
        let out =
            inert_mentions("| @alice's unit | @org/team | `@keep` | mail a@b.c\n```\n@fenced\n```");
        assert!(live_mentions(&out).is_empty(), "{out}");
        assert!(out.contains("`@keep`") && out.contains("\n@fenced\n") && out.contains("a@b.c"));
    }
}

mod untrusted;
pub(crate) use untrusted::hidden;
pub use untrusted::{clean_untrusted, for_terminal, quoted};
