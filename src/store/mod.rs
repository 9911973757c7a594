//! Durable state: the event log and its outbox (the [`Outbox`] port of
//! `drive`). Events and the effects they imply
//! are written together, in one record, before any effect is carried out; effects
//! are marked done afterwards. On restart, the log is replayed and every effect not
//! marked done is carried out again (effects are idempotent).
//!
//! [`FileLedger`] keeps this as JSON lines beside the plan (`.supervise/events.jsonl`):
//! embedded, inspectable with any text tool, one `write` + `fsync` per decision.

pub mod sql;

use crate::drive::{EffectKey, Entry, Loaded, Outbox};
use crate::engine::replay::{Cause, Recorded};
use crate::engine::{Effect, Event};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
enum Record {
    Decision {
        seq: u64,
        /// What the events were decided from (absent in older logs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<Box<Cause>>,
        events: Vec<Event>,
        effects: Vec<Entry>,
    },
    Done {
        effect: EffectKey,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot use the event log {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the event log {path} is damaged at line {line}: {message}; move it aside to start over"
    )]
    Corrupt {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// A reader that follows a log as it grows (the web view of a local run):
/// each look reads only the complete lines written since the last one and
/// applies their events to the state it keeps.
#[derive(Default)]
pub struct Follower {
    offset: u64,
    /// The log's first bytes, as first read: another log in the same place
    /// (the last one set aside, a new operation started) begins otherwise.
    head: Vec<u8>,
    pub state: Option<crate::engine::OperationState>,
}

impl Follower {
    /// Reads what was appended to `path` since the last look; whether the
    /// state changed. A log that shrank (set aside and started over) is
    /// read again from its start.
    pub fn look(&mut self, path: &Path) -> Result<bool, StoreError> {
        use std::io::{Read, Seek, SeekFrom};
        let io = |source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io(e)),
        };
        let len = file.metadata().map_err(io)?.len();
        let mut head = vec![0u8; self.head.len().min(len as usize)];
        file.read_exact(&mut head).map_err(io)?;
        if len < self.offset || head != self.head {
            *self = Follower::default();
        }
        if len == self.offset {
            return Ok(false);
        }
        file.seek(SeekFrom::Start(self.offset)).map_err(io)?;
        let mut fresh = Vec::new();
        file.take(len - self.offset)
            .read_to_end(&mut fresh)
            .map_err(io)?;
        // Only complete lines: the last may still be being written.
        let Some(end) = fresh.iter().rposition(|b| *b == b'\n') else {
            return Ok(false);
        };
        let mut changed = false;
        for line in fresh[..end].split(|b| *b == b'\n') {
            if let Ok(Record::Decision { events, .. }) = serde_json::from_slice::<Record>(line) {
                for e in &events {
                    crate::engine::apply(&mut self.state, e);
                }
                changed |= !events.is_empty();
            }
        }
        if self.offset == 0 {
            self.head = fresh[..end.min(256)].to_vec();
        }
        self.offset += end as u64 + 1;
        Ok(changed)
    }
}

pub struct FileLedger {
    path: PathBuf,
    next_seq: u64,
    file: Option<File>,
    /// Whether `load` may cut a torn last line: only the writer (the holder of
    /// the supervisor lock) may, or a reader could cut a line being written.
    writer: bool,
}

impl FileLedger {
    pub fn new(dir: &Path) -> FileLedger {
        FileLedger::at(dir.join("events.jsonl"))
    }

    /// The ledger in one file (a finished operation's log, set aside).
    pub fn at(path: PathBuf) -> FileLedger {
        FileLedger {
            path,
            next_seq: 1,
            file: None,
            writer: true,
        }
    }

    /// Reads a log without ever changing it (`status`, `spend`, while a
    /// supervisor may be writing it).
    pub fn read(path: PathBuf) -> Result<Loaded, StoreError> {
        FileLedger {
            writer: false,
            ..FileLedger::at(path)
        }
        .load()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, source: std::io::Error) -> StoreError {
        StoreError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Appends one record; with `durable`, waits for the disk.
    fn write_line(&mut self, record: &Record, durable: bool) -> Result<(), StoreError> {
        if self.file.is_none() {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| self.io(e))?;
            }
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|e| self.io(e))?;
            self.file = Some(f);
        }
        let mut line = serde_json::to_string(record).expect("records serialize");
        line.push('\n');
        let f = self.file.as_mut().expect("opened above");
        // One write of the whole line, then (when durable) fsync: a crash leaves
        // either the whole record or a torn last line, which `load` drops.
        let r = f
            .write_all(line.as_bytes())
            .and_then(|_| if durable { f.sync_data() } else { Ok(()) });
        r.map_err(|e| StoreError::Io {
            path: self.path.clone(),
            source: e,
        })
    }
}

