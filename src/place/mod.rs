//! The places where a drive loop's effects are carried out. Each place has the
//! same shape: it turns the engine's effects (dispatch an agent, cancel it,
//! merge a sprint, publish a notice) into actions in its world, and what
//! happens there back into the engine's inputs.
//!
//! - [`local`]: agents as processes in git worktrees on this machine, their
//!   exit criteria run here (`supervise run`).
//! - [`hosted`]: agents as GitHub Actions runs, sprints as branches and pull
//!   requests, notices as comments and check runs (`supervise serve` and the
//!   Action); the command handler that starts and steers its operations.
//!
//! A third place (another forge, another executor) is one more folder here.

pub mod hosted;
pub mod local;
pub mod views;
