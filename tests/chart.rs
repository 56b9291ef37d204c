//! The Helm chart against the real API server: lint, a server-side dry run of everything it renders, its CRDs in
//! sync with `crds/`, and its RBAC applied for real, with the agent and the bridge running as their
//! ServiceAccount identities through a full scenario, and refused what they do not need.

mod scenarios;
use scenarios::{Rig, fixtures};
mod standin;
mod support;
mod world;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use axum::body::Body;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::WAIT;
use support::eventually;
use tower::ServiceExt;
use worksession::api::{Phase, PromptPhase, Via, WorkBudget, WorkEvent, WorkSession};
use world::{World, condition};

fn chart() -> PathBuf {
    support::repo_root().join("charts/worksession")
}

/// `helm` or `kubectl` from the test control plane's pinned binaries, talking to it.
use support::tool;

fn run(cmd: &mut Command, input: Option<&str>) -> String {
    cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(text) = input {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn template(release: &str, namespace: &str, values: &[&str]) -> String {
    let mut cmd = tool("helm");
    cmd.args(["template", release]).arg(chart()).args(["--namespace", namespace]);
    for v in values {
        cmd.arg(v);
    }
    run(&mut cmd, None)
}

/// `helm template` with each of `sets` as a `--set`, whether it succeeds or not.
/// The agent config a rendered chart holds: its text, and what the agent makes of it.
fn agent_config(rendered: &str) -> (String, worksession::config::Config) {
    let configmap = rendered.split("\n---").find(|doc| doc.contains("agent.yaml: |")).expect("the agent ConfigMap");
    let doc: serde_json::Value = serde_yaml_ng::from_str(configmap).unwrap();
    let yaml = doc["data"]["agent.yaml"].as_str().unwrap().to_string();
    let config = worksession::config::Config::parse(&yaml, std::path::Path::new("agent.yaml")).unwrap();
    (yaml, config)
}

fn try_template(sets: &[&str]) -> std::process::Output {
    let mut cmd = tool("helm");
    // The release's namespace named, whatever the kube context says.
    cmd.args(["template", "x", "--namespace", "default"]).arg(chart());
    for set in sets {
        cmd.args(["--set", set]);
    }
    cmd.output().unwrap()
}

/// The agent reloads its config: a config change must not roll its pods (that would restart the tmux container and
/// kill every harness of the node).
#[test]
fn a_config_change_does_not_roll_the_agent_pods() {
    let pod_template = |extra: &[&str]| {
        let mut values = vec!["--set", "bridge.enabled=false"];
        values.extend(extra);
        let rendered = template("ws", "worksession", &values);
        let daemonset = rendered
            .split("\n---")
            .find(|doc| doc.contains("kind: DaemonSet"))
            .expect("the agent DaemonSet")
            .to_string();
        daemonset[daemonset.find("  template:").expect("a pod template")..].to_string()
    };
    let before = pod_template(&[]);
    let after = pod_template(&["--set", "agent.config.defaults.resumeProbeSeconds=7"]);
    assert_eq!(before, after, "the agent's pod template changed with its config");
    let config = template(
        "ws",
        "worksession",
        &["--set", "bridge.enabled=false", "--set", "agent.config.defaults.resumeProbeSeconds=7"],
    );
    assert!(config.contains("resumeProbeSeconds: 7"), "the ConfigMap carries the change");
}

/// The harnesses' own credentials (a Secret named in the values) reach the `tmux` container's environment and never the
/// agent's; the cluster credential reaches the agent's container only.
#[test]
fn the_harnesses_credentials_reach_the_tmux_container_only() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let rendered = template(
        "ws",
        "worksession",
        &["--set", "bridge.enabled=false", "--set", "agent.tmux.credentialsSecret=claude-api-key"],
    );
    let doc = rendered.split("\n---").find(|doc| doc.contains("kind: DaemonSet")).expect("the agent DaemonSet");
    let daemonset: DaemonSet = serde_yaml_ng::from_str(doc).unwrap();
    let pod = daemonset.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.automount_service_account_token, Some(false), "no token by default");
    let container = |name: &str| pod.containers.iter().find(|c| c.name == name).cloned().unwrap();
    let secrets = |name: &str| -> Vec<String> {
        let from = container(name).env_from.unwrap_or_default();
        from.into_iter().filter_map(|f| f.secret_ref.map(|r| r.name)).collect()
    };
    assert_eq!(secrets("tmux"), ["claude-api-key"], "the harnesses' environment");
    assert!(secrets("agent").is_empty(), "never the agent's");
    let token = "/var/run/secrets/kubernetes.io/serviceaccount";
    let mounts = |name: &str| -> Vec<String> {
        container(name).volume_mounts.unwrap_or_default().into_iter().map(|m| m.mount_path).collect()
    };
    assert!(mounts("agent").iter().any(|m| m == token) && !mounts("tmux").iter().any(|m| m == token));
    let without = template("ws", "worksession", &["--set", "bridge.enabled=false"]);
    assert!(!without.contains("envFrom"), "no Secret named: none mounted");
}

