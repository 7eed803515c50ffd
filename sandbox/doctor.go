package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Check results.
const (
	Pass = "PASS"
	Fail = "FAIL"
	Warn = "WARN"
	Skip = "SKIP"
)

// Check is one row of `sandbox doctor`.
type Check struct {
	Name   string `json:"name"`
	Result string `json:"result"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// DoctorOptions say what the doctor checks against.
type DoctorOptions struct {
	Subnet       string // the --subnet sandboxes will use (DefaultSubnet when empty)
	CgroupParent string // the --cgroup-parent (<cgroup2 root>/airlock when empty)
	VaultAddr    string // Vault to reach, if any (VAULT_ADDR / --vault-addr)
	Runtime      string // the --runtime sandboxes will use (DefaultRuntime when empty)
}

// doctorStage is one named check of Doctor; run returns its row (Name is filled in).
type doctorStage struct {
	name string
	run  func(ctx context.Context, o DoctorOptions) Check
}

// doctorStages is the table Doctor runs, in the order of its output.
func (m *Manager) doctorStages() []doctorStage {
	return []doctorStage{
		{"privileges", m.checkPrivileges},
		{"cgroup v2", m.checkCgroup2},
		{"cgroup layout", m.checkCgroupLayout},
		{"oci runtime", m.checkRuntime},
		{"user namespaces", m.checkUserns},
		{"overlayfs", m.checkOverlay},
		{"disk", m.checkDisk},
		{"bpffs", m.checkBPFFS},
		{"kernel BPF features", m.checkBPFFeatures},
		{"packet socket guard", m.checkPacketGuard},
		{"network namespaces", m.checkNetns},
		{"subnet", m.checkSubnet},
		{"ports", m.checkPorts},
		{"state directory", m.checkStateDir},
		{"vault", m.checkVault},
	}
}

// Doctor checks what the local backend needs from this machine: privileges, cgroup v2 and the
// cgroup layout, the OCI runtime, user namespaces, overlayfs, bpffs,
// the kernel's BPF features, network namespaces and veth pairs, the sidecar ports, the subnet,
// the state directory and Vault. Every failure comes with its fix.
func (m *Manager) Doctor(ctx context.Context, o DoctorOptions) []Check {
	var out []Check
	for _, s := range m.doctorStages() {
		c := s.run(ctx, o)
		c.Name = s.name
		out = append(out, c)
	}
	return out
}

func pass(detail string) Check           { return Check{Result: Pass, Detail: detail} }
func result(r, detail, fix string) Check { return Check{Result: r, Detail: detail, Fix: fix} }
func fail(detail, fix string) Check      { return result(Fail, detail, fix) }
func warn(detail, fix string) Check      { return result(Warn, detail, fix) }
func (m *Manager) noKernel() (Check, bool) {
	if m.Kernel != nil {
		return Check{}, false
	}
	return fail("sandbox manager: Kernel is not set", "a bug in the caller: pass ebpf.Host{}"), true
}

func (m *Manager) checkPrivileges(context.Context, DoctorOptions) Check {
	if os.Geteuid() == 0 {
		return pass("running as root")
	}
	return fail(fmt.Sprintf("running as uid %d", os.Geteuid()),
		"run airlock sandbox as root (it creates namespaces, cgroups and eBPF programs)")
}

func (m *Manager) checkCgroup2(_ context.Context, o DoctorOptions) Check {
	if c, ok := m.noKernel(); ok {
		return c
	}
	root, err := m.Kernel.Cgroup2Root()
	if err != nil {
		return fail(err.Error(), "mount it: mount -t cgroup2 none /sys/fs/cgroup (or boot with systemd.unified_cgroup_hierarchy=1)")
	}
	parent := o.CgroupParent
	if parent == "" {
		parent = filepath.Join(root, "airlock")
	}
	detail := "mounted at " + root + "; sandboxes under " + parent
	if err := errors.Join(m.ops().CheckCgroup2Dir(parent), checkWritableDir(parent)); err != nil {
		return fail(detail+": "+err.Error(), "give --cgroup-parent a cgroup v2 directory this user may create children in")
	}
	return pass(detail)
}

func (m *Manager) checkBPFFS(context.Context, DoctorOptions) Check {
	if c, ok := m.noKernel(); ok {
		return c
	}
	if points, err := m.Kernel.MountPoints("bpf"); err == nil && contains(points, "/sys/fs/bpf") {
		return pass("mounted at /sys/fs/bpf")
	}
	return warn("/sys/fs/bpf is not mounted; the sidecar mounts it on first use",
		"to make it permanent: mount -t bpf bpf /sys/fs/bpf (or an fstab line)")
}

func (m *Manager) checkBPFFeatures(context.Context, DoctorOptions) Check {
	if c, ok := m.noKernel(); ok {
		return c
	}
	if err := m.Kernel.Probe(); err != nil {
		return fail(err.Error(),
			"use a kernel >= 5.15 with CONFIG_BPF_SYSCALL, CONFIG_CGROUP_BPF and BTF; production sandboxes refuse to start without it")
	}
	return pass("cgroup sock_addr, sock, skb and sockops programs; ring buffer, socket storage")
}

func (m *Manager) checkPacketGuard(context.Context, DoctorOptions) Check {
	if c, ok := m.noKernel(); ok {
		return c
	}
	active, lerr := m.Kernel.BPFLSMActive()
	switch {
	case m.Kernel.ProbePacketGuard() == nil:
		return pass("the BPF LSM program loads: packet sockets are refused in the kernel")
	case lerr == nil && !active:
		return warn("the BPF LSM is not active: packet sockets are kept out by sandbox exec dropping CAP_NET_RAW (--packet-guard best-effort)",
			"boot with lsm=...,bpf to refuse packet sockets in the kernel as well")
	}
	detail := "the kernel refuses the BPF LSM program"
	if lerr == nil {
		detail += " although the BPF LSM is active (kernel lockdown or a vendor restriction?)"
	}
	return warn(detail+": packet sockets are kept out by sandbox exec dropping CAP_NET_RAW (--packet-guard best-effort)",
		"production sandboxes work as they are; to refuse packet sockets in the kernel too, use a kernel that loads lsm_cgroup programs")
}

func (m *Manager) checkNetns(context.Context, DoctorOptions) Check {
	if err := probeNetns(); err != nil {
		return fail(err.Error(), "the kernel needs CONFIG_NET_NS and CONFIG_VETH, and airlock needs CAP_SYS_ADMIN and CAP_NET_ADMIN")
	}
	return pass("created a namespace with a veth pair and removed it")
}

func (m *Manager) checkSubnet(_ context.Context, o DoctorOptions) Check {
	subnetStr := o.Subnet
	if subnetStr == "" {
		subnetStr = DefaultSubnet
	}
	subnet, err := parseSubnet(subnetStr)
	if err != nil {
		return fail(err.Error(), "give --subnet an IPv4 prefix of /30 or wider")
	}
	if clash := routeOverlap(subnet, m.Store); clash != "" {
		return fail(fmt.Sprintf("%s overlaps %s", subnet, clash), "pick a --subnet no route of this machine uses")
	}
	return pass(subnet.String() + " is free for sandbox links")
}

func (m *Manager) checkPorts(context.Context, DoctorOptions) Check {
	if busy := wildcardListeners(); len(busy) > 0 {
		return fail("wildcard listeners on sidecar ports: "+strings.Join(busy, ", "),
			"bind that service to specific addresses, or stop it: each sidecar binds its link address on 53, 3128, 4000 and 15001")
	}
	return pass("nothing listens on *:53, *:3128, *:4000 or *:15001")
}

func (m *Manager) checkStateDir(context.Context, DoctorOptions) Check {
	if err := checkWritableDir(m.Store.Dir); err != nil {
		return fail(err.Error(), "give --state-dir a directory this user can write")
	}
	return pass(m.Store.Dir)
}

func (m *Manager) checkVault(ctx context.Context, o DoctorOptions) Check {
	if o.VaultAddr == "" {
		return result(Skip, "no VAULT_ADDR or --vault-addr: policies can only use env and file secrets", "")
	}
	if err := probeVault(ctx, o.VaultAddr); err != nil {
		return fail(err.Error(), "check VAULT_ADDR, the network path to Vault and its TLS trust (VAULT_CACERT)")
	}
	return pass(o.VaultAddr + " answers /v1/sys/health")
}

// checkWritableDir reports whether dir, or the nearest ancestor that exists (where dir would be
// created), is writable; it creates nothing.
func checkWritableDir(dir string) error {
	p := dir
	for {
		if _, err := os.Stat(p); err == nil {
			if err := unix.Access(p, unix.W_OK); err != nil {
				return fmt.Errorf("%s is not writable: %w", p, err)
			}
			return nil
		}
		if p == "/" || p == "." {
			return fmt.Errorf("%s: no existing parent", dir)
		}
		p = filepath.Dir(p)
	}
}

// probeNetns creates and removes a throw-away namespace holding both ends of a veth pair; it
// touches nothing outside that namespace.
func probeNetns() error {
	name := doctorNetnsName()
	if err := createNetns(name); err != nil {
		return err
	}
	defer deleteNetns(name)
	ns, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", name, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", name, err)
	}
	defer h.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "probe0"}, PeerName: "probe1"}
	if err := h.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth pair: %w", err)
	}
	return nil
}

func doctorNetnsName() string { return fmt.Sprintf("airlock-doctor-%d", os.Getpid()) }

// routeOverlap names a route of this namespace that overlaps subnet, other than the sandbox
// links of this store.
func routeOverlap(subnet netip.Prefix, store *Store) string {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return ""
	}
	ours := map[string]bool{}
	if states, err := store.List(); err == nil {
		for _, s := range states {
			ours[s.HostVeth] = true
		}
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		p, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		bits, _ := r.Dst.Mask.Size()
		rp := netip.PrefixFrom(p.Unmap(), bits)
		if bits == 0 || !rp.Overlaps(subnet) { // the default route overlaps everything
			continue
		}
		if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil && ours[l.Attrs().Name] {
			continue
		}
		return "route " + rp.String()
	}
	return ""
}

// wildcardListeners lists sockets bound to 0.0.0.0 or :: on the sidecar ports: they keep a
// sidecar from binding its link address.
func wildcardListeners() []string {
	ports := map[int]bool{DNSPort: true, ProxyPort: true, LLMPort: true, TransparentPort: true}
	var out []string
	for _, f := range []struct{ file, proto string }{{"/proc/net/tcp", "tcp"}, {"/proc/net/tcp6", "tcp6"}, {"/proc/net/udp", "udp"}, {"/proc/net/udp6", "udp6"}} {
		fh, err := os.Open(f.file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 {
				continue
			}
			local, state := fields[1], fields[3]
			addr, portHex, ok := strings.Cut(local, ":")
			if !ok {
				continue
			}
			port, err := strconv.ParseInt(portHex, 16, 32)
			if err != nil || !ports[int(port)] || strings.Trim(addr, "0") != "" {
				continue
			}
			if strings.HasPrefix(f.proto, "tcp") && state != "0A" { // LISTEN
				continue
			}
			out = append(out, fmt.Sprintf("%s *:%d", f.proto, port))
		}
		fh.Close()
	}
	return out
}

// probeVault asks Vault's unauthenticated health endpoint; a sealed or standby Vault counts as
// reachable but is reported.
func probeVault(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(addr, "/")+"/v1/sys/health?standbyok=true", nil)
	if err != nil {
		return fmt.Errorf("vault address %q: %w", addr, err)
	}
	// Never a proxy from the environment (http.DefaultClient would take HTTP(S)_PROXY).
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("reach vault: %w", err)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusTooManyRequests:
		return nil
	case http.StatusServiceUnavailable:
		return errors.New("vault is sealed (503)")
	case 501:
		return errors.New("vault is not initialized (501)")
	default:
		return fmt.Errorf("vault health: HTTP %d", resp.StatusCode)
	}
}
