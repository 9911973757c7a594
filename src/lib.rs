//! Sprint Supervisor: runs many coding agents on one execution plan.
//!
//! Layers (see the README's architecture part): [`plan`] reads the plan,
//! [`engine`] decides, [`report`] renders text; adapters ([`runner`], [`store`])
//! carry effects out; the front door ([`cli`]) is thin.

pub mod cli;
pub mod contract;
pub mod engine;
pub mod github;
pub mod plan;
pub mod report;
pub mod runner;
pub mod server;
pub mod settings;
pub mod store;
pub mod sync;
pub mod text;
