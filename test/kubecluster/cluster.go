package kubecluster

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The cluster's addresses, all inside its own network namespace (198.18.0.0/15, the test
// range): the node's veth end, the other end (where tests run their upstream hosts, DNS and
// Vault), the pods' bridge range and the services' range.
const (
	NodeName    = "airlock-node"
	NodeIP      = "198.19.100.1"
	HostIP      = "198.19.101.1" // the test hosts' address, reachable from every pod
	PodCIDR     = "198.19.104.0/24"
	podGateway  = "198.19.104.1"
	ServiceCIDR = "198.19.108.0/24"
	APIServer   = "https://127.0.0.1:6443"
)

// Timeouts bound every wait on a component; nothing sleeps for a fixed time.
const (
	apiTimeout  = 2 * time.Minute
	nodeTimeout = 3 * time.Minute
)

// kubeletSysctls are the kernel settings kubelet insists on (protectKernelDefaults). Inside
// the cluster's mount namespace a file holding the value is bind-mounted over each entry
// that differs, so kubelet is content and this machine's values never change.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// Cluster is a running single-node cluster. Kubeconfig (the admin's, system:masters) works
// with Command, which runs a program inside the cluster's namespaces.
type Cluster struct {
	Bins       *Binaries
	Dir        string // state: PKI, configs, logs, containerd's root
	Kubeconfig string
	CgroupRoot string // kubelet's cgroupRoot, under which every pod lives (in each hierarchy)

	holder *exec.Cmd
	pid    int
	procs  []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// Start brings up a cluster in dir (which the caller removes afterwards) and returns it with
// its node Ready. netns, if not empty, is the path of the network namespace to run in (e.g.
// /run/netns/NAME of a test's testnet.Netns, whose sockets a test can then open); otherwise
// the cluster gets a network namespace of its own. Either way it gets a private mount
// namespace. On error everything started so far is stopped.
func Start(ctx context.Context, bins *Binaries, dir, netns string) (c *Cluster, err error) {
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	c = &Cluster{Bins: bins, Dir: dir, CgroupRoot: "/airlock-kube-" + hex.EncodeToString(id)}
	buildImages() // in the background, while the control plane boots
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	for _, d := range []string{"pki", "logs", "etcd", "containerd", "cni/net.d", "cni/ipam", "sysctl", "opt"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return c, fmt.Errorf("create state directory: %w", err)
		}
	}
	if err := c.makePKI(); err != nil {
		return c, err
	}
	if err := c.startHolder(netns); err != nil {
		return c, err
	}
	if err := c.setupNamespace(ctx); err != nil {
		return c, err
	}
	if err := c.startControlPlane(ctx); err != nil {
		return c, err
	}
	if err := c.startNode(ctx); err != nil {
		return c, err
	}
	return c, nil
}

func (c *Cluster) path(p ...string) string { return filepath.Join(append([]string{c.Dir}, p...)...) }

func (c *Cluster) makePKI() error {
	p, err := newPKI(c.path("pki"))
	if err != nil {
		return err
	}
	svcIP, _, _ := net.ParseCIDR(ServiceCIDR)
	svcIP = svcIP.To4()
	apiIP := net.IPv4(svcIP[0], svcIP[1], svcIP[2], 1)
	certs := []struct {
		name, cn string
		orgs     []string
		dns      []string
		ips      []net.IP
	}{
		{"apiserver", "kube-apiserver", nil, []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(NodeIP), apiIP}},
		{"admin", "airlock-test-admin", []string{"system:masters"}, nil, nil},
		{"kubelet", "system:node:" + NodeName, []string{"system:nodes"}, []string{NodeName}, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(NodeIP)}},
		{"kube-controller-manager", "system:kube-controller-manager", nil, nil, nil},
		{"kube-scheduler", "system:kube-scheduler", nil, nil, nil},
		{"kube-proxy", "system:kube-proxy", nil, nil, nil},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil},
	}
	for _, ct := range certs {
		if err := p.issue(ct.name, ct.cn, ct.orgs, ct.dns, ct.ips); err != nil {
			return err
		}
	}
	if err := p.serviceAccountKeys(); err != nil {
		return err
	}
	for _, n := range []string{"admin", "kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy"} {
		f, err := p.kubeconfig(n, APIServer)
		if err != nil {
			return err
		}
		if n == "admin" {
			c.Kubeconfig = f
		}
	}
	return nil
}

