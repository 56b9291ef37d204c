# scripts/testenv-node.sh: the one-node cluster of `scripts/testenv up --node`, sourced by scripts/testenv.
#
# Besides the API server and etcd: containerd (Debian's, with runc) on a socket in the state folder, a bridge CNI
# network, a kubelet, kube-scheduler, kube-controller-manager and kube-proxy, all from the pinned Kubernetes module.
# Everything lives in the state folder but what a node cannot avoid sharing with the machine: the bridge interface,
# kube-proxy's iptables rules, the kubelet's cgroups and ports. So one node runs per machine; NODE_CLAIM says whose.
# What each setting is for, and what this machine needed, is in ../shared/guides/testenv.md ("A real node").

KUBELET_PORT=10250
KUBELET_HEALTHZ_PORT=10248

# node_claim DIR: makes this state folder the machine's node, refusing while another live one holds it.
node_claim() {
  local dir=$1 other
  (($(id -u) == 0)) || die "up --node: a node needs root (containerd, cgroups, a bridge)"
  if [[ -f $NODE_CLAIM ]]; then
    other=$(cat "$NODE_CLAIM")
    # A node whose owner just exited takes some seconds to go down: wait for it rather than fail.
    local i
    for ((i = 0; i < 600; i++)); do
      node_live "$other" || break
      ((i % 100)) || say "up: waiting for the node in $other to go down"
      sleep 0.1
    done
    if node_live "$other"; then
      die "up --node: a node is already up on this machine (state in $other); one node per machine: 'scripts/testenv down $other'"
    fi
    say "up: taking over from a node that is gone ($other)"
    # Its processes died without `down` (a killed session, a reboot): remove what they left.
    if [[ -d $other ]]; then cmd_down "$other"; fi
    node_leftovers
  fi
  echo "$dir" >"$NODE_CLAIM"
  touch "$dir/node"
}

# node_live DIR: whether any process of the node in DIR still runs.
node_live() {
  local dir=$1 name
  [[ -d $dir ]] || return 1
  for name in kube-apiserver etcd containerd kubelet; do
    [[ -f $dir/$name.pid ]] && running "$dir" "$(cat "$dir/$name.pid")" && return 0
  done
  return 1
}

# The pods' bridge, made before the API server so that it can listen on the gateway address (the bridge plugin
# adopts an existing bridge of its name).
node_bridge() {
  ip link show "$NODE_BRIDGE" >/dev/null 2>&1 || ip link add "$NODE_BRIDGE" type bridge || return 1
  ip addr replace "$NODE_GATEWAY/${NODE_POD_RANGE#*/}" dev "$NODE_BRIDGE" || return 1
  ip link set "$NODE_BRIDGE" up || return 1
  sysctl -qw net.ipv4.ip_forward=1 || return 1
}

