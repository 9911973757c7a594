//! Reading a large plan on every core: the one helper the reader's parallel
//! steps share. Results keep the order of their inputs, so a plan read in
//! parallel is the plan read on one thread.

/// Below this size a document is read on one thread: starting another
/// costs more than it saves.
pub(crate) const FROM_LEN: usize = 256 * 1024;

/// The threads worth using for a document of `len` bytes (the reader's work
/// splits well up to a few).
pub(crate) fn threads_for(len: usize) -> usize {
    if len < FROM_LEN {
        return 1;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// `items.iter().map(f).collect()`, the items split into `parts` runs of
/// about equal length, each on a thread of its own (this one takes the
/// first). A panic in any run is the caller's.
pub(crate) fn map<T: Sync, R: Send>(
    items: &[T],
    parts: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let parts = parts.clamp(1, items.len().max(1));
    if parts == 1 {
        return items.iter().map(&f).collect();
    }
    let size = items.len().div_ceil(parts);
    let f = &f;
    std::thread::scope(|scope| {
        let mut runs = items.chunks(size);
        let first = runs.next().unwrap_or_default();
        let others: Vec<_> = runs
            .map(|run| scope.spawn(move || run.iter().map(f).collect::<Vec<R>>()))
            .collect();
        let mut out: Vec<R> = first.iter().map(f).collect();
        for h in others {
            out.extend(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        }
        out
    })
}

/// `(a(), b())`, `b` on a thread of its own when `parallel`.
pub(crate) fn join<A, B: Send>(
    parallel: bool,
    a: impl FnOnce() -> A,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    if !parallel {
        return (a(), b());
    }
    std::thread::scope(|scope| {
        let b = scope.spawn(b);
        let a = a();
        (a, b.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_keep_the_order_of_their_inputs() {
        let items: Vec<u32> = (0..1001).collect();
        for parts in [0, 1, 2, 3, 7, 2000] {
            assert_eq!(
                super::map(&items, parts, |x| x * 2),
                items.iter().map(|x| x * 2).collect::<Vec<_>>()
            );
        }
        assert!(super::map(&[] as &[u32], 4, |x| *x).is_empty());
    }
}
