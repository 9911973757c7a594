//! The answers kept for conditional requests: a GET repeated with the
//! `ETag` of its last answer costs nothing against the rate limit when GitHub
//! answers 304, and the kept body stands in for the answer.
//!
//! Bounded in entries and in bytes, least recently used first out: a service
//! that reads thousands of paths over days must not keep every body it ever
//! read. Keyed by installation and path, so one installation's answer is never
//! served to another's call.
//!
//! Bodies are kept deflated. GitHub's JSON repeats every field name in every
//! item and compresses several times over, and a body is only read back when
//! GitHub answers 304; at 1,000 operations the kept bodies were a third of the
//! service's live heap, and the byte bound, not the entry bound, decided what
//! was pushed out.

use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use flate2::Compression;
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::sync::Arc;

/// One kept answer: its ETag, its body (deflated) and its next page.
#[derive(Debug)]
pub struct Kept {
    pub etag: String,
    packed: Vec<u8>,
    pub next: Option<String>,
}

impl Kept {
    /// `None` if the body could not be deflated (into a `Vec` it cannot
    /// fail; were it to, nothing is kept rather than an empty body that a
    /// 304 would later stand in for the answer).
    pub fn new(etag: String, body: &str, next: Option<String>) -> Option<Kept> {
        let mut z = DeflateEncoder::new(Vec::with_capacity(body.len() / 4), Compression::fast());
        z.write_all(body.as_bytes()).ok()?;
        let mut packed = z.finish().ok()?;
        packed.shrink_to_fit();
        Some(Kept { etag, packed, next })
    }

    /// The body as it was answered; `None` if it cannot be read back (it was
    /// deflated here, so only a bug would make it so: then the answer is
    /// treated as not kept).
    pub fn body(&self) -> Option<String> {
        let mut body = String::new();
        DeflateDecoder::new(self.packed.as_slice())
            .read_to_string(&mut body)
            .ok()?;
        Some(body)
    }
}

type Key = (u64, String);

