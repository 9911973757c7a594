//! Sprint Supervisor: runs many coding agents on one execution plan.
//!
//! Layers (see the README's architecture part): [`plan`] reads the plan,
//! [`engine`] decides, [`report`] renders text; [`drive`] is the one loop that
//! feeds the engine; a [`place`] carries its effects out (`place::local` for
//! processes on this machine, `place::hosted` for Actions runs) through the
//! adapters ([`github`] for GitHub's REST API, [`store`] for the log); the
//! front doors ([`cli`], [`server`]) are thin.

pub mod attempt;
pub mod cli;
pub mod commands;
pub mod contract;
pub mod drive;
pub mod engine;
pub mod github;
pub mod model_proxy;
pub mod notify;
pub mod otlp;
pub mod place;
pub mod plan;
pub mod report;
pub mod sandbox;
pub mod scrub;
pub mod server;
pub mod settings;
pub mod store;
pub mod sync;
pub mod telemetry;
pub mod text;

/// Every program built on this library (the `supervise` binary, its tests and
/// benchmarks) allocates through mimalloc: reading a plan or a burst of
/// webhook deliveries makes many small, short-lived allocations, where the
/// system allocator (glibc's, and musl's in the static release far more so)
/// spends a fifth of the time. (The `system-allocator` feature leaves it
/// out, for heap profilers that watch malloc.)
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Asks the kernel for no transparent huge pages in this process from now
/// on, for a process that runs for days (`supervise serve`). mimalloc asks
/// for huge pages on its arenas (`madvise`), and a 2 MiB page counts in the
/// resident set whole while a few of its objects live: in a 30-minute soak
/// at 1,000 operations the service's resident memory climbed from 161 to
/// 277 MB (121 to 216 MB without huge pages), while what it allocated during
/// an 11-minute soak and still held, measured with heaptrack on the system
/// allocator, was 40–60 MB. Only the service was measured, so only the
/// service asks. A kernel that refuses is no fault: only memory is at stake.
pub fn without_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_THP_DISABLE takes integer arguments only
    // and changes only this process's paging.
    unsafe {
        let _ = libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
