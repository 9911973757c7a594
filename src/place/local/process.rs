//! Agents as local processes, crash-safe. Each dispatch gets a run directory; a
//! detached wrapper (`supervise __run-agent DIR`) runs the agent there, then the
//! verifier, and writes `result.json`. The wrapper holds an flock on `DIR/lock` for
//! its whole life and writes `DIR/started` before it starts the agent, so:
//! - a wrapper that finds `started` (or cannot lock) exits at once: an attempt
//!   never runs twice, even when a restarted supervisor spawns again;
//! - the supervisor knows a run is alive iff the lock is held, and can adopt it
//!   after its own crash.
//!
//! The supervisor keeps one wrapper started ahead of time ([`Standby`]): it is
//! handed its run directory on standard input the moment a dispatch needs it,
//! and from then on it is exactly the wrapper a dispatch would have started.

pub use crate::attempt::tree::{become_subreaper, descendants, end_descendants};
use crate::attempt::tree::{end_attempt_processes, reap, signal_all};

use crate::contract::RunResult;
use crate::engine::DispatchOrder;
use crate::plan::{Sprint, SprintType, WorkUnit};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

/// Everything the wrapper needs, written before it is spawned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSpec {
    pub order: DispatchOrder,
    pub agent: String,
    /// The project root inside the sprint's worktree: the agent's working directory.
    pub checkout: PathBuf,
    pub unit: WorkUnit,
    pub sprint: Sprint,
    pub verify_timeout_secs: u64,
    /// The sprint worktree's lock file, held by the wrapper of the attempt in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree_lock: Option<PathBuf>,
    /// How the agent reaches its model: the proxy's address and this
    /// attempt's token, in the provider's variables (see
    /// [`crate::model_proxy`]); empty when the supervisor holds no key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_env: Vec<(String, String)>,
    /// `--sandbox`: the agent runs in a network namespace of its own,
    /// reaching only its model and these domains (see [`crate::sandbox`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::sandbox::Egress>,
    /// The sprint branch (its locks are left alone while the attempt lives).
    #[serde(default)]
    pub branch: String,
    /// The sprint branch's head when the attempt was dispatched: where the
    /// branch goes back to if the attempt's work is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Set for a fresh attempt whose sprint may be found done before its
    /// agent starts (see [`super::found_done`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub look_from: Option<super::found_done::StartingPoint>,
}

/// The most agent output kept on disk: `output.log` is rotated to `output.log.1`
/// when it reaches this size, so between one and two of these of the tail remain.
pub const OUTPUT_CAP: u64 = 8 * 1024 * 1024;

/// Set by the wrapper's SIGTERM/SIGINT/SIGHUP handler; read by its wait loop.
static TERMINATE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_terminate(_: libc::c_int) {
    TERMINATE.store(true, Ordering::SeqCst);
}

/// The grace the supervisor asked for in `cancelled`, if it cancelled this run.
fn cancel_grace(dir: &Path) -> Option<Duration> {
    let text = std::fs::read_to_string(dir.join("cancelled")).ok()?;
    Some(Duration::from_secs(text.trim().parse().unwrap_or(10)))
}

/// §5e for a background sprint: whether a process the agent started (and
/// left behind when it ended) still runs, named from `/proc`.
fn still_running(sprint: &Sprint) -> crate::engine::CriterionResult {
    // What a commit leaves behind (`git maintenance --detach`, an auto gc)
    // is git's, not the sprint's: never counted.
    let named = || -> Vec<(i32, String)> {
        reap();
        descendants(std::process::id() as i32)
            .into_iter()
            .map(|pid| {
                let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                (pid, name.trim().to_string())
            })
            .filter(|(_, name)| !name.starts_with("git"))
            .collect()
    };
    let running: Vec<String> = named()
        .into_iter()
        .map(|(pid, name)| format!("{name} (pid {pid})"))
        .collect();
    let (outcome, detail) = match running.is_empty() {
        true => (
            crate::engine::CriterionOutcome::Failed,
            "nothing the agent started runs after it ended; start the process detached (`nohup … > log 2>&1 &`)".to_string(),
        ),
        false => (
            crate::engine::CriterionOutcome::Passed,
            format!("running: {}", running.join(", ")),
        ),
    };
    crate::engine::CriterionResult {
        line: sprint.line,
        text: crate::engine::cascade::BACKGROUND_CRITERION.into(),
        outcome,
        detail,
    }
}

