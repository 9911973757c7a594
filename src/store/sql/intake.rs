//! Group commit for the delivery queue's writes, and the hand-off of what it
//! stores to this process's workers.
//!
//! Deliveries being stored and deliveries whose processing ended, arriving
//! while a commit is being made, wait for the next one and share it — one
//! transaction, a few multi-row statements and one fsync for all of them — so
//! the rate at which deliveries can be taken in grows with the load instead of
//! stopping at two commits per delivery. Nothing is answered before its commit:
//! a delivery is still durable before its 2xx, and an end is recorded before
//! the worker moves on. There is no added wait under light load: a write that
//! finds no commit in progress is committed at once, alone.
//!
//! A delivery stored while this process's workers have room is stored already
//! claimed by them (leased, first attempt) and handed over in memory, body and
//! all: the claim and the body's read-back, two statements per delivery, are
//! not made. The lease is what a claim from the store would have taken, so a
//! crash hands such a delivery to the next worker after it, exactly as one
//! claimed the usual way. When the workers have no room, deliveries are stored
//! pending and claimed from the store in order; none is handed over directly
//! until the workers have found the store drained, so a newer delivery does not
//! overtake an older one still waiting there.

use super::{now_ms, Claimed, Intake, SqlError, SqlStore};
use crate::sync::LockExt;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Notify};

/// One delivery to store.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub id: String,
    pub event: String,
    pub dedupe: Option<String>,
    pub installation: Option<i64>,
    pub payload: String,
    /// Processing it would do nothing — a comment without a command, say
    /// (see `Handler::may_act`): it is stored done, in the same commit, and
    /// never queued for a worker.
    pub settled: bool,
}

/// How a delivery is stored: the row a commit writes for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Row {
    /// Claimed for this process's workers (leased, first attempt) and handed
    /// over in memory.
    Handed,
    /// In line for a claim.
    Pending,
    /// Needing nothing done ([`NewDelivery::settled`]): done already.
    Done,
}

impl Row {
    pub(super) fn status(self) -> &'static str {
        match self {
            Row::Handed => "processing",
            Row::Pending => "pending",
            Row::Done => "done",
        }
    }

    /// Attempts made at it: the hand-over is the first.
    pub(super) fn attempts(self) -> i64 {
        i64::from(self == Row::Handed)
    }

    /// Whether its body is stored: only a worker reads a body, and none
    /// ever takes a delivery stored done. Most deliveries are such (a
    /// comment without a command), and their bodies — GitHub's are 8–12 KB
    /// — were most of what intake wrote to the disk.
    pub(super) fn keeps_body(self) -> bool {
        self != Row::Done
    }

    /// How the deliveries of a batch are stored, in order: settled ones
    /// done; the others handed over while `room` lasts, up to the first
    /// too large to hold — it and those after it wait in the store, behind
    /// which nothing newer may be handed over.
    fn assign(deliveries: &[&NewDelivery], mut room: usize) -> Vec<Row> {
        deliveries
            .iter()
            .map(|d| {
                if d.settled {
                    Row::Done
                } else if room > 0 && d.payload.len() <= HANDOFF_MAX_BODY {
                    room -= 1;
                    Row::Handed
                } else {
                    room = 0;
                    Row::Pending
                }
            })
            .collect()
    }
}

/// One write the queue carries.
#[derive(Debug, Clone)]
enum Write {
    Store(NewDelivery),
    /// A claimed delivery's end, fenced by its attempt (see `SqlStore::finish`).
    End {
        id: String,
        attempts: i64,
        error: Option<String>,
    },
}

/// What a write came to: a stored delivery's `Intake`; an end's nothing.
type Answer = Result<Option<Intake>, SqlError>;
type Waiting = (Write, oneshot::Sender<Answer>);

/// The delivery queue's single writer: hands each write to the next commit.
#[derive(Clone)]
pub struct IntakeQueue {
    tx: mpsc::Sender<Waiting>,
}

/// The most writes one commit takes (a burst larger than this is split).
const MAX_BATCH: usize = 256;

/// The longest the writer keeps a connection through consecutive commits
/// while nobody else waits for one (when anyone does — a worker, an
/// operation, `/readyz` — it is given back at once). Each give-back costs the writer about
/// 3 ms (sqlx checks the connection, from a task of its own, before it can be
/// taken again): every 20 ms that was about a seventh of the writer's time,
/// and intake ran about 16% faster at 256 connections with 100 ms (four
/// alternating pairs of bench runs).
const HOLD_AT_MOST: Duration = Duration::from_millis(100);

