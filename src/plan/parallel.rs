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

/// `items.iter().map(f).collect()` on up to `threads` threads (see
/// [`map_beside`], here with nothing beside).
pub(crate) fn map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    map_beside(items, threads, f, || ()).0
}

/// `(items.iter().map(f).collect(), side())` on `threads` threads that
/// share the work as it comes: the first to start takes `side`, and every
/// thread takes the next run of items when it is free, so a long `side`
/// does not leave one thread idle at the end.
pub(crate) fn map_beside<T: Sync, R: Send, S: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
    side: impl FnOnce() -> S + Send,
) -> (Vec<R>, S) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    if threads <= 1 {
        return (items.iter().map(&f).collect(), side());
    }
    let runs: Vec<&[T]> = items.chunks((items.len() / (threads * 8)).max(1)).collect();
    // No more threads than tasks.
    let threads = threads.min(runs.len() + 1);
    // Task 0 is `side`; task i is run i - 1.
    let next = AtomicUsize::new(0);
    let side = Mutex::new(Some(side));
    let side_out = Mutex::new(None);
    let work = || {
        let mut done = Vec::new();
        loop {
            let task = next.fetch_add(1, Ordering::Relaxed);
            if task == 0 {
                let s = side.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(s) = s {
                    let out = s();
                    *side_out.lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
                }
                continue;
            }
            let Some(run) = runs.get(task - 1) else {
                return done;
            };
            done.push((task, run.iter().map(&f).collect::<Vec<R>>()));
        }
    };
    let mut done = std::thread::scope(|scope| {
        let others: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut done = work();
        for h in others {
            done.extend(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        }
        done
    });
    done.sort_unstable_by_key(|(task, _)| *task);
    let side = side_out
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .expect("the first task is always taken");
    (done.into_iter().flat_map(|(_, r)| r).collect(), side)
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_keep_the_order_of_their_inputs() {
        let items: Vec<u32> = (0..1001).collect();
        for threads in [0, 1, 2, 3, 7, 2000] {
            assert_eq!(
                super::map(&items, threads, |x| x * 2),
                items.iter().map(|x| x * 2).collect::<Vec<_>>()
            );
        }
        assert!(super::map(&[] as &[u32], 4, |x| *x).is_empty());
    }

    #[test]
    fn work_beside_keeps_the_order_and_runs_the_side_once() {
        let items: Vec<u32> = (0..1001).collect();
        let runs = std::sync::atomic::AtomicUsize::new(0);
        for threads in [1, 2, 3, 8] {
            let (out, side) = super::map_beside(
                &items,
                threads,
                |x| x + 1,
                || {
                    runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    "side"
                },
            );
            assert_eq!(out, items.iter().map(|x| x + 1).collect::<Vec<_>>());
            assert_eq!(side, "side");
        }
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 4);
        let (out, side) = super::map_beside(&[] as &[u32], 2, |x| *x, || 7);
        assert!(out.is_empty() && side == 7);
    }
}
