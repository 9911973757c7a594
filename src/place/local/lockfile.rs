//! Advisory locks on files (flock): how this program's processes agree on who
//! holds what — the supervisor of a plan, a running attempt, a sprint's
//! worktree, the repository's shared files. A lock lives as long as its `File`
//! (and dies with its process, whatever kills it), so a crash never leaves one.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Opens (creating, never truncating) the lock file at `path`.
pub fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Takes the exclusive lock if nobody holds it; `false` if someone does.
pub fn try_lock(f: &File) -> bool {
    // SAFETY: flock on a descriptor we own; no memory is shared.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Waits for the exclusive lock.
pub fn lock(f: &File) -> io::Result<()> {
    // SAFETY: as above.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_refused_until_its_file_closes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.lock");
        let a = open(&p).unwrap();
        assert!(try_lock(&a));
        let b = open(&p).unwrap();
        assert!(!try_lock(&b));
        drop(a);
        assert!(try_lock(&b));
    }
}