/// How long the writer keeps its connection waiting for the next writes
/// once none are queued.
const LINGER: Duration = Duration::from_millis(1);

/// A connection of the store's pool.
pub(super) type Conn = sqlx::pool::PoolConnection<sqlx::Any>;

/// Deliveries stored already claimed, waiting in memory for this process's
/// workers (see the module's documentation).
pub struct Handoff {
    waiting: Mutex<VecDeque<(Instant, Claimed)>>,
    /// The most deliveries that wait here; beyond it they are stored pending.
    room: usize,
    lease: Duration,
    /// Told once for each delivery handed over, and once for each commit
    /// that stored some pending.
    pub ready: Notify,
    /// Raised each time a delivery is stored pending (and once at the start:
    /// the store may hold some from before).
    pending_stored: AtomicU64,
    /// The highest `pending_stored` a worker has seen followed by a claim that
    /// found nothing: while it is behind, deliveries wait in the store.
    drained: AtomicU64,
    /// When a commit last claimed in line and found nothing more due (see
    /// [`Handoff::claim_room`]): the workers need not look again before
    /// [`LOOK_AGAIN`] has passed since.
    looked: Mutex<Option<Instant>>,
}

/// How long after its claim found the store empty a worker looks again
/// though told of nothing stored pending: deliveries also come due there
/// without this process storing them — a lease run out, a retry's delay
/// over, another replica's overflow.
pub const LOOK_AGAIN: Duration = Duration::from_millis(250);

impl Handoff {
    pub fn new(room: usize, lease: Duration) -> Arc<Handoff> {
        Arc::new(Handoff {
            waiting: Mutex::new(VecDeque::new()),
            room,
            lease,
            ready: Notify::new(),
            pending_stored: AtomicU64::new(1),
            drained: AtomicU64::new(0),
            looked: Mutex::new(None),
        })
    }

    /// The next delivery handed over, with when its lease was taken.
    pub fn take(&self) -> Option<(Instant, Claimed)> {
        self.waiting.locked().pop_front()
    }

    /// Deliveries a worker claimed from the store beyond the one it works
    /// on, shared with the other workers ahead of those handed over since
    /// (they are older): kept by the worker that claimed them, they waited
    /// behind its work — at 1,000 operations in the scale bench, up to 4 s
    /// while other workers were idle.
    pub fn share(&self, claimed: Vec<Claimed>, taken: Instant) {
        let n = claimed.len();
        {
            let mut waiting = self.waiting.locked();
            for c in claimed.into_iter().rev() {
                waiting.push_front((taken, c));
            }
        }
        for _ in 0..n {
            self.ready.notify_one();
        }
    }

    /// Everything still waiting, for a shutdown to hand back.
    pub fn take_all(&self) -> Vec<Claimed> {
        self.waiting.locked().drain(..).map(|(_, c)| c).collect()
    }

    /// To read before a claim from the store: if the claim finds nothing,
    /// pass it to [`Handoff::drained_at`].
    pub fn pending_mark(&self) -> u64 {
        self.pending_stored.load(Ordering::SeqCst)
    }

    /// A claim begun at `mark` found the store with nothing to claim.
    pub fn drained_at(&self, mark: u64) {
        self.drained.fetch_max(mark, Ordering::SeqCst);
    }

    /// Whether a worker's claim from the store may find something, the
    /// worker's last having found nothing at `found_none` (`None`: it found
    /// some): deliveries were stored pending since the store was found
    /// drained, or that last claim was a while ago (see [`LOOK_AGAIN`]). A
    /// worker with nothing handed over asks first, so idle workers do not
    /// keep the store's one SQLite connection from intake's commits with
    /// claims that find nothing. Each worker asks for itself: on PostgreSQL
    /// a claim racing another for the same rows finds none of them though
    /// many more wait, and must not hold the other workers back.
    ///
    /// A commit's look in line counts as the workers' own (see
    /// [`Handoff::claim_room`]).
    pub fn worth_a_claim(&self, found_none: Option<Instant>) -> bool {
        self.store_waits()
            || found_none.is_none_or(|at| at.elapsed() >= LOOK_AGAIN) && self.look_due()
    }

