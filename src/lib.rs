//! worksession: a Kubernetes-native supervisor for long-lived AI coding-agent conversations hosted in tmux.
//!
//! The library holds every part; `src/main.rs` only parses the command line and calls in here.
//! The pipeline: [`api`] types are what users write; the agent observes [`tmux`], asks the pure [`core`] what to do
//! given the [`config`] and its [`harness`] profiles, and executes the answer.
#![forbid(unsafe_code)]

pub mod agent;
pub mod api;
pub mod bridge;
pub mod config;
pub mod console;
pub mod controller;
pub mod core;
pub mod get;
pub mod github;
pub mod harness;
pub mod hook;
pub mod labeler;
pub mod placement;
pub mod room;
pub mod signal;
pub mod store;
pub mod telemetry;
pub mod terminal;
pub mod tmux;
pub mod transcript;
pub mod words;
pub mod workspace;
