//! worksession: a Kubernetes-native supervisor for long-lived AI coding-agent conversations hosted in tmux.
//!
//! The library holds every part; `src/main.rs` only parses the command line and calls in here.
//! The pipeline: [`api`] types are what users write; the agent observes [`node::tmux`], asks the pure [`core`] what to do
//! given the [`config`] and its [`harness`] profiles, and executes the answer through its [`node`]'s edges.
#![forbid(unsafe_code)]

// The pure parts: what users write, the decision, its configuration, the harnesses' profiles, the closed words.
pub mod api;
pub mod config;
pub mod core;
pub mod harness;
pub mod words;

// The node's edges, which the agent's executor touches.
pub mod node;

// The processes: the node agent, the webhook bridge, the cluster controller, the console, the command line's own.
pub mod agent;
pub mod bridge;
pub mod cli;
pub mod console;
pub mod controller;

// Beside them: storage (the API server or a directory), GitHub's API, telemetry and signals.
pub mod github;
pub mod signal;
pub mod store;
pub mod telemetry;