    /// Whether [`LOOK_AGAIN`] has passed since a commit last found nothing
    /// more due in the store.
    fn look_due(&self) -> bool {
        self.looked
            .locked()
            .is_none_or(|at| at.elapsed() >= LOOK_AGAIN)
    }

    /// A commit's claim in line took everything due.
    fn drained_in_line(&self) {
        self.drained_at(self.pending_mark());
        *self.looked.locked() = Some(Instant::now());
    }

    /// Whether deliveries may wait in the store: some were stored pending
    /// since a claim last found it drained.
    fn store_waits(&self) -> bool {
        self.drained.load(Ordering::SeqCst) < self.pending_stored.load(Ordering::SeqCst)
    }

    /// The room left for deliveries waiting here.
    fn room_left(&self) -> usize {
        self.room.saturating_sub(self.waiting.locked().len())
    }

    /// Takes deliveries just committed claimed, and says whether others were
    /// stored pending; the workers are told.
    fn receive(&self, handed: Vec<Claimed>, pending: bool) {
        let n = handed.len() + usize::from(pending);
        let taken = Instant::now();
        self.waiting
            .locked()
            .extend(handed.into_iter().map(|c| (taken, c)));
        if pending {
            self.pending_stored.fetch_add(1, Ordering::SeqCst);
        }
        for _ in 0..n {
            self.ready.notify_one();
        }
    }

    /// How many deliveries waiting in the store a commit may claim and hand
    /// over: the room left, while deliveries are being stored pending.
    /// Under a load the workers cannot keep up with, deliveries go to the
    /// store in order, and the workers alone claimed them back, on the
    /// pool's one SQLite connection — taking it from the writer between
    /// commits, and giving it back from a task of its own that waited behind
    /// every request's: in the bench's runs that fell into this, at 256
    /// connections, most commits began by waiting 9-12 ms for it, and intake
    /// ran at about two thirds of its rate. Claimed in the commit, in order,
    /// they cost a few statements on the writer's connection instead.
    ///
    /// Otherwise, once [`LOOK_AGAIN`] has passed since a commit last looked,
    /// the commit looks in line for what came due without being stored here
    /// (a lease run out, a retry's delay over), with the room its own
    /// `handed` deliveries leave: under load the workers then have no reason
    /// to take the connection for a look of their own (in a probe at 256
    /// connections, their looks made the writer give the connection up about
    /// 10 times a second, about 3 ms each).
    fn claim_room(&self, handed: usize) -> usize {
        if self.store_waits() {
            self.room_left()
        } else if self.look_due() {
            self.room_left().saturating_sub(handed)
        } else {
            0
        }
    }

    /// How many of the next stored deliveries can be handed over directly.
    fn free(&self) -> usize {
        if self.store_waits() {
            0
        } else {
            self.room_left()
        }
    }
}

impl IntakeQueue {
    /// Starts the writer on the current runtime; it ends with the last queue.
    /// Everything it stores is left pending for a claim.
    pub fn start(store: SqlStore) -> IntakeQueue {
        Self::start_with(store, None)
    }

