//! `supervise serve`: the GitHub App front door. Signature checks, intake over
//! HTTP, the store-backed queue of deliveries and the workers that hand each to
//! [`crate::place::hosted::handle`].

mod budget;
pub mod listen;
pub mod retention;
pub mod run;
pub mod service;
pub mod signature;
pub mod web;
