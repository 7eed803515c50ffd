package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/policy"
)

// Sidecar listener ports on the host end of the sandbox's veth.
const (
	ProxyPort       = 3128
	TransparentPort = 15001
	DNSPort         = 53
	LLMPort         = 4000
)

// Environments a sandbox can be created in.
const (
	EnvProduction  = "production"
	EnvStaging     = "staging"
	EnvDevelopment = "development"
)

// Manager creates, enters and removes the local sandboxes of one Store.
type Manager struct {
	Store *Store
	// Binary is the airlock executable the supervisor and sidecar run (os.Executable()).
	Binary string
	// Progress gets one line per step of Create and Delete; nil discards them.
	Progress io.Writer
	// LoadCA loads or creates the TLS interception CA in a sidecar state directory and returns
	// its certificate (PEM); the sandbox's CA bundle includes it. (cmd passes the proxy's.)
	LoadCA func(stateDir string) ([]byte, error)
}

// CreateOptions say what sandbox to create.
type CreateOptions struct {
	Name string
	// PolicyFile is the policy the sidecar enforces; or Profile names a built-in profile to
	// enforce instead.
	PolicyFile string
	Profile    string
	// Environment is production, staging or development (default). Production refuses to
	// create a sandbox without kernel enforcement; the others fall back to proxy and DNS
	// filter only, with a warning.
	Environment string
	// Subnet is the IPv4 pool of the sandboxes' /30 links (DefaultSubnet when empty).
	Subnet string
	// CgroupParent holds the sandboxes' cgroups (<cgroup2 root>/airlock when empty).
	CgroupParent string
	// UpstreamDNS is the sidecar's own resolver (airlock run --upstream-dns).
	UpstreamDNS string
	Limits      Limits
	// RunArgs are extra `airlock run` flags for the sidecar.
	RunArgs []string
	// Env is the environment of the supervisor and the sidecar (credential sources, Vault,
	// SSL_CERT_FILE); the sandbox's CA bundle starts from its SSL_CERT_FILE.
	Env []string
	// ReadyTimeout bounds the wait for the sidecar's /readyz (30 s when zero).
	ReadyTimeout time.Duration
}

func (m *Manager) progressf(format string, a ...any) {
	if m.Progress != nil {
		fmt.Fprintf(m.Progress, format+"\n", a...)
	}
}

// Warning is returned by Create next to a created sandbox that runs with less than asked:
// a development or staging sandbox without kernel enforcement.
type Warning struct{ Msg string }

func (w *Warning) Error() string { return w.Msg }