/// With rooms (the default) the agent config gives each session a uid from the values' range,
/// entered by the image's binary; the tmux container runs as root holding only SETUID and SETGID, the agent's only
/// CHOWN, DAC_OVERRIDE and FOWNER. With rooms off both run as runAsUser with no capability, as before.
#[test]
fn rooms_give_each_harness_its_own_user_and_each_container_only_what_it_needs() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let render = |values: &[&str]| {
        let mut all = vec!["--set", "bridge.enabled=false"];
        all.extend(values);
        let rendered = template("ws", "worksession", &all);
        let (_, config) = agent_config(&rendered);
        let doc = rendered.split("\n---").find(|doc| doc.contains("kind: DaemonSet")).unwrap();
        let daemonset: DaemonSet = serde_yaml_ng::from_str(doc).unwrap();
        (config, daemonset.spec.unwrap().template.spec.unwrap())
    };
    let security = |pod: &k8s_openapi::api::core::v1::PodSpec, name: &str| {
        let c = pod.containers.iter().find(|c| c.name == name).unwrap().security_context.clone().unwrap();
        let caps = c.capabilities.unwrap();
        (c.run_as_user, caps.add.unwrap_or_default(), caps.drop.unwrap_or_default(), c.allow_privilege_escalation)
    };
    let (config, pod) = render(&["--set", "agent.rooms.firstUid=300000", "--set", "agent.rooms.count=50"]);
    let rooms = config.rooms.expect("rooms on by default");
    assert_eq!((rooms.first_uid, rooms.count), (300_000, 50));
    assert_eq!(rooms.root, std::path::Path::new("/srv/worksession/.rooms"));
    assert!(!rooms.shared, "a hostPath is the node's own");
    let (config, _) = render(&["--set", "agent.workspace.persistentVolumeClaim=shared"]);
    assert!(config.rooms.expect("rooms with a shared volume").shared, "a room is the cluster's there");
    assert_eq!(rooms.helper, std::path::Path::new("/usr/local/bin/worksession"));
    let all = vec!["ALL".to_string()];
    assert_eq!(security(&pod, "tmux"), (Some(0), vec!["SETUID".into(), "SETGID".into()], all.clone(), Some(false)));
    let agent = vec!["CHOWN".to_string(), "DAC_OVERRIDE".into(), "FOWNER".into()];
    assert_eq!(security(&pod, "agent"), (Some(0), agent, all.clone(), Some(false)));
    assert!(pod.init_containers.is_none(), "nothing to hand to runAsUser");

    let (config, pod) = render(&["--set", "agent.rooms.enabled=false"]);
    assert_eq!(config.rooms, None);
    for name in ["tmux", "agent"] {
        assert_eq!(security(&pod, name), (Some(1000), vec![], all.clone(), Some(false)), "{name}");
    }
    assert!(pod.init_containers.is_some(), "the workspace handed to runAsUser");
}

/// A key gateway's Secret is mounted in the agent's container alone (0400), never the tmux server's, where every
/// harness runs; the agent config names its file and what each room is given. A gateway without the egress proxy
/// that serves it, or without rooms, is refused.
#[test]
fn a_gateways_key_is_in_the_agents_container_alone() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let gateway = [
        "--set",
        "agent.rooms.egress.gateways[0].name=anthropic",
        "--set",
        "agent.rooms.egress.gateways[0].upstream=https://api.anthropic.com",
        "--set",
        "agent.rooms.egress.gateways[0].secret.name=anthropic-key",
        "--set",
        "agent.rooms.egress.gateways[0].secret.key=api-key",
        "--set",
        "agent.rooms.egress.gateways[0].keyEnv=ANTHROPIC_API_KEY",
    ];
    let mut values = vec!["--set", "bridge.enabled=false", "--set", "agent.rooms.egress.enabled=true"];
    values.extend(gateway);
    let rendered = template("ws", "worksession", &values);
    let gateways = agent_config(&rendered).1.rooms.unwrap().egress.unwrap().gateways;
    assert_eq!(gateways.len(), 1);
    assert_eq!(gateways[0].key_file, std::path::Path::new("/etc/worksession-gateways/anthropic/key"));
    assert_eq!(gateways[0].env(3129), [("ANTHROPIC_API_KEY".into(), gateways[0].placeholder.clone())]);
    let doc = rendered.split("\n---").find(|doc| doc.contains("kind: DaemonSet")).unwrap();
    let pod = serde_yaml_ng::from_str::<DaemonSet>(doc).unwrap().spec.unwrap().template.spec.unwrap();
    let mounts = |name: &str| -> Vec<String> {
        let container = pod.containers.iter().find(|c| c.name == name).unwrap();
        container.volume_mounts.clone().unwrap_or_default().into_iter().map(|m| m.name).collect()
    };
    assert!(mounts("agent").contains(&"gateway-anthropic".to_string()), "{:?}", mounts("agent"));
    assert!(!mounts("tmux").iter().any(|m| m.starts_with("gateway-")), "{:?}", mounts("tmux"));
    let volume = pod.volumes.unwrap().into_iter().find(|v| v.name == "gateway-anthropic").unwrap();
    let secret = volume.secret.unwrap();
    assert_eq!((secret.secret_name.as_deref(), secret.default_mode), (Some("anthropic-key"), Some(0o400)));
    assert_eq!(secret.items.unwrap()[0].path, "key");

    let mut sets = vec!["bridge.enabled=false"];
    sets.extend(gateway.iter().filter(|s| **s != "--set"));
    let out = try_template(&sets);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("agent.rooms.egress.enabled"), "{said}");
    sets.push("agent.rooms.enabled=false");
    let out = try_template(&sets);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("agent.rooms.enabled"), "without rooms: {said}");
}

