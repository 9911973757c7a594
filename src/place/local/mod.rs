//! The local place: agents as processes on this machine, each in a git
//! worktree of its sprint's branch, with the agent contract's environment.
//! [`supervisor`] is the drive loop's home here (the plan's lock, control
//! files, when a run is over); [`executor`] carries the engine's effects out
//! (worktrees, merges, agent processes, build gates); [`process`] is the
//! detached wrapper around one agent, whose criteria it runs with
//! [`crate::attempt`] (as the agent workflow's verifying job on GitHub
//! does); [`found_done`] looks
//! for a fresh sprint's work on its head before its agent; [`git`] is the
//! repository; [`screen`] what the loop shows and hears.

pub mod executor;
pub mod found_done;
pub mod git;
pub mod lockfile;
pub mod process;
pub mod review;
pub mod screen;
pub mod supervisor;
