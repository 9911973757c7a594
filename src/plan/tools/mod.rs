//! The plan tools of §15–§18, beside the reader and as pure as it: they take a
//! read [`Plan`](crate::plan::Plan) (and its source text where headings matter)
//! and return findings and reports; the front doors write files and replies.

pub mod analyze;
pub mod breakdown;
pub mod evaluate;
pub mod measure;
pub mod prioritize;
pub mod rewrite;