// Create builds the sandbox: state file, network namespace, veth pair, cgroup, CA bundle,
// env file and resolv.conf, then the supervised sidecar, and waits until the sidecar is ready
// and its kernel programs are attached. On failure everything built so far is removed and the
// error says which step failed and why.
func (m *Manager) Create(ctx context.Context, o CreateOptions) (st *State, err error) {
	began := time.Now()
	if err := ValidateName(o.Name); err != nil {
		return nil, err
	}
	env := o.Environment
	if env == "" {
		env = EnvDevelopment
	}
	switch env {
	case EnvProduction, EnvStaging, EnvDevelopment:
	default:
		return nil, fmt.Errorf("--environment %q: use production, staging or development", env)
	}
	subnetStr := o.Subnet
	if subnetStr == "" {
		subnetStr = DefaultSubnet
	}
	subnet, err := parseSubnet(subnetStr)
	if err != nil {
		return nil, err
	}
	policyFile, profileDoc, pol, err := m.loadPolicy(o)
	if err != nil {
		return nil, err
	}
	cgParent := o.CgroupParent
	if cgParent == "" {
		root, err := ebpf.Cgroup2Root()
		if err != nil {
			return nil, fmt.Errorf("find the cgroup v2 hierarchy (give --cgroup-parent): %w", err)
		}
		cgParent = filepath.Join(root, "airlock")
	}
	if err := checkCgroup2Dir(cgParent); err != nil {
		return nil, err
	}
	hostNs, err := currentNetnsInode()
	if err != nil {
		return nil, err
	}

	unlock, err := m.Store.Lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	existing, err := m.Store.List()
	if err != nil {
		return nil, err
	}
	for _, s := range existing {
		if s.Name == o.Name {
			return nil, fmt.Errorf("sandbox %s already exists (phase %s, created %s): delete it first", o.Name, s.Phase, s.Created.Format(time.RFC3339))
		}
	}
	index, err := allocate(subnet, existing)
	if err != nil {
		return nil, err
	}
	l := linkAt(subnet, index)
	st = &State{
		Name: o.Name, Backend: "local", Phase: PhaseCreating, Created: time.Now().UTC(),
		Policy: policyFile, Profile: o.Profile, Environment: env,
		Subnet: subnet.String(), Index: index, HostAddr: l.Host.String(), SandboxAddr: l.Sandbox.String(),
		Netns: NetnsName(o.Name), HostNetns: hostNs, HostVeth: hostVethName(m.Store.Dir, o.Name),
		Cgroup: filepath.Join(cgParent, o.Name), Dir: m.Store.SandboxDir(o.Name), Limits: o.Limits,
		Binary: m.Binary, CreatorPid: os.Getpid(),
	}
	raw := rawRoutes(pol)
	for _, p := range raw {
		st.RawRoutes = append(st.RawRoutes, p.String())
	}
	if _, err := os.Stat(st.Cgroup); err == nil {
		return nil, fmt.Errorf("cgroup %s already exists: a leftover of an earlier sandbox? remove it or run `airlock sandbox reap`", st.Cgroup)
	}
	if netnsExists(st.Netns) {
		return nil, fmt.Errorf("network namespace %s already exists: a leftover of an earlier sandbox, or another state directory's sandbox of the same name", st.Netns)
	}
	// From here on every step is undone on failure; the state file, saved first, names it all.
	if err := m.Store.Save(st); err != nil {
		return nil, err
	}
	defer func() {
		var warn *Warning
		if err != nil && !errors.As(err, &warn) {
			if rerr := m.teardown(context.WithoutCancel(ctx), st); rerr != nil {
				err = errors.Join(err, fmt.Errorf("undo: %w (run `airlock sandbox reap` to retry)", rerr))
				return
			}
			_ = m.Store.Remove(st.Name)
			st = nil
		}
	}()
	last := time.Now()
	step := func(n int, what, format string, a ...any) {
		now := time.Now()
		m.progressf("  [%d/6] %-8s %s (%s)", n, what, fmt.Sprintf(format, a...), now.Sub(last).Round(100*time.Microsecond))
		last = now
	}
	if err := os.MkdirAll(st.sidecarStateDir(), 0o700); err != nil {
		return st, fmt.Errorf("create %s: %w", st.Dir, err)
	}
	if profileDoc != nil {
		if err := writeFileAtomic(policyFile, profileDoc, 0o600); err != nil {
			return st, err
		}
	}

	if err := createNetns(st.Netns); err != nil {
		return st, fmt.Errorf("step netns: %w", err)
	}
	step(1, "netns", "%s", filepath.Join(NetnsDir, st.Netns))
	if err := wireLink(st.Netns, st.HostVeth, l, raw); err != nil {
		return st, fmt.Errorf("step veth: %w", err)
	}
	routes := ""
	if len(raw) > 0 {
		routes = ", raw TCP routes " + strings.Join(st.RawRoutes, " ")
	}
	step(2, "veth", "%s %s/30 <-> %s %s/30%s", st.HostVeth, st.HostAddr, sandboxVethName, st.SandboxAddr, routes)
	if err := createCgroup(st.Cgroup, st.Limits); err != nil {
		return st, fmt.Errorf("step cgroup: %w", err)
	}
	step(3, "cgroup", "%s", st.Cgroup)

	if m.LoadCA == nil {
		return st, errors.New("step ca: Manager.LoadCA is not set")
	}
	caPEM, err := m.LoadCA(st.sidecarStateDir())
	if err != nil {
		return st, fmt.Errorf("step ca: %w", err)
	}
	base, err := baseTrust(o.Env)
	if err != nil {
		return st, fmt.Errorf("step ca: %w", err)
	}
	if err := st.writePublic(caPEM, base); err != nil {
		return st, fmt.Errorf("step files: %w", err)
	}
	step(4, "files", "env %s, CA bundle %s, resolv.conf -> %s:%d", st.EnvFile(), st.CABundle(), st.HostAddr, DNSPort)

	if st.AdminAddr, err = freeLoopbackAddr(); err != nil {
		return st, fmt.Errorf("step sidecar: %w", err)
	}
	st.SidecarArgs = sidecarArgs(st, o)
	sidecarDone, err := m.startSidecar(st, o.Env)
	if err != nil {
		return st, fmt.Errorf("step sidecar: %w", err)
	}
	if err := m.Store.Save(st); err != nil {
		return st, err
	}
	timeout := o.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	if err := m.waitSidecar(ctx, st, sidecarDone, timeout); err != nil {
		return st, fmt.Errorf("step sidecar: %w", err)
	}
	step(5, "sidecar", "pid %d (supervisor %d), proxy %s:%d, DNS :%d, model API :%d, admin %s",
		sidecarPid(st), st.SupervisorPid, st.HostAddr, ProxyPort, DNSPort, LLMPort, st.AdminAddr)

	var warn error
	st.Kernel = pinned(st.Name)
	switch {
	case st.Kernel:
		step(6, "kernel", "eBPF attached to the cgroup, pinned at %s", filepath.Join(ebpf.DefaultPinRoot, st.Name))
	case env == EnvProduction:
		return st, fmt.Errorf("step kernel: production sandboxes need kernel enforcement, and the sidecar runs without it (see %s)", st.LogFile())
	default:
		msg := fmt.Sprintf("WARN sandbox %s runs WITHOUT kernel enforcement (%s environment falls back to proxy + DNS filter only; see %s and `airlock sandbox doctor`)", st.Name, env, st.LogFile())
		step(6, "kernel", "NOT attached: %s", msg)
		warn = &Warning{Msg: msg}
	}
	st.Phase = PhaseReady
	st.CreatorPid = 0
	if err := m.Store.Save(st); err != nil {
		return st, err
	}
	m.progressf("sandbox %s ready in %s", st.Name, time.Since(began).Round(time.Millisecond))
	return st, warn
}

