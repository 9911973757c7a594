//! Runners carry out dispatches. This one runs agents as local processes, each in
//! a git worktree of its sprint's branch, with the agent contract of DESIGN.md;
//! the GitHub Actions runner shares the contract and `supervise verify`.

pub mod criteria;
pub mod git;
pub mod local;
pub mod lockfile;
pub mod place;
pub mod process;
