//! The command line's own commands, beside the processes: [`get`] lists WorkSessions and WorkEvents the way
//! `kubectl get` does, and [`terminal`] puts a session's harness on the user's terminal (`peek`, `attach`).
//! [`approve`] answers a harness's permission request, [`relocate`] asks for a move. `src/main.rs` parses the
//! arguments and calls in here.

pub mod approve;
pub mod get;
pub mod read;
pub mod relocate;
pub mod terminal;
