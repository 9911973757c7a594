//! The one loop that drives the engine, wherever agents run. It owns the order
//! of things — decide an input, record its events and effects as one durable
//! record, carry the effects out, mark each done, decide what they yielded —
//! and what happens when an effect fails. It knows neither git nor GitHub: a
//! place plugs in an [`Outbox`] (where the record is kept: JSON lines, SQL) and
//! an [`Executor`] (how effects are carried out: local processes, Actions runs).
//!
//! Crash safety rests on the order: nothing is carried out before it is
//! recorded, and every effect is idempotent, so whatever a crash left undone is
//! carried out again from the outbox on the next start.

pub mod spans;

use crate::engine::replay::Cause;
use crate::engine::{decide_shared, Effect, Event, Input, OperationState, Refusal};
use serde::{Deserialize, Serialize};
use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::Arc;

/// An outbox entry's idempotency key: the decision's sequence number in the
/// log and the effect's place in it. Stable across restarts; written `seq.index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EffectKey {
    pub seq: u64,
    pub index: u32,
}

impl fmt::Display for EffectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.seq, self.index)
    }
}

impl std::str::FromStr for EffectKey {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (seq, index) = s
            .split_once('.')
            .ok_or_else(|| format!("`{s}` is not an effect key (seq.index)"))?;
        Ok(EffectKey {
            seq: seq.parse().map_err(|_| format!("bad sequence in `{s}`"))?,
            index: index.parse().map_err(|_| format!("bad index in `{s}`"))?,
        })
    }
}

impl Serialize for EffectKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for EffectKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// One effect in the outbox, with its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(rename = "id")]
    pub key: EffectKey,
    pub effect: Effect,
}

impl Entry {
    /// A decision's effects as outbox entries, numbered in order.
    pub fn numbered(seq: u64, effects: &[Effect]) -> Vec<Entry> {
        effects
            .iter()
            .enumerate()
            .map(|(i, e)| Entry {
                key: EffectKey {
                    seq,
                    index: i as u32,
                },
                effect: e.clone(),
            })
            .collect()
    }
}

/// What carrying out one effect came to.
#[derive(Debug)]
pub enum Outcome {
    /// Done; these inputs follow from it (a launch that failed, a merge made…).
    Done(Vec<Input>),
    /// Not possible yet (CI still running, a review not given, a cap above the
    /// operation reached): it stays in the outbox and is tried again when
    /// [`Driver::drive`] is told to. The inputs say so to the engine (a held
    /// dispatch), and are decided at once.
    Wait(Vec<Input>),
}

/// What became of one input: the engine acted on it (these events were
/// recorded — none when it changed nothing), or refused it, with the reason
/// for the person who sent it. A refusal is an answer, not a failure: failures
/// are the outbox's error type.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    Acted(Vec<Event>),
    Refused(Refusal),
}

impl Decided {
    pub fn refusal(self) -> Option<Refusal> {
        match self {
            Decided::Acted(_) => None,
            Decided::Refused(r) => Some(r),
        }
    }
}

/// What a log holds: the state its events fold into and the effects not done.
#[derive(Debug, Default)]
pub struct Loaded {
    pub state: Option<OperationState>,
    pub events: usize,
    pub pending: Vec<Entry>,
}

/// Where decisions are recorded. Implemented by the JSON-lines ledger of local
/// runs and the SQL store of the service.
pub trait Outbox {
    type Error: std::error::Error + Send + Sync + 'static;
    /// Writes the events and their effects as one durable record.
    /// `cause` is what they were decided from, kept for replay.
    fn append(
        &mut self,
        events: &[Event],
        effects: &[Effect],
        cause: &Cause,
    ) -> impl Future<Output = Result<Vec<Entry>, Self::Error>> + Send;
    fn done(&mut self, key: EffectKey) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// Reads the log back (after a failed append: the log is the record).
    fn load(&mut self) -> impl Future<Output = Result<Loaded, Self::Error>> + Send;
}

/// Whether an effect that failed may succeed if tried again unchanged.
pub trait Failure: fmt::Display {
    fn is_transient(&self) -> bool;
}

