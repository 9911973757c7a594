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
/// order, so most answers are a step or two past the last one. (One per
/// thread: the starts are shared, the cursor is not.)
struct LineIndex<'a>(&'a [usize], std::cell::Cell<usize>);

fn line_starts(src: &str) -> Vec<usize> {
    let mut starts = Vec::with_capacity(src.len() / 32 + 1);
    starts.push(0);
    starts.extend(memchr::memchr_iter(b'\n', src.as_bytes()).map(|i| i + 1));
    starts
}

impl LineIndex<'_> {
    fn new(starts: &[usize]) -> LineIndex<'_> {
        LineIndex(starts, std::cell::Cell::new(0))
    }

    /// The 1-based line holding `offset`.
    fn line(&self, offset: usize) -> usize {
        let starts = self.0;
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

/// The inside of a paragraph that is only `**Sprint N: Name**`.
fn bold_sprint_title(text: &str) -> Option<&str> {
    let inner = text.strip_prefix("**")?.strip_suffix("**")?;
    (!inner.contains("**") && crate::plan::detect::sprint_heading(inner).is_some()).then_some(inner)
}

enum Open {
    Heading(u8, usize),
    /// Its line and byte offset.
    Paragraph(usize, usize),
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
    parse_in(source, super::parallel::threads_for(source.len()))
}

/// Reads the document in up to `pieces` parts on as many threads, when it can
/// be cut where Markdown carries nothing across (see [`cut_points`]); the
/// blocks are those of one reading.
fn parse_in(source: &str, pieces: usize) -> Doc {
    let source = source
        .strip_prefix('\u{feff}')
        .unwrap_or(source)
        .to_string();
    let starts = line_starts(&source);
    let cuts = cut_points(&source, &starts, pieces);
    let read = |r: std::ops::Range<usize>| read_piece(&source, r, &starts);
    let whole = || read(0..source.len());
    let piece = if cuts.is_empty() {
        whole()
    } else {
        let mut bounds = vec![0];
        bounds.extend(&cuts);
        bounds.push(source.len());
        let ranges: Vec<_> = bounds.windows(2).map(|w| w[0]..w[1]).collect();
        let parts = super::parallel::map(&ranges, ranges.len(), |r| read(r.clone()));
        // A part that ends inside a block (a code fence or an HTML block left
        // open) would have read the next part's first lines differently.
        if parts[..parts.len() - 1].iter().any(|p| p.open_at_end) {
            whole()
        } else {
            let total: usize = parts.iter().map(|p| p.blocks.len()).sum();
            let mut parts = parts.into_iter();
            let mut all = parts.next().expect("one part at least");
            // Grown once to the whole, not once per part appended.
            all.blocks.reserve(total - all.blocks.len());
            for p in parts {
                all.blocks.extend(p.blocks);
                all.frontmatter.extend(p.frontmatter);
            }
            all
        }
    };
    Doc {
        blocks: piece.blocks,
        frontmatter: piece.frontmatter,
        source,
    }
}

/// Where the document can be cut into `pieces` parts of about equal size: at
/// the start of a `#` heading line at the left margin after a blank line,
/// outside any code fence — a line every container (list, quote, table,
/// paragraph) has ended before. None at all when a part could read something
/// another part holds: a link reference definition (`]:` anywhere) or an HTML
/// block (a line opening with `<`; one may run past blank lines). No cut
/// either between a line ending in `---` over a non-blank line and the next
/// `---` or `...` line: pulldown-cmark reads that as a metadata block, blank
/// lines and all (unless the line after it is blank or ends it at once). A
/// fence the scan lost track of (one opened in a list item) is caught after
/// reading: see `Piece::open_at_end`.
fn cut_points(src: &str, starts: &[usize], pieces: usize) -> Vec<usize> {
    if pieces < 2 || memchr::memmem::find(src.as_bytes(), b"]:").is_some() {
        return Vec::new();
    }
    let bytes = src.as_bytes();
    let line_at = |i: usize| {
        let end = starts.get(i + 1).map_or(bytes.len(), |&e| e);
        &bytes[starts[i]..end]
    };
    let mut cuts = Vec::new();
    let mut fence: Option<(u8, usize)> = None;
    let mut in_metadata = false;
    let mut metadata_from_start = false;
    let mut blank_before = false;
    let mut next_target = src.len() / pieces;
    for (i, &start) in starts.iter().enumerate() {
        let line = line_at(i);
        let indent = line.iter().take_while(|&&c| c == b' ').count();
        let body = &line[indent..];
        let trimmed = body.trim_ascii_end();
        if indent <= 3 && body.first() == Some(&b'<') {
            return Vec::new();
        }
        let blank = trimmed.is_empty();
        if in_metadata && !closes_metadata(line) {
            continue;
        }
        // The line that ends a block the scan took for metadata may open the
        // next (where the first was not one, say a setext underline) — unless
        // the first opened the document, where it surely was one.
        let closed_metadata = std::mem::take(&mut in_metadata);
        if closed_metadata && metadata_from_start {
            metadata_from_start = false;
            blank_before = false;
            continue;
        }
        if trimmed.ends_with(b"---")
            && (trimmed.len() == 3 || matches!(trimmed[trimmed.len() - 4], b' ' | b'\t' | b'>'))
            && starts.get(i + 1).is_some_and(|_| {
                let next = line_at(i + 1);
                !next.trim_ascii().is_empty() && !closes_metadata(next)
            })
        {
            in_metadata = true;
            metadata_from_start = i == 0;
            blank_before = false;
            continue;
        }
        if closed_metadata {
            blank_before = false;
            continue;
        }
        let run = |c: u8| body.iter().take_while(|&&b| b == c).count();
        match fence {
            Some((c, n)) => {
                if indent <= 3 && run(c) >= n && trimmed.iter().all(|&b| b == c) {
                    fence = None;
                }
            }
            None => {
                if indent <= 3 {
                    for c in [b'`', b'~'] {
                        let n = run(c);
                        if n >= 3 && !(c == b'`' && trimmed[n..].contains(&b'`')) {
                            fence = Some((c, n));
                        }
                    }
                }
                if fence.is_none()
                    && blank_before
                    && start >= next_target
                    && line.first() == Some(&b'#')
                {
                    cuts.push(start);
                    if cuts.len() + 1 == pieces {
                        break;
                    }
                    next_target = start + (bytes.len() - start) / (pieces - cuts.len());
                }
            }
        }
        blank_before = fence.is_none() && blank;
    }
    cuts
}

/// `---` or `...` at the margin, then only spaces: what ends a metadata block.
fn closes_metadata(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let end = line.iter().rposition(|&c| c != b' ').map_or(0, |i| i + 1);
    matches!(&line[..end], b"---" | b"...")
}

/// The blocks of one part of the document.
struct Piece {
    blocks: Vec<Block>,
    frontmatter: Vec<(String, String)>,
    /// A code block or an HTML block runs to the part's very end.
    open_at_end: bool,
}

/// Reads `source[r]`; offsets and lines are the whole document's.
fn read_piece(source: &str, r: std::ops::Range<usize>, starts: &[usize]) -> Piece {
    let base = r.start;
    let text = &source[r];
    let index = LineIndex::new(starts);
    let opts = Options::ENABLE_TABLES
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_YAML_STYLE_METADATA_BLOCKS;
    let mut open_at_end = false;
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

    for (event, range) in Parser::new_ext(text, opts).into_offset_iter() {
        let range = range.start + base..range.end + base;
        // Only tags that open an element need their line; text events are many.
        let line = if matches!(event, Event::Start(_)) {
            index.line(range.start)
        } else {
            0
        };
        if matches!(event, Event::Start(Tag::CodeBlock(_) | Tag::HtmlBlock))
            && range.end >= base + text.len()
        {
            open_at_end = true;
        }
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
                    open = Some(Open::Paragraph(line, range.start));
                    buf.clear();
                } else if let Some(it) = items.last_mut() {
                    if !it.text.is_empty() {
                        it.text.push(' ');
                    }
                }
            }
            Event::End(TagEnd::Paragraph) => {
                if let Some(Open::Paragraph(l, offset)) = open {
                    open = None;
                    let text = tidy(&buf);
                    if let Some(title) = bold_sprint_title(&text) {
                        // `**Sprint 2: Page**` alone on its line is written as a
                        // heading one below the last; read as a paragraph, its
                        // criteria went to the sprint above without a word.
                        let level = blocks
                            .iter()
                            .rev()
                            .find_map(Block::heading)
                            .map_or(2, |(l, _)| (l + 1).min(6));
                        blocks.push(Block::Heading {
                            level,
                            text: title.to_string(),
                            line: l,
                            offset,
                        });
                    } else if !text.is_empty() {
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
    Piece {
        blocks,
        frontmatter,
        open_at_end,
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

    /// Lines that open, close or continue every kind of block, and the
    /// headings a cut may fall before.
    const LINES: &[&str] = &[
        "## Sprint 1: A",
        "# Title",
        "### Task 2.1: B",
        "#not a heading",
        "",
        "",
        "text with `code` and **bold**",
        "- [ ] `make test` passes",
        "  - nested item",
        "1. first",
        "> quoted",
        "```",
        "````",
        "```sh",
        "~~~",
        "    indented code",
        "  ```",
        "| a | b |",
        "|---|---|",
        "-->",
        "see [ref] here",
        "---",
        "\t- tabbed",
        // Either rules out every cut: last, so most documents go without.
        "<!-- comment",
        "[ref]: /url",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// However the document is cut (or not), its blocks are those of
        /// one reading of the whole.
        #[test]
        fn reading_in_parts_reads_the_same(
            picks in proptest::collection::vec(0..LINES.len(), 0..80),
            pieces in 2usize..5,
            uncuttable in proptest::bool::weighted(0.1),
        ) {
            let usable = if uncuttable { LINES.len() } else { LINES.len() - 2 };
            let src: String = picks.iter().map(|&i| format!("{}\n", LINES[i % usable])).collect();
            let whole = parse_in(&src, 1);
            let parts = parse_in(&src, pieces);
            proptest::prop_assert_eq!(parts.blocks, whole.blocks);
            proptest::prop_assert_eq!(parts.frontmatter, whole.frontmatter);
        }
    }

    #[test]
    fn a_long_plan_is_cut_at_headings_and_read_the_same() {
        let mut src = String::from("---\nfeature_name: x\n---\n# Plan\n\n");
        for u in 0..40 {
            src.push_str(&format!("## Unit {u}\n\n```sh\n## not a heading {u}\n```\n\n### Sprint 1: S\n- [ ] `cargo test` passes\n\n"));
        }
        let starts = line_starts(&src);
        let cuts = cut_points(&src, &starts, 3);
        assert_eq!(cuts.len(), 2, "{cuts:?}");
        for c in &cuts {
            assert!(src[*c..].starts_with("## Unit") || src[*c..].starts_with("### Sprint"));
        }
        assert_eq!(parse_in(&src, 3).blocks, parse_in(&src, 1).blocks);
        assert_eq!(
            parse_in(&src, 3).frontmatter,
            vec![("feature_name".to_string(), "x".to_string())]
        );
    }

    #[test]
    fn line_numbers_are_the_same_asked_in_any_order() {
        let src = "a\nbb\n\nccc\nd";
        let starts = line_starts(src);
        let index = LineIndex::new(&starts);
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
