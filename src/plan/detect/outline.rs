//! The document's outline: where sections end and where sprint definitions are.

#[allow(unused_imports)]
use super::*;

/// Where every section ends and where sprint definitions are, computed once so
/// that no heuristic rescans the document (plans with thousands of units).
pub(super) struct Outline {
    /// For a heading at `i`: the first block after its section.
    end: Vec<usize>,
    /// Prefix counts of blocks that define sprints (sprint/task headings, sprint tables).
    defs: Vec<u32>,
}

impl Outline {
    pub(super) fn new(blocks: &[Block]) -> Outline {
        let mut end = vec![blocks.len(); blocks.len()];
        let mut open: Vec<(usize, u8)> = Vec::new();
        let mut defs = Vec::with_capacity(blocks.len() + 1);
        defs.push(0u32);
        for (i, b) in blocks.iter().enumerate() {
            if let Some((level, _)) = b.heading() {
                while open.last().is_some_and(|(_, l)| *l >= level) {
                    let (j, _) = open.pop().expect("checked");
                    end[j] = i;
                }
                open.push((i, level));
            }
            let is_def = match b {
                Block::Heading { text, .. } => {
                    sprint_heading(text).is_some() || task_heading(text).is_some()
                }
                Block::Table { header, .. } => is_sprint_table(header),
                _ => false,
            };
            defs.push(defs[i] + u32::from(is_def));
        }
        Outline { end, defs }
    }

    /// The blocks from heading `i` to the next heading of the same or a higher level.
    pub(super) fn section(&self, i: usize) -> Range<usize> {
        i..self.end[i]
    }

    pub(super) fn has_defs(&self, r: Range<usize>) -> bool {
        r.start < r.end && self.defs[r.end] > self.defs[r.start]
    }
}