# node_up DIR [IMAGE...]: starts containerd, imports the images, starts the node's components, waits for Ready.
node_up() {
  local dir=$1; shift
  local images=("$@") kc=$dir/admin.kubeconfig
  mkdir -p "$dir/containerd/root" "$dir/containerd/state" "$dir/cni" "$dir/kubelet" "$dir/pod-logs" "$dir/images"

  new_cert "$dir" kubelet-client client-ca "/O=system:nodes/CN=system:node:$NODE_NAME"
  new_cert "$dir" kubelet serving-ca "/CN=$NODE_NAME" "DNS:$NODE_NAME,IP:$NODE_GATEWAY,IP:127.0.0.1"
  write_kubeconfig "$dir" "$dir/kubelet.kubeconfig" "system:node:$NODE_NAME" kubelet-client

  # restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE; without it every sandbox fails in runc
  # ("can't get final child's PID from pipe: EOF"). Network namespaces are mounted in the state folder, so that
  # `down` finds them with everything else it unmounts.
  cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/worksession-pause:1"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni"
EOF
  containerd --config "$dir/containerd.toml" >"$dir/containerd.log" 2>&1 </dev/null &
  echo $! >"$dir/containerd.pid"
  local i
  for ((i = 0; i < 100; i++)); do
    ctr --address "$dir/containerd.sock" version >/dev/null 2>&1 && break
    kill -0 "$(cat "$dir/containerd.pid")" 2>/dev/null || { tail -n 20 "$dir/containerd.log" >&2; return 1; }
    sleep 0.1
  done
  ctr --address "$dir/containerd.sock" version >/dev/null || { tail -n 20 "$dir/containerd.log" >&2; return 1; }

  "$(dirname "$(realpath "$0")")/image" pause --out "$dir/images/pause.tar" || return 1
  if ((${#images[@]} == 0)); then
    "$(dirname "$(realpath "$0")")/image" build --out "$dir/images/worksession.tar" || return 1
    images=("$dir/images/worksession.tar")
  fi
  local image
  for image in "$dir/images/pause.tar" "${images[@]}"; do
    step "import $(basename "$image")" node_import "$dir" "$image"
  done

  cat >"$dir/cni/10-worksession.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "worksession-testenv",
  "plugins": [
    {"type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$NODE_POD_RANGE", "gateway": "$NODE_GATEWAY"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$dir/cni-ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

  # cgroup v1 here (failCgroupV1: false), no systemd (cgroupfs), swap may be on. Eviction thresholds are low so a
  # nearly full disk on a test machine does not evict the pods under test.
  cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$dir/containerd.sock
port: $KUBELET_PORT
healthzPort: $KUBELET_HEALTHZ_PORT
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
address: $NODE_GATEWAY
tlsCertFile: $dir/kubelet.crt
tlsPrivateKeyFile: $dir/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $dir/client-ca.crt}
authorization: {mode: AlwaysAllow}
podLogsDir: $dir/pod-logs
resolvConf: /etc/resolv.conf
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# ConfigMap volumes follow their ConfigMap at the pod's next sync: every 10 s here, not every minute.
syncFrequency: 10s
EOF
  "$NODE_BIN_DIR/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
    --root-dir "$dir/kubelet" --hostname-override "$NODE_NAME" --node-ip "$NODE_GATEWAY" --v=1 \
    >"$dir/kubelet.log" 2>&1 </dev/null &
  echo $! >"$dir/kubelet.pid"

  "$NODE_BIN_DIR/kube-controller-manager" --kubeconfig "$kc" --authentication-kubeconfig "$kc" \
    --authorization-kubeconfig "$kc" --leader-elect=false --secure-port 0 \
    --service-account-private-key-file "$dir/sa.key" --root-ca-file "$dir/serving-ca.crt" \
    --use-service-account-credentials=false --service-cluster-ip-range "$SERVICE_RANGE" --v=1 \
    >"$dir/kube-controller-manager.log" 2>&1 </dev/null &
  echo $! >"$dir/kube-controller-manager.pid"
  "$NODE_BIN_DIR/kube-scheduler" --kubeconfig "$kc" --authentication-kubeconfig "$kc" \
    --authorization-kubeconfig "$kc" --leader-elect=false --secure-port 0 --v=1 \
    >"$dir/kube-scheduler.log" 2>&1 </dev/null &
  echo $! >"$dir/kube-scheduler.pid"
  # kube-proxy makes the `kubernetes` Service (SERVICE_IP:443) reach the API server from pods.
  "$NODE_BIN_DIR/kube-proxy" --kubeconfig "$kc" --hostname-override "$NODE_NAME" --proxy-mode iptables \
    --cluster-cidr "$NODE_POD_RANGE" --conntrack-max-per-core 0 --healthz-bind-address 127.0.0.1:10256 \
    --metrics-bind-address 127.0.0.1:10249 --v=1 \
    >"$dir/kube-proxy.log" 2>&1 </dev/null &
  echo $! >"$dir/kube-proxy.pid"

  node_ready "$dir" 120
}

# node_import DIR FILE: an OCI archive into the node's containerd, under the name the kubelet asks for
# (`worksession:dev` is docker.io/library/worksession:dev to Kubernetes), replacing an older image of that name.
node_import() {
  local dir=$1 file=$2 ref name
  local ctr=(ctr --address "$dir/containerd.sock" -n k8s.io)
  ref=$(tar -xOf "$file" index.json | python3 -c 'import json,sys; print(json.load(sys.stdin)["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])')
  "${ctr[@]}" images import "$file"
  name=$ref
  [[ $name == */* ]] || name=docker.io/library/$name
  [[ ${name%%/*} == *.* || ${name%%/*} == localhost ]] || name=docker.io/$name
  if [[ $name != "$ref" ]]; then
    "${ctr[@]}" images tag --force "$ref" "$name"
    "${ctr[@]}" images rm "$ref"
  fi
  # Not `grep -q`: it would close the pipe early, and pipefail would count ctr's SIGPIPE as a failed import.
  "${ctr[@]}" images ls -q | grep -x "$name" >/dev/null
}

# node_ready DIR SECONDS: the node registered, Ready, and without the not-ready taint (the node lifecycle
# controller removes it), so pods can be scheduled.
node_ready() {
  local dir=$1 secs=$2 i ready taints
  for ((i = 0; i < secs * 2; i++)); do
    local name
    for name in kubelet kube-controller-manager kube-scheduler kube-proxy containerd; do
      kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null || { say "$name exited:"; tail -n 30 "$dir/$name.log" >&2; return 1; }
    done
    ready=$(KUBECONFIG=$dir/admin.kubeconfig "$BIN_DIR/kubectl" get node "$NODE_NAME" \
      -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
    taints=$(KUBECONFIG=$dir/admin.kubeconfig "$BIN_DIR/kubectl" get node "$NODE_NAME" \
      -o 'jsonpath={.spec.taints[*].key}' 2>/dev/null || true)
    if [[ $ready == True && $taints != *not-ready* ]]; then return 0; fi
    sleep 0.5
  done
  say "node $NODE_NAME not Ready after ${secs}s (Ready=$ready, taints: $taints); kubelet log:"
  tail -n 30 "$dir/kubelet.log" >&2
  return 1
}

# node_down DIR: stops the node's components, the pods' processes, and removes what they left on the machine.
node_down() {
  local dir=$1 name
  # The kubelet first, or it restarts what is stopped next.
  for name in kubelet kube-scheduler kube-controller-manager kube-proxy; do stop "$dir" "$name"; done
  if [[ -S $dir/containerd.sock ]]; then
    local ctr=(ctr --address "$dir/containerd.sock" -n k8s.io) task
    for task in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
      "${ctr[@]}" tasks kill -a -s SIGKILL "$task" >/dev/null 2>&1 || true
    done
    for task in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
      "${ctr[@]}" tasks delete -f "$task" >/dev/null 2>&1 || true
    done
  fi
  stop "$dir" containerd
  pkill -9 -f "containerd-shim-runc-v2 .*-address $dir/containerd.sock" 2>/dev/null || true
  # Every mount under the state folder, deepest first: volumes, container root file systems, network namespaces.
  local mnt
  for mnt in $(awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
    umount -l "$mnt" 2>/dev/null || true
  done
  if [[ -f $NODE_CLAIM && $(cat "$NODE_CLAIM") == "$dir" ]]; then
    node_leftovers
    rm -f "$NODE_CLAIM"
  fi
  say "down: node $NODE_NAME stopped"
}

# What a node leaves on the machine outside its folder: pods' processes whose containerd died without stopping them
# (the kubelet's cgroup tree is the one node's), the bridge and kube-proxy's iptables rules.
node_leftovers() {
  local procs
  for procs in $(find /sys/fs/cgroup/pids/kubepods /sys/fs/cgroup/kubepods -name cgroup.procs 2>/dev/null); do
    xargs -r kill -9 <"$procs" 2>/dev/null || true
  done
  ip link del "$NODE_BRIDGE" 2>/dev/null || true
  "$NODE_BIN_DIR/kube-proxy" --cleanup >/dev/null 2>&1 || true
}