    /// As [`IntakeQueue::start`], handing what it stores to `handoff` while
    /// it has room.
    pub fn start_with(store: SqlStore, handoff: Option<Arc<Handoff>>) -> IntakeQueue {
        let (tx, mut rx) = mpsc::channel::<Waiting>(4 * MAX_BATCH);
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(MAX_BATCH);
            // The connection is kept from one commit to the next while
            // writes keep coming: taking it from the pool and giving it back
            // costs a trip to the database each (sqlx checks a connection
            // given back), which was a fifth of a commit under load.
            let mut conn: Option<Conn> = None;
            let mut taken = Instant::now();
            loop {
                // Holding the connection, wait a moment for the next writes
                // before giving it back: under load they follow within a
                // fraction of a millisecond, and a connection given back is
                // not free to take again until sqlx has checked it (a trip to
                // the database, after a task of its own is scheduled) — about
                // a sixth of each commit at 256 connections, in a probe.
                let lingered = match conn {
                    Some(_) => tokio::time::timeout(LINGER, rx.recv_many(&mut batch, MAX_BATCH))
                        .await
                        .ok(),
                    None => None,
                };
                let received = match lingered {
                    Some(n) => n,
                    None => {
                        conn = None;
                        rx.recv_many(&mut batch, MAX_BATCH).await
                    }
                };
                if received == 0 {
                    break;
                }
                metrics::histogram!("supervise_intake_batch").record(batch.len() as f64);
                let began = Instant::now();
                let had = conn.is_some();
                store
                    .commit_batch(&mut conn, std::mem::take(&mut batch), handoff.as_deref())
                    .await;
                if !had {
                    taken = began;
                }
                metrics::histogram!("supervise_intake_commit_seconds")
                    .record(began.elapsed().as_secs_f64());
                // On SQLite it is the store's one connection: claims,
                // processing and operations wait for it.
                if store.others_wait() || taken.elapsed() >= HOLD_AT_MOST {
                    conn = None;
                }
            }
        });
        IntakeQueue { tx }
    }

    async fn send(&self, w: Write) -> Answer {
        let (done, answer) = oneshot::channel();
        self.tx
            .send((w, done))
            .await
            .map_err(|_| SqlError::Closed)?;
        answer.await.map_err(|_| SqlError::Closed)?
    }

    /// Stores one delivery (with whatever arrives with it); `Duplicate` when
    /// its id or its dedupe key is already stored.
    pub async fn submit(&self, d: NewDelivery) -> Result<Intake, SqlError> {
        Ok(self
            .send(Write::Store(d))
            .await?
            .unwrap_or(Intake::Duplicate))
    }

    /// Records a claimed delivery's end, as `SqlStore::finish` does, in the
    /// next shared commit.
    pub async fn finish(
        &self,
        id: &str,
        attempts: i64,
        error: Option<&str>,
    ) -> Result<(), SqlError> {
        self.send(Write::End {
            id: id.to_string(),
            attempts,
            error: error.map(str::to_string),
        })
        .await
        .map(|_| ())
    }
}

const FINISH: &str = "UPDATE deliveries SET status = $1, lease_until = NULL, error = $2 WHERE id = $3 AND attempts = $4";

/// A value bound to a placeholder of a batch's statements.
#[derive(Clone, Copy)]
enum Bind<'a> {
    Text(&'a str),
    MaybeText(Option<&'a str>),
    Int(i64),
    MaybeInt(Option<i64>),
}

/// One statement of a batch.
struct Statement<'a> {
    sql: String,
    binds: Vec<Bind<'a>>,
}

/// A batch's statements, sent together, as one script or one statement:
/// their placeholders are numbered on from one statement to the next (`$n`),
/// or `positional` (`?`, taken in order). SQLite gets the latter: it looks a
/// numbered placeholder's name up by walking a list, once for each, which
/// made binding a batch of a few hundred values take longer than running it.
struct Script<'a> {
    statements: Vec<Statement<'a>>,
    next: usize,
    positional: bool,
}

impl<'a> Script<'a> {
    fn new(positional: bool) -> Script<'a> {
        Script {
            statements: Vec::new(),
            next: 1,
            positional,
        }
    }

    /// Adds a statement: `write` is given a function that binds a value and
    /// returns its placeholder.
    fn push(&mut self, write: impl FnOnce(&mut dyn FnMut(Bind<'a>) -> String) -> String) {
        let mut binds = Vec::new();
        let mut next = self.next;
        let positional = self.positional;
        // Values are bound in the order `write` asks for placeholders, which
        // must be the order they appear in its text.
        let sql = write(&mut |b| {
            binds.push(b);
            next += 1;
            if positional {
                "?".to_string()
            } else {
                format!("${}", next - 1)
            }
        });
        self.next = next;
        self.statements.push(Statement { sql, binds });
    }

    fn binds(&self) -> Vec<Bind<'a>> {
        self.statements
            .iter()
            .flat_map(|s| s.binds.iter().copied())
            .collect()
    }
}

fn bound<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    binds: &[Bind<'q>],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments> {
    for b in binds {
        q = match *b {
            Bind::Text(v) => q.bind(v),
            Bind::MaybeText(v) => q.bind(v),
            Bind::Int(v) => q.bind(v),
            Bind::MaybeInt(v) => q.bind(v),
        };
    }
    q
}

