//! The `worksession` command line: parses arguments and calls into the library.
use clap::Parser;

/// Kubernetes-native supervisor for long-lived AI coding-agent conversations hosted in tmux.
#[derive(Parser)]
#[command(version, about)]
struct Cli {}

fn main() {
    Cli::parse();
}
