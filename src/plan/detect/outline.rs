//! The document's outline: where sections end and where sprint definitions are.

use super::{is_sprint_table, label_of, sprint_heading, task_heading, Block, Range};

/// Where every section ends and where sprint definitions are, computed once so
/// that no heuristic rescans the document (plans with thousands of units).
pub(super) struct Outline {
    /// For a heading at `i`: the first block after its section.
    end: Vec<usize>,
    /// Prefix counts of blocks that define sprints (sprint/task headings, sprint
    /// tables, and headings over a checklist that are no label).
    defs: Vec<u32>,
    /// What each heading is, read once here: several heuristics ask, and
    /// reading a heading as a sprint's costs a copy of its text.
    heads: Vec<HeadingKind>,
}

/// A heading's role in a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HeadingKind {
    /// Not a heading.
    None,
    /// `Sprint N: …`.
    Sprint,
    /// `Task N.M: …`.
    Task,
    /// Any other heading.
    Other,
}

impl Outline {
    /// `threads`: how many to read the headings on.
    pub(super) fn new(blocks: &[Block], threads: usize) -> Outline {
        let mut end = vec![blocks.len(); blocks.len()];
        let mut open: Vec<(usize, u8)> = Vec::new();
        let mut defs = Vec::with_capacity(blocks.len() + 1);
        defs.push(0u32);
        let heads = crate::plan::parallel::map(blocks, threads, |b| match b {
            Block::Heading { text, .. } if sprint_heading(text).is_some() => HeadingKind::Sprint,
            Block::Heading { text, .. } if task_heading(text).is_some() => HeadingKind::Task,
            Block::Heading { .. } => HeadingKind::Other,
            _ => HeadingKind::None,
        });
        // A heading whose own blocks hold a `- [ ]` is a checklist group (§2b.4):
        // it defines a sprint as surely as `### Sprint 1:` does, so the unit
        // around it is found by it (before, such a unit was dropped unsaid).
        let mut checklist = vec![false; blocks.len()];
        let mut under = None;
        for (i, b) in blocks.iter().enumerate() {
            match b {
                Block::Heading { text, .. } => {
                    under =
                        (heads[i] == HeadingKind::Other && label_of(text).is_none()).then_some(i)
                }
                Block::Item {
                    checked: Some(_), ..
                } => {
                    if let Some(h) = under.take() {
                        checklist[h] = true;
                    }
                }
                _ => {}
            }
        }
        for (i, b) in blocks.iter().enumerate() {
            if let Some((level, _)) = b.heading() {
                while open.last().is_some_and(|(_, l)| *l >= level) {
                    let (j, _) = open.pop().expect("checked");
                    end[j] = i;
                }
                open.push((i, level));
            }
            let is_def = match b {
                Block::Table { header, .. } => is_sprint_table(header),
                _ => checklist[i] || matches!(heads[i], HeadingKind::Sprint | HeadingKind::Task),
            };
            defs.push(defs[i] + u32::from(is_def));
        }
        Outline { end, defs, heads }
    }

    /// What block `i` is as a heading.
    pub(super) fn heading_kind(&self, i: usize) -> HeadingKind {
        self.heads.get(i).copied().unwrap_or(HeadingKind::None)
    }

    /// Whether block `i` is a sprint or task heading.
    pub(super) fn defines_sprint(&self, i: usize) -> bool {
        matches!(
            self.heading_kind(i),
            HeadingKind::Sprint | HeadingKind::Task
        )
    }

    /// The blocks from heading `i` to the next heading of the same or a higher level.
    pub(super) fn section(&self, i: usize) -> Range<usize> {
        i..self.end[i]
    }

    pub(super) fn has_defs(&self, r: Range<usize>) -> bool {
        r.start < r.end && self.defs[r.end] > self.defs[r.start]
    }
}
