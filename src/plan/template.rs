//! A plan's own dispatch template (§6c): which variables it uses and how each is
//! filled for one sprint. The reader uses it to report variables it cannot fill;
//! the engine uses it to build prompts — one list of names for both.

use super::model::{Sprint, WorkUnit};

/// The variable spellings plans use, by what they stand for.
const UNIT: &[&str] = &[
    "<PACKAGE_NAME>",
    "<WORK_UNIT>",
    "<UNIT_NAME>",
    "<UNIT>",
    "{{unit}}",
    "{{work_unit}}",
    "{{package}}",
];
const DIR: &[&str] = &[
    "<PACKAGE_DIR>",
    "<UNIT_DIR>",
    "<DIRECTORY>",
    "{{directory}}",
    "{{dir}}",
];
const SPRINT: &[&str] = &[
    "<N>",
    "<SPRINT_ID>",
    "<SPRINT_NUMBER>",
    "{{sprint}}",
    "{{sprint_id}}",
];
const SPRINT_NAME: &[&str] = &["<SPRINT_NAME>", "{{sprint_name}}"];
/// Environment-style variables the agent's shell or the supervisor resolves.
const PASSED_THROUGH: &[&str] = &["$PROJECT_ROOT"];

/// The template filled for one sprint, and the variables left as written
/// (each once, in the order they first appear).
pub fn fill(template: &str, unit: &WorkUnit, sprint: &Sprint) -> (String, Vec<String>) {
    let dir = unit.directory.clone().unwrap_or_else(|| ".".to_string());
    let pairs: [(&[&str], &str); 4] = [
        (UNIT, &unit.name),
        (DIR, &dir),
        (SPRINT, sprint.id.as_str()),
        (SPRINT_NAME, &sprint.name),
    ];
    let mut out = template.to_string();
    for (keys, value) in pairs {
        for k in keys {
            out = out.replace(k, value);
        }
    }
    // A choice such as `<8|9|10|11|12>` (seed 001's Appendix D: "the section
    // number for this package's sprint definitions") takes the option that
    // numbers the section holding the unit's sprints.
    let mut unfilled = Vec::new();
    for var in variables(&out) {
        if let Some(options) = choice(&var) {
            let pick = unit.section.as_deref().and_then(|n| {
                options
                    .iter()
                    .find(|o| **o == n || n.split('.').next() == Some(o))
            });
            match pick {
                Some(o) => out = out.replace(&var, o),
                None => unfilled.push(var),
            }
        } else if !PASSED_THROUGH.contains(&var.as_str()) {
            unfilled.push(var);
        }
    }
    // The agent runs at the project root, so root-relative paths need no prefix.
    let out = out
        .replace("$PROJECT_ROOT/", "")
        .replace("${PROJECT_ROOT}/", "")
        .replace("$PROJECT_ROOT", ".");
    (out, unfilled)
}

fn choice(var: &str) -> Option<Vec<&str>> {
    let inner = var.strip_prefix('<')?.strip_suffix('>')?;
    inner
        .contains('|')
        .then(|| inner.split('|').map(str::trim).collect())
}

/// The variables a template uses: `<UPPER_CASE>`, `<a|b|c>` choices,
/// `{{name}}` and `$UPPER_CASE`, each once, in order of first appearance.
pub fn variables(text: &str) -> Vec<String> {
    let mut vars: Vec<String> = Vec::new();
    let mut push = |v: String| {
        if !vars.contains(&v) {
            vars.push(v);
        }
    };
    let chars: Vec<char> = text.chars().collect();
    let take = |from: usize, stop: char| -> Option<(String, usize)> {
        let mut j = from;
        let mut s = String::new();
        while j < chars.len() && chars[j] != stop && s.len() < 40 {
            s.push(chars[j]);
            j += 1;
        }
        (j < chars.len() && chars[j] == stop).then_some((s, j))
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '<' {
            if let Some((name, j)) = take(i + 1, '>') {
                let upper = |s: &str| {
                    !s.is_empty()
                        && s.chars()
                            .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
                };
                let is_choice = name.contains('|')
                    && name
                        .split('|')
                        .all(|o| !o.trim().is_empty() && !o.contains(char::is_whitespace));
                if upper(&name) || is_choice {
                    push(format!("<{name}>"));
                    i = j;
                }
            }
        } else if c == '{' && chars.get(i + 1) == Some(&'{') {
            if let Some((name, j)) = take(i + 2, '}') {
                push(format!("{{{{{}}}}}", name.trim()));
                i = j;
            }
        } else if c == '$' {
            let start = if chars.get(i + 1) == Some(&'{') {
                i + 2
            } else {
                i + 1
            };
            let name: String = chars[start.min(chars.len())..]
                .iter()
                .take_while(|c| c.is_ascii_uppercase() || **c == '_')
                .collect();
            if name.len() > 1 {
                push(format!("${name}"));
            }
        }
        i += 1;
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::SprintId;

    fn unit(section: Option<&str>) -> (WorkUnit, Sprint) {
        let sprint = Sprint {
            id: SprintId::parse("3").unwrap(),
            name: "Parser types".into(),
            line: 1,
            kind: crate::plan::SprintType::Code,
            tasks: vec![],
            entry_criteria: vec![],
            exit_criteria: vec![],
            notes: vec![],
            body: String::new(),
        };
        let u = WorkUnit {
            name: "parser".into(),
            directory: Some("Parser".into()),
            layer: 0,
            depends_on: vec![],
            line: 1,
            section: section.map(str::to_string),
            sprints: vec![sprint.clone()],
        };
        (u, sprint)
    }

    #[test]
    fn a_section_choice_is_filled_from_the_units_section_number() {
        let t = "Work on <PACKAGE_NAME> at $PROJECT_ROOT/<PACKAGE_DIR>/: Sprint <N> (<SPRINT_NAME>) in Section <8|9|10|11|12>.";
        let (u, s) = unit(Some("10"));
        let (out, unfilled) = fill(t, &u, &s);
        assert_eq!(
            out,
            "Work on parser at Parser/: Sprint 3 (Parser types) in Section 10."
        );
        assert!(unfilled.is_empty());
        let (u, s) = unit(None);
        let (out, unfilled) = fill(t, &u, &s);
        assert!(out.contains("Section <8|9|10|11|12>"));
        assert_eq!(unfilled, ["<8|9|10|11|12>"]);
    }

    #[test]
    fn unknown_variables_are_reported_once() {
        let (u, s) = unit(None);
        let (_, unfilled) = fill("<TICKET> and {{owner}} and <TICKET> and $HOME_DIR", &u, &s);
        assert_eq!(unfilled, ["<TICKET>", "{{owner}}", "$HOME_DIR"]);
    }
}
