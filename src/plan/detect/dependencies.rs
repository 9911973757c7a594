//! §2c: dependencies between units — columns, prose, arrows, Mermaid graphs,
//! shortened names — the cycle check, and layers from depth.

use super::{
    contains_word, nearest, AhoCorasick, BTreeMap, BTreeSet, Block, Doc, HashMap, Problem,
    UnitDraft, UnitGraph, WorkUnit,
};

/// Explicit dependency edges `(dependent, dependency)` as unit indices
/// (§2c.2). A sentence that says a unit depends on something that is no unit
/// but nearly one's name is warned of, with the name it may mean.
pub(super) fn dependencies(
    doc: &Doc,
    drafts: &[UnitDraft],
    errors: &mut Vec<Problem>,
    warnings: &mut Vec<Problem>,
) -> BTreeSet<(usize, usize)> {
    let names: Vec<String> = drafts.iter().map(|d| d.name.to_lowercase()).collect();
    let index = NameIndex::new(&names);
    let find = |n: &str| {
        index
            .words
            .get(n.to_lowercase().as_str())
            .copied()
            .or_else(|| names.iter().position(|x| *x == n.to_lowercase()))
    };
    let mut edges = BTreeSet::new();
    for (i, d) in drafts.iter().enumerate() {
        for (dep, line) in &d.declared_deps {
            if dep.trim().eq_ignore_ascii_case("all") {
                // `all`: every unit of the lower layers, or every unit listed
                // before this one when the plan has no layers.
                let mine = d.layer;
                for (j, other) in drafts.iter().enumerate() {
                    let below = match (mine, other.layer) {
                        (Some(m), Some(o)) => o < m,
                        _ => j < i,
                    };
                    if below {
                        edges.insert((i, j));
                    }
                }
                continue;
            }
            match find(dep)
                .map(Ok)
                .unwrap_or_else(|| resolve_short(dep, drafts))
            {
                Ok(j) => {
                    edges.insert((i, j));
                }
                Err(candidates) if candidates.len() > 1 => {
                    errors.push(
                        Problem::new(
                            *line,
                            format!(
                                "work unit `{}` depends on `{dep}`, which could be any of {}",
                                d.name,
                                candidates
                                    .iter()
                                    .map(|c| format!("`{c}`"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                        .hint("write the unit's full name"),
                    );
                }
                Err(_) => {
                    let mut p = Problem::new(
                        *line,
                        format!(
                            "work unit `{}` depends on `{dep}`, which the plan does not define",
                            d.name
                        ),
                    );
                    if let Some(n) = nearest(dep, drafts.iter().map(|d| d.name.as_str())) {
                        p = p.hint(format!("did you mean `{n}`?"));
                    } else {
                        p = p.hint("list only units named in the work-unit table");
                    }
                    errors.push(p);
                }
            }
        }
    }
    // Mermaid graphs first, whatever the number of units read: a node that
    // is no unit drops every dependency through it.
    for b in &doc.blocks {
        if let Block::Code {
            lang, text, line, ..
        } = b
        {
            if lang == "mermaid" {
                for node in mermaid_edges(text, &names, &mut edges) {
                    unknown_node(doc, &node, *line, &names, errors, warnings);
                }
            }
        }
    }
    if drafts.len() < 2 {
        return edges;
    }
    // The unit whose section holds each block, for sentences without a subject.
    let mut owners: Vec<Option<usize>> = vec![None; doc.blocks.len()];
    for (u, d) in drafts.iter().enumerate() {
        for slot in d.region.clone().into_iter().flatten() {
            owners[slot].get_or_insert(u);
        }
    }
    let owner = |idx: usize| owners[idx];
    let mut dep_section = false;
    for (idx, b) in doc.blocks.iter().enumerate() {
        let (text, arrows_ok) = match b {
            Block::Heading { text, .. } => {
                dep_section = ["depend", "order", "graph", "layer"]
                    .iter()
                    .any(|w| crate::text::contains_lowercase(text, w));
                (text.as_str(), false)
            }
            Block::Paragraph { text, .. } | Block::Item { text, .. } => {
                (text.as_str(), dep_section)
            }
            Block::Code { lang, text, .. } => {
                if lang == "mermaid" {
                    continue;
                }
                (
                    text.as_str(),
                    lang.is_empty() || lang == "text" || lang == "ascii",
                )
            }
            Block::Table { .. } => continue,
        };
        // Most blocks name no dependency at all: skip them with one cheap scan.
        static HINTS: std::sync::LazyLock<AhoCorasick> = std::sync::LazyLock::new(|| {
            AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .build(DEP_HINTS)
                .expect("fixed patterns")
        });
        if !arrows_ok && !HINTS.is_match(text) {
            continue;
        }
        let block_lower = text.to_lowercase();
        for lower in block_lower.split(['.', ';', '\n']) {
            if arrows_ok {
                arrow_edges(lower, &index, &mut edges);
            }
            for kw in [
                "depends on",
                "depend on",
                "requires",
                "needs",
                "preconditions:",
                "precondition:",
                "dependencies:",
                "blocked by",
                "waits for",
            ] {
                let Some(pos) = lower.find(kw) else { continue };
                let (before, after) = (&lower[..pos], &lower[pos + kw.len()..]);
                let objects = index.mentions(after);
                if objects.is_empty() {
                    // "depends on alpah": a misspelt unit, not prose about
                    // something else, when the word is a near miss.
                    let word = after
                        .split(|c: char| !is_word_char(c))
                        .find(|w| !w.is_empty() && !matches!(*w, "the" | "a" | "an" | "unit"));
                    if let Some(n) = word.and_then(|w| {
                        nearest(w, drafts.iter().map(|d| d.name.as_str())).filter(|_| w.len() > 2)
                    }) {
                        warnings.push(
                            Problem::new(
                                b.line(),
                                format!(
                                    "\"{kw} {}\" names no work unit, so no dependency was read from it",
                                    word.unwrap_or_default()
                                ),
                            )
                            .hint(format!("did you mean `{n}`?")),
                        );
                    }
                }
                let mut subjects = index.mentions(before);
                if subjects.is_empty() {
                    subjects.extend(owner(idx));
                }
                for &s in &subjects {
                    for &o in &objects {
                        if s != o {
                            edges.insert((s, o));
                        }
                    }
                }
            }
        }
    }
    edges
}

/// A unit name without case, spaces, hyphens, underscores or dots.
pub(super) fn squash(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, ' ' | '-' | '_' | '.' | '/'))
        .flat_map(char::to_lowercase)
        .collect()
}

/// A dependency written in a shortened or differently spelled form: the same
/// name ignoring case, spaces and hyphens (`API v1` for `api-v1`), or the tail
/// or head of exactly one unit's name at a separator (`validation-profiles` for
/// `SwiftVerificar-validation-profiles`). `Err` carries the candidates when
/// more than one unit fits (none when no unit does).
pub(super) fn resolve_short(dep: &str, drafts: &[UnitDraft]) -> Result<usize, Vec<String>> {
    let want = squash(dep);
    if want.is_empty() {
        return Err(Vec::new());
    }
    let same: Vec<usize> = (0..drafts.len())
        .filter(|&j| squash(&drafts[j].name) == want)
        .collect();
    if let [j] = same[..] {
        return Ok(j);
    }
    let dep_lower = dep.trim().to_lowercase();
    let sep = |c: Option<char>| c.is_none_or(|c| matches!(c, ' ' | '-' | '_' | '.' | '/'));
    let part: Vec<usize> = (0..drafts.len())
        .filter(|&j| {
            let name = drafts[j].name.to_lowercase();
            let tail = name
                .strip_suffix(dep_lower.as_str())
                .is_some_and(|head| !head.is_empty() && sep(head.chars().last()));
            let head = name
                .strip_prefix(dep_lower.as_str())
                .is_some_and(|rest| !rest.is_empty() && sep(rest.chars().next()));
            tail || head
        })
        .collect();
    match part[..] {
        [j] => Ok(j),
        _ => Err(part
            .iter()
            .chain(&same)
            .map(|&j| drafts[j].name.clone())
            .collect()),
    }
}

/// Substrings every dependency keyword contains (a cheap pre-filter).
pub(super) const DEP_HINTS: &[&str] = &[
    "depend",
    "requires",
    "needs",
    "precondition",
    "blocked by",
    "waits for",
];

/// Finds unit names in text by word lookup, so a sentence costs its length, not
/// its length times the number of units.
pub(super) struct NameIndex<'a> {
    names: &'a [String],
    words: HashMap<&'a str, usize>,
    /// Names with characters outside words (spaces, `+`…): matched one by one.
    other: Vec<usize>,
}

pub(super) fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '-' || c == '_'
}

