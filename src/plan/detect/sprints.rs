//! §2b and §2g: a unit's sprints — headings, `Task N.M` items or a table —
//! their parts, their order, and their type.

use super::{
    column, command_criterion, criterion, is_none_word, label_of, paragraph_label, plain,
    push_criterion, AhoCorasick, BTreeMap, Block, CriterionKind, Doc, Label, Outline, Problem,
    Range, Sprint, SprintId, SprintType,
};

/// `Sprint 2a: Name` → (`2a`, `Name`).
pub(crate) fn sprint_heading(text: &str) -> Option<(SprintId, String)> {
    let t = plain(text);
    // `Sprint` in any case, compared in place: lowercasing the whole heading
    // first cost a copy per heading (and may change its length).
    let rest = t
        .get(..6)
        .filter(|w| w.eq_ignore_ascii_case("sprint"))
        .map(|_| &t[6..])?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let rest_orig = rest.trim_start();
    let id_len = rest_orig
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(rest_orig.len());
    let id = SprintId::parse(&rest_orig[..id_len])?;
    let after = rest_orig[id_len..].trim_start();
    let name = if after.is_empty() {
        format!("Sprint {id}")
    } else {
        let sep = after.chars().next()?;
        if !matches!(sep, ':' | '.' | '-' | '—' | '–' | '(') {
            return None;
        }
        after[sep.len_utf8()..]
            .trim()
            .trim_end_matches(')')
            .trim()
            .to_string()
    };
    let name = if name.is_empty() {
        format!("Sprint {id}")
    } else {
        name
    };
    Some((id, name))
}

/// `Task 3.2: Name` → (3, `Name`).
pub(super) fn task_heading(text: &str) -> Option<(u32, String)> {
    let t = plain(text);
    let rest = t
        .strip_prefix("Task ")
        .or_else(|| t.strip_prefix("task "))?;
    let (num, name) = rest.split_once([':', ' ']).unwrap_or((rest, ""));
    let (major, minor) = num.trim_end_matches(':').split_once('.')?;
    minor.parse::<u32>().ok()?;
    Some((
        major.parse().ok()?,
        name.trim_start_matches(':').trim().to_string(),
    ))
}

pub(super) fn is_sprint_table(header: &[String]) -> bool {
    column(header, &["sprint", "sprint id", "#"]).is_some()
        && column(
            header,
            &[
                "name",
                "description",
                "goal",
                "title",
                "deliverable",
                "objective",
            ],
        )
        .is_some()
}

/// §2b in priority order, within one unit's region.
pub(super) fn find_sprints(doc: &Doc, o: &Outline, r: Range<usize>) -> Vec<Sprint> {
    let blocks = &doc.blocks;
    // 1. `## Sprint N:` headers.
    let heads: Vec<(usize, SprintId, String)> = (r.start..r.end)
        .filter_map(|i| {
            let (_, text) = blocks[i].heading()?;
            sprint_heading(text).map(|(id, name)| (i, id, name))
        })
        .collect();
    if !heads.is_empty() {
        // A sprint ends at the next sprint heading whatever its level: a
        // `### Sprint 2` under `## Sprint 1` is its sibling, not its part.
        let next: Vec<usize> = heads.iter().skip(1).map(|h| h.0).chain([r.end]).collect();
        return heads
            .into_iter()
            .zip(next)
            .map(|((i, id, name), next)| {
                let s = o.section(i);
                let end = s.end.min(r.end).min(next);
                build_sprint(doc, id, name, i, i + 1..end)
            })
            .collect();
    }
    // 2. A sprint table.
    for b in &blocks[r.clone()] {
        if let Block::Table { header, rows, .. } = b {
            if is_sprint_table(header) {
                return table_sprints(header, rows);
            }
        }
    }
    // 3. `### Task N.M:` headers grouped by N.
    let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for i in r.clone() {
        if let Some((_, text)) = blocks[i].heading() {
            if let Some((major, _)) = task_heading(text) {
                groups.entry(major).or_default().push(i);
            }
        }
    }
    if !groups.is_empty() {
        return groups
            .into_iter()
            .map(|(major, heads)| {
                let first = heads[0];
                let last = o.section(*heads.last().unwrap_or(&first));
                let mut s = build_sprint(
                    doc,
                    SprintId::ordinal(major as usize),
                    format!("Sprint {major}"),
                    first,
                    first + 1..last.end.min(r.end),
                );
                let titles: Vec<String> = heads
                    .iter()
                    .filter_map(|&h| blocks[h].heading().map(|(_, t)| plain(t)))
                    .collect();
                if let Some(t) = titles.first().and_then(|t| task_heading(t)).map(|(_, n)| n) {
                    if !t.is_empty() {
                        s.name = t;
                    }
                }
                let mut tasks = titles;
                tasks.append(&mut s.tasks);
                s.tasks = tasks;
                s.kind = classify(&s.name, &s.tasks, None);
                s
            })
            .collect();
    }
    // 4. Checklist groups under headers.
    let mut out = Vec::new();
    for i in r.clone() {
        let Some((_, text)) = blocks[i].heading() else {
            continue;
        };
        if label_of(text).is_some() {
            continue;
        }
        let end = blocks[i + 1..r.end]
            .iter()
            .position(|b| b.heading().is_some())
            .map_or(r.end, |p| i + 1 + p);
        let has_checks = blocks[i + 1..end].iter().any(|b| {
            matches!(
                b,
                Block::Item {
                    checked: Some(_),
                    ..
                }
            )
        });
        if has_checks {
            let s = o.section(i);
            out.push(build_sprint(
                doc,
                SprintId::ordinal(out.len() + 1),
                plain(text),
                i,
                i + 1..s.end.min(r.end),
            ));
        }
    }
    out
}

