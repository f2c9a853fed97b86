#!/usr/bin/env bash
# The k8s tier's cluster (tests/k8s/): shared/k8s-local/k8s-local.sh as the team's notes gave it (its README
# lists the traps it avoids), kept here so a clean clone has it.
# A real single-node Kubernetes (v1.20.2) on loopback, from Debian bookworm's own packages only:
# etcd-server, containerd, runc, containernetworking-plugins, golang-1.19, and the `kubernetes`
# SOURCE package (1.20.5+really1.20.2-1.1+deb12u1, which still carries the whole upstream tree with vendor/).
#   k8s-local.sh install   # apt packages (+ a deb-src entry for bookworm)
#   k8s-local.sh build     # kube-apiserver, -controller-manager, -scheduler, kubelet, kubectl -> $K8S_CACHE/bin
#   k8s-local.sh up        # etcd, apiserver, controller-manager, scheduler, containerd, kubelet; node Ready
#   k8s-local.sh image DIR NAME:TAG [CMD...]   # a directory (e.g. a debootstrap rootfs) -> image in containerd
#   k8s-local.sh smoke     # Namespace + Pod + Job, read back, logs
#   k8s-local.sh down      # stops every process it started (by pid), unmounts, removes its netns
# Everything listens on 127.0.0.1 only; pods get an eth0 that is one end of a veth pair whose other end
# stays inside the pod's own netns (an address from 127.1.0.0/16): nothing can leave the machine.
set -euo pipefail
BASE=${K8S_LOCAL_DIR:-/tmp/k8s-local}
CACHE=${K8S_CACHE:-/var/cache/k8s-local/v1.20.2}
SRCVER=1.20.5+really1.20.2-1.1+deb12u1
RUN=$BASE/run; PKI=$BASE/pki; KC=$BASE/kubeconfig; CTR_SOCK=$BASE/containerd/containerd.sock
export KUBECONFIG=$KC/admin.kubeconfig
log() { echo "[k8s-local] $*" >&2; }

install() {
  # a deb-src entry beside the machine's own Debian entry (same mirror, same suite), for the kubernetes source package
  awk 'BEGIN{RS=""; ORS="\n\n"} NR==1 {sub(/Types: deb/, "Types: deb-src"); sub(/Suites: [^\n]*/, "Suites: bookworm"); print}' \
    /etc/apt/sources.list.d/debian.sources > /etc/apt/sources.list.d/k8s-local-src.sources
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    golang-1.19-go golang-github-modern-go-reflect2-dev make rsync gcc libc6-dev \
    etcd-server containerd runc containernetworking-plugins iproute2 util-linux openssl curl python3 busybox-static >/dev/null
}

build() {
  [ -x "$CACHE/bin/kube-apiserver" ] && [ -x "$CACHE/bin/kubelet" ] && { log "binaries cached in $CACHE/bin"; return; }
  local W=$CACHE/work; rm -rf "$W"; mkdir -p "$W/gopath/src/k8s.io" "$CACHE/bin"
  (cd "$W" && apt-get source --download-only -qq "kubernetes=$SRCVER" >/dev/null)
  tar -C "$W" -xzf "$W"/kubernetes_1.20.5+really1.20.2.orig.tar.gz
  mv "$W/kubernetes-1.20.2" "$W/gopath/src/k8s.io/kubernetes"
  local K=$W/gopath/src/k8s.io/kubernetes
  # vendored reflect2 v1.0.1 does not work with Go >= 1.18; Debian ships the fixed 1.0.2
  rm -rf "$K/vendor/github.com/modern-go/reflect2"
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$K/vendor/github.com/modern-go/reflect2"
  rm -f "$K/vendor/github.com/modern-go/reflect2/go.mod"
  (cd "$K" && env PATH=/usr/lib/go-1.19/bin:$PATH GOPATH=$W/gopath GOCACHE=$W/gocache GOPROXY=off GOFLAGS= \
     KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_TREE_STATE=clean KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 \
     make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubelet cmd/kubectl" GOLDFLAGS="-s -w")
  cp "$K"/_output/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kubectl} "$CACHE/bin/"
  gcc -Os -static -o "$CACHE/bin/pause" "$K/build/pause/linux/pause.c"
  rm -rf "$W"
  log "built into $CACHE/bin"
}