// loadPolicy checks the policy (or writes the profile's) and returns its absolute path.
func (m *Manager) loadPolicy(o CreateOptions) (file string, profileDoc []byte, pol *policy.Policy, err error) {
	switch {
	case o.PolicyFile != "" && o.Profile != "":
		return "", nil, nil, errors.New("give --policy or --profile, not both (a policy can extend a profile)")
	case o.PolicyFile == "" && o.Profile == "":
		return "", nil, nil, errors.New("--policy FILE or --profile NAME is required")
	case o.Profile != "":
		if !contains(policy.BuiltinNames(), o.Profile) {
			return "", nil, nil, fmt.Errorf("--profile %q: built-in profiles are %s", o.Profile, strings.Join(policy.BuiltinNames(), ", "))
		}
		// Written into the sandbox's directory once the name is known to be free.
		file := filepath.Join(m.Store.SandboxDir(o.Name), "policy.yaml")
		doc := []byte(fmt.Sprintf("apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata:\n  name: %s-%s\nspec:\n  extends: [%s]\n", o.Name, o.Profile, o.Profile))
		pol, err := policy.Parse(file, doc)
		return file, doc, pol, err
	}
	abs, err := filepath.Abs(o.PolicyFile)
	if err != nil {
		return "", nil, nil, fmt.Errorf("policy %s: %w", o.PolicyFile, err)
	}
	pol, err = policy.Load(abs)
	if err != nil {
		return "", nil, nil, err
	}
	return abs, nil, pol, nil
}

// rawRoutes are the IPv4 CIDRs of protocol tcp rules: the sandbox routes them to the host end
// of its veth, and the kernel programs allow exactly their ports. (IPv6 is not routed: the
// sandbox link is IPv4 only.)
func rawRoutes(pol *policy.Policy) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range pol.Rules() {
		if r.Protocol != policy.ProtocolTCP {
			continue
		}
		for _, c := range r.CIDRs {
			p, err := netip.ParsePrefix(c)
			if err == nil && p.Addr().Is4() {
				out = append(out, p.Masked())
			}
		}
	}
	return out
}