pub struct EtagCache {
    entries: HashMap<Key, (u64, Arc<Kept>)>,
    /// Last use → key, oldest first: the eviction order.
    by_use: BTreeMap<u64, Key>,
    clock: u64,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

/// What one entry weighs: its deflated body, its ETag and its path.
fn weight(key: &Key, kept: &Kept) -> usize {
    key.1.len() + kept.etag.len() + kept.packed.len() + kept.next.as_ref().map_or(0, String::len)
}

impl EtagCache {
    pub fn new(max_entries: usize, max_bytes: usize) -> EtagCache {
        EtagCache {
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            clock: 0,
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    /// The kept answer for a path, marked as just used (shared: a GET takes
    /// it only to ask with its ETag, and reads its body on a 304 alone).
    pub fn get(&mut self, installation: u64, path: &str) -> Option<Arc<Kept>> {
        let key = (installation, path.to_string());
        self.clock += 1;
        let clock = self.clock;
        let (used, kept) = self.entries.get_mut(&key)?;
        self.by_use.remove(used);
        *used = clock;
        self.by_use.insert(clock, key);
        Some(Arc::clone(kept))
    }

    /// Keeps an answer, letting the least recently used go until both bounds
    /// hold. An answer larger than a quarter of the byte bound is not kept:
    /// it would push out many small ones that are read more often.
    pub fn put(&mut self, installation: u64, path: &str, kept: Kept) {
        let key = (installation, path.to_string());
        self.remove(&key);
        let w = weight(&key, &kept);
        if w > self.max_bytes / 4 || self.max_entries == 0 {
            return;
        }
        self.clock += 1;
        self.by_use.insert(self.clock, key.clone());
        self.entries.insert(key, (self.clock, Arc::new(kept)));
        self.bytes += w;
        while self.entries.len() > self.max_entries || self.bytes > self.max_bytes {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            if let Some((_, k)) = self.entries.remove(&oldest) {
                self.bytes -= weight(&oldest, &k);
            }
        }
    }

    fn remove(&mut self, key: &Key) {
        if let Some((used, k)) = self.entries.remove(key) {
            self.by_use.remove(&used);
            self.bytes -= weight(key, &k);
        }
    }

    /// Entries and bytes kept now.
    pub fn size(&self) -> (usize, usize) {
        (self.entries.len(), self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kept(body: &str) -> Kept {
        Kept::new("W/\"e\"".into(), body, None).expect("deflated")
    }

    /// Text that deflate cannot shrink much, so a size bound bites as the
    /// length says.
    fn random_text(len: usize) -> String {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ len as u64;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'!' + (x % 94) as u8)
            })
            .collect()
    }

    /// A list as GitHub answers it, each item repeating the same field
    /// names, is kept in a fraction of its length and read back unchanged.
    #[test]
    fn a_kept_body_is_deflated_and_read_back_as_answered() {
        let item = |i: usize| {
            format!(
                r#"{{"id":{i},"name":"Supervise agent","head_branch":"supervise/op/u{i}/s1","status":"in_progress","conclusion":null,"html_url":"https://github.com/acme/shop/actions/runs/{i}"}}"#
            )
        };
        let body = format!(
            "{{\"total_count\":100,\"workflow_runs\":[{}]}}",
            (0..100).map(item).collect::<Vec<_>>().join(",")
        );
        let k = kept(&body);
        assert_eq!(k.body().as_deref(), Some(body.as_str()));
        assert!(
            k.packed.len() * 4 < body.len(),
            "{} bytes kept of {}",
            k.packed.len(),
            body.len()
        );
    }

    #[test]
    fn the_least_recently_used_goes_first_and_installations_are_apart() {
        let mut c = EtagCache::new(2, 1 << 20);
        c.put(1, "/a", kept("a"));
        c.put(1, "/b", kept("b"));
        assert!(c.get(1, "/a").is_some(), "touch /a: /b is now the oldest");
        c.put(1, "/c", kept("c"));
        assert!(c.get(1, "/b").is_none());
        assert_eq!(c.get(1, "/a").and_then(|k| k.body()), Some("a".into()));
        assert!(c.get(2, "/a").is_none(), "another installation's call");
    }

    #[test]
    fn a_body_too_large_to_keep_is_not_kept_and_replaces_nothing() {
        let mut c = EtagCache::new(10, 400);
        c.put(1, "/a", kept("a"));
        c.put(1, "/big", kept(&random_text(300)));
        assert!(c.get(1, "/big").is_none());
        assert!(c.get(1, "/a").is_some());
    }

    proptest! {
        #[test]
        fn any_body_is_read_back_as_it_was_kept(body in any::<String>()) {
            prop_assert_eq!(kept(&body).body(), Some(body));
        }

        /// Whatever is put, in any order, both bounds hold after each put and
        /// the byte count is the sum of what is kept.
        #[test]
        fn both_bounds_hold_after_every_put(
            puts in proptest::collection::vec((0u64..3, 0usize..40, 0usize..300), 1..200),
            gets in proptest::collection::vec((0u64..3, 0usize..40), 0..50),
        ) {
            let mut c = EtagCache::new(16, 2_000);
            for (i, (inst, path, len)) in puts.iter().enumerate() {
                c.put(*inst, &format!("/p/{path}"), kept(&random_text(*len)));
                if let Some((gi, gp)) = gets.get(i) {
                    c.get(*gi, &format!("/p/{gp}"));
                }
                let (n, bytes) = c.size();
                prop_assert!(n <= 16);
                prop_assert!(bytes <= 2_000);
                let sum: usize = c.entries.iter().map(|(k, (_, v))| weight(k, v)).sum();
                prop_assert_eq!(sum, bytes);
                prop_assert_eq!(c.by_use.len(), n);
            }
        }
    }
}
