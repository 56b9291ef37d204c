//! worksession: a Kubernetes-native supervisor for long-lived AI coding-agent conversations hosted in tmux.
//!
//! The library holds every part; `src/main.rs` only parses the command line and calls in here.
#![forbid(unsafe_code)]
