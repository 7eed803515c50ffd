// Package kubecluster runs a real single-node Kubernetes for airlock's tests, offline: the
// control plane, kubelet and kube-proxy of Kubernetes 1.37 and etcd 3.7 built from source
// through the wrapper module in build/ (its own go.mod, so airlock's never grows by
// Kubernetes' dependencies), and containerd, runc, the CNI plugins and nft unpacked from
// Debian packages into a private prefix. Built binaries and unpacked packages are cached in
// the repository's .cache/ keyed on versions, the Go version and the build flags.
//
// A cluster lives in network and mount namespaces of its own (held by an `unshare` process;
// every component runs under nsenter), on the range 198.19.100.0/22 (node and test hosts),
// 198.19.104.0/22 (pods) and 198.19.108.0/24 (services). Nothing listens on this machine's
// network, no host sysctl or firewall is touched, and Stop removes every process, mount and
// cgroup it made. Every image is built locally (internal/imagebuild) and imported into
// containerd: nothing is ever pulled.
package kubecluster
