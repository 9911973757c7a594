//! Metrics that more than one layer records under one name. The name and its
//! labels are written once, here, so the service (which sees a delivery
//! queue and wait for its installation) and the GitHub place (which alone
//! sees it wait for its operation) cannot drift apart in what a dashboard
//! reads as one histogram.

use std::time::Duration;

/// What a delivery waited for before its work began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitStage {
    /// Stored until a worker took it (first attempts only: a retry's wait
    /// is its delay, not a queue's).
    Queue,
    /// One of its installation's places.
    Installation,
    /// Its operation, busy with another delivery or a tick.
    Operation,
}

impl WaitStage {
    fn label(self) -> &'static str {
        match self {
            WaitStage::Queue => "queue",
            WaitStage::Installation => "installation",
            WaitStage::Operation => "operation",
        }
    }
}

/// `supervise_delivery_wait_seconds{stage}`: where a slow reaction's time
/// went before any work was done.
pub fn waited(stage: WaitStage, time: Duration) {
    metrics::histogram!("supervise_delivery_wait_seconds", "stage" => stage.label())
        .record(time.as_secs_f64());
}