// startHolder starts the process that holds the cluster's network and mount namespaces, and
// waits for it to be in them.
func (c *Cluster) startHolder(netns string) error {
	holder := []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", "echo ready; exec sleep infinity"}
	if netns == "" {
		holder = append([]string{"unshare", "--net", "--"}, holder...)
	} else {
		holder = append([]string{"nsenter", "--net=" + netns, "--"}, holder...)
	}
	cmd := exec.Command(holder[0], holder[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("start namespace holder: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start namespace holder: %w", err)
	}
	c.holder, c.pid = cmd, cmd.Process.Pid
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		return fmt.Errorf("namespace holder did not start: %q %v", line, err)
	}
	return nil
}

// Command returns a command running name inside the cluster's network and mount namespaces
// with the admin kubeconfig and the cluster's binaries on PATH.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(c.pid), "-n", "-m", "--", name}, args...)...)
	cmd.Env = append(os.Environ(), c.Bins.Env()...)
	cmd.Env = append(cmd.Env, "KUBECONFIG="+c.Kubeconfig)
	return cmd
}

// Kubectl runs kubectl with args in the cluster and returns its combined output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	out, err := c.Command(ctx, c.Bins.Path("kubectl"), args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// sh runs a shell script inside the namespaces.
func (c *Cluster) sh(ctx context.Context, script string) error {
	out, err := c.Command(ctx, "sh", "-ec", script).CombinedOutput()
	if err != nil {
		return fmt.Errorf("run in cluster namespace: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupNamespace makes the node's network and the private mounts: tmpfs over the fixed host
// paths components write to whatever their configuration says, a bpffs of its own (this
// machine's, if mounted, is unmounted in the namespace only), the
// sysctl files, and the cgroup root in every hierarchy. The bpffs and the cgroup mounts are
// made shared inside the namespace (the sidecar's hostPaths propagate from the host); the
// namespace was created private, so nothing propagates to or from this machine's mounts.
func (c *Cluster) setupNamespace(ctx context.Context) error {
	var b strings.Builder
	fmt.Fprintf(&b, `ip link set lo up
ip link add node0 type veth peer name hosts0
ip addr add %s/24 dev node0
ip addr add %s/24 dev hosts0
ip link set node0 up
ip link set hosts0 up
ip route add %s dev node0
echo 1 > /proc/sys/net/ipv4/ip_forward
for d in /run /var/lib /var/log; do mount -t tmpfs -o mode=0755 airlock-kube "$d"; done
mkdir -p /run/containerd /var/lib/kubelet /var/log/pods
while mountpoint -q /sys/fs/bpf; do umount -l /sys/fs/bpf; done
mount -t bpf bpf /sys/fs/bpf
mount --make-shared /sys/fs/bpf
mount --make-rshared /sys/fs/cgroup
`, NodeIP, HostIP, ServiceCIDR)
	for key, want := range kubeletSysctls {
		have, err := os.ReadFile(filepath.Join("/proc/sys", key))
		if err != nil || strings.TrimSpace(string(have)) == want {
			continue
		}
		f := c.path("sysctl", strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(f, []byte(want+"\n"), 0o644); err != nil {
			return fmt.Errorf("write sysctl stand-in: %w", err)
		}
		fmt.Fprintf(&b, "mount --bind %s /proc/sys/%s\n", f, key)
	}
	if err := c.sh(ctx, b.String()); err != nil {
		return err
	}
	for _, h := range cgroupHierarchies() {
		if err := os.Mkdir(filepath.Join(h, c.CgroupRoot), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup root: %w", err)
		}
		// A new v1 cpuset starts empty and takes no task: give it its parent's CPUs and nodes.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(h, c.CgroupRoot, f), v, 0o644); err != nil {
					return fmt.Errorf("set %s of the cgroup root: %w", f, err)
				}
			}
		}
	}
	return nil
}

// cgroupHierarchies lists the mounted cgroup hierarchies (v1 controllers and the unified one).
func cgroupHierarchies() []string {
	var root syscall.Statfs_t
	if syscall.Statfs("/sys/fs/cgroup", &root) == nil && root.Type == 0x63677270 {
		return []string{"/sys/fs/cgroup"} // pure cgroup v2
	}
	var out []string
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		var st syscall.Statfs_t
		if e.IsDir() && syscall.Statfs(p, &st) == nil && (st.Type == 0x27e0eb || st.Type == 0x63677270) {
			out = append(out, p)
		}
	}
	return out
}

