//! The `worksession` command line: parses arguments and calls into the library.
use clap::{Parser, Subcommand};

/// Kubernetes-native supervisor for long-lived AI coding-agent conversations hosted in tmux.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions of WorkSession and WorkEvent as multi-document YAML.
    Crd,
}

fn main() {
    match Cli::parse().command {
        Command::Crd => print!("{}", worksession::api::crds_yaml()),
    }
}
