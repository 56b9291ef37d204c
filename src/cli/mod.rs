//! The command line's own commands, beside the processes: [`get`] lists WorkSessions and WorkEvents the way
//! `kubectl get` does, and [`terminal`] puts a session's harness on the user's terminal (`peek`, `attach`).
//! `src/main.rs` parses the arguments and calls in here.

pub mod get;
pub mod read;
pub mod terminal;