start() { # name, command...
  local n=$1; shift
  "$@" >"$RUN/$n.log" 2>&1 & echo $! >"$RUN/$n.pid"
}
wait_for() { # seconds, what, command...
  local t=$1 what=$2; shift 2
  for _ in $(seq 1 $((t * 2))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  log "timed out waiting for $what"; return 1
}

pki() {
  mkdir -p "$PKI" "$KC"; cd "$PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 7 -subj /CN=k8s-local-ca 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  printf '[req]\ndistinguished_name=dn\n[dn]\n[srv]\nsubjectAltName=DNS:localhost,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.96.0.1\nextendedKeyUsage=serverAuth\n[cli]\nextendedKeyUsage=clientAuth\n' > x.cnf
  openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out a.csr -subj /CN=kube-apiserver 2>/dev/null
  openssl x509 -req -in a.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 7 -extfile x.cnf -extensions srv 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout kubelet-client.key -out k.csr -subj "/O=system:masters/CN=apiserver-kubelet-client" 2>/dev/null
  openssl x509 -req -in k.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out kubelet-client.crt -days 7 -extfile x.cnf -extensions cli 2>/dev/null
  local tok; tok=$(openssl rand -hex 16)
  printf '%s\n' "$tok-a,admin,1,\"system:masters\"" "$tok-c,system:kube-controller-manager,2" \
    "$tok-s,system:kube-scheduler,3" "$tok-n,system:node:localhost,4,\"system:nodes\"" > tokens.csv
  for u in admin:a kcm:c sched:s node:n; do
    printf 'apiVersion: v1\nkind: Config\nclusters: [{name: local, cluster: {server: "https://127.0.0.1:6443", certificate-authority: "%s"}}]\nusers: [{name: u, user: {token: "%s"}}]\ncontexts: [{name: local, context: {cluster: local, user: u}}]\ncurrent-context: local\n' \
      "$PKI/ca.crt" "$tok-${u#*:}" > "$KC/${u%%:*}.kubeconfig"
  done
  cd - >/dev/null
}

cni() {
  mkdir -p "$BASE/cni/bin" "$BASE/cni/net.d"; cp /usr/lib/cni/loopback "$BASE/cni/bin/"
  cat > "$BASE/cni/bin/k8s-local-veth" <<EOF
#!/bin/bash
set -e
cat >/dev/null
case "\$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"0.4.0","supportedVersions":["0.3.0","0.3.1","0.4.0"]}';;
ADD)
  exec 9>$BASE/cni/ipam.lock; flock 9
  n=\$(( \$(cat $BASE/cni/ipam.next 2>/dev/null || echo 0) + 1 )); echo \$n > $BASE/cni/ipam.next
  echo "\$CNI_NETNS" >> $BASE/cni/netns.list
  ip="127.1.\$(( n / 250 )).\$(( n % 250 + 2 ))"
  nsenter --net="\$CNI_NETNS" ip link add "\$CNI_IFNAME" type veth peer name "\${CNI_IFNAME}p"
  nsenter --net="\$CNI_NETNS" ip addr add "\$ip/32" dev "\$CNI_IFNAME"
  nsenter --net="\$CNI_NETNS" ip link set "\${CNI_IFNAME}p" up
  nsenter --net="\$CNI_NETNS" ip link set "\$CNI_IFNAME" up
  echo "{\"cniVersion\":\"0.4.0\",\"interfaces\":[{\"name\":\"\$CNI_IFNAME\",\"sandbox\":\"\$CNI_NETNS\"}],\"ips\":[{\"version\":\"4\",\"address\":\"\$ip/32\",\"interface\":0}]}";;
*) exit 0;;
esac
EOF
  chmod +x "$BASE/cni/bin/k8s-local-veth"
  if [ -n "${K8S_LOCAL_POD_BRIDGE:-}" ]; then
    # Sluice's addition: pods on a bridge of the caller's (made and removed by it, its address the gateway)
    # on a private range, so they reach the servers the caller binds there; no default route, no NAT:
    # nothing beyond that range.
    cp /usr/lib/cni/bridge /usr/lib/cni/host-local "$BASE/cni/bin/"
    cat > "$BASE/cni/net.d/10-k8s-local.conflist" <<EOF
{"cniVersion":"0.4.0","name":"k8s-local","plugins":[{"type":"loopback"},
 {"type":"bridge","bridge":"$K8S_LOCAL_POD_BRIDGE","isGateway":true,"ipMasq":false,"hairpinMode":false,
  "ipam":{"type":"host-local","dataDir":"$BASE/cni/ipam","ranges":[[{"subnet":"$K8S_LOCAL_POD_CIDR"}]],"routes":[]}}]}
