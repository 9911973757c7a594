//! An attempt's processes as a tree: finding every live descendant through
//! `/proc` (orphans included, the wrapper being their subreaper), signalling
//! them, reaping them, and ending them all before the verdict — so nothing
//! an agent or a check started outlives its attempt.

use std::path::Path;
use std::time::{Duration, Instant};

/// Every live (not zombie) process below `root`, found through `/proc`. With the
/// wrapper as child subreaper, processes that daemonize or leave their process
/// group are still found: their orphans are re-parented to the wrapper.
///
/// Asked at every agent's end, it follows each process's own list of children
/// (`/proc/PID/task/TID/children`): reading every process's `stat` instead cost
/// a read per process on the machine (70 here, hundreds on a desktop) between
/// one agent's exit and the next one's start. A kernel without those lists
/// (`CONFIG_PROC_CHILDREN`) gets the full scan.
pub fn descendants(root: i32) -> Vec<i32> {
    static CHILDREN_LISTS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *CHILDREN_LISTS.get_or_init(|| Path::new("/proc/thread-self/children").exists()) {
        descendants_by_children(root)
    } else {
        descendants_by_scan(root)
    }
}

/// `pid`'s state letter and parent from `/proc/PID/stat` (`None`: it is gone).
fn stat_of(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

fn is_dead(state: char) -> bool {
    state == 'Z' || state == 'X'
}

/// `pid`'s children: the union of its threads' lists (a process that is gone
/// has none).
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn descendants_by_children(root: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for c in children_of(p) {
            // A zombie has no children left: they went to the reaper when it
            // exited.
            if stat_of(c).is_some_and(|(state, _)| !is_dead(state)) && !found.contains(&c) {
                found.push(c);
                todo.push(c);
            }
        }
    }
    found
}

fn descendants_by_scan(root: i32) -> Vec<i32> {
    let mut parent_of = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            if let Some((state, ppid)) = stat_of(pid) {
                parent_of.push((pid, ppid, is_dead(state)));
            }
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(
            parent_of
                .iter()
                .filter(|(_, pp, _)| *pp == p)
                .map(|(pid, _, _)| *pid),
        );
        i += 1;
    }
    found.remove(0);
    found.retain(|pid| !parent_of.iter().any(|(p, _, dead)| p == pid && *dead));
    found
}

pub(crate) fn signal_all(pgid: i32, sig: libc::c_int) {
    // SAFETY: signalling processes; no memory is shared. The group is the agent's
    // own (created at spawn), never the wrapper's.
    unsafe { libc::kill(-pgid, sig) };
    for pid in descendants(std::process::id() as i32) {
        // SAFETY: as above; these are the wrapper's own descendants.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Makes this process the reaper of every orphan among its descendants, so
/// that nothing started below it (a double fork into a new session
/// included) can get out of [`end_descendants`]' reach.
pub fn become_subreaper() {
    // SAFETY: a process attribute of our own; no memory is involved.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Kills every descendant of this process and reaps them, until none is
/// left: what checking repository code started does not outlive the check.
pub fn end_descendants() {
    let me = std::process::id() as i32;
    let mut pause = Duration::from_millis(1);
    loop {
        reap();
        let left = descendants(me);
        if left.is_empty() {
            return;
        }
        for pid in left {
            // SAFETY: signalling our own descendants; no memory is shared.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Reaps every exited child of the wrapper (orphans re-parented to it included).
pub(crate) fn reap() {
    loop {
        // SAFETY: waitpid on our own children with WNOHANG never blocks.
        let r = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if r <= 0 {
            return;
        }
    }
}

/// Ends every process the attempt left: SIGTERM, then SIGKILL after `grace`,
/// until none is left. Returns when the attempt's process tree is empty.
pub(crate) fn end_attempt_processes(pgid: i32, grace: Duration) {
    let me = std::process::id() as i32;
    if descendants(me).is_empty() {
        reap();
        return;
    }
    signal_all(pgid, libc::SIGTERM);
    let until = Instant::now() + grace;
    // Most leftovers (a `git maintenance --detach` after a commit) end within
    // a millisecond or two of the signal: look again soon, then less often.
    let mut pause = Duration::from_millis(1);
    loop {
        reap();
        if descendants(me).is_empty() {
            return;
        }
        if Instant::now() >= until {
            signal_all(pgid, libc::SIGKILL);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::{descendants, descendants_by_children, descendants_by_scan};
    use std::process::Command;
    use std::time::Duration;

    #[test]
    fn descendants_include_children_in_other_sessions() {
        // A child that starts a grandchild in a new session: both are found.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("setsid sleep 30 & sleep 30")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let mut found = Vec::new();
        for _ in 0..100 {
            found = descendants(me);
            if found.len() >= 3 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(found.contains(&(child.id() as i32)));
        assert!(found.len() >= 3, "{found:?}");
        // Following the children lists finds what the scan of every process finds.
        let sorted = |mut v: Vec<i32>| {
            v.sort();
            v
        };
        assert_eq!(
            sorted(descendants_by_children(me)),
            sorted(descendants_by_scan(me))
        );
        for p in &found {
            unsafe { libc::kill(*p, libc::SIGKILL) };
        }
        child.wait().unwrap();
    }
}