// sidecarArgs is the sidecar's command line (after the binary).
func sidecarArgs(st *State, o CreateOptions) []string {
	hp := func(port int) string { return net.JoinHostPort(st.HostAddr, fmt.Sprint(port)) }
	args := []string{"run",
		"--policy", st.Policy,
		"--sandbox", st.Name,
		"--environment", st.Environment,
		"--cgroup", st.Cgroup,
		"--proxy-addr", hp(ProxyPort),
		"--transparent-addr", hp(TransparentPort),
		"--dns-addr", hp(DNSPort),
		"--llm-addr", hp(LLMPort),
		"--admin-addr", st.AdminAddr,
		"--state-dir", st.sidecarStateDir(),
		"--audit-log", st.AuditLog(),
	}
	if o.UpstreamDNS != "" {
		args = append(args, "--upstream-dns", o.UpstreamDNS)
	}
	// `sandbox exec` drops every capability, CAP_NET_RAW included, so a sandboxed process
	// cannot open a packet socket even where the BPF LSM guard is unavailable.
	if !hasFlag(o.RunArgs, "packet-guard") {
		args = append(args, "--packet-guard", "best-effort")
	}
	return append(args, o.RunArgs...)
}

func hasFlag(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// freeLoopbackAddr picks a free 127.0.0.1 port for the sidecar's admin listener: loopback of
// the host namespace, which the sandbox's own loopback cannot reach.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick an admin port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startSidecar starts the first sidecar and its supervisor, both detached (their own
// sessions, output to the sandbox's log file), side by side: the supervisor adopts the running
// sidecar, so its own start-up is not on the path to a ready sandbox.
func (m *Manager) startSidecar(st *State, env []string) (sidecarDone <-chan struct{}, err error) {
	logf, err := os.OpenFile(st.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	defer logf.Close()
	start := func(args ...string) (*exec.Cmd, error) {
		cmd := exec.Command(m.Binary, args...)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		return cmd, cmd.Start()
	}
	sidecar, err := start(st.SidecarArgs...)
	if err != nil {
		return nil, fmt.Errorf("start sidecar: %w", err)
	}
	if err := writePidFile(st.sidecarPidFile(), sidecar.Process.Pid); err != nil {
		_ = sidecar.Process.Kill()
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = sidecar.Wait(); close(done) }()
	sup, err := start("sandbox", "supervise", "--state-dir", m.Store.StateRoot, "--adopt", strconv.Itoa(sidecar.Process.Pid), st.Name)
	if err != nil {
		return done, fmt.Errorf("start supervisor: %w", err)
	}
	st.SupervisorPid = sup.Process.Pid
	st.SupervisorTick, _ = procStart(st.SupervisorPid)
	// Reap them if they exit while this process still runs; once it exits they are
	// re-parented and run on.
	go func() { _ = sup.Wait() }()
	return done, nil
}

// waitSidecar waits for /readyz, or for the first sidecar to exit (its log then says why).
func (m *Manager) waitSidecar(ctx context.Context, st *State, sidecarDone <-chan struct{}, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- waitReady(ctx, st.AdminAddr, 0) }()
	select {
	case err := <-ready:
		if err == nil {
			return nil
		}
		return fmt.Errorf("%w (log: %s)", err, lastError(st.LogFile()))
	case <-sidecarDone:
		return fmt.Errorf("the sidecar did not start: %s", lastError(st.LogFile()))
	}
}

// lastError returns the sidecar's one-line reason ("airlock: ...") from the log, or the last
// log line.
func lastError(logFile string) string {
	f, err := os.Open(logFile)
	if err != nil {
		return "no log"
	}
	defer f.Close()
	var last, reason string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		last = line
		if strings.HasPrefix(line, "airlock: ") && !strings.HasPrefix(line, "airlock: supervise ") {
			reason = line
		}
	}
	if reason != "" {
		return reason
	}
	if last == "" {
		return "empty log " + logFile
	}
	return last
}

// pinned reports whether the sandbox's kernel programs are pinned (attached by its sidecar).
func pinned(name string) bool {
	entries, err := os.ReadDir(filepath.Join(ebpf.DefaultPinRoot, name))
	return err == nil && len(entries) > 0
}

// sidecarPid is the running sidecar's pid, or 0.
func sidecarPid(st *State) int {
	pid, start := readPid(st.sidecarPidFile())
	if !alive(pid, start) {
		return 0
	}
	return pid
}