EOF
  else
    echo '{"cniVersion":"0.4.0","name":"k8s-local","plugins":[{"type":"loopback"},{"type":"k8s-local-veth"}]}' > "$BASE/cni/net.d/10-k8s-local.conflist"
  fi
}

image() { # DIR NAME:TAG [CMD...]: the directory as a one-layer image, imported into containerd's k8s.io namespace
  local dir=$1 ref=$2; shift 2
  python3 - "$dir" "$ref" "$@" <<'EOF' | ctr -a "$CTR_SOCK" -n k8s.io images import - >/dev/null
import hashlib, io, json, sys, tarfile
src, ref, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
    t.add(src, arcname=".")
layer = layer.getvalue()
cfg = {"architecture": "amd64", "os": "linux",
       "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": cmd or None},
       "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}}
cfgb = json.dumps(cfg).encode()
out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|")
for name, data in (("layer.tar", layer), ("config.json", cfgb),
                   ("manifest.json", json.dumps([{"Config": "config.json", "RepoTags": [ref], "Layers": ["layer.tar"]}]).encode())):
    ti = tarfile.TarInfo(name); ti.size = len(data); out.addfile(ti, io.BytesIO(data))
out.close()
EOF
}

up() {
  local B=$CACHE/bin; mkdir -p "$RUN" "$BASE/etcd" "$BASE/kubelet" "$BASE/containerd"
  export CTR_SOCK=$BASE/containerd/containerd.sock
  pki; cni
  start etcd etcd --name local --data-dir "$BASE/etcd" --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
    --initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster local=http://127.0.0.1:2380
  start apiserver "$B/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 --bind-address=127.0.0.1 --secure-port=6443 \
    --advertise-address=127.0.0.1 --endpoint-reconciler-type=none --cert-dir="$BASE/apiserver" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" --client-ca-file="$PKI/ca.crt" \
    --token-auth-file="$PKI/tokens.csv" --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" --service-cluster-ip-range=10.96.0.0/16 \
    --kubelet-client-certificate="$PKI/kubelet-client.crt" --kubelet-client-key="$PKI/kubelet-client.key" \
    --kubelet-preferred-address-types=Hostname --feature-gates=TTLAfterFinished=true
  wait_for 60 apiserver "$B/kubectl" get --raw /readyz
  start controller-manager "$B/kube-controller-manager" --kubeconfig="$KC/kcm.kubeconfig" \
    --authentication-kubeconfig="$KC/kcm.kubeconfig" --authorization-kubeconfig="$KC/kcm.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=10257 --port=0 --leader-elect=false \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" --use-service-account-credentials \
    --controllers='*,-nodeipam,-cloud-node-lifecycle,-service,-route' --feature-gates=TTLAfterFinished=true
  start scheduler "$B/kube-scheduler" --kubeconfig="$KC/sched.kubeconfig" --authentication-kubeconfig="$KC/sched.kubeconfig" \
    --authorization-kubeconfig="$KC/sched.kubeconfig" --bind-address=127.0.0.1 --secure-port=10259 --port=0 --leader-elect=false
  containerd config default | sed -e "s#^root = .*#root = \"$BASE/containerd/root\"#" -e "s#^state = .*#state = \"$BASE/containerd/state\"#" \
    -e "s#address = \"/run/containerd/containerd.sock\"#address = \"$CTR_SOCK\"#" -e "s#bin_dir = .*#bin_dir = \"$BASE/cni/bin\"#" \
    -e "s#conf_dir = .*#conf_dir = \"$BASE/cni/net.d\"#" -e 's#sandbox_image = .*#sandbox_image = "localhost/pause:k8s-local"#' \
    -e 's#restrict_oom_score_adj = false#restrict_oom_score_adj = true#' > "$BASE/containerd.toml"
  start containerd containerd --config "$BASE/containerd.toml"
  wait_for 30 containerd ctr -a "$CTR_SOCK" version
  mkdir -p "$BASE/pause/rootfs"; cp "$B/pause" "$BASE/pause/rootfs/pause"; image "$BASE/pause/rootfs" localhost/pause:k8s-local /pause
  cat > "$BASE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
cgroupDriver: cgroupfs
failSwapOn: false
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: "$PKI/ca.crt"}}
authorization: {mode: Webhook}
featureGates: {TTLAfterFinished: true}
EOF
  start kubelet "$B/kubelet" --config="$BASE/kubelet.yaml" --kubeconfig="$KC/node.kubeconfig" --hostname-override=localhost \
    --container-runtime=remote --container-runtime-endpoint="unix://$CTR_SOCK" --root-dir="$BASE/kubelet" --cert-dir="$BASE/kubelet/pki"
  wait_for 120 "node Ready" sh -c "'$B/kubectl' get node localhost -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -q True"
  wait_for 60 "node untainted" sh -c "! '$B/kubectl' get node localhost -o jsonpath='{.spec.taints}' | grep -q not-ready"
  wait_for 60 "default ServiceAccount" "$B/kubectl" get sa default -n default
  log "up: KUBECONFIG=$KUBECONFIG"
}

