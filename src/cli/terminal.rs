//! `worksession peek` and `worksession attach`: a session's harness on the user's terminal. In local mode through
//! tmux directly; on a cluster by `kubectl exec` into the tmux container of the agent pod on the session's node,
//! with the user's own credentials and RBAC (`list` pods, `get` daemonsets, `create` pods/exec in the release's
//! namespace). Detaching (`C-b d`) leaves the harness running.

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
/// The namespace the chart is installed in, unless told otherwise (`--agent-namespace`).
pub const DEFAULT_AGENT_NAMESPACE: &str = "worksession";

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

/// The agent pod on `node`: a pod of the release's `namespace` with the agent's labels, made by a DaemonSet of that
/// namespace that carries them too (its controller, matched by uid). Labels alone are anybody's: a tenant's pod
/// labelled so, on that node, would get an administrator's terminal. Found with the user's own credentials.
pub async fn agent_pod(client: &Client, namespace: &str, node: &str) -> Result<String, String> {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels(AGENT_POD_SELECTOR).fields(&format!("spec.nodeName={node}"));
    let list = pods.list(&params).await.map_err(|e| format!("listing the agent pods in namespace {namespace}: {e}"))?;
    let sets: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
    for pod in list.items {
        let Some(owner) = pod.owner_references().iter().find(|o| o.controller == Some(true)) else { continue };
        if owner.kind != "DaemonSet" || owner.api_version != "apps/v1" {
            continue;
        }
        let set = match sets.get_opt(&owner.name).await {
            Ok(set) => set,
            Err(e) => return Err(format!("reading the agent DaemonSet {namespace}/{}: {e}", owner.name)),
        };
        let labelled = |set: &DaemonSet| {
            let labels = set.labels();
            AGENT_POD_SELECTOR.split(',').all(|pair| {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                labels.get(key).map(String::as_str) == Some(value)
            })
        };
        if set.is_some_and(|set| set.uid().as_deref() == Some(owner.uid.as_str()) && labelled(&set)) {
            return Ok(pod.name_any());
        }
    }
    Err(format!(
        "no worksession agent pod on node {node} in namespace {namespace} (the release's namespace: --agent-namespace)"
    ))
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
