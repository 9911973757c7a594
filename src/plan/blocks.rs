//! Markdown → a flat list of blocks (headings, paragraphs, list items, code, tables),
//! each with its 1-based source line and byte offset. The detection heuristics work on
//! this list, so they never see pulldown-cmark's event stream.

use pulldown_cmark::{CodeBlockKind, Event, MetadataBlockKind, Options, Parser, Tag, TagEnd};

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Block {
    Heading {
        level: u8,
        text: String,
        line: usize,
        offset: usize,
    },
    Paragraph {
        text: String,
        line: usize,
    },
    Item {
        text: String,
        checked: Option<bool>,
        depth: usize,
        line: usize,
    },
    Code {
        lang: String,
        text: String,
        line: usize,
        in_item: bool,
    },
    Table {
        header: Vec<String>,
        rows: Vec<Row>,
        line: usize,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub cells: Vec<String>,
    pub line: usize,
}

impl Block {
    pub fn line(&self) -> usize {
        match self {
            Block::Heading { line, .. }
            | Block::Paragraph { line, .. }
            | Block::Item { line, .. }
            | Block::Code { line, .. }
            | Block::Table { line, .. } => *line,
        }
    }

    pub fn heading(&self) -> Option<(u8, &str)> {
        match self {
            Block::Heading { level, text, .. } => Some((*level, text)),
            _ => None,
        }
    }
}

/// The parsed document: blocks plus the frontmatter, if any.
pub(crate) struct Doc {
    pub blocks: Vec<Block>,
    pub frontmatter: Vec<(String, String)>,
    /// The source with any BOM removed; block offsets index into it.
    pub source: String,
}

/// Line starts, and where the last look ended: the parser asks in document
/// order, so most answers are a step or two past the last one.
struct LineIndex(Vec<usize>, std::cell::Cell<usize>);

impl LineIndex {
    fn new(src: &str) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(memchr::memchr_iter(b'\n', src.as_bytes()).map(|i| i + 1));
        LineIndex(starts, std::cell::Cell::new(0))
    }

    /// The 1-based line holding `offset`.
    fn line(&self, offset: usize) -> usize {
        let starts = &self.0;
        let mut i = self.1.get();
        if starts.get(i).is_some_and(|&s| s <= offset) {
            while starts.get(i + 1).is_some_and(|&s| s <= offset) {
                i += 1;
            }
        } else {
            i = starts.partition_point(|&s| s <= offset).saturating_sub(1);
        }
        self.1.set(i);
        i + 1
    }
}

enum Open {
    Heading(u8, usize),
    Paragraph(usize),
    Code(String, usize),
    Cell,
    Metadata,
}

struct ItemBuf {
    text: String,
    checked: Option<bool>,
    line: usize,
    flushed: bool,
}

