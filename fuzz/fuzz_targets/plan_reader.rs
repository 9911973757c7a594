//! Any bytes, read as a plan: the reader must answer (a plan or a list of problems)
//! and never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(plan) = supervise::plan::parse(text, "fuzz") {
            assert!(plan.total_sprints() > 0);
        }
    }
});