pub(super) fn table_sprints(header: &[String], rows: &[crate::plan::blocks::Row]) -> Vec<Sprint> {
    let id_col = column(header, &["sprint", "sprint id", "#"]).unwrap_or(0);
    let name_col = column(
        header,
        &[
            "name",
            "title",
            "goal",
            "objective",
            "deliverable",
            "description",
        ],
    );
    let desc_col = column(header, &["description", "tasks", "deliverables", "scope"]);
    let entry_col = column(header, &["entry criteria", "entry", "preconditions"]);
    let exit_col = column(
        header,
        &[
            "exit criteria",
            "exit",
            "done when",
            "validation",
            "acceptance",
        ],
    );
    let type_col = column(header, &["type", "kind"]);
    rows.iter()
        .enumerate()
        .map(|(n, r)| {
            let get =
                |c: Option<usize>| c.and_then(|c| r.cells.get(c)).cloned().unwrap_or_default();
            let id = SprintId::parse(&plain(&get(Some(id_col))))
                .unwrap_or_else(|| SprintId::ordinal(n + 1));
            let name = plain(&get(name_col));
            let tasks: Vec<String> = if desc_col.is_some() && desc_col != name_col {
                split_cell(&get(desc_col))
            } else {
                Vec::new()
            };
            let crit = |c: Option<usize>, label: Label| {
                split_cell(&get(c))
                    .into_iter()
                    .map(|t| criterion(&t, r.line, label))
                    .collect::<Vec<_>>()
            };
            let explicit = SprintType::parse(&plain(&get(type_col)));
            Sprint {
                kind: classify(&name, &tasks, explicit),
                name: if name.is_empty() {
                    format!("Sprint {id}")
                } else {
                    name
                },
                id,
                line: r.line,
                entry_criteria: crit(entry_col, Label::Entry),
                exit_criteria: crit(exit_col, Label::Exit),
                tasks,
                notes: Vec::new(),
                body: r.cells.join(" | "),
            }
        })
        .collect()
}

pub(super) fn split_cell(s: &str) -> Vec<String> {
    s.split("; ")
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty() && !is_none_word(p))
        .collect()
}

