//! Writing the plan's frontmatter: the one edit the supervisor makes to a
//! plan, naming the operation (`feature_name`, the ritual of §2–3). Text in,
//! text out, everything else in the file kept byte for byte.

/// `source` with `feature_name: <name>` in its leading `---` block: the
/// key's line replaced where there is one, added at the block's end where
/// the block lacks it, and a block made where the plan has none.
pub fn with_feature_name(source: &str, name: &str) -> String {
    // A name is words; anything that would end the line or the block is not
    // written (names come from the naming ritual, this only makes sure).
    let name: String = name
        .chars()
        .filter(|c| !c.is_control())
        .collect::<String>()
        .trim()
        .to_string();
    let line = format!("feature_name: {name}");
    // A byte-order mark stays first, where the reader expects it, and the
    // block is looked for after it.
    if let Some(rest) = source.strip_prefix('\u{feff}') {
        return format!("\u{feff}{}", with_feature_name(rest, &name));
    }
    let Some(block) = leading_block(source) else {
        return format!("---\n{line}\n---\n\n{source}");
    };
    let inner = &source[block.inner.clone()];
    let mut out = String::with_capacity(source.len() + line.len() + 1);
    out.push_str(&source[..block.inner.start]);
    let mut found = false;
    for l in inner.split_inclusive('\n') {
        if !found && l.trim_start().starts_with("feature_name:") && !l.starts_with([' ', '\t']) {
            found = true;
            out.push_str(&line);
            out.push_str(if l.ends_with("\r\n") { "\r\n" } else { "\n" });
        } else {
            out.push_str(l);
        }
    }
    if !found {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&source[block.inner.end..]);
    out
}

/// Where the leading metadata block's lines are: after the opening `---`
/// line, up to the line that closes it.
struct Block {
    inner: std::ops::Range<usize>,
}

fn leading_block(source: &str) -> Option<Block> {
    let first = source.split_inclusive('\n').next()?;
    if first.trim_end() != "---" || !first.ends_with('\n') {
        return None;
    }
    let start = first.len();
    let mut at = start;
    for l in source[start..].split_inclusive('\n') {
        if matches!(l.trim_end(), "---" | "...") {
            return Some(Block { inner: start..at });
        }
        at += l.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::with_feature_name;
    use proptest::prelude::*;

    const PLAN: &str = "# Tool\n\n## Sprint 1: Scaffold\n- [ ] `a.txt` exists\n";

    #[test]
    fn a_plan_without_frontmatter_gets_a_block_and_one_with_it_keeps_the_rest() {
        assert_eq!(
            with_feature_name(PLAN, "Brave Otter"),
            format!("---\nfeature_name: Brave Otter\n---\n\n{PLAN}")
        );
        let with = format!("---\nowner: ana\n---\n{PLAN}");
        assert_eq!(
            with_feature_name(&with, "Brave Otter"),
            format!("---\nowner: ana\nfeature_name: Brave Otter\n---\n{PLAN}")
        );
        let bom = format!("\u{feff}---\nowner: ana\n---\n{PLAN}");
        assert_eq!(
            with_feature_name(&bom, "Brave Otter"),
            format!("\u{feff}---\nowner: ana\nfeature_name: Brave Otter\n---\n{PLAN}")
        );
        let named = format!("---\nfeature_name: Old Name\r\nowner: ana\r\n---\r\n{PLAN}");
        assert_eq!(
            with_feature_name(&named, "New\nName"),
            format!("---\nfeature_name: NewName\r\nowner: ana\r\n---\r\n{PLAN}")
        );
    }

    proptest! {
        /// Whatever the plan and the name, the plan reads the same with the
        /// name written into it, and the name reads back.
        #[test]
        fn the_name_reads_back_and_the_plan_is_otherwise_unchanged(
            name in "[A-Z][a-z]{1,12}( [A-Z][a-z]{1,12}){0,2}",
            front in proptest::option::of("[a-z]{1,8}: [a-z ]{0,12}"),
            named in proptest::bool::ANY,
        ) {
            let mut src = String::new();
            if front.is_some() || named {
                src.push_str("---\n");
                if named { src.push_str("feature_name: Earlier\n"); }
                if let Some(f) = &front { src.push_str(f); src.push('\n'); }
                src.push_str("---\n");
            }
            src.push_str(PLAN);
            let before = crate::plan::parse(&src, "x").unwrap();
            let after = crate::plan::parse(&with_feature_name(&src, &name), "x").unwrap();
            prop_assert_eq!(after.feature_name.as_deref(), Some(name.as_str()));
            // Lines move down; nothing that matters changes.
            prop_assert!(crate::plan::diff::changes(&before, &after).is_empty());
            prop_assert_eq!(after.total_sprints(), before.total_sprints());
            prop_assert_eq!(with_feature_name(&with_feature_name(&src, &name), &name), with_feature_name(&src, &name));
        }
    }
}