/// What one batch writes: deliveries, each stored as its [`Row`] says (the
/// handed-over ones claimed until `lease_until`), then plain ends, then ends
/// with an error.
pub(super) struct BatchWrites<'a> {
    pub(super) deliveries: Vec<&'a NewDelivery>,
    /// One for each of `deliveries`.
    pub(super) rows: Vec<Row>,
    /// The replica (and its run) the handed-over deliveries are claimed for.
    pub(super) holder: Option<&'a super::Holder>,
    pub(super) now: i64,
    pub(super) lease_until: Option<i64>,
    pub(super) done: Vec<(&'a str, i64)>,
    pub(super) failed: Vec<(&'a str, i64, &'a str)>,
    /// How many of the deliveries due first in the store (pending, or their
    /// lease run out) the commit may also claim for the hand-over, until
    /// `lease_until` (see [`Taken`]).
    pub(super) claim: usize,
}

/// Deliveries a commit claimed from the store besides its writes, oldest
/// first, for this process's workers, and whether it left none due that it
/// could have taken. Only intake's own SQLite connection claims so (see
/// [`Handoff::claim_room`]); elsewhere nothing is taken.
#[derive(Default)]
pub(super) struct Taken {
    pub(super) claimed: Vec<Claimed>,
    pub(super) drained: bool,
}

impl<'a> BatchWrites<'a> {
    /// The statements, in order. The first, if there are deliveries, inserts
    /// them and returns the ids it stored (`ON CONFLICT DO NOTHING`: a
    /// delivery id or dedupe key already there is skipped, as is a second of
    /// either in the same batch); the second, if any body is to be kept (see
    /// `Row::keeps_body`), stores the bodies of those stored, found in
    /// `stored_in` (the table, when the statements run one after another;
    /// the first's result, when they are parts of one statement), so it
    /// needs nothing back from the first.
    ///
    /// `padded`: each statement's rows are made up to the next power of two
    /// with rows of NULLs that store and match nothing, so that a batch's
    /// statement is one of a few shapes, each prepared once per connection
    /// and kept (PostgreSQL: an unprepared shape costs a round trip more,
    /// and planning).
    fn script(&self, stored_in: &str, positional: bool, padded: bool) -> Script<'a> {
        let rows = |n: usize| if padded { n.next_power_of_two() } else { n };
        let mut script = Script::new(positional);
        if !self.deliveries.is_empty() {
            script.push(|bind| {
                let mut sql = String::from("INSERT INTO deliveries (id, event, dedupe, installation, received_at, status, attempts, lease_until, holder, incarnation) ");
                sql.push_str(if padded { "SELECT * FROM (VALUES " } else { "VALUES " });
                for i in 0..rows(self.deliveries.len()) {
                    let row = match self.deliveries.get(i).zip(self.rows.get(i)) {
                        Some((d, &how)) => {
                            let direct = how == Row::Handed;
                            let held = self.holder.filter(|_| direct);
                            [
                                bind(Bind::Text(&d.id)),
                                bind(Bind::Text(&d.event)),
                                bind(Bind::MaybeText(d.dedupe.as_deref())),
                                bind(Bind::MaybeInt(d.installation)),
                                bind(Bind::Int(self.now)),
                                bind(Bind::Text(how.status())),
                                bind(Bind::Int(how.attempts())),
                                bind(Bind::MaybeInt(if direct { self.lease_until } else { None })),
                                bind(Bind::MaybeText(held.map(|h| h.replica.as_str()))),
                                bind(Bind::MaybeText(held.map(|h| h.run.as_str()))),
                            ]
                        }
                        // NULLs of each column's type (PostgreSQL types a
                        // VALUES column from all its rows).
                        None => {
                            let (text, int) = (Bind::MaybeText(None), Bind::MaybeInt(None));
                            [text, text, text, int, int, text, int, int, text, text].map(&mut *bind)
                        }
                    };
                    sql.push_str(if i == 0 { "(" } else { ", (" });
                    sql.push_str(&row.join(", "));
                    sql.push(')');
                }
                if padded {
                    sql.push_str(") AS v WHERE column1 IS NOT NULL");
                }
                sql.push_str(" ON CONFLICT DO NOTHING RETURNING id");
                sql
            });
        }
        // The bodies a worker will read (see `Row::keeps_body`), each whose
        // delivery is in the table now: stored just now, or stored before
        // with its body (which stays as it is).
        let bodies: Vec<&NewDelivery> = self
            .deliveries
            .iter()
            .zip(&self.rows)
            .filter(|(_, how)| how.keeps_body())
            .map(|(d, _)| *d)
            .collect();
        if !bodies.is_empty() {
            script.push(|bind| {
                let mut sql = String::from("INSERT INTO delivery_payloads (id, payload) SELECT column1, column2 FROM (VALUES ");
                for i in 0..rows(bodies.len()) {
                    let d = bodies.get(i);
                    let id = bind(Bind::MaybeText(d.map(|d| d.id.as_str())));
                    let body = bind(Bind::MaybeText(d.map(|d| d.payload.as_str())));
                    sql.push_str(&format!("{}({id}, {body})", if i == 0 { "" } else { ", " }));
                }
                sql.push_str(&format!(") AS v WHERE column1 IN (SELECT id FROM {stored_in}) ON CONFLICT DO NOTHING"));
                sql
            });
        }
        if !self.done.is_empty() {
            script.push(|bind| {
                let mut sql = String::from("UPDATE deliveries SET status = 'done', lease_until = NULL, error = NULL WHERE ");
                for i in 0..rows(self.done.len()) {
                    let end = self.done.get(i);
                    let id = bind(Bind::MaybeText(end.map(|e| e.0)));
                    let attempts = bind(Bind::MaybeInt(end.map(|e| e.1)));
                    sql.push_str(&format!("{}(id = {id} AND attempts = {attempts})", if i == 0 { "" } else { " OR " }));
                }
                sql
            });
        }
        for (id, attempts, error) in &self.failed {
            script.push(|bind| {
                format!(
                    "UPDATE deliveries SET status = 'failed', lease_until = NULL, error = {} WHERE id = {} AND attempts = {}",
                    bind(Bind::Text(error)),
                    bind(Bind::Text(id)),
                    bind(Bind::Int(*attempts))
                )
            })
        }
        script
    }
}