pub(crate) fn parse(source: &str) -> Doc {
    let source = source
        .strip_prefix('\u{feff}')
        .unwrap_or(source)
        .to_string();
    let index = LineIndex::new(&source);
    let opts = Options::ENABLE_TABLES
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_YAML_STYLE_METADATA_BLOCKS;
    let mut blocks = Vec::new();
    let mut frontmatter = Vec::new();
    let mut open: Option<Open> = None;
    let mut buf = String::new();
    let mut items: Vec<ItemBuf> = Vec::new();
    let mut list_depth = 0usize;
    let mut table: Option<(Vec<String>, Vec<Row>, usize)> = None;
    let mut row: Option<(Vec<String>, usize)> = None;
    let mut in_head = false;

    fn flush_item(items: &mut [ItemBuf], blocks: &mut Vec<Block>, depth: usize) {
        if let Some(it) = items.last_mut() {
            if !it.flushed {
                it.flushed = true;
                blocks.push(Block::Item {
                    text: tidy(&it.text),
                    checked: it.checked,
                    depth: depth.saturating_sub(1),
                    line: it.line,
                });
            }
        }
    }

    for (event, range) in Parser::new_ext(&source, opts).into_offset_iter() {
        // Only tags that open an element need their line; text events are many.
        let line = if matches!(event, Event::Start(_)) {
            index.line(range.start)
        } else {
            0
        };
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                open = Some(Open::Heading(level as u8, range.start));
                buf.clear();
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(Open::Heading(level, offset)) = open.take() {
                    blocks.push(Block::Heading {
                        level,
                        text: tidy(&buf),
                        line: index.line(offset),
                        offset,
                    });
                }
            }
            Event::Start(Tag::Paragraph) => {
                if items.is_empty() && table.is_none() {
                    open = Some(Open::Paragraph(line));
                    buf.clear();
                } else if let Some(it) = items.last_mut() {
                    if !it.text.is_empty() {
                        it.text.push(' ');
                    }
                }
            }
            Event::End(TagEnd::Paragraph) => {
                if let Some(Open::Paragraph(l)) = open {
                    open = None;
                    let text = tidy(&buf);
                    if !text.is_empty() {
                        blocks.push(Block::Paragraph { text, line: l });
                    }
                }
            }
            Event::Start(Tag::List(_)) => {
                flush_item(&mut items, &mut blocks, list_depth);
                list_depth += 1;
            }
            Event::End(TagEnd::List(_)) => list_depth = list_depth.saturating_sub(1),
            Event::Start(Tag::Item) => items.push(ItemBuf {
                text: String::new(),
                checked: None,
                line,
                flushed: false,
            }),
            Event::End(TagEnd::Item) => {
                flush_item(&mut items, &mut blocks, list_depth);
                items.pop();
            }
            Event::TaskListMarker(checked) => {
                if let Some(it) = items.last_mut() {
                    it.checked = Some(checked);
                }
            }
            Event::Start(Tag::CodeBlock(kind)) => {
                flush_item(&mut items, &mut blocks, list_depth);
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => {
                        info.split_whitespace().next().unwrap_or("").to_string()
                    }
                    CodeBlockKind::Indented => String::new(),
                };
                open = Some(Open::Code(lang, line));
                buf.clear();
            }
            Event::End(TagEnd::CodeBlock) => {
                if let Some(Open::Code(lang, l)) = open.take() {
                    blocks.push(Block::Code {
                        lang,
                        text: buf.replace('\r', "").trim_end().to_string(),
                        line: l,
                        in_item: !items.is_empty(),
                    });
                }
            }
            Event::Start(Tag::MetadataBlock(MetadataBlockKind::YamlStyle)) => {
                open = Some(Open::Metadata);
                buf.clear();
            }
            Event::End(TagEnd::MetadataBlock(_)) => {
                open = None;
                for l in buf.lines() {
                    if let Some((k, v)) = l.split_once(':') {
                        let v = v.trim().trim_matches('"').trim_matches('\'');
                        frontmatter.push((k.trim().to_string(), v.to_string()));
                    }
                }
            }
            Event::Start(Tag::Table(_)) => table = Some((Vec::new(), Vec::new(), line)),
            Event::End(TagEnd::Table) => {
                if let Some((header, rows, l)) = table.take() {
                    blocks.push(Block::Table {
                        header,
                        rows,
                        line: l,
                    });
                }
            }
            Event::Start(Tag::TableHead) => {
                in_head = true;
                row = Some((Vec::new(), line));
            }
            Event::End(TagEnd::TableHead) => {
                in_head = false;
                if let (Some((cells, _)), Some(t)) = (row.take(), table.as_mut()) {
                    t.0 = cells;
                }
            }
            Event::Start(Tag::TableRow) => row = Some((Vec::new(), line)),
            Event::End(TagEnd::TableRow) => {
                if let (Some((cells, l)), Some(t)) = (row.take(), table.as_mut()) {
                    if !in_head {
                        t.1.push(Row { cells, line: l });
                    }
                }
            }
            Event::Start(Tag::TableCell) => {
                open = Some(Open::Cell);
                buf.clear();
            }
            Event::End(TagEnd::TableCell) => {
                open = None;
                if let Some((cells, _)) = row.as_mut() {
                    cells.push(tidy(&buf));
                }
            }
            Event::Start(Tag::Strong) | Event::End(TagEnd::Strong) => {
                push(&mut open, &mut buf, &mut items, "**")
            }
            Event::Text(t) => push(&mut open, &mut buf, &mut items, &t),
            Event::Code(t) => {
                push(&mut open, &mut buf, &mut items, "`");
                push(&mut open, &mut buf, &mut items, &t);
                push(&mut open, &mut buf, &mut items, "`");
            }
            Event::SoftBreak | Event::HardBreak => push(&mut open, &mut buf, &mut items, " "),
            // `<br>` inside table cells separates items; other HTML is dropped.
            Event::Html(t) | Event::InlineHtml(t)
                if matches!(open, Some(Open::Cell))
                    && t.to_ascii_lowercase().starts_with("<br") =>
            {
                buf.push_str("; ");
            }
            _ => {}
        }
    }
    Doc {
        blocks,
        frontmatter,
        source,
    }
}