pub(super) fn build_sprint(
    doc: &Doc,
    id: SprintId,
    name: String,
    head: usize,
    r: Range<usize>,
) -> Sprint {
    let blocks = &doc.blocks;
    let mut s = Sprint {
        id,
        name,
        line: blocks[head].line(),
        kind: SprintType::Code,
        tasks: Vec::new(),
        entry_criteria: Vec::new(),
        exit_criteria: Vec::new(),
        notes: Vec::new(),
        body: body_text(doc, head, r.end),
    };
    let mut label: Option<Label> = None;
    let mut explicit: Option<SprintType> = None;
    for b in &blocks[r] {
        match b {
            Block::Heading { text, .. } => label = Some(label_of(text).unwrap_or(Label::Notes)),
            Block::Paragraph { text, line } => {
                if let Some((l, rest)) = paragraph_label(text) {
                    // A note or a type given in one line (`**Priority**: 12.5 — …`,
                    // which `prioritize` writes under the heading, or
                    // `**Type**: command`) opens no list: items after it are
                    // read as they were before it.
                    if !matches!(l, Label::Notes | Label::Type) || rest.is_empty() {
                        label = Some(l);
                    }
                    if rest.is_empty() {
                        continue;
                    }
                    match l {
                        Label::Type => {
                            explicit = SprintType::parse(
                                plain(rest).split_whitespace().next().unwrap_or(""),
                            )
                        }
                        Label::Entry => s.entry_criteria.push(criterion(rest, *line, l)),
                        Label::Exit | Label::Validate => {
                            s.exit_criteria.push(criterion(rest, *line, l))
                        }
                        _ => s.notes.push(plain(rest)),
                    }
                } else {
                    match label {
                        Some(l @ (Label::Entry | Label::Exit)) if text.contains('`') => {
                            push_criterion(&mut s, text, *line, l)
                        }
                        _ => s.notes.push(text.clone()),
                    }
                }
            }
            Block::Item {
                text,
                line,
                checked,
                ..
            } => match label {
                Some(l @ (Label::Entry | Label::Exit | Label::Validate)) => {
                    push_criterion(&mut s, text, *line, l)
                }
                _ => {
                    // A checkbox that names a command, a file or an assertion is
                    // an exit criterion in every plan shape (§2d), wherever it
                    // stands: under a task, a notes heading or no label at all.
                    let checkable = checked
                        .map(|_| criterion(text, *line, Label::Exit))
                        .filter(|c| c.kind != CriterionKind::Checklist);
                    match (checkable, label) {
                        (Some(c), _) => s.exit_criteria.push(c),
                        (None, Some(Label::Tasks) | None) => s.tasks.push(text.clone()),
                        (None, _) => s.notes.push(text.clone()),
                    }
                }
            },
            Block::Code {
                text,
                line,
                in_item,
                lang,
            } => {
                if lang == "mermaid" || text.trim().is_empty() {
                    continue;
                }
                match label {
                    Some(Label::Expected) => {
                        if let Some(c) = s
                            .exit_criteria
                            .iter_mut()
                            .rev()
                            .find(|c| c.command.is_some())
                        {
                            c.expected = Some(text.trim().to_string());
                        }
                    }
                    Some(l @ (Label::Entry | Label::Exit | Label::Validate)) => {
                        let list = if l == Label::Entry {
                            &mut s.entry_criteria
                        } else {
                            &mut s.exit_criteria
                        };
                        match list.last_mut() {
                            Some(c) if *in_item && c.command.is_none() && c.line < *line => {
                                c.kind = CriterionKind::Command;
                                c.command = Some(text.trim().to_string());
                                c.assertion = None;
                            }
                            _ => list.push(command_criterion(text, *line)),
                        }
                    }
                    _ => {}
                }
            }
            Block::Table { .. } => {}
        }
    }
    s.kind = classify(&s.name, &s.tasks, explicit);
    s
}