/// Runs `f`, which blocks, on this thread: out of the runtime's pool of
/// workers first when it has others to take this one's tasks over.
fn block_here<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// What came of one write of a batch.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// Stored, as its row says.
    Stored(Row),
    Duplicate,
    Ended,
}

impl Outcome {
    fn answer(self) -> Option<Intake> {
        match self {
            Outcome::Stored(_) => Some(Intake::Stored),
            Outcome::Duplicate => Some(Intake::Duplicate),
            Outcome::Ended => None,
        }
    }
}

/// Bodies larger than this are never held in memory waiting for a worker:
/// such a delivery is stored pending, and the worker reads it when it comes
/// to it (so the hand-off holds at most its room times this).
pub(super) const HANDOFF_MAX_BODY: usize = 64 * 1024;

impl SqlStore {
    /// Stores one delivery in its own transaction, pending.
    pub async fn intake(
        &self,
        id: &str,
        event: &str,
        dedupe: Option<&str>,
        installation: Option<i64>,
        payload: &str,
    ) -> Result<Intake, SqlError> {
        self.store_alone(
            &mut None,
            &NewDelivery {
                id: id.to_string(),
                event: event.to_string(),
                dedupe: dedupe.map(str::to_string),
                installation,
                payload: payload.to_string(),
                settled: false,
            },
        )
        .await
    }

    /// Stores one delivery in a transaction of its own, pending (or done,
    /// if settled).
    async fn store_alone(
        &self,
        conn: &mut Option<Conn>,
        d: &NewDelivery,
    ) -> Result<Intake, SqlError> {
        let writes = BatchWrites {
            deliveries: vec![d],
            rows: Row::assign(&[d], 0),
            holder: None,
            now: now_ms(),
            lease_until: None,
            done: Vec::new(),
            failed: Vec::new(),
            claim: 0,
        };
        Ok(if self.write(conn, &writes).await?.0.is_empty() {
            Intake::Duplicate
        } else {
            Intake::Stored
        })
    }

    /// Records a claimed delivery's end; fenced like [`SqlStore::renew`], so a
    /// worker that lost its lease cannot overwrite the new holder's outcome.
    pub async fn finish(
        &self,
        id: &str,
        attempts: i64,
        error: Option<&str>,
    ) -> Result<(), SqlError> {
        sqlx::query(FINISH)
            .bind(if error.is_some() { "failed" } else { "done" })
            .bind(error)
            .bind(id)
            .bind(attempts)
            .execute(&mut *self.connection().await?)
            .await?;
        Ok(())
    }