/// How a place carries effects out. Each effect must be idempotent: it may be
/// carried out again after a crash.
pub trait Executor {
    type Error: Failure;
    fn carry_out(
        &mut self,
        state: Option<&OperationState>,
        entry: &Entry,
    ) -> impl Future<Output = Result<Outcome, Self::Error>> + Send;
    /// An effect failed for good and leaves the outbox: tell the people
    /// concerned. (What the engine must hear of it, the driver tells it.)
    fn failed(&mut self, entry: &Entry, error: &Self::Error) -> impl Future<Output = ()> + Send;
    /// Sees the events of every recorded decision (live output, logs).
    fn observe(&mut self, _events: &[Event]) {}
}

/// One operation in motion: its state, its outbox entries not yet done, and
/// the inputs waiting to be decided.
#[derive(Debug, Default)]
pub struct Driver {
    /// Shared with whoever shows it (the web view, a status being
    /// published): a decision copies it only if it changes it while shared.
    pub state: Option<Arc<OperationState>>,
    pub pending: Vec<Entry>,
    pub queue: VecDeque<Input>,
    /// Entries that answered [`Outcome::Wait`]: passed over until a drive that
    /// retries waiting ones, so waiting costs no work per input.
    waiting: HashSet<EffectKey>,
    /// The operation's trace as its decisions are recorded, when spans are
    /// exported (see [`crate::otlp`]).
    spans: spans::Spans,
}

impl Driver {
    /// Falls back to what the log holds (another replica acted, or a write
    /// failed); inputs not yet decided stay queued.
    pub fn reload(&mut self, loaded: Loaded) {
        self.spans = spans::Spans::default();
        self.state = loaded.state.map(Arc::new);
        self.pending = loaded.pending;
        self.waiting.clear();
    }

    pub fn new(loaded: Loaded) -> Driver {
        Driver {
            state: loaded.state.map(Arc::new),
            pending: loaded.pending,
            ..Default::default()
        }
    }

    /// Decides one input and records it; its effects join the outbox (carried
    /// out by the next [`Driver::drive`]). A refusal changes nothing.
    pub async fn decide<O: Outbox>(
        &mut self,
        outbox: &mut O,
        input: Input,
    ) -> Result<Decided, O::Error> {
        // Applied in place (the state is copied only if it is shared and the
        // input changes it); if the record cannot be written, the state
        // falls back to what the log holds.
        let cause = Cause {
            input: input.clone(),
            at: chrono::Utc::now(),
        };
        let d = match decide_shared(&mut self.state, input, cause.at) {
            Ok(d) => d,
            Err(r) => return Ok(Decided::Refused(r)),
        };
        if d.events.is_empty() && d.effects.is_empty() {
            return Ok(Decided::Acted(Vec::new()));
        }
        match outbox.append(&d.events, &d.effects, &cause).await {
            Ok(entries) => {
                self.pending.extend(entries);
                if let (Some(exporter), Some(st)) = (crate::otlp::global(), self.state.as_deref()) {
                    let spans = &mut self.spans;
                    exporter.send(d.events.iter().flat_map(|e| spans.push(st, e)).collect());
                }
                Ok(Decided::Acted(d.events))
            }
            Err(e) => {
                match outbox.load().await {
                    Ok(loaded) => self.reload(loaded),
                    Err(again) => tracing::warn!(error = %again, "cannot reload the log either"),
                }
                Err(e)
            }
        }
    }

    /// Carries out the outbox and decides the queued inputs (and those the
    /// effects yield) until both are empty or only waiting entries are left.
    /// `retry_waiting`: entries that waited are tried again in this drive.
    /// An effect's failure is the executor's to report, never an error here:
    /// only the outbox failing stops the drive.
    pub async fn drive<O: Outbox, X: Executor>(
        &mut self,
        outbox: &mut O,
        exec: &mut X,
        retry_waiting: bool,
    ) -> Result<(), O::Error> {
        loop {
            if !self.carry_out(outbox, exec, retry_waiting).await? {
                // A transient failure: the rest stays, in order, for a later drive.
                return Ok(());
            }
            let Some(input) = self.queue.pop_front() else {
                return Ok(());
            };
            self.decide_and_observe(outbox, exec, input).await?;
        }
    }

    /// Decides one input, then drives; what became of the input is returned.
    pub async fn submit<O: Outbox, X: Executor>(
        &mut self,
        outbox: &mut O,
        exec: &mut X,
        input: Input,
    ) -> Result<Decided, O::Error> {
        let decided = self.decide_and_observe(outbox, exec, input).await?;
        self.drive(outbox, exec, false).await?;
        Ok(decided)
    }

