//! `worksession peek` and `worksession attach`: a session's harness on the user's terminal. In local mode through
//! tmux directly; on a cluster by `kubectl exec` into the tmux container of the agent pod on the session's node,
//! with the user's own credentials and RBAC (`get`/`list` pods, `create` pods/exec in the agent's namespace).
//! Detaching (`C-b d`) leaves the harness running.

use std::path::Path;
use std::process::Command;

use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use crate::api::WorkSession;
use crate::config::Config;

/// The tmux socket inside the chart's agent pod (shared by its tmux and agent containers).
pub const POD_SOCKET: &str = "/run/worksession/tmux.sock";
/// The labels of the chart's agent pods.
pub const AGENT_POD_SELECTOR: &str = "app.kubernetes.io/name=worksession,app.kubernetes.io/component=agent";

/// The tmux session a WorkSession's harness runs in, as the agent recorded it ([`crate::core::tmux_session`], taking
/// the recorded one as there: the agent records only one it observed).
pub fn session_of(ws: &WorkSession, config: &Config) -> String {
    crate::core::tmux_session(ws, config, |_| true).current
}

/// The tmux arguments that print the last `lines` lines of `session`'s pane, with their colours (SGR escapes, for the
/// console) when `colours`.
pub fn capture_args(session: &str, lines: usize, colours: bool) -> Vec<String> {
    let (start, target) = (format!("-{lines}"), format!("={session}:"));
    let colours = colours.then_some("-e");
    let args = ["capture-pane", "-p"].into_iter().chain(colours).chain(["-J", "-S", &start, "-t", &target]);
    args.map(String::from).collect()
}

/// The tmux arguments that attach the terminal to `session`.
pub fn attach_args(session: &str) -> Vec<String> {
    ["attach-session", "-t", &format!("={session}")].map(String::from).to_vec()
}

/// tmux on this machine, on `socket` (tmux's default server when `None`), never starting a server.
pub fn local_tmux(socket: Option<&Path>, args: &[String]) -> Command {
    let mut cmd = Command::new("tmux");
    if let Some(socket) = socket {
        cmd.arg("-S").arg(socket);
    }
    // Attaching from inside another tmux is what the user asked for: tmux would refuse it while $TMUX is set.
    cmd.arg("-N").args(args).env_remove("TMUX");
    cmd
}

/// `kubectl exec` into the tmux container of `pod`, running tmux on the pod's socket with `args`.
pub fn kubectl_tmux(namespace: &str, pod: &str, args: &[String], interactive: bool) -> Command {
    let mut cmd = Command::new("kubectl");
    cmd.args(["exec", "-n", namespace, pod, "-c", "tmux"]);
    if interactive {
        cmd.arg("-it");
    }
    cmd.args(["--", "tmux", "-u", "-N", "-S", POD_SOCKET]).args(args);
    cmd
}

/// The node a session's harness runs on, or why it has none yet.
pub fn node_of(ws: &WorkSession) -> Result<&str, String> {
    let not_placed = || format!("{} is not placed on a node yet (see its Placed condition)", ws.name_any());
    ws.spec.node_name.as_deref().ok_or_else(not_placed)
}

/// The agent pod (`namespace`, `name`) on `node`, found with the user's own credentials.
pub async fn agent_pod(client: &Client, node: &str) -> Result<(String, String), String> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(client.clone());
    let params = ListParams::default().labels(AGENT_POD_SELECTOR).fields(&format!("spec.nodeName={node}"));
    let list = pods.list(&params).await.map_err(|e| format!("listing the agent pods: {e}"))?;
    let pod = list.items.into_iter().next().ok_or_else(|| format!("no worksession agent pod on node {node}"))?;
    Ok((pod.namespace().unwrap_or_default(), pod.name_any()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_name_the_session_exactly_and_never_start_a_server() {
        assert_eq!(capture_args("loop-a", 40, false), ["capture-pane", "-p", "-J", "-S", "-40", "-t", "=loop-a:"]);
        assert_eq!(capture_args("loop-a", 9, true), ["capture-pane", "-p", "-e", "-J", "-S", "-9", "-t", "=loop-a:"]);
        assert_eq!(attach_args("loop-a"), ["attach-session", "-t", "=loop-a"]);
        let cmd = kubectl_tmux("ws", "agent-x", &attach_args("loop-a"), true);
        let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            args,
            [
                "exec",
                "-n",
                "ws",
                "agent-x",
                "-c",
                "tmux",
                "-it",
                "--",
                "tmux",
                "-u",
                "-N",
                "-S",
                POD_SOCKET,
                "attach-session",
                "-t",
                "=loop-a"
            ]
        );
    }
}