/// The egress lists the platform sets reach the agent config as written: a namespace's hosts, and whether a
/// session's own widen its room's (by default they do not).
#[test]
fn a_namespaces_egress_hosts_and_the_sessions_switch_reach_the_agent_config() {
    let egress_of = |more: &[&str]| {
        let mut values = vec!["--set", "bridge.enabled=false", "--set", "agent.rooms.egress.enabled=true"];
        values.extend(more.iter().flat_map(|v| ["--set", v]));
        let rendered = template("ws", "worksession", &values);
        agent_config(&rendered).1.rooms.unwrap().egress.unwrap()
    };
    let defaults = egress_of(&[]);
    assert!(!defaults.session_hosts && defaults.namespaces.is_empty());
    let set = egress_of(&[
        "agent.rooms.egress.namespaces.team-a={pypi.org,*.pythonhosted.org}",
        "agent.rooms.egress.sessionHosts=true",
    ]);
    assert!(set.session_hosts);
    assert_eq!(set.namespaces["team-a"], ["pypi.org", "*.pythonhosted.org"]);
    let out = try_template(&["bridge.enabled=false", "agent.rooms.egress.namespaces.Team_A={pypi.org}"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("'Team_A' does not match"), "the chart's schema: {said}");
}

/// Prices and a profile's usage record, set through the chart, reach the agent config; a price that is no number of
/// dollars is refused by the chart's schema.
#[test]
fn prices_and_a_profiles_usage_reach_the_agent_config() {
    let values = [
        "--set",
        "bridge.enabled=false",
        "--set-json",
        r#"agent.config.prices={"my-gateway-model":{"input":1,"output":4,"cacheWrite":1,"cacheRead":0.1}}"#,
        "--set-json",
        r#"agent.config.harnesses.claude={"usage":{"format":"claude"}}"#,
    ];
    let config = agent_config(&template("ws", "worksession", &values)).1;
    assert_eq!(config.prices.of("my-gateway-model").map(|p| p.output), Some(4.0));
    assert_eq!(config.prices.of("claude-sonnet-4-5").map(|p| p.input), Some(3.0), "the built-in ones stay");
    assert!(config.harnesses["claude"].usage.is_some());
    let out = try_template(&["bridge.enabled=false", "agent.config.prices.m.input=lots"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("prices"), "the chart's schema: {said}");
}

/// A namespace's keys: in each listed namespace a Role to get its one Secret by name, bound to the agent, and the
/// agent config names the Secret and its variables; the name of a Secret the chart hands its own containers, in the
/// release's namespace, is refused.
#[test]
fn namespace_keys_give_the_agent_one_secret_of_each_listed_namespace() {
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let sets = [
        "--set",
        "bridge.enabled=false",
        "--set",
        "agent.rooms.namespaceKeys.namespaces={team-a,team-b}",
        "--set",
        "agent.rooms.namespaceKeys.variables={COPILOT_GITHUB_TOKEN}",
    ];
    let rendered = template("ws", "worksession", &sets);
    let docs: Vec<&str> = rendered.split("\n---").collect();
    let roles: Vec<Role> = docs
        .iter()
        .filter(|d| d.contains("\nkind: Role\n") && d.contains("namespace-keys"))
        .map(|d| serde_yaml_ng::from_str(d).unwrap())
        .collect();
    let namespaces: Vec<_> = roles.iter().map(|r| r.metadata.namespace.clone().unwrap()).collect();
    assert_eq!(namespaces, ["team-a", "team-b"]);
    for role in &roles {
        let rules = role.rules.clone().unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].verbs, ["get"]);
        assert_eq!(rules[0].resources.as_deref(), Some(&["secrets".to_string()][..]));
        assert_eq!(rules[0].resource_names.as_deref(), Some(&["worksession-harness-keys".to_string()][..]));
    }
    let bindings: Vec<RoleBinding> = docs
        .iter()
        .filter(|d| d.contains("\nkind: RoleBinding\n") && d.contains("namespace-keys"))
        .map(|d| serde_yaml_ng::from_str(d).unwrap())
        .collect();
    assert_eq!(bindings.len(), 2);
    for binding in &bindings {
        let subject = &binding.subjects.as_ref().unwrap()[0];
        assert_eq!(
            (subject.name.as_str(), subject.namespace.as_deref()),
            ("ws-worksession-agent", Some("worksession"))
        );
    }
    let keys = agent_config(&rendered).1.rooms.unwrap().namespace_keys.unwrap();
    assert_eq!(
        (keys.secret_name.as_str(), keys.variables.as_slice()),
        ("worksession-harness-keys", &["COPILOT_GITHUB_TOKEN".to_string()][..])
    );

    let out = try_template(&[
        "bridge.enabled=false",
        "agent.rooms.namespaceKeys.namespaces={default}",
        "agent.tmux.credentialsSecret=harness-credentials",
        "agent.rooms.namespaceKeys.secretName=harness-credentials",
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("agent.rooms.namespaceKeys.secretName"), "{said}");
    // A variable the room helper reads as root is refused by the chart's schema, as by the agent.
    let out = try_template(&["bridge.enabled=false", "agent.rooms.namespaceKeys.variables={LD_PRELOAD}"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("/agent/rooms/namespaceKeys/variables/0"), "{said}");
    // Without rooms every harness shares one user: refused.
    let out = try_template(&[
        "bridge.enabled=false",
        "agent.rooms.enabled=false",
        "agent.rooms.namespaceKeys.namespaces={team-a}",
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("agent.rooms.namespaceKeys needs agent.rooms.enabled"), "{said}");
}

/// A cordon moves sessions only where their conversations are on storage every node mounts: the controller is told
/// so by default exactly when the workspace is a shared volume claim, and a value set by hand wins.
#[test]
fn a_cordon_moves_sessions_only_with_shared_storage_unless_told() {
    let cordon_moves = |values: &[&str]| {
        let mut all = vec!["--set", "bridge.enabled=false"];
        all.extend(values);
        let rendered = template("ws", "worksession", &all);
        let flag = rendered.lines().find_map(|l| l.trim().strip_prefix("- --cordon-moves=")).map(String::from);
        flag.expect("the controller is told")
    };
    assert_eq!(cordon_moves(&[]), "false", "a hostPath: a move would start each conversation fresh");
    let shared = ["--set", "agent.workspace.persistentVolumeClaim=shared"];
    assert_eq!(cordon_moves(&shared), "true");
    assert_eq!(cordon_moves(&["--set", "placement.cordonMoves=true"]), "true");
    let mut told = shared.to_vec();
    told.extend(["--set", "placement.cordonMoves=false"]);
    assert_eq!(cordon_moves(&told), "false");
}

/// The node's clones lie on a volume only the agent's container mounts, rooms on or off: with rooms off a harness
/// shares the agent's user, and one that could write a clone would have the agent's next fetch act on what it
/// planted (an alternate's command run in the agent's container, a proxy handed the git token).
#[test]
fn the_nodes_clones_are_out_of_every_harness_reach() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    for rooms in ["true", "false"] {
        let rendered = template(
            "ws",
            "worksession",
            &["--set", "bridge.enabled=false", "--set", &format!("agent.rooms.enabled={rooms}")],
        );
        let (_, config) = agent_config(&rendered);
        let clones = config.workspaces.mirrors.expect("the chart names the clones' place");
        let doc = rendered.split("\n---").find(|doc| doc.contains("kind: DaemonSet")).unwrap();
        let pod = serde_yaml_ng::from_str::<DaemonSet>(doc).unwrap().spec.unwrap().template.spec.unwrap();
        // The volume each container sees the clones' place on, if any.
        let holder = |name: &str| {
            let container = pod.containers.iter().find(|c| c.name == name).unwrap();
            let mounts = container.volume_mounts.clone().unwrap_or_default();
            mounts.into_iter().find(|m| clones.starts_with(&m.mount_path)).map(|m| m.name)
        };
        let volume = holder("agent").expect("the agent's container holds its clones");
        assert_eq!(holder("tmux"), None, "rooms {rooms}: the harnesses' container sees no clone");
        let mounted_by: Vec<&str> = pod
            .containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
            .filter(|c| c.volume_mounts.iter().flatten().any(|m| m.name == volume))
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(mounted_by, ["agent"], "rooms {rooms}");
        let spec = pod.volumes.iter().flatten().find(|v| v.name == volume).unwrap();
        assert!(spec.empty_dir.is_some() && spec.host_path.is_none(), "not the node's shared disk: {spec:?}");
    }
}

/// The agent config the chart renders is one the agent accepts: tmux on the shared socket, never started by the agent
/// (tmux has its own container), and the harnesses' home the agent reads transcripts from.
#[test]
fn the_rendered_agent_config_is_valid_and_names_the_harness_home() {
    let rendered = template("ws", "worksession", &["--set", "bridge.enabled=false"]);
    let (yaml, config) = agent_config(&rendered);
    assert!(!config.tmux.start_server, "{yaml}");
    assert_eq!(config.tmux.socket.as_deref(), Some(std::path::Path::new("/run/worksession/tmux.sock")));
    assert_eq!(config.harness_home.as_deref(), Some(std::path::Path::new("/srv/worksession/.home")));
    // Clones on the node's workspace; credentials only when a Secret is named, then from its mount.
    assert_eq!(config.workspaces.mirrors.as_deref(), Some(std::path::Path::new("/var/lib/worksession/repos")));
    assert_eq!(config.workspaces.token_file, None);
    let rendered = template(
        "ws",
        "worksession",
        &["--set", "bridge.enabled=false", "--set", "agent.workspaces.credentials.existingSecret=git"],
    );
    let (_, config) = agent_config(&rendered);
    assert_eq!(config.workspaces.token_file.as_deref(), Some(std::path::Path::new("/etc/worksession-git/token")));
    let daemonset = rendered.split("\n---").find(|doc| doc.contains("kind: DaemonSet")).unwrap();
    assert!(daemonset.contains("secretName: git") && daemonset.contains("mountPath: /etc/worksession-git"));

    // Every option on: the agent takes it all (profiles with storePath and discover included).
    let values = format!("--values={}", support::repo_root().join("tests/chart/all-on.yaml").display());
    let rendered = template("ws", "worksession", &[values.as_str()]);
    let (yaml, config) = agent_config(&rendered);
    assert!(config.harnesses["otherharness"].discover.as_ref().is_some_and(|d| d.names_workdir), "{yaml}");
}

#[test]
fn chart_crds_are_the_generated_crds() {
    let chart_crds = std::fs::read(chart().join("crds/worksession.dev.yaml")).unwrap();
    let crds = std::fs::read(support::repo_root().join("crds/worksession.dev.yaml")).unwrap();
    assert!(
        chart_crds == crds,
        "charts/worksession/crds is stale: cp crds/worksession.dev.yaml charts/worksession/crds/"
    );
}

/// A stand-in for the Prometheus Operator's CRD, so that ServiceMonitors can be dry-run.
async fn install_servicemonitor_crd(client: Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
        "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                 "names": {"kind": "ServiceMonitor", "plural": "servicemonitors", "singular": "servicemonitor"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap();
    let api: Api<CustomResourceDefinition> = Api::all(client);
    api.patch(
        "servicemonitors.monitoring.coreos.com",
        &PatchParams::apply("worksession-tests").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap();
    let established = kube::runtime::wait::await_condition(
        api,
        "servicemonitors.monitoring.coreos.com",
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(WAIT, established).await.unwrap().unwrap();
}

#[tokio::test]
async fn lint_and_server_side_dry_run_with_defaults_and_every_option() {
    let ns = support::TestNamespace::new().await;
    support::install_crds(ns.client.clone()).await;
    install_servicemonitor_crd(ns.client.clone()).await;
    let all_on = support::repo_root().join("tests/chart/all-on.yaml");
    let all_on = format!("--values={}", all_on.display());
    run(tool("helm").arg("lint").arg(chart()).args(["--set", "bridge.secrets.githubSecret=x"]), None);
    run(tool("helm").arg("lint").arg(chart()).arg(&all_on), None);
    for values in [vec!["--set=bridge.secrets.githubSecret=x"], vec![all_on.as_str()]] {
        let rendered = template(&format!("r-{}", ns.name), &ns.name, &values);
        let applied =
            run(tool("kubectl").args(["apply", "--dry-run=server", "-n", &ns.name, "-f", "-"]), Some(&rendered));
        for kind in [
            "daemonset.apps",
            "deployment.apps",
            "service",
            "configmap",
            "clusterrole.rbac",
            "serviceaccount",
            "secret",
        ] {
            assert!(applied.contains(kind), "{kind} in:\n{applied}");
        }
        if values[0] == all_on {
            assert!(applied.contains("servicemonitor.monitoring.coreos.com"), "{applied}");
        }
    }
    // A value the schema forbids is refused before anything renders.
    let out = try_template(&["bridge.secrets.githubSecret=x", "agent.config.defaults.resumeProbeSeconds=301"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("resumeProbeSeconds"));
    // A volume only the tmux container mounts, inside the folder the agent's container sees too: refused.
    for (path, refused) in
        [("/srv/worksession/data", true), ("/srv/worksession/", true), ("/srv/worksessions", false), ("/data", false)]
    {
        let out = try_template(&[
            "bridge.enabled=false",
            "agent.extraVolumes[0].name=data",
            "agent.extraVolumes[0].emptyDir.medium=Memory",
            "agent.extraVolumeMounts[0].name=data",
            &format!("agent.extraVolumeMounts[0].mountPath={path}"),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(!out.status.success(), refused, "{path}: {stderr}");
        assert_eq!(stderr.contains("lies in agent.workspace.mountPath"), refused, "{path}: {stderr}");
    }
}

/// Applies the chart's ServiceAccounts, ClusterRoles and ClusterRoleBindings for real; returns (agent, bridge)
/// clients authenticated as those ServiceAccounts.
async fn chart_identities(w: &World) -> (Client, Client, Client) {
    // Short: a certificate's CN (the user name) holds at most 64 characters. The ClusterRoles it names are
    // cluster-wide, so a rerun against the same control plane re-points them at the new namespace.
    let release = "w";
    let rendered = template(release, &w.ns.name, &["--set=bridge.secrets.githubSecret=x"]);
    let rbac: Vec<String> = rendered
        .split("\n---")
        .filter(|doc| {
            ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
                .iter()
                .any(|k| doc.contains(&format!("\nkind: {k}\n")))
        })
        .map(|d| d.to_string())
        .collect();
    assert_eq!(rbac.len(), 13, "three of each: agent, bridge, labeler; and the Leases' Role and RoleBinding of two");
    run(tool("kubectl").args(["apply", "-n", &w.ns.name, "-f", "-"]), Some(&rbac.join("\n---\n")));
    let identity = |component: &str| {
        let user = format!("system:serviceaccount:{}:{release}-worksession-{component}", w.ns.name);
        support::kubeconfig_for(&user, &["system:serviceaccounts", &format!("system:serviceaccounts:{}", w.ns.name)])
    };
    let agent = support::client_for(&identity("agent")).await;
    let bridge = support::client_for(&identity("bridge")).await;
    let labeler = support::client_for(&identity("labeler")).await;
    let sessions: Api<WorkSession> = Api::all(agent.clone());
    eventually("the agent's RBAC to take effect", || async {
        sessions.list(&ListParams::default().limit(1)).await.ok()
    })
    .await;
    (agent, bridge, labeler)
}

fn forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) {
    match result {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{what}: {s:?}"),
        other => panic!("{what}: expected 403, got {other:?}"),
    }
}

#[tokio::test]
async fn chart_rbac_is_enough_for_the_scenario_and_no_more() {
    let mut w = World::new().await;
    let (agent, bridge_client, labeler) = chart_identities(&w).await;
    w.stop_agent();
    w.start_agent_as(agent.clone());
    w.start_labeler_as(labeler.clone());

    // Agent as its ServiceAccount: an unknown conversation started fresh, status, Events.
    w.send("rho", "rho-1", "first").await;
    w.create_session("rho", json!({"harnessSessionId": "ghost"})).await;
    let ev = w.await_event("rho-1", PromptPhase::Delivered).await;
    assert_eq!(ev.status.unwrap().via, Some(Via::Fresh));
    let ws = w.await_phase("rho", Phase::Running).await;
    assert_eq!(condition(&ws, "Resumed").map(|c| c.1), Some("ConversationNotFound".into()));
    let kube_events: Api<k8s_openapi::api::events::v1::Event> = w.ns.api();
    eventually("Events recorded by the agent's identity", || async {
        let list = kube_events.list(&ListParams::default()).await.ok()?;
        list.items.iter().any(|e| e.reason.as_deref() == Some("ResumeFailed")).then_some(())
    })
    .await;

    // Bridge as its ServiceAccount: a signed webhook creates the session and the event; the agent delivers it.
    let secret = b"chart-secret";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s"), secret).unwrap();
    let yaml = format!(
        "github:\n  secretFile: {}\nroutes:\n  - repository: 'octo-org/*'\n    namespace: {}\n    nodeName: {}\n    harness: standin\n    workdir: {}\n    maxSessions: 1\n",
        dir.path().join("s").display(),
        w.ns.name,
        w.node,
        w.tmux.workdir().display()
    );
    let app = support::bridge_router(&yaml, worksession::store::kube::KubeSink::new(bridge_client.clone()));
    let comment = |delivery: &str, number: u64, text: &str| {
        let payload = serde_json::to_vec(&fixtures::issue_comment("octo-org/sigma", number, "mona", text)).unwrap();
        let request = axum::http::Request::post("/webhooks/github")
            .header("x-github-event", "issue_comment")
            .header("x-github-delivery", delivery)
            .header("x-hub-signature-256", worksession::bridge::github::sign(secret, &payload))
            .body(Body::from(payload))
            .unwrap();
        app.clone().oneshot(request)
    };
    assert_eq!(comment("chart-1", 5, "from the bridge").await.unwrap().status(), 201);
    let ev = w.await_event("gh-chart-1", PromptPhase::Delivered).await;
    assert_eq!(ev.spec.session, support::work_item("octo-org/sigma", 5));
    // The route keeps one session: a second work item is ignored, counted with the bridge's own RBAC (list).
    let status = comment("chart-2", 6, "one too many").await.unwrap().status();
    assert_eq!(status, 202, "past maxSessions: ignored, not 503");

    // Labeler as its ServiceAccount: a hand-made event for a running session is labelled, wakes the agent's
    // label-selected watch and is delivered.
    w.send("rho", "rho-2", "by hand").await;
    let ev = w.await_event("rho-2", PromptPhase::Delivered).await;
    assert_eq!(ev.labels().get(worksession::api::NODE_LABEL), Some(&worksession::api::node_label_value(&w.node)));

    // The budgets: the controller lists them and writes their sums, as it does (server-side apply of the status);
    // the agent lists them and writes nothing of them.
    w.apply_budget("cap", json!({"tokens": 1_000_000_000})).await;
    let labeler_budgets: Api<WorkBudget> = Api::namespaced(labeler.clone(), &w.ns.name);
    labeler_budgets.list(&ListParams::default()).await.expect("the controller lists budgets");
    let sum = json!({"apiVersion": "worksession.dev/v1alpha1", "kind": "WorkBudget", "status": {"tokens": 0}});
    let apply = PatchParams::apply(worksession::controller::budgets::FIELD_MANAGER).force();
    labeler_budgets.patch_status("cap", &apply, &Patch::Apply(&sum)).await.expect("the controller writes a sum");
    let agent_budgets: Api<WorkBudget> = Api::namespaced(agent.clone(), &w.ns.name);
    agent_budgets.list(&ListParams::default()).await.expect("the agent lists budgets");

    // And no more than that.
    forbidden(agent_budgets.patch_status("cap", &apply, &Patch::Apply(&sum)).await, "agent writes a budget's sum");
    let raise = json!({"spec": {"tokens": 1}});
    forbidden(agent_budgets.patch("cap", &PatchParams::default(), &Patch::Merge(&raise)).await, "agent edits a budget");
    forbidden(
        labeler_budgets.patch("cap", &PatchParams::default(), &Patch::Merge(&raise)).await,
        "controller edits a budget",
    );
    let bridge_sessions: Api<WorkSession> = Api::namespaced(bridge_client.clone(), &w.ns.name);
    let status = json!({"status": {"phase": "Failed"}});
    forbidden(
        bridge_sessions.patch_status("rho", &PatchParams::default(), &Patch::Merge(&status)).await,
        "bridge patches status",
    );
    // Deleting is granted only with a route whose onClose is Delete (none here).
    forbidden(bridge_sessions.delete("rho", &Default::default()).await.map(|_| ()), "bridge deletes sessions");
    forbidden(
        Api::<WorkEvent>::namespaced(bridge_client.clone(), &w.ns.name).delete("rho-1", &Default::default()).await,
        "bridge deletes events",
    );
    forbidden(
        Api::<Secret>::namespaced(bridge_client, &w.ns.name).list(&ListParams::default()).await,
        "bridge reads secrets",
    );
    forbidden(
        Api::<Secret>::namespaced(agent.clone(), &w.ns.name).list(&ListParams::default()).await,
        "agent reads secrets",
    );
    let agent_sessions: Api<WorkSession> = Api::namespaced(agent.clone(), &w.ns.name);
    let ws: WorkSession = serde_json::from_value(json!({"metadata": {"name": "nope"}, "spec": {"workItem": "nope", "nodeName": "n", "harness": "h", "workdir": "/w"}})).unwrap();
    forbidden(agent_sessions.create(&PostParams::default(), &ws).await, "agent creates sessions");
    forbidden(agent_sessions.delete("rho", &Default::default()).await, "agent deletes sessions");
    // The agent renews its own Lease in the release's namespace, and nothing else there.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(agent.clone(), &w.ns.name);
    eventually("the agent's Lease, renewed with its own identity", || async {
        leases.get_opt(&worksession::agent::lease::lease_name(&w.node)).await.ok().flatten()
    })
    .await;
    forbidden(leases.list(&ListParams::default()).await.map(|_| ()), "agent lists Leases");
    let labeler_sessions: Api<WorkSession> = Api::namespaced(labeler.clone(), &w.ns.name);
    // The controller binds sessions (it lists and patches them) but deletes none and creates none.
    forbidden(labeler_sessions.delete("rho", &Default::default()).await.map(|_| ()), "controller deletes sessions");
    forbidden(labeler_sessions.create(&PostParams::default(), &ws).await, "controller creates sessions");
    let labeler_events: Api<WorkEvent> = Api::namespaced(labeler.clone(), &w.ns.name);
    forbidden(
        labeler_events.patch_status("rho-2", &PatchParams::default(), &Patch::Merge(&status)).await,
        "labeler patches event status",
    );
    // It deletes an unlabelled event whose session has not existed for 10 minutes, and writes none.
    let made: WorkEvent =
        serde_json::from_value(json!({"metadata": {"name": "nope"}, "spec": {"session": "rho", "prompt": "x"}}))
            .unwrap();
    forbidden(labeler_events.create(&PostParams::default(), &made).await, "labeler creates events");
    forbidden(
        Api::<Secret>::namespaced(labeler, &w.ns.name).list(&ListParams::default()).await,
        "labeler reads secrets",
    );
}

/// Every key of the values schema is in the values reference, docs/helm-values.md (linked from the README's docs
/// index and from docs/install.md).
#[test]
fn values_reference_documents_every_value() {
    fn leaves(node: &serde_json::Value, prefix: String, out: &mut Vec<String>) {
        match node.get("properties").and_then(|p| p.as_object()) {
            Some(props) => {
                for (k, v) in props {
                    let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    leaves(v, path, out);
                }
            }
            None => out.push(prefix),
        }
    }
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap()).unwrap();
    let mut keys = Vec::new();
    leaves(&schema, String::new(), &mut keys);
    let reference = std::fs::read_to_string(support::repo_root().join("docs/helm-values.md")).unwrap();
    let missing: Vec<&String> = keys.iter().filter(|k| !reference.contains(&format!("`{k}`"))).collect();
    assert!(missing.is_empty(), "values not documented in docs/helm-values.md: {missing:?}");
    let readme = std::fs::read_to_string(support::repo_root().join("README.md")).unwrap();
    assert!(readme.contains("(docs/helm-values.md)"), "the README links the values reference");
    assert!(keys.len() > 40);
}

/// Every query of the shipped dashboard names a metric the agent or the bridge exports, each concern of the issue has
/// a panel, and the chart embeds the same dashboard.
#[test]
fn the_dashboard_queries_exported_metrics() {
    use prometheus_client::registry::Registry;
    let mut agent = Registry::with_prefix("worksession_agent");
    worksession::agent::AgentMetrics::register(&mut agent);
    let mut bridge = Registry::with_prefix("worksession_bridge");
    worksession::bridge::BridgeMetrics::register(&mut bridge);
    // The sample names each family exports: counters as `_total`, histograms as `_bucket`, `_sum`, `_count`.
    let mut exported = Vec::new();
    for registry in [&agent, &bridge] {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        for line in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let (name, kind) = line.split_once(' ').unwrap();
            match kind {
                "counter" => exported.push(format!("{name}_total")),
                "histogram" => exported.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}"))),
                _ => exported.push(name.to_string()),
            }
        }
    }
    let json = std::fs::read_to_string(chart().join("dashboards/worksession.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&json).unwrap();
    let metric = regex::Regex::new(r"worksession_[a-z_]+").unwrap();
    let mut titles = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        titles.push(panel["title"].as_str().unwrap().to_lowercase());
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let names: Vec<&str> = metric.find_iter(expr).map(|m| m.as_str()).collect();
            assert!(!names.is_empty(), "{expr}");
            for name in names {
                assert!(exported.iter().any(|e| e == name), "{name} (in {expr:?}) is not exported: {exported:?}");
            }
        }
    }
    for concern in
        ["phase", "resumed vs fresh", "resume failures", "deliveries", "reconcile errors", "latency", "bridge requests"]
    {
        assert!(titles.iter().any(|t| t.contains(concern)), "no panel for {concern}: {titles:?}");
    }
    let rendered =
        template("ws", "worksession", &["--set", "bridge.enabled=false", "--set", "grafana.dashboard.enabled=true"]);
    assert!(
        rendered.contains("worksession.json: |") && rendered.contains("worksession_agent_sessions"),
        "the chart ships it"
    );
    assert!(
        !template("ws", "worksession", &["--set", "bridge.enabled=false"]).contains("worksession.json"),
        "off by default"
    );
}