    async fn decide_and_observe<O: Outbox, X: Executor>(
        &mut self,
        outbox: &mut O,
        exec: &mut X,
        input: Input,
    ) -> Result<Decided, O::Error> {
        let decided = self.decide(outbox, input).await?;
        match &decided {
            Decided::Acted(events) => exec.observe(events),
            Decided::Refused(r) => tracing::debug!(%r, "input refused"),
        }
        Ok(decided)
    }

    /// Carries out the pending entries in order. False when one failed in a way
    /// that may pass: it and those after it wait for a later drive.
    async fn carry_out<O: Outbox, X: Executor>(
        &mut self,
        outbox: &mut O,
        exec: &mut X,
        retry_waiting: bool,
    ) -> Result<bool, O::Error> {
        let mut i = 0;
        while i < self.pending.len() {
            let entry = self.pending[i].clone();
            if self.waiting.contains(&entry.key) && !retry_waiting {
                i += 1;
                continue;
            }
            let span = tracing::info_span!("effect", key = %entry.key);
            let outcome = tracing::Instrument::instrument(
                exec.carry_out(self.state.as_deref(), &entry),
                span,
            )
            .await;
            let follow = match outcome {
                Ok(Outcome::Done(inputs)) => inputs,
                Ok(Outcome::Wait(inputs)) => {
                    for input in inputs {
                        self.decide_and_observe(outbox, exec, input).await?;
                    }
                    self.waiting.insert(entry.key);
                    i += 1;
                    continue;
                }
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, key = %entry.key, "effect failed; will retry");
                    return Ok(false);
                }
                Err(e) => {
                    tracing::error!(error = %e, key = %entry.key, "effect failed for good");
                    exec.failed(&entry, &e).await;
                    given_up(&entry.effect, &e.to_string())
                }
            };
            // What the effect yielded is recorded before the effect is marked
            // done: a crash in between carries the effect out again (it is
            // idempotent, and so is what it yields), instead of losing, say,
            // the news that a merge was made.
            for input in follow {
                self.decide_and_observe(outbox, exec, input).await?;
            }
            self.waiting.remove(&entry.key);
            outbox.done(entry.key).await?;
            let at = self.pending.iter().position(|p| p.key == entry.key);
            if let Some(at) = at {
                self.pending.remove(at);
            }
        }
        Ok(true)
    }
}

/// What the engine must hear of an effect abandoned after a failure: a launch
/// that never happened is a failed dispatch; a merge that cannot be made needs
/// a person. Other effects (a notice, a report) change nothing it decides on.
fn given_up(effect: &Effect, error: &str) -> Vec<Input> {
    match effect {
        Effect::Dispatch(o) => vec![Input::DispatchFailed {
            dispatch: o.dispatch.clone(),
            error: error.to_string(),
        }],
        Effect::Integrate { unit, sprint, .. } => vec![Input::IntegrationFailed {
            unit: unit.clone(),
            sprint: sprint.clone(),
            error: error.to_string(),
        }],
        _ => Vec::new(),
    }
}

