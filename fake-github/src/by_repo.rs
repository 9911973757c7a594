//! Append-only lists of repositories' items (issues, pull requests, check
//! runs, workflow runs, comments) that know where each repository's are.
//! GitHub answers for one repository without reading every other's, and so
//! must the fake: a benchmark of a thousand operations over half an hour
//! otherwise measures the fake's scans (37% of its CPU went to comparing
//! repository names, and the service waited on it).
//!
//! Items are never removed, and an item's repository never changes, so
//! positions stay valid. The list reads as a slice (`Deref`) for the rest.

use serde::{Serialize, Serializer};
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};

/// An item that belongs to one repository (`owner/name`).
pub(crate) trait InRepo {
    fn repo(&self) -> &str;
}

#[derive(Debug)]
pub(crate) struct ByRepo<T> {
    items: Vec<T>,
    /// Each repository's items' positions in `items`, in order.
    at: HashMap<String, Vec<usize>>,
}

impl<T> Default for ByRepo<T> {
    fn default() -> Self {
        ByRepo {
            items: Vec::new(),
            at: HashMap::new(),
        }
    }
}

impl<T: InRepo> ByRepo<T> {
    pub(crate) fn push(&mut self, item: T) {
        self.at
            .entry(item.repo().to_string())
            .or_default()
            .push(self.items.len());
        self.items.push(item);
    }

    /// One repository's items, in the order they were added.
    pub(crate) fn in_repo<'a>(&'a self, repo: &str) -> impl Iterator<Item = &'a T> + 'a {
        self.at
            .get(repo)
            .into_iter()
            .flatten()
            .map(|&i| &self.items[i])
    }

    /// The first of one repository's items that `which` picks.
    pub(crate) fn find_mut(&mut self, repo: &str, which: impl Fn(&T) -> bool) -> Option<&mut T> {
        let i = *self
            .at
            .get(repo)?
            .iter()
            .find(|&&i| which(&self.items[i]))?;
        Some(&mut self.items[i])
    }
}

impl<T> Deref for ByRepo<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.items
    }
}

/// Items may change in place, but not their repository (see the module).
impl<T> DerefMut for ByRepo<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.items
    }
}

impl<T: Serialize> Serialize for ByRepo<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.items.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::{ByRepo, InRepo};

    #[derive(Debug, Clone, PartialEq)]
    struct Item(String, u32);
    impl InRepo for Item {
        fn repo(&self) -> &str {
            &self.0
        }
    }

    /// Whatever is pushed, a repository's items are those a scan of all
    /// would find, in the same order.
    #[test]
    fn a_repository_s_items_are_those_a_scan_finds() {
        let mut list = ByRepo::default();
        for n in 0..200u32 {
            list.push(Item(format!("o/r{}", n * 7 % 13), n));
        }
        for r in 0..14 {
            let repo = format!("o/r{r}");
            let indexed: Vec<&Item> = list.in_repo(&repo).collect();
            let scanned: Vec<&Item> = list.iter().filter(|i| i.0 == repo).collect();
            assert_eq!(indexed, scanned);
            let first = scanned.iter().find(|i| i.1 % 2 == 1).map(|i| i.1);
            assert_eq!(list.find_mut(&repo, |i| i.1 % 2 == 1).map(|i| i.1), first);
        }
    }
}