impl<'a> NameIndex<'a> {
    fn new(names: &'a [String]) -> NameIndex<'a> {
        let mut words = HashMap::new();
        let mut other = Vec::new();
        for (i, n) in names.iter().enumerate() {
            if !n.is_empty() && n.chars().all(is_word_char) {
                words.entry(n.as_str()).or_insert(i);
            } else {
                other.push(i);
            }
        }
        NameIndex {
            names,
            words,
            other,
        }
    }

    /// Indices of the units named in `lower` (already lower-case), ascending.
    fn mentions(&self, lower: &str) -> Vec<usize> {
        let mut found: Vec<usize> = lower
            .split(|c: char| !is_word_char(c))
            .filter_map(|w| self.words.get(w).copied())
            .collect();
        found.extend(
            self.other
                .iter()
                .copied()
                .filter(|&j| contains_word(lower, &self.names[j])),
        );
        found.sort_unstable();
        found.dedup();
        found
    }
}

/// `a ──► b`, `a -> b`, `a → b`: b depends on a.
pub(super) fn arrow_edges(line: &str, index: &NameIndex, edges: &mut BTreeSet<(usize, usize)>) {
    let mut norm = line.to_string();
    for a in ["──►", "──>", "-->", "->", "→", "=>", "⟶"] {
        norm = norm.replace(a, "\u{1}");
    }
    let parts: Vec<Vec<usize>> = norm
        .split('\u{1}')
        .map(|p| index.mentions(p.trim()))
        .collect();
    for w in parts.windows(2) {
        for &from in &w[0] {
            for &to in &w[1] {
                if from != to {
                    edges.insert((to, from));
                }
            }
        }
    }
}

/// A node of a Mermaid graph (at `line`) that names no unit. When a section
/// heading bears its name, the unit was there and was not read (its sprints
/// have no headings the reader knows): the plan is refused with the fix,
/// since every dependency through it would be dropped. Otherwise it is
/// warned of (a graph may hold a node that is no unit: a start, a deploy).
fn unknown_node(
    doc: &Doc,
    node: &str,
    line: usize,
    names: &[String],
    errors: &mut Vec<Problem>,
    warnings: &mut Vec<Problem>,
) {
    let section = doc.blocks.iter().find_map(|b| match b {
        Block::Heading { text, line, .. } if squash(text) == squash(node) => Some(*line),
        _ => None,
    });
    match section {
        Some(at) => errors.push(
            Problem::new(
                at,
                format!(
                    "the dependency graph (line {line}) names `{node}`, and its section here reads as no work unit: it has no sprint the reader knows, so `{node}` and every dependency through it would be dropped"
                ),
            )
            .hint(format!(
                "give each of its sprints a heading such as `### Sprint 1: <name>` under the `{node}` section (a heading of its own followed by a checklist is not read as a sprint)"
            )),
        ),
        None => {
            let mut p = Problem::new(
                line,
                format!(
                    "the dependency graph names `{node}`, which is no work unit; no dependency through it is read"
                ),
            );
            if let Some(n) = nearest(node, names.iter().map(String::as_str)) {
                p = p.hint(format!("did you mean `{n}`?"));
            }
            warnings.push(p);
        }
    }
}

/// Mermaid `graph`/`flowchart` edges; node ids or labels name units. Returns
/// the nodes of edges that name no unit (by label where one is given).
pub(super) fn mermaid_edges(
    text: &str,
    names: &[String],
    edges: &mut BTreeSet<(usize, usize)>,
) -> Vec<String> {
    let mut unknown: Vec<String> = Vec::new();
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("%%"));
    let Some(first) = lines.next() else {
        return unknown;
    };
    if !(first.starts_with("graph") || first.starts_with("flowchart")) {
        return unknown;
    }
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    let node = |tok: &str, labels: &mut BTreeMap<String, String>| -> String {
        let tok = tok.trim();
        let id_end = tok.find(['[', '(', '{', '>']).unwrap_or(tok.len());
        let id = tok[..id_end].trim().to_string();
        if id_end < tok.len() {
            let label = tok[id_end..]
                .trim_matches(|c| "[](){}>\"' ".contains(c))
                .to_string();
            labels.insert(id.clone(), label);
        }
        id
    };
    for l in lines {
        if [
            "subgraph",
            "end",
            "classdef",
            "class ",
            "style",
            "click",
            "linkstyle",
            "direction",
        ]
        .iter()
        .any(|k| l.to_lowercase().starts_with(k))
        {
            continue;
        }
        // Drop edge labels (`-->|text|`) before splitting on arrows.
        let mut norm = String::new();
        let mut in_label = false;
        for ch in l.chars() {
            if ch == '|' {
                in_label = !in_label;
            } else if !in_label {
                norm.push(ch);
            }
        }
        for a in ["-.->", "==>", "-->", "---", "--o", "--x", "->"] {
            norm = norm.replace(a, "\u{1}");
        }
        let toks: Vec<String> = norm
            .split('\u{1}')
            .map(|t| node(t.trim_end_matches(';'), &mut labels))
            .collect();
        if toks.len() < 2 {
            continue;
        }
        let resolve = |id: &str, labels: &BTreeMap<String, String>| -> Option<usize> {
            let by_id = id.to_lowercase();
            names
                .iter()
                .position(|n| {
                    *n == by_id || n.replace(['-', ' '], "_") == by_id.replace(['-', ' '], "_")
                })
                .or_else(|| {
                    labels
                        .get(id)
                        .and_then(|l| names.iter().position(|n| *n == l.to_lowercase()))
                })
        };
        for t in &toks {
            if !t.is_empty() && resolve(t, &labels).is_none() {
                let shown = labels.get(t).filter(|l| !l.is_empty()).unwrap_or(t);
                if !unknown.contains(shown) {
                    unknown.push(shown.clone());
                }
            }
        }
        for w in toks.windows(2) {
            if let (Some(from), Some(to)) = (resolve(&w[0], &labels), resolve(&w[1], &labels)) {
                if from != to {
                    edges.insert((to, from));
                }
            }
        }
    }
    unknown
}

