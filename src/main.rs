//! The `worksession` command line: parses arguments, picks the storage backend (the API server or a directory),
//! and calls into the library. This is the only place that names a backend.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use worksession::api::Decision;
use worksession::config::{Config, Reloader};
use worksession::store::kube::{KubeSink, KubeStore};
use worksession::store::local::LocalStore;

/// Kubernetes-native supervisor for long-lived AI coding-agent conversations hosted in tmux.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Log JSON lines instead of text (also WORKSESSION_LOG_JSON=true).
    #[arg(long, global = true, env = "WORKSESSION_LOG_JSON")]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions of WorkSession and WorkEvent as multi-document YAML.
    Crd,
    /// Run the node agent against the cluster of KUBECONFIG (or the in-cluster config), or a local directory.
    Agent {
        /// This node's name (from the downward API in the chart); not used with --local.
        #[arg(long, env = "NODE_NAME", required_unless_present = "local")]
        node: Option<String>,
        /// Local mode: reconcile the WorkSession and WorkEvent manifests in this directory, without a cluster.
        #[arg(long, value_name = "DIR")]
        local: Option<PathBuf>,
        /// The agent config file (YAML); reloaded on change.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Where to serve /metrics, /livez and /readyz (port 0 picks a free port, logged).
        #[arg(long, default_value = "0.0.0.0:9090")]
        admin_addr: SocketAddr,
    },
    /// Run the webhook bridge: GitHub and generic webhooks become WorkEvents.
    Bridge {
        /// The bridge config file (YAML); reloaded on change.
        #[arg(long)]
        config: PathBuf,
        /// Local mode: write WorkEvents (and WorkSessions) as files in this directory.
        #[arg(long, value_name = "DIR")]
        local: Option<PathBuf>,
        /// Where webhooks are received.
        #[arg(long, default_value = "0.0.0.0:8080")]
        listen: SocketAddr,
        /// Where to serve /metrics, /livez and /readyz (port 0 picks a free port, logged).
        #[arg(long, default_value = "0.0.0.0:9091")]
        admin_addr: SocketAddr,
    },
    /// The cluster-level controller: places WorkSessions without a node on nodes with a Ready agent that has
    /// room, places again those of a lost node, and labels WorkEvents made by hand with their session's node. Run one
    /// per cluster (the chart's controller Deployment). `labeler` is its former name.
    #[command(alias = "labeler")]
    Controller {
        /// Where to serve /metrics, /livez and /readyz (port 0 picks a free port, logged).
        #[arg(long, default_value = "0.0.0.0:9092")]
        admin_addr: SocketAddr,
        /// Where the agents' Leases are: the agents' `placement.leaseNamespace`.
        #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
        lease_namespace: String,
        /// Seconds after its agent's Lease ran out that a NotReady or deleted node is lost and its sessions are
        /// placed again: the agents' `placement.nodeLostGraceSeconds` (the same number).
        #[arg(long, default_value_t = worksession::config::placement::DEFAULT_GRACE_SECONDS)]
        node_lost_grace_seconds: u64,
        /// Only label events; place nothing (the labeler as it was).
        #[arg(long)]
        no_placement: bool,
        /// Place only the sessions of this namespace, and sum only its WorkBudgets (default: every namespace).
        #[arg(long)]
        namespace: Option<String>,
        /// Whether a cordoned node's sessions move to other nodes: true where their conversations are on storage
        /// every node shares (the chart sets it from `agent.workspace.persistentVolumeClaim`); false (the default)
        /// keeps them on the cordoned node, where they go on, since a move would start each one fresh.
        #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
        cordon_moves: bool,
    },
    /// List WorkSessions (or WorkEvents: `get wev`) like `kubectl get`, from the cluster or a local directory.
    Get {
        /// `ws` (the default) or `wev`, then names; or only names of WorkSessions.
        #[arg(value_name = "[RESOURCE] [NAME]")]
        args: Vec<String>,
        /// The namespace (default: the kubeconfig context's; `default` in local mode).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Every namespace, with a NAMESPACE column.
        #[arg(short = 'A', long, conflicts_with = "namespace")]
        all_namespaces: bool,
        /// Output format.
        #[arg(short, long, value_enum)]
        output: Option<worksession::cli::get::Output>,
        /// After the list, print a row for every change until interrupted.
        #[arg(short, long)]
        watch: bool,
        /// Read the manifests in this directory instead of the cluster.
        #[arg(long, value_name = "DIR")]
        local: Option<PathBuf>,
    },
    /// Print the last lines of a session's harness pane (local mode: tmux; a cluster: kubectl exec).
    Peek {
        /// The WorkSession.
        name: String,
        /// How many lines.
        #[arg(long, default_value_t = 40)]
        lines: usize,
        #[command(flatten)]
        at: Where,
    },
    /// Serve a read-only web page of every session, live, on this machine with your own credentials; prints the
    /// address to open.
    Console {
        /// Where to listen: loopback unless told otherwise (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// Only this namespace (default: every namespace, like `get -A`, which needs `list` cluster-wide).
        #[arg(short, long, conflicts_with = "local")]
        namespace: Option<String>,
        /// Local mode: the manifests directory.
        #[arg(long, value_name = "DIR")]
        local: Option<PathBuf>,
        /// Local mode: the agent config (for the tmux socket and session prefix).
        #[arg(long, requires = "local")]
        config: Option<PathBuf>,
        /// The namespace of the chart's release, whose agent pods alone are exec'd into for screens.
        #[arg(long, env = "WORKSESSION_AGENT_NAMESPACE", default_value = worksession::cli::terminal::DEFAULT_AGENT_NAMESPACE)]
        agent_namespace: String,
    },
    /// Move a session to another node: its agent stops the harness once no prompt is being delivered and hands it
    /// over; the new node's agent resumes the conversation where the state is shared.
    Move {
        /// The WorkSession.
        name: String,
        /// The node (default: any node the controller chooses, not its own).
        #[arg(long)]
        to: Option<String>,
        /// The namespace (default: the kubeconfig context's).
        #[arg(short, long)]
        namespace: Option<String>,
    },
    /// Allow what a session's harness asks for permission to do (its status.approval): the request ID, or the one
    /// waiting.
    Approve {
        /// The WorkSession.
        name: String,
        /// The request (default: the one that waits).
        id: Option<String>,
        #[command(flatten)]
        at: Answering,
    },
    /// Deny what a session's harness asks for permission to do; its model is told the reason.
    Deny {
        /// The WorkSession.
        name: String,
        /// The request (default: the one that waits).
        id: Option<String>,
        /// Why, for the harness's model.
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        at: Answering,
    },
    /// Attach the terminal to a session's harness (detach with C-b d; the harness keeps running).
    Attach {
        /// The WorkSession.
        name: String,
        #[command(flatten)]
        at: Where,
    },
    /// Append what a harness's hook hands over on stdin to a hook file, as one line (run by the harness: a
    /// hook-backed profile's hooks call it).
    #[command(hide = true)]
    Hook {
        /// The session's hook file.
        #[arg(long)]
        out: PathBuf,
        /// The tag of the spawn whose harness runs the hook.
        #[arg(long)]
        spawn: String,
        /// The hook's event (`SessionStart`, `UserPromptSubmit`, ..., `notify`).
        #[arg(long)]
        event: String,
        /// What the harness hands over, when it gives it as an argument (Codex's notify) rather than on stdin.
        payload: Option<String>,
        /// A permission request's answers folder: wait there for the agent's answer, and print it.
        #[arg(long, requires = "wait")]
        answers: Option<PathBuf>,
        /// Seconds a permission request waits for its answer before it is denied.
        #[arg(long, requires = "answers")]
        wait: Option<u32>,
    },
    /// Write a hook-backed harness's settings beside its hook file, then become the harness (a profile with
    /// `hooks: gemini`, `copilot` or `opencode` runs its harness through this, where tmux runs, as its user).
    #[command(hide = true)]
    HookExec {
        /// How the harness takes hooks (`gemini`, `copilot`, `opencode`).
        #[arg(long)]
        style: String,
        /// The session's hook file.
        #[arg(long)]
        out: PathBuf,
        /// The tag of the spawn.
        #[arg(long)]
        spawn: String,
        /// The harness and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Run a harness in its room (the tmux server runs this, as root holding SETUID and SETGID): become the room's
    /// uid and gid with no other group and no capability, HOME and TMPDIR in the room, then exec the command.
    #[command(hide = true)]
    Room {
        /// The room's uid (and gid).
        #[arg(long)]
        uid: u32,
        /// The room's HOME.
        #[arg(long)]
        home: PathBuf,
        /// Where the harness runs.
        #[arg(long)]
        workdir: PathBuf,
        /// The egress proxy's port on 127.0.0.1: the only TCP port the harness may connect to (Landlock).
        #[arg(long)]
        egress_port: Option<u16>,
        /// The harness and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
}

/// Where a session is, for `peek` and `attach`.
#[derive(clap::Args)]
struct Where {
    /// The namespace (default: the kubeconfig context's; `default` in local mode).
    #[arg(short, long)]
    namespace: Option<String>,
    /// Local mode: the manifests directory.
    #[arg(long, value_name = "DIR")]
    local: Option<PathBuf>,
    /// Local mode: the agent config (for the tmux socket and session prefix).
    #[arg(long, requires = "local")]
    config: Option<PathBuf>,
    /// The namespace of the chart's release, whose agent pods alone are exec'd into.
    #[arg(long, env = "WORKSESSION_AGENT_NAMESPACE", default_value = worksession::cli::terminal::DEFAULT_AGENT_NAMESPACE)]
    agent_namespace: String,
}

/// Where an answer goes.
#[derive(clap::Args)]
struct Answering {
    /// The namespace (default: the kubeconfig context's; `default` in local mode).
    #[arg(short, long)]
    namespace: Option<String>,
    /// Local mode: the manifests directory.
    #[arg(long, value_name = "DIR")]
    local: Option<PathBuf>,
}

/// `worksession approve` and `deny`: the answer made as a WorkEvent, by the user the API server knows (local mode:
/// `$USER`).
async fn answer(name: &str, id: Option<String>, decision: Decision, reason: Option<String>, at: Answering) -> ExitCode {
    use worksession::cli::approve::answer;
    let answered = match at.local {
        Some(dir) => {
            let store = match LocalStore::new(dir) {
                Ok(store) => Arc::new(store),
                Err(e) => return fail(&e),
            };
            let namespace = at.namespace.unwrap_or_else(|| "default".into());
            let by = std::env::var("USER").ok().map(|u| format!("local:{u}"));
            answer(&store, (&namespace, name), id, decision, reason, by).await
        }
        None => {
            let (client, namespace) = match client_in(at.namespace).await {
                Ok(c) => c,
                Err(e) => return fail(&e),
            };
            let by = worksession::cli::approve::who_am_i(&client).await;
            answer(&KubeSink::new(client), (&namespace, name), id, decision, reason, by).await
        }
    };
    match answered {
        Ok(said) => {
            println!("{said}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

/// A client of the kubeconfig's cluster (or the pod's), and `namespace` or else the context's.
async fn client_in(namespace: Option<String>) -> Result<(kube::Client, String), Box<dyn std::error::Error>> {
    let config = kube::Config::infer().await?;
    let namespace = namespace.unwrap_or_else(|| config.default_namespace.clone());
    Ok((kube::Client::try_from(config)?, namespace))
}

/// `worksession move`: asks for the move in the session's annotation (the agent and the controller do the rest).
async fn move_session(name: &str, to: Option<String>, namespace: Option<String>) -> ExitCode {
    let (client, namespace) = match client_in(namespace).await {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    match worksession::cli::relocate::move_session(client, &namespace, name, to).await {
        Ok(said) => {
            println!("{said}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Room { uid, home, workdir, egress_port, command } = &cli.command {
        // Before any thread exists: the process becomes the room's user and execs, or says why it could not.
        let e = worksession::node::room::enter(*uid, home, workdir, *egress_port, command);
        eprintln!("worksession room: {e}");
        return ExitCode::from(126);
    }
    if let Command::Hook { out, spawn, answers: Some(answers), wait: Some(wait), .. } = &cli.command {
        // Run by a harness that asks for permission: it waits for the agent's answer, and prints it.
        return match worksession::node::answers::ask(out, spawn, answers, *wait, std::io::stdin().lock()) {
            Ok(said) => {
                println!("{said}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("worksession hook: {}: {e}", out.display());
                ExitCode::FAILURE
            }
        };
    }
    if let Command::Hook { out, spawn, event, payload, .. } = &cli.command {
        // Run by a harness for each of its hooks: one line appended, nothing else, and quickly.
        let received = match payload {
            Some(payload) => worksession::node::hook::receive(out, event, spawn, payload.as_bytes()),
            None => worksession::node::hook::receive(out, event, spawn, std::io::stdin().lock()),
        };
        return match received {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("worksession hook: {}: {e}", out.display());
                ExitCode::FAILURE
            }
        };
    }
    if let Command::HookExec { style, out, spawn, command } = &cli.command {
        let Some(style) = worksession::node::hook::Hooks::from_name(style) else {
            eprintln!("worksession hook-exec: unknown style {style:?} (known: gemini, copilot, opencode)");
            return ExitCode::FAILURE;
        };
        let e = worksession::node::hook::exec_through(style, out, spawn, command);
        eprintln!("worksession hook-exec: {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(run(cli))
}

async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Room { .. } | Command::Hook { .. } | Command::HookExec { .. } => {
            unreachable!("handled before the runtime")
        }
        Command::Get { args, namespace, all_namespaces, output, watch, local } => {
            get(args, namespace, all_namespaces, output, watch, local).await
        }
        Command::Peek { name, lines, at } => peek(&name, at, lines).await,
        Command::Attach { name, at } => attach(&name, at).await,
        Command::Move { name, to, namespace } => move_session(&name, to, namespace).await,
        Command::Approve { name, id, at } => answer(&name, id, Decision::Allow, None, at).await,
        Command::Deny { name, id, reason, at } => answer(&name, id, Decision::Deny, reason, at).await,
        Command::Console { listen, namespace, local, config, agent_namespace } => {
            console(listen, namespace, local, config, agent_namespace).await
        }
        Command::Crd => {
            print!("{}", worksession::api::crds_yaml());
            ExitCode::SUCCESS
        }
        Command::Agent { node, local, config, admin_addr } => {
            worksession::telemetry::init_tracing(cli.log_json);
            // The reloader lives as long as the agent: dropping it would stop the reloads.
            let (_reloader, config) = match config {
                Some(path) => match Reloader::start(path, Duration::from_secs(2)) {
                    Ok(r) => {
                        let rx = r.config();
                        (Some(r), rx)
                    }
                    Err(e) => return fail(&e),
                },
                None => (None, tokio::sync::watch::channel(Arc::new(Config::default())).1),
            };
            let options = worksession::agent::AgentOptions {
                config,
                admin_addr: Some(admin_addr),
                admin_listening: None,
                failpoint: None,
            };
            let result = match local {
                Some(dir) => match LocalStore::watching(dir) {
                    Ok(store) => worksession::agent::run_on_changes(store, options).await,
                    Err(e) => Err(e),
                },
                None => {
                    let client = match kube::Client::try_default().await {
                        Ok(c) => c,
                        Err(e) => return fail(&e),
                    };
                    let node = node.expect("clap requires --node without --local");
                    let store = KubeStore::new(client.clone(), &node);
                    worksession::agent::run(client, node, store, options).await
                }
            };
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e),
            }
        }
        Command::Controller {
            admin_addr,
            lease_namespace,
            node_lost_grace_seconds,
            no_placement,
            namespace,
            cordon_moves,
        } => {
            worksession::telemetry::init_tracing(cli.log_json);
            let grace = Duration::from_secs(node_lost_grace_seconds.max(1));
            let placement =
                (!no_placement).then_some(worksession::controller::placement::controller::PlacementOptions {
                    lease_namespace,
                    grace,
                    namespace: namespace.clone(),
                    cordon_moves,
                });
            let result = match kube::Client::try_default().await {
                Ok(client) => worksession::controller::run(client, Some(admin_addr), placement, namespace).await,
                Err(e) => return fail(&e),
            };
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e),
            }
        }
        Command::Bridge { config, local, listen, admin_addr } => {
            use worksession::bridge::{self, BridgeConfig};
            worksession::telemetry::init_tracing(cli.log_json);
            let reloader = match Reloader::start_with(config, Duration::from_secs(2), BridgeConfig::parse) {
                Ok(r) => r,
                Err(e) => return fail(&e),
            };
            let mut options = bridge::BridgeOptions {
                config: reloader.config(),
                listen,
                admin_addr: Some(admin_addr),
                feedback: None,
            };
            let result = match local {
                Some(dir) => match LocalStore::new(dir) {
                    Ok(store) => bridge::run(Arc::new(store), options).await,
                    Err(e) => Err(e),
                },
                None => match kube::Client::try_default().await {
                    Ok(client) => {
                        options.feedback = Some(client.clone());
                        bridge::run(KubeSink::new(client), options).await
                    }
                    Err(e) => return fail(&e),
                },
            };
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e),
            }
        }
    }
}

async fn get(
    mut args: Vec<String>,
    namespace: Option<String>,
    all_namespaces: bool,
    output: Option<worksession::cli::get::Output>,
    watch: bool,
    local: Option<PathBuf>,
) -> ExitCode {
    use worksession::cli::get::{Query, Resource, Scope, run};
    let kind = match args.first().and_then(|a| Resource::parse(a)) {
        Some(kind) => {
            args.remove(0);
            kind
        }
        None => Resource::WorkSessions,
    };
    use worksession::cli::read::{Cluster, Local};
    let result = match local {
        Some(dir) => {
            // Notifications only for a watch: a plain listing reads the directory once.
            let store = if watch { LocalStore::watching(dir) } else { LocalStore::new(dir) };
            let store = match store {
                Ok(store) => store,
                Err(e) => return fail(&e),
            };
            let scope = if all_namespaces { Scope::All } else { Scope::One(namespace.unwrap_or("default".into())) };
            let query = Query { kind, names: args, scope, output };
            run(&Local::new(store, Config::default()), &query, watch).await
        }
        None => match kube::Config::infer().await {
            Ok(config) => {
                let context_namespace = config.default_namespace.clone();
                let client = match kube::Client::try_from(config) {
                    Ok(client) => client,
                    Err(e) => return fail(&e),
                };
                let scope =
                    if all_namespaces { Scope::All } else { Scope::One(namespace.unwrap_or(context_namespace)) };
                let watched = match &scope {
                    Scope::All => None,
                    Scope::One(ns) => Some(ns.clone()),
                };
                let query = Query { kind, names: args, scope, output };
                run(&Cluster::new(client, watched), &query, watch).await
            }
            Err(e) => return fail(&e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// `peek`: the pane's last `lines` lines, read as the console reads its screen.
async fn peek(name: &str, at: Where, lines: usize) -> ExitCode {
    use worksession::cli::read::{Cluster, Local};
    match at.local {
        Some(dir) => {
            let config = match at.config.as_deref().map(Config::load).transpose() {
                Ok(config) => config.unwrap_or_default(),
                Err(e) => return fail(&e),
            };
            let store = match LocalStore::new(dir) {
                Ok(store) => store,
                Err(e) => return fail(&e),
            };
            let namespace = at.namespace.unwrap_or_else(|| "default".into());
            print_screen(&Local::new(store, config), &namespace, name, lines).await
        }
        None => {
            let config = match kube::Config::infer().await {
                Ok(c) => c,
                Err(e) => return fail(&e),
            };
            let namespace = at.namespace.unwrap_or_else(|| config.default_namespace.clone());
            match kube::Client::try_from(config) {
                Ok(client) => {
                    let source = Cluster::new(client, Some(namespace.clone())).with_agent_namespace(at.agent_namespace);
                    print_screen(&source, &namespace, name, lines).await
                }
                Err(e) => fail(&e),
            }
        }
    }
}

async fn print_screen<S: worksession::cli::read::Source>(
    source: &S,
    namespace: &str,
    name: &str,
    lines: usize,
) -> ExitCode {
    let ws = match source.session(namespace, name).await {
        Ok(ws) => ws,
        Err(e) => return fail(&e),
    };
    match source.screen(&ws, lines, false).await {
        Ok(screen) => {
            print!("{screen}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

/// `attach`: the user's terminal on the session's pane, until they detach.
async fn attach(name: &str, at: Where) -> ExitCode {
    use worksession::cli::read::{Cluster, Local, Source};
    use worksession::cli::terminal::{attach_args, kubectl_tmux, local_tmux, node_of, session_of};
    let mut cmd = match at.local {
        Some(dir) => {
            let config = match at.config.as_deref().map(Config::load).transpose() {
                Ok(config) => config.unwrap_or_default(),
                Err(e) => return fail(&e),
            };
            let store = match LocalStore::new(dir) {
                Ok(store) => store,
                Err(e) => return fail(&e),
            };
            let namespace = at.namespace.unwrap_or_else(|| "default".into());
            let ws = match Local::new(store, config.clone()).session(&namespace, name).await {
                Ok(ws) => ws,
                Err(e) => return fail(&e),
            };
            local_tmux(config.tmux.socket.as_deref(), &attach_args(&session_of(&ws, &config)))
        }
        None => {
            let config = match kube::Config::infer().await {
                Ok(c) => c,
                Err(e) => return fail(&e),
            };
            let namespace = at.namespace.unwrap_or_else(|| config.default_namespace.clone());
            let client = match kube::Client::try_from(config) {
                Ok(c) => c,
                Err(e) => return fail(&e),
            };
            let ws = match Cluster::new(client.clone(), Some(namespace.clone())).session(&namespace, name).await {
                Ok(ws) => ws,
                Err(e) => return fail(&e),
            };
            let node = match node_of(&ws) {
                Ok(node) => node,
                Err(e) => return fail(&e),
            };
            let pod = match worksession::cli::terminal::agent_pod(&client, &at.agent_namespace, node).await {
                Ok(p) => p,
                Err(e) => return fail(&e),
            };
            kubectl_tmux(&at.agent_namespace, &pod, &attach_args(&session_of(&ws, &Config::default())), true)
        }
    };
    match cmd.status() {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => ExitCode::from(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1)),
        Err(e) => fail(&e),
    }
}

/// `worksession console`: the page, from the cluster (the user's kubeconfig) or a local directory.
async fn console(
    listen: std::net::SocketAddr,
    namespace: Option<String>,
    local: Option<PathBuf>,
    config: Option<PathBuf>,
    agent_namespace: String,
) -> ExitCode {
    use worksession::cli::read::{Cluster, Local};
    use worksession::console;
    let result = match local {
        Some(dir) => {
            let config = match config.as_deref().map(Config::load).transpose() {
                Ok(config) => config.unwrap_or_default(),
                Err(e) => return fail(&e),
            };
            match LocalStore::watching(dir) {
                Ok(store) => console::serve(Local::new(store, config), listen).await,
                Err(e) => return fail(&e),
            }
        }
        None => match kube::Client::try_default().await {
            Ok(client) => {
                console::serve(Cluster::new(client, namespace).with_agent_namespace(agent_namespace), listen).await
            }
            Err(e) => return fail(&e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("worksession: {e}");
    ExitCode::FAILURE
}