pub(super) fn first_line(s: &str) -> String {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

pub(super) fn body_text(doc: &Doc, head: usize, end: usize) -> String {
    let start = match &doc.blocks[head] {
        Block::Heading { offset, .. } => *offset,
        _ => return String::new(),
    };
    let stop = doc.blocks[end..]
        .iter()
        .find_map(|b| match b {
            Block::Heading { offset, .. } => Some(*offset),
            _ => None,
        })
        .unwrap_or(doc.source.len());
    let body = doc.source.get(start..stop.max(start)).unwrap_or("");
    // One copy: most plans have no carriage returns to drop.
    if body.contains('\r') {
        body.replace('\r', "").trim_end().to_string()
    } else {
        body.trim_end().to_string()
    }
}

/// §2g: the sprint's type from its name (weighted) and its tasks.
pub(super) fn classify(name: &str, tasks: &[String], explicit: Option<SprintType>) -> SprintType {
    if let Some(t) = explicit {
        return t;
    }
    const INDICATORS: &[(SprintType, &[&str])] = &[
        (
            SprintType::Manual,
            &[
                "listen",
                "visit",
                "check browser",
                "check the browser",
                "spot-check",
                "spot check",
                "human judgment",
                "human judgement",
                "manually",
                "manual review",
                "by hand",
            ],
        ),
        (
            SprintType::Deferred,
            &[
                "wait for",
                "wait until",
                "monitor",
                "check deployment",
                "poll until",
                "once deployed",
            ],
        ),
        (
            SprintType::Background,
            &[
                "kick off",
                "nohup",
                "background",
                "long-running",
                "overnight",
            ],
        ),
        (
            SprintType::Command,
            &["run ", "execute", "deploy", "migrate the", "publish"],
        ),
        (
            SprintType::Code,
            &[
                "write",
                "create",
                "implement",
                "build",
                "fix",
                "add ",
                "refactor",
                "port ",
                "define",
            ],
        ),
    ];
    // One automaton over every indicator: each text is scanned once.
    static MATCHER: std::sync::LazyLock<(AhoCorasick, Vec<SprintType>)> =
        std::sync::LazyLock::new(|| {
            let (kinds, words): (Vec<SprintType>, Vec<&str>) = INDICATORS
                .iter()
                .flat_map(|(k, ws)| ws.iter().map(move |w| (*k, *w)))
                .unzip();
            let ac = AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .match_kind(aho_corasick::MatchKind::Standard)
                .build(words)
                .expect("fixed patterns");
            (ac, kinds)
        });
    let (ac, kinds) = &*MATCHER;
    // Each indicator counts once per text: a bit per indicator (there are
    // fewer than 64), not a set allocated per text.
    debug_assert!(kinds.len() <= 64);
    let mut scores = [0usize; 5];
    let mut padded = String::new();
    for (i, text) in std::iter::once(name)
        .chain(tasks.iter().map(String::as_str))
        .enumerate()
    {
        let weight = if i == 0 { 3 } else { 1 };
        // A trailing space lets `run `, `add `, `port ` match at the end.
        padded.clear();
        padded.push_str(text);
        padded.push(' ');
        let mut seen = 0u64;
        for m in ac.find_overlapping_iter(&padded) {
            let bit = 1u64 << m.pattern().as_usize();
            if seen & bit == 0 {
                seen |= bit;
                scores[kinds[m.pattern().as_usize()] as usize] += weight;
            }
        }
    }
    if name
        .get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case("start "))
    {
        scores[SprintType::Background as usize] += 3;
    }
    // Ties go to the earlier entry of INDICATORS (manual before code).
    let mut best = (0usize, SprintType::Code);
    for (t, _) in INDICATORS {
        if scores[*t as usize] > best.0 {
            best = (scores[*t as usize], *t);
        }
    }
    best.1
}

/// Orders sprints by id (2a before 2b) and refuses duplicate ids.
pub(super) fn order_sprints(
    mut sprints: Vec<Sprint>,
    unit: &str,
    errors: &mut Vec<Problem>,
    warnings: &mut Vec<Problem>,
) -> Vec<Sprint> {
    let mut seen: BTreeMap<SprintId, usize> = BTreeMap::new();
    for s in &sprints {
        if let Some(first) = seen.insert(s.id.clone(), s.line) {
            errors.push(
                Problem::new(
                    s.line,
                    format!("work unit `{unit}` defines sprint {} twice", s.id),
                )
                .hint(format!(
                    "first definition at line {first}; give each sprint its own id, e.g. 2a and 2b"
                )),
            );
        }
    }
    if sprints.windows(2).any(|w| w[0].id > w[1].id) {
        let line = sprints.first().map_or(1, |s| s.line);
        warnings.push(Problem::new(
            line,
            format!("sprints of `{unit}` are not written in order; running them by id"),
        ));
        sprints.sort_by(|a, b| a.id.cmp(&b.id));
    }
    sprints
}
