//! Small text helpers shared by the plan reader and the command parsers.

/// Edit distance between two short strings (for "did you mean …" answers), with
/// a swap of two neighbouring letters counted as one edit — the commonest typo.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for j in 0..=b.len() {
        d[0][j] = j;
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
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        out.push_str("unit");
    }
    out.truncate(48);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
