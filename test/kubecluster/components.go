package kubecluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

func (c *Cluster) startControlPlane(ctx context.Context) error {
	pki := func(n string) string { return c.path("pki", n) }
	if err := c.start("etcd", nil, c.Bins.Path("etcd"),
		"--name=default", "--data-dir="+c.path("etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=default=http://127.0.0.1:2380", "--log-level=warn"); err != nil {
		return err
	}
	if err := c.start("kube-apiserver", nil, c.Bins.Path("kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0", "--secure-port=6443", "--advertise-address="+NodeIP,
		"--service-cluster-ip-range="+ServiceCIDR,
		"--tls-cert-file="+pki("apiserver.crt"), "--tls-private-key-file="+pki("apiserver.key"),
		"--client-ca-file="+pki("ca.crt"),
		"--service-account-key-file="+pki("sa.pub"), "--service-account-signing-key-file="+pki("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--authorization-mode=Node,RBAC", "--allow-privileged=true",
		"--kubelet-client-certificate="+pki("apiserver-kubelet-client.crt"), "--kubelet-client-key="+pki("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP", "--profiling=false", "--v=1"); err != nil {
		return err
	}
	client, err := c.apiClient()
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	if err := c.poll(ctx, "the API server", apiTimeout, func() bool { return apiReady(ctx, client) }); err != nil {
		return err
	}
	if err := c.start("kube-controller-manager", nil, c.Bins.Path("kube-controller-manager"),
		"--kubeconfig="+pki("kube-controller-manager.kubeconfig"),
		"--authentication-kubeconfig="+pki("kube-controller-manager.kubeconfig"),
		"--authorization-kubeconfig="+pki("kube-controller-manager.kubeconfig"),
		"--bind-address=127.0.0.1", "--leader-elect=false",
		"--controllers=*,-nodeipam", "--use-service-account-credentials",
		"--cluster-signing-cert-file="+pki("ca.crt"), "--cluster-signing-key-file="+pki("ca.key"),
		"--service-account-private-key-file="+pki("sa.key"), "--root-ca-file="+pki("ca.crt"),
		"--service-cluster-ip-range="+ServiceCIDR, "--profiling=false"); err != nil {
		return err
	}
	return c.start("kube-scheduler", nil, c.Bins.Path("kube-scheduler"),
		"--kubeconfig="+pki("kube-scheduler.kubeconfig"),
		"--authentication-kubeconfig="+pki("kube-scheduler.kubeconfig"),
		"--authorization-kubeconfig="+pki("kube-scheduler.kubeconfig"),
		"--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false")
}

// startNode starts containerd, kubelet and kube-proxy and waits for the node to be Ready.
func (c *Cluster) startNode(ctx context.Context) error {
	if err := c.writeNodeConfigs(); err != nil {
		return err
	}
	if err := c.start("containerd", nil, filepath.Join(c.Bins.Root, "usr/bin/containerd"), "--config", c.path("containerd.toml")); err != nil {
		return err
	}
	if err := c.poll(ctx, "containerd", apiTimeout, func() bool {
		return c.Command(ctx, filepath.Join(c.Bins.Root, "usr/bin/ctr"), "--address", containerdSock, "version").Run() == nil
	}); err != nil {
		return err
	}
	if err := c.importImages(ctx); err != nil {
		return err
	}
	if err := c.start("kubelet", nil, c.Bins.Path("kubelet"),
		"--config="+c.path("kubelet.yaml"), "--kubeconfig="+c.path("pki", "kubelet.kubeconfig"),
		"--root-dir=/var/lib/kubelet", "--hostname-override="+NodeName, "--node-ip="+NodeIP, "--v=1"); err != nil {
		return err
	}
	if err := c.start("kube-proxy", nil, c.Bins.Path("kube-proxy"), "--config="+c.path("kube-proxy.yaml"), "--v=1"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, nodeTimeout)
	defer cancel()
	if err := c.wait(ctx, "node Ready", nodeTimeout, "node/"+NodeName, "--for=condition=Ready"); err != nil {
		return err
	}
	// Pods need the default ServiceAccount (the controller-manager makes it).
	return c.poll(ctx, "the default ServiceAccount", nodeTimeout, func() bool {
		_, err := c.Kubectl(ctx, "-n", "default", "get", "serviceaccount", "default")
		return err == nil
	})
}

const containerdSock = "/run/containerd/containerd.sock"

// PauseImage is the pod sandbox image's name; it is built locally and imported.
const PauseImage = "registry.k8s.io/pause:3.10"

func (c *Cluster) writeNodeConfigs() error {
	r := c.Bins.Root
	files := map[string]string{
		"containerd.toml": fmt.Sprintf(`version = 2
root = %q
state = "/run/containerd"
[grpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, c.path("containerd"), containerdSock, c.path("opt"), PauseImage, filepath.Join(r, "usr/sbin/runc"), filepath.Join(r, "usr/lib/cni"), c.path("cni/net.d")),
		"cni/net.d/10-bridge.conflist": fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "airlock-test", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q, "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}}
]}
`, c.path("cni/ipam"), PodCIDR, podGateway),
		"kubelet.yaml": fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
tlsCertFile: %q
tlsPrivateKeyFile: %q
address: 0.0.0.0
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupRoot: %q
failCgroupV1: false
containerRuntimeEndpoint: unix://%s
podLogsDir: /var/log/pods
syncFrequency: 2s
fileCheckFrequency: 2s
protectKernelDefaults: true
clusterDomain: cluster.local
clusterDNS: [%q]
resolvConf: %q
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {"memory.available": "1Mi", "nodefs.available": "0%%", "imagefs.available": "0%%", "nodefs.inodesFree": "0%%"}
failSwapOn: false
serializeImagePulls: false
`, c.path("pki", "ca.crt"), c.path("pki", "kubelet.crt"), c.path("pki", "kubelet.key"), c.CgroupRoot, containerdSock, HostIP, c.path("resolv.conf")),
		"resolv.conf": "nameserver " + HostIP + "\n",
		"kube-proxy.yaml": fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: %q}
hostnameOverride: %s
clusterCIDR: %s
bindAddress: 0.0.0.0
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, c.path("pki", "kube-proxy.kubeconfig"), NodeName, PodCIDR),
	}
	for name, data := range files {
		if err := os.WriteFile(c.path(name), []byte(data), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}
