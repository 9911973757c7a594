//! Agents as local processes, crash-safe. Each dispatch gets a run directory; a
//! detached wrapper (`supervise __run-agent DIR`) runs the agent there, then the
//! verifier, and writes `result.json`. The wrapper holds an flock on `DIR/lock` for
//! its whole life and writes `DIR/started` before it starts the agent, so:
//! - a wrapper that finds `started` (or cannot lock) exits at once: an attempt
//!   never runs twice, even when a restarted supervisor spawns again;
//! - the supervisor knows a run is alive iff the lock is held, and can adopt it
//!   after its own crash.

use crate::engine::{CriterionResult, DispatchOrder};
use crate::plan::{Sprint, WorkUnit};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunResult {
    pub exit_code: Option<i32>,
    pub turns_used: Option<u32>,
    pub output_tail: String,
    pub criteria: Vec<CriterionResult>,
    /// What the plan's progress files say (recorded by `supervise verify --record`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<crate::engine::ProgressMarker>,
}

pub fn run_dir(runs: &Path, dispatch: &str) -> PathBuf {
    runs.join(dispatch.replace('/', "__"))
}

fn try_lock(f: &File) -> bool {
    // SAFETY: flock on a descriptor we own; no memory is shared.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Whether a wrapper holds the run's lock right now.
pub fn is_alive(dir: &Path) -> bool {
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join("lock"))
    {
        Ok(f) => !try_lock(&f), // our lock (if taken) is released when `f` drops
        Err(_) => false,
    }
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

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(tmp, path)
}

/// Writes the spec and prompt and starts the wrapper, unless this dispatch already
/// ran or runs. Returns the child when one was spawned.
pub fn spawn(dir: &Path, spec: &RunSpec) -> Result<Option<Child>> {
    if dir.join("started").exists() {
        return Ok(None);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    write_atomic(&dir.join("prompt.md"), spec.order.prompt.as_bytes())?;
    write_atomic(&dir.join("run.json"), &serde_json::to_vec_pretty(spec)?)?;
    let exe = std::env::current_exe().context("finding the supervise executable")?;
    let log = File::create(dir.join("wrapper.log"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("__run-agent")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: setsid is async-signal-safe; it detaches the wrapper into its own
    // session so it outlives the supervisor and its process group can be signalled.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    Ok(Some(cmd.spawn().context("starting the agent wrapper")?))
}

/// The agent's turn count, if it printed `supervise:turns=N` or `turns used: N`.
pub fn parse_turns(output: &str) -> Option<u32> {
    output.lines().rev().find_map(|l| {
        let l = l.to_lowercase();
        let at = l
            .find("supervise:turns=")
            .map(|i| i + 16)
            .or_else(|| l.find("turns used:").map(|i| i + 11))?;
        l[at..]
            .trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    })
}

/// The wrapper's body (`supervise __run-agent DIR`). Exit status 0 unless it could
/// not even read its spec.
pub fn run_agent(dir: &Path) -> Result<()> {
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join("lock"))?;
    if !try_lock(&lock) || dir.join("started").exists() || dir.join("cancelled").exists() {
        return Ok(()); // another wrapper has (or had) this dispatch
    }
    write_atomic(
        &dir.join("started"),
        std::process::id().to_string().as_bytes(),
    )?;
    let spec: RunSpec = serde_json::from_slice(&std::fs::read(dir.join("run.json"))?)?;
    let prompt_file = dir.join("prompt.md").canonicalize()?;
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("output.log"))?;
    let err = out.try_clone()?;
    let o = &spec.order;
    let status = Command::new("sh")
        .arg("-c")
        .arg(&spec.agent)
        .current_dir(&spec.checkout)
        .stdin(File::open(&prompt_file)?)
        .stdout(out)
        .stderr(err)
        .env("SUPERVISE_PROMPT_FILE", &prompt_file)
        .env("SUPERVISE_DISPATCH_ID", &o.dispatch.0)
        .env("SUPERVISE_UNIT", &o.unit)
        .env("SUPERVISE_UNIT_DIR", o.directory.as_deref().unwrap_or("."))
        .env("SUPERVISE_SPRINT", o.sprint.as_str())
        .env("SUPERVISE_SPRINT_NAME", &o.sprint_name)
        .env("SUPERVISE_ATTEMPT", o.attempt.to_string())
        .env("SUPERVISE_MODEL", &o.model_id)
        .env("SUPERVISE_MAX_TURNS", o.max_turns.to_string())
        .status();
    let output = std::fs::read_to_string(dir.join("output.log")).unwrap_or_default();
    let exit_code = status.as_ref().ok().and_then(|s| s.code());
    let criteria = super::verify::verify_sprint(
        &spec.unit,
        &spec.sprint,
        &spec.checkout,
        Duration::from_secs(spec.verify_timeout_secs),
    );
    let result = RunResult {
        exit_code,
        turns_used: parse_turns(&output),
        output_tail: super::verify::tail(&output, 4000),
        criteria,
        progress: None,
    };
    write_atomic(
        &dir.join("result.json"),
        &serde_json::to_vec_pretty(&result)?,
    )?;
    drop(lock);
    Ok(())
}

/// Stops a run: SIGTERM to its process group now, SIGKILL after `grace` if it is
/// still alive (the force-cancel for agents that ignore the first signal).
pub fn cancel(dir: &Path, grace: Duration) {
    let _ = File::create(dir.join("cancelled"));
    let Some(pid) = started_pid(dir) else { return };
    // SAFETY: signalling the wrapper's process group (its pid, as session leader).
    unsafe { libc::kill(-pid, libc::SIGTERM) };
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        let until = Instant::now() + grace;
        while Instant::now() < until && is_alive(&dir) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if is_alive(&dir) {
            // SAFETY: as above.
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
    wrap: impl Fn(Watched) -> M + Send + 'static,
) {
    std::thread::spawn(move || {
        let spawned_at = Instant::now();
        let mut last_len = 0u64;
        let mut last_activity = Instant::now();
        loop {
            if let Some(c) = child.as_mut() {
                let _ = c.try_wait(); // reap, so the wrapper leaves no zombie
            }
            let finished = dir.join("result.json").exists()
                || (dir.join("started").exists() && !is_alive(&dir))
                || (!dir.join("started").exists()
                    && spawned_at.elapsed() > Duration::from_secs(10)
                    && !is_alive(&dir));
            if finished {
                let _ = tx.send(wrap(Watched::Finished));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_are_read_from_the_output() {
        assert_eq!(parse_turns("working\nsupervise:turns=17\n"), Some(17));
        assert_eq!(parse_turns("Turns used: 23 of 50"), Some(23));
        assert_eq!(parse_turns("nothing here"), None);
    }

    #[test]
    fn liveness_follows_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_alive(dir.path()));
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.path().join("lock"))
            .unwrap();
        assert!(try_lock(&f));
        assert!(is_alive(dir.path()));
        drop(f);
        assert!(!is_alive(dir.path()));
    }
}
