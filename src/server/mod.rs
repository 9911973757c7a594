//! `supervise serve`: the GitHub App front door. This part holds the pure pieces
//! every delivery goes through — signature check, command parsing, authorisation;
//! the HTTP service is built on them.

pub mod auth;
pub mod command;
pub mod listen;
pub mod payload;
pub mod service;
pub mod signature;