// Delete stops the sandbox's sidecar gracefully (its Vault leases are revoked), kills what
// runs in its cgroup, detaches and unpins its kernel programs, and removes its namespace,
// veth, cgroup and state. Deleting a sandbox that does not exist is not an error
// (ErrNotFound is returned for the caller to mention).
func (m *Manager) Delete(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	unlock, err := m.Store.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	st, err := m.Store.Load(name)
	if err != nil {
		return err
	}
	return m.remove(ctx, st)
}

// remove tears st down and, when that worked, forgets it. The caller holds the lock.
func (m *Manager) remove(ctx context.Context, st *State) error {
	st.Phase = PhaseDeleting
	if err := m.Store.Save(st); err != nil {
		return err
	}
	if err := m.teardown(ctx, st); err != nil {
		return fmt.Errorf("delete sandbox %s: %w (state kept; `airlock sandbox delete %s` retries)", st.Name, err, st.Name)
	}
	return m.Store.Remove(st.Name)
}

// teardown removes every resource st names, each step tolerating an absent resource, and
// carries on past a failed step so that one stuck piece does not keep the others.
func (m *Manager) teardown(ctx context.Context, st *State) error {
	var errs []error
	if err := stopProcess(st.SupervisorPid, st.SupervisorTick, StopGrace+5*time.Second); err != nil {
		errs = append(errs, fmt.Errorf("stop supervisor: %w", err))
	}
	// A sidecar whose supervisor died (it gets SIGTERM then, but may be slow) or was killed.
	if pid, start := readPid(st.sidecarPidFile()); pid > 0 {
		if err := stopProcess(pid, start, StopGrace); err != nil {
			errs = append(errs, fmt.Errorf("stop sidecar: %w", err))
		}
	}
	m.progressf("  stopped   sidecar and supervisor")
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := removeCgroup(cctx, st.Cgroup); err != nil {
		errs = append(errs, err)
	}
	if err := ebpf.Remove("", st.Name); err != nil {
		errs = append(errs, fmt.Errorf("unpin kernel programs: %w", err))
	}
	m.progressf("  removed   cgroup %s, kernel pins", st.Cgroup)
	if err := deleteHostVeth(st.HostVeth, st.HostNetns, st.SupervisorPid); err != nil {
		errs = append(errs, err)
	}
	if err := deleteNetns(st.Netns); err != nil {
		errs = append(errs, err)
	}
	m.progressf("  removed   veth %s, netns %s", st.HostVeth, st.Netns)
	return errors.Join(errs...)
}

// ReapResult says what Reap removed and why.
type ReapResult struct {
	Name   string
	Reason string
	Err    error
}

// Reap removes sandboxes created more than olderThan ago, and orphaned ones whatever their age:
// half-created or half-deleted (a crashed create or delete: the store lock proves nobody is
// still working on them) and those whose supervisor is gone. It also removes cgroups that no
// state file names from the cgroup parents this store's sandboxes use.
func (m *Manager) Reap(ctx context.Context, olderThan time.Duration) ([]ReapResult, error) {
	unlock, err := m.Store.Lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	states, listErr := m.Store.List()
	var out []ReapResult
	parents := map[string]bool{}
	known := map[string]bool{}
	for _, st := range states {
		parents[filepath.Dir(st.Cgroup)] = true
		known[st.Cgroup] = true
		reason := ""
		switch {
		case st.Phase == PhaseCreating:
			reason = "half-created (its create did not finish)"
		case st.Phase == PhaseDeleting:
			reason = "half-deleted"
		case !alive(st.SupervisorPid, st.SupervisorTick):
			reason = "orphaned (its supervisor is gone)"
		case time.Since(st.Created) > olderThan:
			reason = fmt.Sprintf("older than %s (created %s)", olderThan, st.Created.Format(time.RFC3339))
		default:
			continue
		}
		out = append(out, ReapResult{Name: st.Name, Reason: reason, Err: m.remove(ctx, st)})
	}
	for parent := range parents {
		entries, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range entries {
			path := filepath.Join(parent, e.Name())
			if !e.IsDir() || known[path] || ValidateName(e.Name()) != nil {
				continue
			}
			err := removeCgroup(ctx, path)
			out = append(out, ReapResult{Name: e.Name(), Reason: "cgroup " + path + " without a state file", Err: err})
		}
	}
	return out, listErr
}