fn push(open: &mut Option<Open>, buf: &mut String, items: &mut [ItemBuf], text: &str) {
    match open {
        Some(_) => buf.push_str(text),
        None => {
            if let Some(it) = items.last_mut() {
                if !it.flushed {
                    it.text.push_str(text);
                }
            }
        }
    }
}

/// Collapses white space (carriage returns included) in one pass.
fn tidy(s: &str) -> String {
    // Most text is tidy already (ASCII words and single spaces): one look
    // at its bytes, and a copy.
    let mut prev_space = true;
    let tidy_already = s.bytes().all(|c| {
        let ok = c < 0x80
            && !matches!(c, b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
            && !(c == b' ' && prev_space);
        prev_space = c == b' ';
        ok
    }) && !prev_space;
    if tidy_already {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    for word in s.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Removes Markdown emphasis and code markers for names and labels: every
/// `**` and every backtick (in one pass: it runs for every heading, label
/// and criterion), then surrounding space, `_` and `*`.
pub(crate) fn plain(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = memchr::memchr2(b'*', b'`', rest.as_bytes()) {
        out.push_str(&rest[..i]);
        let bytes = rest.as_bytes();
        let skip = match bytes[i] {
            b'*' if bytes.get(i + 1) == Some(&b'*') => 2,
            b'*' => {
                out.push('*');
                1
            }
            _ => 1,
        };
        rest = &rest[i + skip..];
    }
    out.push_str(rest);
    let t = out.trim().trim_matches('_').trim_matches('*').trim();
    if t.len() == out.len() {
        out
    } else {
        t.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The one-pass `plain` says what removing every `**`, then every
        /// backtick, then trimming says.
        #[test]
        fn tidy_collapses_white_space(s in "[a \\t\\r\\n\u{a0}\u{3000}é]{0,24}") {
            let slow = s.split_whitespace().collect::<Vec<_>>().join(" ");
            proptest::prop_assert_eq!(tidy(&s), slow);
        }

        #[test]
        fn plain_is_the_replacements_it_stands_for(s in "[a* `_\\n:é]{0,24}") {
            let slow = s.replace("**", "").replace('`', "");
            let slow = slow.trim().trim_matches('_').trim_matches('*').trim();
            proptest::prop_assert_eq!(plain(&s), slow);
        }
    }

    #[test]
    fn line_numbers_are_the_same_asked_in_any_order() {
        let src = "a\nbb\n\nccc\nd";
        let index = LineIndex::new(src);
        let expected = |offset: usize| src[..offset].matches('\n').count() + 1;
        let offsets: Vec<usize> = (0..src.len()).chain((0..src.len()).rev()).collect();
        for o in offsets {
            assert_eq!(index.line(o), expected(o), "offset {o}");
        }
        for o in [9, 0, 4, 10, 1, 7] {
            assert_eq!(index.line(o), expected(o), "offset {o}");
        }
    }

    #[test]
    fn lines_survive_crlf_and_bom() {
        let doc =
            parse("\u{feff}# Title\r\n\r\n## Sprint 1: A\r\n\r\n- [ ] `make test` passes\r\n");
        assert_eq!(doc.blocks[0].line(), 1);
        assert_eq!(doc.blocks[1].line(), 3);
        match &doc.blocks[2] {
            Block::Item {
                text,
                checked,
                line,
                ..
            } => {
                assert_eq!(text, "`make test` passes");
                assert_eq!(*checked, Some(false));
                assert_eq!(*line, 5);
            }
            b => panic!("expected an item, got {b:?}"),
        }
    }

    #[test]
    fn nested_items_come_after_their_parent() {
        let doc = parse("- parent\n  - child\n- next\n");
        let texts: Vec<_> = doc
            .blocks
            .iter()
            .map(|b| match b {
                Block::Item { text, depth, .. } => format!("{depth}:{text}"),
                _ => String::new(),
            })
            .collect();
        assert_eq!(texts, ["0:parent", "1:child", "0:next"]);
    }

    #[test]
    fn tables_keep_row_lines() {
        let doc = parse("intro\n\n| Package | Layer |\n|---|---|\n| a | 0 |\n| b | 1 |\n");
        match &doc.blocks[1] {
            Block::Table { header, rows, line } => {
                assert_eq!(header, &["Package", "Layer"]);
                assert_eq!(*line, 3);
                assert_eq!(rows[1].line, 6);
                assert_eq!(rows[1].cells, ["b", "1"]);
            }
            b => panic!("expected a table, got {b:?}"),
        }
    }
}