/// Copies the agent's output to `output.log`, rotating at [`OUTPUT_CAP`].
fn copy_output(mut from: impl Read, dir: PathBuf) -> std::io::Result<()> {
    let path = dir.join("output.log");
    let mut out = OpenOptions::new().create(true).append(true).open(&path)?;
    let mut written = out.metadata()?.len();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if written + n as u64 > OUTPUT_CAP {
            std::fs::rename(&path, dir.join("output.log.1"))?;
            out = File::create(&path)?;
            written = 0;
        }
        out.write_all(&buf[..n])?;
        written += n as u64;
    }
}

/// The last `max` bytes of the agent's output, across a rotation, decoded lossily
/// (an agent may print any bytes).
pub fn output_tail(dir: &Path, max: usize) -> String {
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap_or_default();
    let mut bytes = read("output.log");
    if bytes.len() < max {
        let mut older = read("output.log.1");
        older.extend_from_slice(&bytes);
        bytes = older;
    }
    let start = bytes.len().saturating_sub(max);
    crate::attempt::criteria::tail(&String::from_utf8_lossy(&bytes[start..]), max)
}

pub fn run_dir(runs: &Path, dispatch: &str) -> PathBuf {
    runs.join(dispatch.replace('/', "__"))
}

use super::lockfile::try_lock;

/// Whether a wrapper holds the run's lock right now.
pub fn is_alive(dir: &Path) -> bool {
    match super::lockfile::open(&dir.join("lock")) {
        Ok(f) => !try_lock(&f), // our lock (if taken) is released when `f` drops
        Err(_) => false,
    }
}

/// The sprint branches whose attempts are alive now (their wrappers hold the lock).
pub fn live_branches(runs: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(runs) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|d| is_alive(d))
        .filter_map(|d| Some(read_spec(&d)?.branch))
        .filter(|b| !b.is_empty())
        .collect()
}

/// The spec a run was prepared with, if it got that far.
pub fn read_spec(dir: &Path) -> Option<RunSpec> {
    serde_json::from_slice(&std::fs::read(dir.join("run.json")).ok()?).ok()
}

/// Whether a wrapper took this run and began it (it may have ended since).
pub fn has_started(dir: &Path) -> bool {
    dir.join("started").exists()
}

pub fn started_pid(dir: &Path) -> Option<i32> {
    std::fs::read_to_string(dir.join("started"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

pub fn read_result(dir: &Path) -> Option<RunResult> {
    serde_json::from_slice(&std::fs::read(dir.join("result.json")).ok()?).ok()
}

/// Writes a file whole or not at all (a crash leaves the old file or none),
/// on disk before it is in place.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace_file(path, bytes, true)
}

/// As [`write_atomic`], without waiting for the disk: for what a power cut
/// may lose because nothing depends on it alone (the `started` marker,
/// written durably by the wrapper, says whether an attempt began).
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace_file(path, bytes, false)
}

fn replace_file(path: &Path, bytes: &[u8], durable: bool) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    if durable {
        f.sync_all()?;
    }
    std::fs::rename(tmp, path)
}

/// Writes the spec and prompt and starts the wrapper, unless this dispatch already
/// ran or runs. A wrapper on standby, when one is given, takes the run; else one
/// is started now. Returns the child when one was spawned.
pub fn spawn(dir: &Path, spec: &RunSpec, standby: Option<Standby>) -> Result<Option<Child>> {
    if has_started(dir) {
        return Ok(None);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    write_whole(&dir.join("prompt.md"), spec.order.prompt.as_bytes())?;
    write_whole(&dir.join("run.json"), &serde_json::to_vec_pretty(spec)?)?;
    if let Some(child) = standby.and_then(|s| s.assign(dir)) {
        return Ok(Some(child));
    }
    let log = File::create(dir.join("wrapper.log"))?;
    let mut cmd = wrapper_command()?;
    cmd.arg(dir).stdin(Stdio::null()).stderr(log);
    Ok(Some(cmd.spawn().context("starting the agent wrapper")?))
}

/// What no agent's environment holds, nor its wrapper's: the notices'
/// secret, and every model provider's key (agents reach their model
/// through the proxy, with a token of their own).
fn withheld() -> impl Iterator<Item = &'static str> {
    crate::contract::WITHHELD_FROM_AGENTS
        .iter()
        .copied()
        .chain(crate::model_proxy::PROVIDER_KEYS)
}