/// Runs a future whose every step is synchronous (the local place: files, git,
/// processes) on the calling thread. Such futures never wait, so one poll
/// finishes them; should one ever wait, it is polled again until it is done.
pub fn finish_now<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::*;

    /// A log in memory whose `done` can be made to fail, as a crash between
    /// carrying an effect out and marking it done would.
    #[derive(Default)]
    struct MemLog {
        records: Vec<(Vec<Event>, Vec<Entry>)>,
        done: HashSet<EffectKey>,
        crash_on_done: bool,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("crashed")]
    struct Crashed;

    impl Outbox for MemLog {
        type Error = Crashed;
        async fn append(
            &mut self,
            events: &[Event],
            effects: &[Effect],
            _cause: &Cause,
        ) -> Result<Vec<Entry>, Crashed> {
            let seq = self.records.len() as u64 + 1;
            let entries = Entry::numbered(seq, effects);
            self.records.push((events.to_vec(), entries.clone()));
            Ok(entries)
        }
        async fn done(&mut self, key: EffectKey) -> Result<(), Crashed> {
            if self.crash_on_done {
                return Err(Crashed);
            }
            self.done.insert(key);
            Ok(())
        }
        async fn load(&mut self) -> Result<Loaded, Crashed> {
            let events: Vec<Event> = self.records.iter().flat_map(|r| r.0.clone()).collect();
            Ok(Loaded {
                state: OperationState::replay(&events),
                events: events.len(),
                pending: self
                    .records
                    .iter()
                    .flat_map(|r| r.1.clone())
                    .filter(|e| !self.done.contains(&e.key))
                    .collect(),
            })
        }
    }

    /// Merges every sprint it is asked to; launches nothing.
    struct Merger;

    impl Failure for Crashed {
        fn is_transient(&self) -> bool {
            false
        }
    }

    impl Executor for Merger {
        type Error = Crashed;
        async fn carry_out(
            &mut self,
            _: Option<&OperationState>,
            entry: &Entry,
        ) -> Result<Outcome, Crashed> {
            Ok(Outcome::Done(match &entry.effect {
                Effect::Integrate { unit, sprint, .. } => vec![Input::Integrated {
                    unit: unit.clone(),
                    sprint: sprint.clone(),
                }],
                _ => Vec::new(),
            }))
        }
        async fn failed(&mut self, _: &Entry, _: &Crashed) {}
    }

    #[test]
    fn what_an_effect_yields_is_recorded_before_the_effect_is_marked_done() {
        let plan = crate::plan::parse(
            "# P\n\n## Sprint 1: Implement x\n- [ ] `make x` passes\n## Sprint 2: Implement y\n- [ ] `make y` passes\n",
            "p",
        )
        .unwrap();
        let (mut log, mut driver) = (MemLog::default(), Driver::default());
        let start = Input::Start {
            operation: OperationId("op".into()),
            plan: Box::new(plan),
            config: EngineConfig::default(),
            seed: 1,
            workflow: None,
            already_done: Vec::new(),
        };
        let started = finish_now(driver.submit(&mut log, &mut Merger, start)).unwrap();
        assert!(matches!(started, Decided::Acted(_)));
        let st = driver.state.as_ref().unwrap();
        let dispatch = st.units[0].sprints[0].active.as_ref().unwrap().id.clone();
        let report = AgentReport {
            exit_code: Some(0),
            output_tail: "Done.".into(),
            turns_used: Some(3),
            usage: None,
            evidence: Evidence {
                commits: vec!["abc1234".into()],
                criteria: vec![CriterionResult {
                    line: 1,
                    text: "make x passes".into(),
                    outcome: CriterionOutcome::Passed,
                    detail: String::new(),
                }],
                ..Default::default()
            },
        };
        // The process dies right after the merge, before marking it done.
        log.crash_on_done = true;
        let finished = Input::AgentFinished { dispatch, report };
        assert!(finish_now(driver.submit(&mut log, &mut Merger, finished)).is_err());
        let restarted = finish_now(log.load()).unwrap();
        let st = restarted.state.as_ref().unwrap();
        assert!(
            !st.units[0].sprints[0].awaiting_merge(),
            "the merge the executor reported is in the log"
        );
        assert!(
            restarted
                .pending
                .iter()
                .any(|e| matches!(e.effect, Effect::Integrate { .. })),
            "the merge itself is carried out again (idempotent)"
        );
        // Carried out again after the restart, the merge changes nothing more.
        log.crash_on_done = false;
        let mut again = Driver::new(restarted);
        finish_now(again.drive(&mut log, &mut Merger, false)).unwrap();
        assert!(again.pending.is_empty());
        assert_eq!(
            again.state.as_ref().unwrap().units[0].sprints[1].status(),
            SprintStatus::Dispatched
        );
    }

    #[test]
    fn effect_keys_read_back_what_they_write() {
        let k = EffectKey { seq: 42, index: 3 };
        assert_eq!(k.to_string(), "42.3");
        assert_eq!("42.3".parse::<EffectKey>().unwrap(), k);
        assert!("42".parse::<EffectKey>().is_err());
        assert!("x.1".parse::<EffectKey>().is_err());
        let json = serde_json::to_string(&k).unwrap();
        assert_eq!(json, "\"42.3\"");
        assert_eq!(serde_json::from_str::<EffectKey>(&json).unwrap(), k);
    }
}