    /// Makes a batch's writes in one transaction; returns the ids of the
    /// deliveries it stored. On SQLite the transaction is one script, sent to
    /// the connection's thread at once (each statement sent alone would cross
    /// to it and back); on PostgreSQL, which takes no script with parameters,
    /// it is one statement, the writes its parts (`WITH`), so one round trip.
    /// Made on `conn`, or on one taken from the pool and left there;
    /// a connection a write failed on is given back.
    async fn write(
        &self,
        conn: &mut Option<Conn>,
        w: &BatchWrites<'_>,
    ) -> Result<(HashSet<String>, Taken), SqlError> {
        // On SQLite the pool's one connection, held, also keeps every other
        // write (and transaction) off the file while intake's own
        // connection writes.
        let c = match conn {
            Some(c) => c,
            None => conn.insert(self.pool.acquire().await?),
        };
        if let Some(direct) = &self.direct {
            return block_here(|| direct.write(w));
        }
        let ids = |rows: Vec<sqlx::any::AnyRow>| -> Result<(HashSet<String>, Taken), SqlError> {
            let stored = rows
                .iter()
                .map(|r| sqlx::Row::try_get::<String, _>(r, "id"))
                .collect::<Result<_, _>>()?;
            Ok((stored, Taken::default()))
        };
        let stored_first = !w.deliveries.is_empty();
        if self.sqlite {
            let script = w.script("deliveries", true, false);
            let mut sql = String::from("BEGIN IMMEDIATE;\n");
            for s in &script.statements {
                sql.push_str(&s.sql);
                sql.push_str(";\n");
            }
            sql.push_str("COMMIT");
            // Only placeholders are made here; the values are bound.
            let q = bound(
                sqlx::query(sqlx::AssertSqlSafe(sql)).persistent(false),
                &script.binds(),
            );
            return match q.fetch_all(&mut **c).await {
                Ok(rows) => ids(rows),
                Err(e) => {
                    // The script stopped part way, inside its transaction
                    // (or before it began): undo it, so the connection goes
                    // back to the pool clean — or is closed if even that
                    // fails for another reason than there being nothing to
                    // undo (closing the one connection of an in-memory
                    // database would lose it).
                    if let Err(r) = sqlx::query("ROLLBACK").execute(&mut **c).await {
                        if !r.to_string().contains("no transaction is active") {
                            c.close_on_drop();
                        }
                    }
                    *conn = None;
                    Err(e.into())
                }
            };
        }
        let script = w.script("w0", false, w.failed.is_empty());
        let parts: Vec<String> = script
            .statements
            .iter()
            .enumerate()
            .map(|(i, s)| format!("w{i} AS ({})", s.sql))
            .collect();
        let sql = format!(
            "WITH {} {}",
            parts.join(", "),
            if stored_first {
                "SELECT id FROM w0"
            } else {
                "SELECT '' AS id WHERE false"
            }
        );
        // Only placeholders are made here; the values are bound. Prepared
        // and kept, as the statements of other queries are: batches of a
        // few writes recur, and an unprepared statement costs PostgreSQL a
        // round trip more (it is described before it is run).
        let q = bound(sqlx::query(sqlx::AssertSqlSafe(sql)), &script.binds());
        let rows = q.fetch_all(&mut **c).await;
        if rows.is_err() {
            *conn = None;
        }
        ids(rows?)
    }