// start runs bin with args in the namespaces, logging to logs/name.log.
func (c *Cluster) start(name string, env []string, bin string, args ...string) error {
	log, err := os.Create(c.path("logs", name+".log"))
	if err != nil {
		return fmt.Errorf("create %s log: %w", name, err)
	}
	cmd := c.Command(context.Background(), bin, args...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: log}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.procs = append(c.procs, p)
	return nil
}

// Log returns the last n bytes of component name's log, for failure messages.
func (c *Cluster) Log(name string, n int64) string {
	f, err := os.Open(c.path("logs", name+".log"))
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// exited returns the name of a component that has exited, if any.
func (c *Cluster) exited() string {
	for _, p := range c.procs {
		select {
		case <-p.done:
			return p.name
		default:
		}
	}
	return ""
}

// poll calls ok every 500ms until it returns true, a component exits, or timeout passes.
// Polling is how another process's readiness is observed here; it is bounded.
func (c *Cluster) poll(ctx context.Context, what string, timeout time.Duration, ok func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		if ok() {
			return nil
		}
		if name := c.exited(); name != "" {
			return fmt.Errorf("waiting for %s: %s exited:\n%s", what, name, c.Log(name, 3000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// Apply runs kubectl apply -f - with manifest.
func (c *Cluster) Apply(ctx context.Context, manifest string) (string, error) {
	cmd := c.Command(ctx, c.Bins.Path("kubectl"), "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl apply: %w", err)
	}
	return string(out), nil
}

// WaitPod waits until the pod is Ready.
func (c *Cluster) WaitPod(ctx context.Context, ns, name string) error {
	err := c.wait(ctx, "pod "+ns+"/"+name+" Ready", nodeTimeout, "-n", ns, "pod/"+name, "--for=condition=Ready")
	if err != nil {
		desc, _ := c.Kubectl(ctx, "-n", ns, "describe", "pod", name)
		return fmt.Errorf("%w\n%s\nkubelet:\n%s", err, desc, c.Log("kubelet", 3000))
	}
	return nil
}

// wait runs `kubectl wait` with args until it succeeds, a component exits, or timeout passes.
// One kubectl watches the object where a poll would start a kubectl every half second (a
// cost on 2 cores with three clusters side by side). A wait that fails early (the object
// not there yet, a watch cut) is started again at the next tick.
func (c *Cluster) wait(ctx context.Context, what string, timeout time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel() // ends a kubectl still waiting
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	args = append([]string{"wait", "--timeout=" + timeout.String()}, args...)
	for {
		done := make(chan error, 1)
		go func() {
			_, err := c.Kubectl(ctx, args...)
			done <- err
		}()
		err := c.untilDone(ctx, what, tick, done)
		if err == nil {
			return nil
		}
		if errors.Is(err, errGaveUp) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// errGaveUp marks a wait that must not be started again: a component exited, or the time
// is up.
var errGaveUp = errors.New("gave up")

// untilDone waits for done (a kubectl wait's result), checking at every tick that no
// component has exited.
func (c *Cluster) untilDone(ctx context.Context, what string, tick *time.Ticker, done <-chan error) error {
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if name := c.exited(); name != "" {
				return fmt.Errorf("%w waiting for %s: %s exited:\n%s", errGaveUp, what, name, c.Log(name, 3000))
			}
		case <-ctx.Done():
			return fmt.Errorf("%w waiting for %s: %w", errGaveUp, what, ctx.Err())
		}
	}
}