smoke() {
  local B=$CACHE/bin; export CTR_SOCK=$BASE/containerd/containerd.sock
  mkdir -p "$BASE/smoke/bin"; cp /bin/busybox "$BASE/smoke/bin/"; for a in sh echo sleep cat id; do ln -sf busybox "$BASE/smoke/bin/$a"; done
  image "$BASE/smoke" localhost/smoke:1 /bin/sh -c "echo hello"
  "$B/kubectl" create namespace smoke
  cat <<'EOF' | "$B/kubectl" apply -f -
apiVersion: v1
kind: Pod
metadata: {name: hello, namespace: smoke}
spec:
  restartPolicy: Never
  containers: [{name: c, image: localhost/smoke:1, imagePullPolicy: Never, command: [sh, -c, "echo pod-ran; id"],
                securityContext: {runAsUser: 1000, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false}}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: hello, namespace: smoke}
spec:
  completions: 2
  parallelism: 2
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: localhost/smoke:1, imagePullPolicy: Never, command: [sh, -c, "echo job-pod-ran"]}]
EOF
  "$B/kubectl" wait -n smoke --for=condition=complete job/hello --timeout=120s
  wait_for 60 "pod Succeeded" sh -c "'$B/kubectl' get pod hello -n smoke -o jsonpath='{.status.phase}' | grep -q Succeeded"
  "$B/kubectl" logs -n smoke hello
  "$B/kubectl" logs -n smoke job/hello
  "$B/kubectl" get pod,job -n smoke -o wide
  "$B/kubectl" delete namespace smoke --wait=true
}

down() {
  [ -d "$RUN" ] || return 0
  local B=$CACHE/bin
  if [ -f "$RUN/kubelet.pid" ] && kill -0 "$(cat "$RUN/kubelet.pid")" 2>/dev/null; then
    timeout 60 "$B/kubectl" delete pods --all --all-namespaces --wait=true --grace-period=5 >/dev/null 2>&1 || true
  fi
  for n in kubelet scheduler controller-manager apiserver containerd etcd; do
    [ -f "$RUN/$n.pid" ] || continue
    local p; p=$(cat "$RUN/$n.pid")
    kill "$p" 2>/dev/null || true
    for _ in $(seq 1 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$p" 2>/dev/null || true
    rm -f "$RUN/$n.pid"
  done
  # container shims left behind (pods not deleted in time): their pids are recorded by containerd
  for f in $(find "$BASE/containerd/state" -name init.pid 2>/dev/null); do kill -9 "$(cat "$f")" 2>/dev/null || true; done
  for f in $(find "$BASE/containerd/state" -name shim.pid 2>/dev/null); do kill -9 "$(cat "$f")" 2>/dev/null || true; done
  sleep 1
  grep -o " $BASE[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  # the pods' netns that this cluster's CNI plugin saw (containerd removes them when pods are deleted)
  sort -u "$BASE/cni/netns.list" 2>/dev/null | while read -r ns; do
    [ -e "$ns" ] && { umount "$ns" 2>/dev/null || true; rm -f "$ns"; }
  done
  # kubelet 1.20 also writes to hardcoded host paths; on a machine that runs no other kubelet/containerd:
  if [ "${K8S_LOCAL_CLEAN_HOST:-0}" = 1 ]; then
    rm -rf /var/log/pods /var/log/containers /var/lib/kubelet /var/lib/cni /run/containerd
  fi
  log "down"
}

"$@"