impl FileLedger {
    pub fn load(&mut self) -> Result<Loaded, StoreError> {
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
            Err(e) => return Err(self.io(e)),
        };
        let mut state = None;
        let mut pending: Vec<Entry> = Vec::new();
        let mut events = 0;
        let mut good_len = 0u64;
        let mut lines = BufReader::new(file).lines().enumerate().peekable();
        while let Some((i, line)) = lines.next() {
            let line = line.map_err(|e| self.io(e))?;
            let last = lines.peek().is_none();
            let record: Record = match serde_json::from_str(&line) {
                Ok(r) => r,
                // A torn final line is what a crash mid-write leaves: drop it.
                Err(_) if last => break,
                Err(e) => {
                    return Err(StoreError::Corrupt {
                        path: self.path.clone(),
                        line: i + 1,
                        message: e.to_string(),
                    })
                }
            };
            good_len += line.len() as u64 + 1;
            match record {
                Record::Decision {
                    seq,
                    events: evs,
                    effects,
                    ..
                } => {
                    for e in &evs {
                        crate::engine::apply(&mut state, e);
                    }
                    events += evs.len();
                    pending.extend(effects);
                    self.next_seq = seq + 1;
                }
                Record::Done { effect } => pending.retain(|p| p.key != effect),
            }
        }
        // Cut a torn tail so the next append starts on a clean line.
        let len = std::fs::metadata(&self.path).map_err(|e| self.io(e))?.len();
        if self.writer && len > good_len {
            let f = OpenOptions::new()
                .write(true)
                .open(&self.path)
                .map_err(|e| self.io(e))?;
            f.set_len(good_len).map_err(|e| self.io(e))?;
        }
        Ok(Loaded {
            state,
            events,
            pending,
        })
    }

    pub fn append(
        &mut self,
        events: &[Event],
        effects: &[Effect],
        cause: Option<&Cause>,
    ) -> Result<Vec<Entry>, StoreError> {
        let seq = self.next_seq;
        let entries = Entry::numbered(seq, effects);
        self.write_line(
            &Record::Decision {
                seq,
                cause: cause.cloned().map(Box::new),
                events: events.to_vec(),
                effects: entries.clone(),
            },
            true,
        )?;
        self.next_seq += 1;
        Ok(entries)
    }

    /// Notes an effect carried out. Not waited for on disk: only a power cut
    /// can lose it (a crashed process's write is in the kernel already), and
    /// then the effect is carried out again on restart, as after a crash
    /// between an effect and its note — every effect is idempotent.
    pub fn mark_done(&mut self, key: EffectKey) -> Result<(), StoreError> {
        self.write_line(&Record::Done { effect: key }, false)
    }
}

/// The decisions of a log written by [`FileLedger`] (or exported by
/// `supervise export`), as replay reads them. A torn last line (a crash
/// mid-write) is left out, as the ledger itself would on restart.
pub fn read_records(path: &Path) -> Result<Vec<Recorded>, StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let text = std::fs::read(path).map_err(io)?;
    let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Record>(line) {
            Ok(Record::Decision {
                seq, cause, events, ..
            }) => out.push(Recorded {
                seq,
                cause: cause.map(|c| *c),
                events,
            }),
            Ok(Record::Done { .. }) => {}
            Err(_) if i + 1 == lines.len() => break,
            Err(e) => {
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    line: i + 1,
                    message: e.to_string(),
                })
            }
        }
    }
    Ok(out)
}

