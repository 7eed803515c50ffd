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
	"path/filepath"
	"strings"
	"sync"
	"time"

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
	// durable is false for a sandbox that lives for one command (State.ephemeral): a new
	// CA's files need not be fsynced.
	LoadCA func(stateDir string, durable bool) ([]byte, error)
	// Kernel is the kernel enforcement's pins, probes and mounts (ebpf.Host,
	// passed in by cmd/airlock); Create, Delete, Reap, Doctor and ExecInPlace need it.
	Kernel Kernel
	// Images gets images ready for sandboxes created with an image (sandbox/image's Store,
	// passed in by cmd/airlock); nil refuses CreateOptions.Image.
	Images ImageSource

	// Archive, when set, is called by Delete and Reap once a sandbox is torn down and before
	// its directory goes (the sidecar has written its final usage record there): cmd keeps
	// the sandbox's bill in the state directory's usage archive. An error is reported on
	// Progress, never stops the delete.
	Archive func(st *State) error

	// RunSidecar, when set, starts the sidecar of a sandbox made for one command (exec
	// --ephemeral: CreateOptions.OnceProcess) inside this process, from the arguments a sidecar
	// process would get (`run ...`), its log and audit lines to log; nil starts a process of
	// its own. (cmd/airlock passes its `airlock run`.) The process lives exactly as long as the
	// sandbox, so one start-up of the airlock binary less is on the path of every tool call.
	RunSidecar func(args []string, log io.Writer) (HereSidecar, error)

	// host makes the changes to this machine; nil means linuxHost (tests put a fake here).
	host hostOps

	// hereMu guards here: the supervisors running as goroutines of this process, by sandbox.
	hereMu sync.Mutex
	here   map[string]*hereSupervisor
}

// ops is the manager's hostOps.
func (m *Manager) ops() hostOps {
	if m.host == nil {
		return linuxHost{}
	}
	return m.host
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
	// Limits are the container's; zero fields take the defaults (DefaultMemory, DefaultPids).
	Limits Limits
	// Runtime is the OCI runtime: runc (default), crun or a path.
	Runtime string
	// Mounts are host paths the sandbox sees (--mount SRC:DST[:ro|rw]).
	Mounts []Mount
	// Workdir is the private working directory and the commands' cwd (DefaultWorkdir when
	// empty); a Mount at the same path takes its place.
	Workdir string
	// Network is NetworkSidecar (default) or NetworkNone (loopback only).
	Network string
	// Image is the image the root filesystem is built from (create --image): an OCI layout
	// directory, an image tarball or a registry reference; the Manager's Images gets it.
	// Empty: the host's read-only view. With an image, an empty Workdir means the image's
	// WorkingDir (in its root filesystem), else DefaultWorkdir.
	Image string
	// TmpSize caps /tmp and the working directory in bytes (DefaultTmpSize when zero).
	TmpSize int64
	// Disk, when not zero, puts /tmp and the working directory (unless a Mount) on a disk of
	// their own of this many bytes, which caps all they hold together (TmpSize then does
	// not apply).
	Disk int64
	// IDBase is the first host uid/gid handed to sandboxes (DefaultIDBase when zero).
	IDBase uint32
	// Once prepares the container without starting it: OnceCommand then runs one command as
	// the container (`exec --ephemeral`), which saves the runtime a start, an exec and a delete.
	Once bool
	// OnceProcess, with Once, is the one command, known at create: the runtime then creates
	// the container with it while the sidecar starts, and StartOnce starts it once the kernel
	// programs are attached (`exec --ephemeral` without a terminal). This process becomes a
	// child subreaper (the command's process is then its child: WaitContainer). Nil leaves
	// the command to OnceCommand.
	OnceProcess *OnceProcess
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
		"--sandbox-netns", filepath.Join(NetnsDir, st.Netns),
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

// upstreamCA reads the sidecar's --upstream-proxy-ca (from RunArgs, else
// AIRLOCK_UPSTREAM_PROXY_CA in Env): the CA of an inspecting upstream proxy, which the
// sandbox's CA bundle must hold too. Nil when none is set.
func upstreamCA(o CreateOptions) ([]byte, error) {
	file := runFlagValue(o.RunArgs, "upstream-proxy-ca")
	if file == "" {
		for _, kv := range o.Env {
			if v, ok := strings.CutPrefix(kv, "AIRLOCK_UPSTREAM_PROXY_CA="); ok {
				file = v
			}
		}
	}
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--upstream-proxy-ca: %w", err)
	}
	return b, nil
}