/// `supervise __run-agent`, detached: its own session, so it outlives the
/// supervisor and its process group can be signalled.
fn wrapper_command() -> Result<Command> {
    let exe = std::env::current_exe().context("finding the supervise executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("__run-agent").stdout(Stdio::null());
    for name in withheld() {
        cmd.env_remove(name);
    }
    // SAFETY: setsid is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    Ok(cmd)
}

/// The argument that makes a wrapper wait for its run directory on standard input.
pub const STANDBY_ARG: &str = "-";

/// A wrapper started before its dispatch, waiting on its standard input for
/// the run directory it is to run. Starting a process (the `supervise`
/// binary, then its set-up) is the largest single step between one agent's
/// end and the next one's start; a wrapper on standby has done it already.
/// It holds nothing and has written nothing: when this handle drops (or the
/// supervisor dies) its input closes and it exits without a trace.
pub struct Standby {
    /// Both are taken when the run is handed over.
    child: Option<Child>,
    input: Option<std::process::ChildStdin>,
}

impl Standby {
    /// Starts a wrapper on standby.
    pub fn start() -> Result<Standby> {
        let mut cmd = wrapper_command()?;
        cmd.arg(STANDBY_ARG)
            .stdin(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().context("starting a wrapper on standby")?;
        let input = child.stdin.take();
        Ok(Standby {
            child: Some(child),
            input,
        })
    }

    /// Hands the wrapper its run directory, ended by a NUL (the one byte no
    /// path holds: a repository may live in a directory named with a line
    /// break). `None` if the wrapper is gone (then nothing of this run has
    /// started, and the caller starts a wrapper of its own; a wrapper that
    /// takes a run it finds taken leaves it alone).
    fn assign(mut self, dir: &Path) -> Option<Child> {
        let mut path = dir
            .canonicalize()
            .ok()?
            .into_os_string()
            .into_encoded_bytes();
        path.push(0);
        let mut input = self.input.take()?;
        input.write_all(&path).ok()?;
        self.child.take()
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        // Closing its input ends a waiting wrapper; it is reaped off this
        // thread, which must not wait for a process start.
        self.input.take();
        if let Some(mut child) = self.child.take() {
            std::thread::spawn(move || child.wait());
        }
    }
}

/// Keeps one wrapper on standby for the next dispatch, started off the
/// caller's thread: a dispatch takes it if it is ready and never waits for it.
pub struct StandbyPool {
    ready: Option<Standby>,
    arrivals: std::sync::mpsc::Receiver<Standby>,
    send: Sender<Standby>,
    starting: bool,
}

impl Default for StandbyPool {
    fn default() -> StandbyPool {
        let (send, arrivals) = std::sync::mpsc::channel();
        StandbyPool {
            ready: None,
            arrivals,
            send,
            starting: false,
        }
    }
}

impl StandbyPool {
    /// Takes in the wrapper the starting thread sent, if it has.
    fn collect(&mut self) {
        if let Ok(s) = self.arrivals.try_recv() {
            self.starting = false;
            self.ready = Some(s);
        }
    }

    /// The wrapper on standby, if one has started.
    pub fn take(&mut self) -> Option<Standby> {
        self.collect();
        self.ready.take()
    }

    /// Starts the next wrapper on standby, unless one is ready or starting.
    /// (One that cannot start is not tried again: dispatches then start
    /// their own, as they always may.)
    pub fn refill(&mut self) {
        self.collect();
        if self.ready.is_some() || self.starting {
            return;
        }
        self.starting = true;
        let send = self.send.clone();
        std::thread::spawn(move || match Standby::start() {
            Ok(s) => {
                let _ = send.send(s);
            }
            Err(e) => tracing::warn!("no wrapper on standby: {e:#}"),
        });
    }
}

/// The run directory a wrapper on standby is handed (see [`Standby`]), ended
/// by a NUL on standard input. `None` when the input closes first: the supervisor went
/// away, and there is nothing to run. The wrapper's errors go to the run's
/// `wrapper.log` from then on, as a wrapper started for the run would send them.
pub fn await_assignment() -> Result<Option<PathBuf>> {
    use std::os::unix::ffi::OsStringExt;
    use std::os::unix::io::AsRawFd;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    let mut stdin = std::io::stdin().lock();
    loop {
        match stdin.read(&mut byte) {
            Ok(0) => return Ok(None),
            Ok(_) if byte[0] == 0 => break,
            Ok(_) => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let dir = PathBuf::from(std::ffi::OsString::from_vec(line));
    let log = File::create(dir.join("wrapper.log"))?;
    let null = File::open("/dev/null")?;
    // SAFETY: dup2 onto this process's own standard descriptors.
    unsafe {
        libc::dup2(log.as_raw_fd(), 2);
        libc::dup2(null.as_raw_fd(), 0);
    }
    Ok(Some(dir))
}

pub use crate::attempt::record::parse_turns;

/// The words of an agent command that a shell would run as they stand — no
/// quoting, expansion, redirection, globbing, assignment or builtin — which
/// are then run without one: `sh -c` costs a process start on the way from
/// one agent to the next. `None` for anything else, which `sh -c` runs.
fn plain_command(command: &str) -> Option<Vec<&str>> {
    const SHELL_WORDS: &[&str] = &[
        ".", ":", "[", "alias", "bg", "break", "case", "cd", "command", "continue", "do", "done",
        "elif", "else", "esac", "eval", "exec", "exit", "export", "false", "fc", "fg", "fi", "for",
        "function", "getopts", "hash", "if", "in", "jobs", "kill", "local", "printf", "pwd",
        "read", "readonly", "return", "select", "set", "shift", "source", "test", "then", "time",
        "times", "trap", "true", "type", "ulimit", "umask", "unalias", "unset", "until", "wait",
        "while", "echo",
    ];
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:,+@%=".contains(c);
    if !command.chars().all(|c| c == ' ' || plain(c)) {
        return None;
    }
    let words: Vec<&str> = command.split(' ').filter(|w| !w.is_empty()).collect();
    let first = *words.first()?;
    (!first.contains('=') && !SHELL_WORDS.contains(&first)).then_some(words)
}

/// Waits (polling, so a cancel is noticed) for the exclusive lock of the unit's
/// worktree: an attempt never starts while a process of an earlier one (of its
/// sprint, or the sprint before) lives. Looked at often at first: the wrapper
/// before may be a moment from letting go (its result is written just before).
fn lock_worktree(path: &Path, dir: &Path) -> Result<Option<File>> {
    let f = open_worktree_lock(path)?;
    let since = Instant::now();
    loop {
        if try_lock(&f) {
            return Ok(Some(f));
        }
        if dir.join("cancelled").exists() || TERMINATE.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let soon = since.elapsed() < Duration::from_millis(200);
        std::thread::sleep(Duration::from_millis(if soon { 2 } else { 50 }));
    }
}

/// Waits for a worktree's lock, for the supervisor's own work there (a
/// condition's check), which no attempt may share.
pub fn lock_worktree_now(path: &Path) -> Result<File> {
    let f = open_worktree_lock(path)?;
    super::lockfile::lock(&f).with_context(|| format!("locking {}", path.display()))?;
    Ok(f)
}

fn open_worktree_lock(path: &Path) -> Result<File> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    super::lockfile::open(path).with_context(|| format!("opening {}", path.display()))
}

/// Takes a run's lock for its wrapper; `false` if another wrapper holds it.
/// A supervisor asking whether the run is alive holds the lock for a moment
/// (`is_alive`), and so does, until its `exec`, any process it forks
/// meanwhile: a wrapper that gave up at once found its run taken by nobody,
/// and the attempt was lost. So a refusal is believed only after half a
/// second of them; a wrapper holds the lock for its whole run.
fn take_run_lock(lock: &File) -> bool {
    let until = Instant::now() + Duration::from_millis(500);
    loop {
        if try_lock(lock) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The wrapper's body (`supervise __run-agent DIR`). Exit status 0 unless it could
/// not even read its spec. It holds the run's lock until every process of the
/// attempt is gone, so "not alive" really means nothing of this attempt runs.
pub fn run_agent(dir: &Path) -> Result<()> {
    let lock = super::lockfile::open(&dir.join("lock"))?;
    if !take_run_lock(&lock) || has_started(dir) || dir.join("cancelled").exists() {
        return Ok(()); // another wrapper has (or had) this dispatch
    }
    // SAFETY: the handler only stores to an atomic. Being the child subreaper,
    // the wrapper inherits whatever the agent orphans, so nothing escapes it.
    unsafe {
        let handler = on_terminate as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGHUP, handler);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let spec: RunSpec = serde_json::from_slice(&std::fs::read(dir.join("run.json"))?)?;
    // Ends the attempt before its agent: nothing ran, nothing to verify.
    let unstarted = |why: String| -> Result<()> {
        let result = RunResult {
            output_tail: why,
            ..Default::default()
        };
        Ok(write_atomic(
            &dir.join("result.json"),
            &serde_json::to_vec_pretty(&result)?,
        )?)
    };
    let _worktree = match &spec.worktree_lock {
        Some(p) => match lock_worktree(p, dir)? {
            Some(f) => Some(f),
            None => return unstarted("cancelled before the agent started".into()),
        },
        None => None,
    };
    if !spec.branch.is_empty() {
        use super::git::Entered;
        match super::git::enter_branch(&spec.checkout, &spec.branch) {
            Ok(Entered::Already | Entered::Moved) => {}
            Ok(Entered::Returned) => eprintln!(
                "the worktree was on another branch; checked out {}",
                spec.branch
            ),
            Ok(Entered::Stayed(why)) => {
                eprintln!("could not return the worktree to {}: {why}", spec.branch)
            }
            // An agent started anyway would work on the sprint before's branch.
            Err(e) => {
                return unstarted(format!(
                    "could not put the worktree on {}: {e:#}",
                    spec.branch
                ))
            }
        }
    }
    write_atomic(
        &dir.join("started"),
        std::process::id().to_string().as_bytes(),
    )?;
    if let Some(start) = &spec.look_from {
        let timeout = Duration::from_secs(spec.verify_timeout_secs);
        if let Some((criteria, found)) =
            super::found_done::look(&spec.sprint, &spec.checkout, start, timeout)
        {
            let result = RunResult {
                output_tail: format!(
                    "no agent was launched: the sprint's work is done by {}",
                    found.by
                ),
                criteria,
                found_done: Some(found),
                ..Default::default()
            };
            write_whole(
                &dir.join("result.json"),
                &serde_json::to_vec_pretty(&result)?,
            )?;
            drop(lock);
            return Ok(());
        }
    }
    let prompt_file = dir.join("prompt.md").canonicalize()?;
    let (reader, writer) = std::io::pipe()?;
    let o = &spec.order;
    let answer_file =
        crate::contract::answer_path(o, &spec.checkout, &dir.canonicalize()?.join("answer"));
    // The runner's own answer file is this attempt's: one left by an earlier
    // attempt must not stand in for a missing one. (A repository file is the
    // branch's, kept from attempt to attempt like all its work.)
    if o.answer_file.is_none() {
        let _ = std::fs::remove_file(&answer_file);
    }
    // What a shell started there would say, with or without one.
    let pwd = spec
        .checkout
        .canonicalize()
        .unwrap_or_else(|_| spec.checkout.clone());
    // Made before the agent, served by this process while it runs.
    let sandbox = match &spec.sandbox {
        Some(egress) => match crate::sandbox::open(egress, &spec.model_env) {
            Ok(s) => Some(s),
            Err(e) => return unstarted(format!("{e:#}")),
        },
        None => None,
    };
    let model_env = sandbox.as_ref().map_or(&spec.model_env, |s| &s.env);
    let spawn = |mut cmd: Command| -> std::io::Result<std::process::Child> {
        for name in withheld() {
            cmd.env_remove(name);
        }
        cmd.current_dir(&spec.checkout)
            .stdin(File::open(&prompt_file)?)
            .stdout(writer.try_clone()?)
            .stderr(writer.try_clone()?)
            // The agent's own group: signals reach everything it starts, never us.
            .process_group(0)
            .env("PWD", &pwd)
            .envs(crate::contract::agent_env(
                o,
                &prompt_file.to_string_lossy(),
                &answer_file.to_string_lossy(),
            ))
            .envs(model_env.iter().map(|(k, v)| (k, v)));
        // The agent joins the operation's trace, as a child of its attempt.
        if crate::otlp::global().is_some() {
            let dispatch = o.dispatch.0.as_str();
            cmd.env(
                "TRACEPARENT",
                crate::otlp::traceparent(crate::otlp::operation_of(dispatch), dispatch),
            );
        }
        if let Some(s) = &sandbox {
            let netns = s.netns.try_clone()?;
            // SAFETY: setns(2) only, between fork and exec.
            unsafe {
                cmd.pre_exec(move || crate::sandbox::enter(&netns));
            }
        }
        cmd.spawn()
    };
    let in_shell = || {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(&spec.agent);
        cmd
    };
    let spawned = match plain_command(&spec.agent) {
        // A program that cannot be started is left to the shell, whose
        // message (`not found`, status 127) the agent's output then holds.
        Some(words) => {
            let mut cmd = Command::new(words[0]);
            cmd.args(&words[1..]);
            spawn(cmd).or_else(|_| spawn(in_shell()))
        }
        None => spawn(in_shell()),
    };
    drop(writer);
    let copier = {
        let dir = dir.to_path_buf();
        std::thread::spawn(move || copy_output(reader, dir))
    };
    let mut exit_code = None;
    let mut cancelled = false;
    let background = spec.sprint.kind == SprintType::Background;
    let mut attempt_group = None;
    if let Ok(mut child) = spawned {
        let pgid = child.id() as i32;
        let mut kill_at: Option<Instant> = None;
        // The agent's end is waited for on a thread of its own, so it is
        // seen the moment it happens; this loop wakes for it or every 20 ms
        // to look for a cancel.
        let (ended_tx, ended) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = ended_tx.send(child.wait().ok().and_then(|s| s.code()));
        });
        loop {
            match ended.recv_timeout(Duration::from_millis(20)) {
                Ok(code) => {
                    exit_code = code;
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
            let asked = TERMINATE.load(Ordering::SeqCst) || dir.join("cancelled").exists();
            if asked && kill_at.is_none() {
                cancelled = true;
                signal_all(pgid, libc::SIGTERM);
                kill_at =
                    Some(Instant::now() + cancel_grace(dir).unwrap_or(Duration::from_secs(10)));
            }
            if kill_at.is_some_and(|t| Instant::now() >= t) {
                signal_all(pgid, libc::SIGKILL);
            }
        }
        // Whatever the agent left running (`(sleep 60) &`, a daemon) ends
        // with it, unless starting it was the sprint (§5e: a background
        // sprint is done when its process runs): that is checked first.
        if background && !cancelled {
            attempt_group = Some(pgid);
        } else {
            let grace = if cancelled {
                Duration::ZERO
            } else {
                Duration::from_secs(2)
            };
            end_attempt_processes(pgid, grace);
        }
    }
    // A cancelled attempt is not verified: it is charged as cancelled whatever
    // its checkout holds, and the verifier could take minutes.
    let mut criteria = Vec::new();
    if attempt_group.is_some() {
        criteria.push(still_running(&spec.sprint));
    }
    if !cancelled {
        criteria.extend(crate::attempt::criteria::verify_sprint(
            &spec.sprint,
            &spec.checkout,
            Duration::from_secs(spec.verify_timeout_secs),
        ));
    }
    let keep_running = attempt_group.is_some()
        && criteria
            .iter()
            .all(|c| c.outcome == crate::engine::CriterionOutcome::Passed);
    match attempt_group {
        Some(pgid) if !keep_running => end_attempt_processes(pgid, Duration::ZERO),
        _ => {}
    }
    if keep_running {
        // Left running, and perhaps holding the output pipe: what the agent
        // wrote is in the log by now; the copier is not waited for.
        std::thread::sleep(Duration::from_millis(50));
    } else {
        let _ = copier.join();
    }
    if let Some(s) = &sandbox {
        note_refusals(dir, &s.refused());
    }
    let output = output_tail(dir, 64 * 1024);
    // The record as every place assembles it; locally the supervisor reads
    // the branch (commits, progress files) itself. (Not `attempt::verify`
    // whole: a background sprint's process must outlive this check.)
    let result = crate::attempt::record::results_record(
        &output,
        exit_code,
        criteria,
        None,
        None,
        crate::contract::read_answer(&answer_file),
        None,
    );
    // Whole, but not waited for on disk: the supervisor records what it reads
    // here durably before acting on it, and a result a power cut loses only
    // makes the attempt count as failed (it is retried, never run twice).
    write_whole(
        &dir.join("result.json"),
        &serde_json::to_vec_pretty(&result)?,
    )?;
    drop(lock);
    Ok(())
}

/// Stops a run: the wrapper is asked (SIGTERM and the `cancelled` file holding
/// the grace) and terminates the agent's processes, with SIGKILL after `grace`
/// — on its own, so escalation happens even when this supervisor exits at once.
/// Should the wrapper itself be gone or wedged, this process kills its session
/// after a further margin.
pub fn cancel(dir: &Path, grace: Duration) {
    let _ = write_atomic(
        &dir.join("cancelled"),
        grace.as_secs().to_string().as_bytes(),
    );
    let Some(pid) = started_pid(dir) else { return };
    // SAFETY: signalling the wrapper, which handles SIGTERM.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        let until = Instant::now() + grace + Duration::from_secs(5);
        while Instant::now() < until && is_alive(&dir) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if is_alive(&dir) {
            // SAFETY: the wrapper's session (it is its leader).
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    });
}

pub enum Watched {
    Finished,
    Activity,
}

/// Watches one run until it finishes, reporting output growth and the end. Works
/// the same for a run this process spawned and one adopted after a restart.
pub fn watch<M: Send + 'static>(
    dir: PathBuf,
    mut child: Option<Child>,
    tx: Sender<M>,
    wrap: impl Fn(Watched) -> M + Send + Sync + 'static,
) {
    let wrap = std::sync::Arc::new(wrap);
    // The end is told once, by whichever sees it first.
    let told = std::sync::Arc::new(AtomicBool::new(false));
    std::thread::spawn(move || {
        let spawned_at = Instant::now();
        let mut last_len = 0u64;
        let mut last_activity = Instant::now();
        let mut waiting = false;
        loop {
            if told.load(Ordering::SeqCst) {
                return;
            }
            // Once the wrapper holds its lock (it writes `started` after
            // taking it), a thread waits on that lock: the wrapper lets go
            // only after writing its result, so the end is seen at once
            // rather than at the next look. (Never before `started`: the
            // wait would take the lock from a wrapper not yet holding it.)
            if !waiting && has_started(&dir) {
                waiting = true;
                let (dir, tx, wrap, told) = (dir.clone(), tx.clone(), wrap.clone(), told.clone());
                std::thread::spawn(move || {
                    let Ok(f) = super::lockfile::open(&dir.join("lock")) else {
                        return;
                    };
                    if super::lockfile::lock(&f).is_ok() {
                        drop(f);
                        if !told.swap(true, Ordering::SeqCst) {
                            let _ = tx.send(wrap(Watched::Finished));
                        }
                    }
                });
            }
            if let Some(c) = child.as_mut() {
                let _ = c.try_wait(); // reap, so the wrapper leaves no zombie
            }
            let finished = dir.join("result.json").exists()
                || (has_started(&dir) && !is_alive(&dir))
                || (!has_started(&dir)
                    && spawned_at.elapsed() > Duration::from_secs(10)
                    && !is_alive(&dir));
            if finished {
                if !told.swap(true, Ordering::SeqCst) {
                    let _ = tx.send(wrap(Watched::Finished));
                }
                return;
            }
            let len = std::fs::metadata(dir.join("output.log"))
                .map(|m| m.len())
                .unwrap_or(0);
            if len != last_len && last_activity.elapsed() >= Duration::from_secs(1) {
                last_len = len;
                last_activity = Instant::now();
                if tx.send(wrap(Watched::Activity)).is_err() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(15));
        }
    });
}

/// What the sandbox refused, kept with the attempt: `network.json` in its run
/// directory, and a last line of its output, which its record and the
/// decision log quote.
fn note_refusals(dir: &Path, refused: &std::collections::BTreeMap<String, u32>) {
    let _ = write_whole(
        &dir.join("network.json"),
        &crate::sandbox::refusals_json(refused),
    );
    let Some(line) = crate::sandbox::refusal_line(refused) else {
        return;
    };
    if let Ok(mut log) = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("output.log"))
    {
        let _ = writeln!(log, "\n{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_commands_a_shell_would_run_as_they_stand_skip_it() {
        assert_eq!(
            plain_command("bash /tmp/agent.sh --model opus-4"),
            Some(vec!["bash", "/tmp/agent.sh", "--model", "opus-4"])
        );
        assert_eq!(
            plain_command("  codex   exec  "),
            Some(vec!["codex", "exec"])
        );
        for shell in [
            "claude -p \"$(cat \"$SUPERVISE_PROMPT_FILE\")\"",
            "agent --model $SUPERVISE_MODEL",
            "agent > out.log",
            "agent; other",
            "agent && other",
            "agent | tee log",
            "agent *.md",
            "agent ~/plan",
            "agent 'quoted words'",
            "agent a\\ b",
            "agent # a comment",
            "agent\tfile",
            "agent\nother",
            "MODEL=opus agent",
            "cd sub",
            ". ./env.sh",
            "exec agent",
            "echo hello",
            "",
            "   ",
        ] {
            assert_eq!(plain_command(shell), None, "{shell:?}");
        }
    }

    #[test]
    fn turns_are_read_from_the_output() {
        assert_eq!(parse_turns("working\nsupervise:turns=17\n"), Some(17));
        assert_eq!(parse_turns("Turns used: 23 of 50"), Some(23));
        assert_eq!(parse_turns("nothing here"), None);
    }

    #[test]
    fn invalid_utf8_in_the_output_keeps_the_tail_and_the_turn_count() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = b"start \xff\xfe binary \xc3\n".to_vec();
        bytes.extend_from_slice(b"all done\nsupervise:turns=7\n");
        copy_output(&bytes[..], dir.path().to_path_buf()).unwrap();
        let tail = output_tail(dir.path(), 4000);
        assert!(tail.contains("all done"), "{tail}");
        assert_eq!(parse_turns(&tail), Some(7));
    }

    #[test]
    fn the_output_log_is_capped_and_keeps_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let chunk = vec![b'x'; 1024 * 1024];
        let mut all = Vec::new();
        for _ in 0..20 {
            all.extend_from_slice(&chunk);
        }
        all.extend_from_slice(b"\nthe last line\n");
        copy_output(&all[..], dir.path().to_path_buf()).unwrap();
        let size = |n: &str| std::fs::metadata(dir.path().join(n)).map_or(0, |m| m.len());
        assert!(size("output.log") <= OUTPUT_CAP && size("output.log.1") <= OUTPUT_CAP);
        assert!(size("output.log") + size("output.log.1") < 20 * 1024 * 1024);
        assert!(output_tail(dir.path(), 100).ends_with("the last line\n"));
    }

    #[test]
    fn liveness_follows_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_alive(dir.path()));
        let f = super::super::lockfile::open(&dir.path().join("lock")).unwrap();
        assert!(try_lock(&f));
        assert!(is_alive(dir.path()));
        drop(f);
        assert!(!is_alive(dir.path()));
    }

    /// A wrapper takes its run from a moment's holder (a liveness probe, a
    /// forked child before its exec), and leaves it to a wrapper that keeps it.
    #[test]
    fn a_wrapper_waits_out_a_moments_hold_on_its_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let probe = super::super::lockfile::open(&path).unwrap();
        assert!(try_lock(&probe));
        let released = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(probe);
        });
        let wrapper = super::super::lockfile::open(&path).unwrap();
        assert!(take_run_lock(&wrapper), "gave up on a moment's hold");
        released.join().unwrap();
        let second = super::super::lockfile::open(&path).unwrap();
        assert!(!take_run_lock(&second), "took a run another wrapper holds");
    }
}