    /// One transaction for the batch; if it fails, each write is tried on
    /// its own (pending, not handed over), so one that cannot be made never
    /// costs the others theirs.
    async fn commit_batch(
        &self,
        conn: &mut Option<Conn>,
        batch: Vec<Waiting>,
        handoff: Option<&Handoff>,
    ) {
        if batch.len() > 1 || handoff.is_some() {
            match self.write_all(conn, &batch, handoff).await {
                Ok((outcomes, taken)) => {
                    // Committed: what was stored is durable, and now handed
                    // over (the bodies moved, not copied), then answered.
                    let (mut handed, mut pending) = (Vec::new(), false);
                    // Within a few milliseconds of the batch's own time.
                    let stored_at = now_ms();
                    let mut answers = Vec::with_capacity(outcomes.len());
                    for ((w, done), o) in batch.into_iter().zip(outcomes) {
                        answers.push((done, o.answer()));
                        match (o, w) {
                            (Outcome::Stored(Row::Handed), Write::Store(d)) => {
                                handed.push(Claimed {
                                    id: d.id,
                                    event: d.event,
                                    installation: d.installation,
                                    payload: d.payload,
                                    attempts: 1,
                                    stored_at_ms: stored_at,
                                })
                            }
                            (Outcome::Stored(Row::Pending), _) => pending = true,
                            _ => {}
                        }
                    }
                    if let Some(h) = handoff {
                        // What the commit claimed from the store came due
                        // before anything it stored: it goes first.
                        let mut all = taken.claimed;
                        all.append(&mut handed);
                        h.receive(all, pending);
                        if taken.drained {
                            // Every delivery due when the commit was made is
                            // claimed: direct hand-over can begin again.
                            h.drained_in_line();
                        }
                    }
                    for (done, answer) in answers {
                        let _ = done.send(Ok(answer));
                    }
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, n = batch.len(), "a batch of delivery writes failed; making each alone");
                    // An end alone goes through the pool: on SQLite the
                    // connection held here is its only one.
                    *conn = None;
                }
            }
        }
        for (w, done) in batch {
            let r = match &w {
                Write::Store(d) => self.store_alone(conn, d).await.map(Some),
                Write::End {
                    id,
                    attempts,
                    error,
                } => {
                    // Through the pool, whose one SQLite connection the
                    // delivery stored alone before this end may have left
                    // held here: kept, the end would wait for it in vain.
                    *conn = None;
                    self.finish(id, *attempts, error.as_deref())
                        .await
                        .map(|_| None)
                }
            };
            let settled = matches!(&w, Write::Store(d) if d.settled);
            if let (Ok(Some(Intake::Stored)), Some(h), false) = (&r, handoff, settled) {
                h.receive(Vec::new(), true);
            }
            let _ = done.send(r);
        }
    }

    /// The batch in one transaction (see [`BatchWrites::script`]): what
    /// came of each write.
    async fn write_all(
        &self,
        conn: &mut Option<Conn>,
        batch: &[Waiting],
        handoff: Option<&Handoff>,
    ) -> Result<(Vec<Outcome>, Taken), SqlError> {
        let now = now_ms();
        let deliveries: Vec<&NewDelivery> = batch
            .iter()
            .filter_map(|(w, _)| match w {
                Write::Store(d) => Some(d),
                Write::End { .. } => None,
            })
            .collect();
        let lease_until = handoff.map(|h| now + h.lease.as_millis() as i64);
        let rows = Row::assign(&deliveries, handoff.map_or(0, Handoff::free));
        let handed = rows.iter().filter(|r| **r == Row::Handed).count();
        let mut done = Vec::new();
        let mut failed = Vec::new();
        for (w, _) in batch {
            match w {
                Write::End {
                    id,
                    attempts,
                    error: None,
                } => done.push((id.as_str(), *attempts)),
                Write::End {
                    id,
                    attempts,
                    error: Some(e),
                } => failed.push((id.as_str(), *attempts, e.as_str())),
                Write::Store(_) => {}
            }
        }
        let claim = match (handoff, &self.direct) {
            (Some(h), Some(_)) => h.claim_room(handed),
            _ => 0,
        };
        let writes = BatchWrites {
            deliveries,
            rows,
            holder: self.holder.as_deref(),
            now,
            lease_until,
            done,
            failed,
            claim,
        };
        let (mut inserted, taken) = self.write(conn, &writes).await?;
        // The first write of an id stored is the one stored; another write
        // of it in the same batch is its duplicate.
        let mut stored = writes
            .deliveries
            .iter()
            .zip(&writes.rows)
            .map(|(d, &how)| inserted.remove(d.id.as_str()).then_some(how));
        let outcomes = batch
            .iter()
            .map(|(w, _)| match w {
                Write::Store(_) => match stored.next().flatten() {
                    Some(how) => Outcome::Stored(how),
                    None => Outcome::Duplicate,
                },
                Write::End { .. } => Outcome::Ended,
            })
            .collect();
        Ok((outcomes, taken))
    }
}