// runFlagValue returns the value of --name in args ("--name v" or "--name=v"), "" when absent.
func runFlagValue(args []string, name string) string {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
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

// waitSidecar waits for the sidecar's READY=1 on notify (nil: none) or its /readyz, or for the
// first sidecar to exit (its log then says why).
func (m *Manager) waitSidecar(ctx context.Context, st *State, sidecarDone <-chan struct{}, notify *readyListener, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ready := make(chan error, 2)
	poll := 2 * time.Millisecond
	if notify != nil {
		// The ready socket answers at once; /readyz is asked now and then, in case the sidecar
		// could not tell it.
		poll = 50 * time.Millisecond
		go func() {
			if notify.wait(ctx, m.sidecarPid(st)) == nil {
				ready <- nil
			}
		}()
	}
	go func() { ready <- waitReadyEvery(ctx, st.AdminAddr, poll) }()
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

// sidecarPid is the running sidecar's pid, or 0.
func (m *Manager) sidecarPid(st *State) int {
	pid, start := readPid(st.sidecarPidFile())
	if !m.ops().Alive(pid, start) {
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
		if errors.Is(err, ErrNotFound) {
			// Another command deleted it while its sidecar ran in this process (exec
			// --ephemeral): stop that sidecar here, gracefully.
			_ = m.stopHere(name)
		}
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
	if m.Archive != nil {
		if err := m.Archive(st); err != nil {
			m.progressf("  warning: usage of %s not archived: %v", st.Name, err)
		}
	}
	return m.Store.RemoveState(st)
}

// teardown removes every resource st names: the undos of every create step, in reverse, each
// tolerating an absent resource (a crashed create got only so far) and carrying on past a
// failed one.
func (m *Manager) teardown(ctx context.Context, st *State) error {
	return m.undo(ctx, st, m.createSteps())
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
// state file names from the cgroup parents this store's sandboxes use, and uid range claims
// whose sandbox's state file is gone, image layers no sandbox pins, and state files a crash
// of the host left empty (an ephemeral sandbox's, never fsynced: see State.ephemeral).
func (m *Manager) Reap(ctx context.Context, olderThan time.Duration) ([]ReapResult, error) {
	unlock, err := m.Store.Lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	var out []ReapResult
	for _, name := range m.Store.EmptyStates() {
		out = append(out, ReapResult{Name: name, Reason: "empty state file (a crash of the host left it; what the sandbox had in the kernel ended with it)", Err: m.Store.Remove(name)})
	}
	states, listErr := m.Store.List()
	for _, st := range states {
		if reason := m.reapReason(st, olderThan); reason != "" {
			out = append(out, ReapResult{Name: st.Name, Reason: reason, Err: m.remove(ctx, st)})
		}
	}
	out = append(out, m.reapStrayCgroups(ctx, states)...)
	for _, claim := range m.ops().StrayIDClaims(m.Store.Dir) {
		out = append(out, ReapResult{Name: filepath.Base(claim), Reason: "uid range claim " + claim + " without a state file", Err: m.ops().ReleaseIDRange(claim)})
	}
	if m.Images != nil { // layers only sandboxes whose state file is gone held
		if n, err := m.Images.Prune(olderThan); n > 0 || err != nil {
			out = append(out, ReapResult{Name: "images", Reason: fmt.Sprintf("%d image layers no sandbox uses or was created with for %s", n, olderThan), Err: err})
		}
	}
	return out, listErr
}

// reapReason says why st is to be reaped, or "" to keep it.
func (m *Manager) reapReason(st *State, olderThan time.Duration) string {
	switch {
	case st.Phase == PhaseCreating:
		return "half-created (its create did not finish)"
	case st.Phase == PhaseDeleting:
		return "half-deleted"
	case st.Network != NetworkNone && !m.ops().Alive(st.SupervisorPid, st.SupervisorTick):
		return "orphaned (its supervisor is gone)"
	case time.Since(st.Created) > olderThan:
		return fmt.Sprintf("older than %s (created %s)", olderThan, st.Created.Format(time.RFC3339))
	}
	return ""
}

// reapStrayCgroups removes the cgroups under the parents of states' cgroups that no state file
// names and that are named like a sandbox.
func (m *Manager) reapStrayCgroups(ctx context.Context, states []*State) []ReapResult {
	parents := map[string]bool{}
	known := map[string]bool{}
	for _, st := range states {
		parents[filepath.Dir(st.Cgroup)] = true
		known[st.Cgroup] = true
	}
	var out []ReapResult
	for parent := range parents {
		children, err := m.ops().ChildCgroups(parent)
		if err != nil {
			continue
		}
		for _, name := range children {
			path := filepath.Join(parent, name)
			if known[path] || ValidateName(name) != nil {
				continue
			}
			err := m.ops().RemoveCgroup(ctx, path)
			out = append(out, ReapResult{Name: name, Reason: "cgroup " + path + " without a state file", Err: err})
		}
	}
	return out
}