pub(super) fn find_cycle(units: &[WorkUnit], graph: &UnitGraph) -> Option<Vec<String>> {
    let deps = &graph.deps;
    // Iterative depth-first search: 0 unseen, 1 on the stack, 2 done.
    let mut state = vec![0u8; units.len()];
    for root in 0..units.len() {
        if state[root] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        state[root] = 1;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(&j) = deps[node].get(*next) {
                *next += 1;
                match state[j] {
                    1 => {
                        let from = stack.iter().position(|(k, _)| *k == j).unwrap_or(0);
                        let mut cycle: Vec<String> = stack[from..]
                            .iter()
                            .map(|(k, _)| units[*k].name.clone())
                            .collect();
                        cycle.push(units[j].name.clone());
                        return Some(cycle);
                    }
                    0 => {
                        state[j] = 1;
                        stack.push((j, 0));
                    }
                    _ => {}
                }
            } else {
                state[node] = 2;
                stack.pop();
            }
        }
    }
    None
}

/// Without declared layers, a unit's layer is its depth in the dependency
/// graph, found in topological order so that a long chain cannot overflow
/// the stack. (Acyclic by now; a unit in a cycle would stay at layer 0.)
pub(super) fn assign_depths(units: &mut [WorkUnit], graph: &UnitGraph) {
    let mut depth = vec![0u32; units.len()];
    for i in graph.topological_order() {
        depth[i] = graph.deps[i]
            .iter()
            .map(|&j| depth[j] + 1)
            .max()
            .unwrap_or(0);
    }
    for (unit, d) in units.iter_mut().zip(depth) {
        unit.layer = d;
    }
}
