//! Runners carry out dispatches. This one runs agents as local processes, each in
//! a git worktree of its sprint's branch, with the agent contract; in a GitHub
//! Actions runner, the trusted jobs after the agent's (`handoff`) share the
//! contract and the criteria.

pub mod criteria;
pub mod git;
pub mod handoff;
pub mod local;
pub mod lockfile;
pub mod place;
pub mod process;