/// Writes `records` as a log [`read_records`] reads (the decisions'
/// events and causes; no effects, which replay does not need).
pub fn write_records(out: &mut impl Write, records: &[Recorded]) -> std::io::Result<()> {
    for r in records {
        let line = serde_json::to_string(&Record::Decision {
            seq: r.seq,
            cause: r.cause.clone().map(Box::new),
            events: r.events.clone(),
            effects: Vec::new(),
        })?;
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// The ledger's writes are synchronous: each future is ready when first polled.
impl Outbox for FileLedger {
    type Error = StoreError;
    async fn append(
        &mut self,
        events: &[Event],
        effects: &[Effect],
        cause: &Cause,
    ) -> Result<Vec<Entry>, StoreError> {
        FileLedger::append(self, events, effects, Some(cause))
    }
    async fn done(&mut self, key: EffectKey) -> Result<(), StoreError> {
        self.mark_done(key)
    }
    async fn load(&mut self) -> Result<Loaded, StoreError> {
        FileLedger::load(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{decide, EngineConfig, Input, OperationId};

    #[test]
    fn a_follower_reads_only_whole_new_lines_and_starts_over_on_a_new_log() {
        let dir = tempfile::tempdir().unwrap();
        let plan = crate::plan::parse(
            "# P\n\n## Sprint 1: Implement x\n- [ ] `make` passes\n",
            "p",
        )
        .unwrap();
        let start = |id: &str| {
            decide(
                None,
                Input::Start {
                    operation: OperationId(id.into()),
                    plan: Box::new(plan.clone()),
                    config: EngineConfig::default(),
                    seed: 1,
                    workflow: None,
                    already_done: Vec::new(),
                },
                chrono::Utc::now(),
            )
            .unwrap()
        };
        let mut l = FileLedger::new(dir.path());
        let mut f = Follower::default();
        assert!(!f.look(l.path()).unwrap(), "no log yet");
        let d = start("one");
        l.append(&d.events, &[], None).unwrap();
        // Half of the next line: not read until it is whole.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(l.path())
            .unwrap();
        file.write_all(b"{\"record\":\"decis").unwrap();
        assert!(f.look(l.path()).unwrap());
        let st = f.state.clone().unwrap();
        assert_eq!(
            (st.id.0.as_str(), st.version),
            ("one", d.events.len() as u64)
        );
        assert!(!f.look(l.path()).unwrap(), "nothing new");
        // The log set aside and a new operation started: read from its start.
        std::fs::write(l.path(), "").unwrap();
        let mut l = FileLedger::new(dir.path());
        l.append(&start("two").events, &[], None).unwrap();
        assert!(f.look(l.path()).unwrap());
        assert_eq!(f.state.unwrap().id.0, "two");
    }

    #[test]
    fn replays_and_keeps_undone_effects_and_survives_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let plan = crate::plan::parse(
            "# P\n\n## Sprint 1: Implement x\n- [ ] `make` passes\n",
            "p",
        )
        .unwrap();
        let now = chrono::Utc::now();
        let d = decide(
            None,
            Input::Start {
                operation: OperationId("op".into()),
                plan: Box::new(plan),
                config: EngineConfig::default(),
                seed: 1,
                workflow: None,
                already_done: Vec::new(),
            },
            now,
        )
        .unwrap();
        let mut l = FileLedger::new(dir.path());
        let pending = l.append(&d.events, &d.effects, None).unwrap();
        l.mark_done(pending[0].key).unwrap();
        // A crash mid-write leaves half a line.
        std::fs::OpenOptions::new()
            .append(true)
            .open(l.path())
            .unwrap()
            .write_all(b"{\"record\":\"decis")
            .unwrap();
        let mut again = FileLedger::new(dir.path());
        let loaded = again.load().unwrap();
        assert_eq!(
            loaded.state.as_ref().unwrap().version,
            d.events.len() as u64
        );
        assert_eq!(loaded.pending.len(), pending.len() - 1);
        assert_eq!(loaded.pending[0].key, pending[1].key);
        // The torn tail was cut: appending again yields a readable log.
        again.mark_done(pending[1].key).unwrap();
        assert_eq!(
            FileLedger::new(dir.path()).load().unwrap().pending.len(),
            pending.len() - 2
        );
    }

    #[test]
    fn a_reader_never_cuts_the_line_a_writer_is_writing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        std::fs::write(
            &path,
            "{\"record\":\"done\",\"effect\":\"1.0\"}\n{\"record\":\"decis",
        )
        .unwrap();
        let before = std::fs::read(&path).unwrap();
        FileLedger::read(path.clone()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), before, "read-only");
        FileLedger::at(path.clone()).load().unwrap();
        assert!(
            std::fs::read(&path).unwrap().len() < before.len(),
            "the writer cuts it"
        );
    }

    #[test]
    fn damage_before_the_end_is_reported_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("events.jsonl"),
            "garbage\n{\"record\":\"done\",\"effect\":\"1.0\"}\n",
        )
        .unwrap();
        let err = FileLedger::new(dir.path()).load().unwrap_err();
        assert!(err.to_string().contains("damaged at line 1"), "{err}");
    }
}
