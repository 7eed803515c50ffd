package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/trust"
)

// createStep is one named step of Create. do builds its part and returns the detail of its
// progress line; undo removes what do built and returns the line that says so ("" for none).
// An undo tolerates an absent resource, so it runs after its own do failed halfway, after a
// crash (Delete and Reap run every undo of a state file) and twice.
type createStep struct {
	name string
	do   func(ctx context.Context, c *creation) (detail string, err error)
	undo func(ctx context.Context, st *State) (line string, err error)
	// undoBefore names a step whose undo (later in undo order) needs this undo done; the undos
	// in between, of resources independent of this one, run beside it. Empty: in order.
	undoBefore string
	// undoEarly starts this undo before every other, beside them; it is awaited at its own
	// place in undo order, so the undos after it still find it done. For what no undo before
	// it needs: the veth pair (the kernel's RCU waits in its deletion need not hold the other
	// steps up). Not the container: the sidecar's last usage sample, taken as it stops, reads
	// the container's cgroups, which the container's undo removes.
	undoEarly bool
}

// creation is one Create in progress: its options, the state its steps fill in, and what
// passes from one step to a later one.
type creation struct {
	o          CreateOptions
	st         *State
	link       link
	raw        []netip.Prefix
	profileDoc []byte // the built-in profile's policy file, written once the name is reserved
	began      time.Time
	warn       *Warning
	idBase     uint32       // where the search for a free uid range starts
	created    <-chan error // the runtime's create of a OnceProcess container, until awaited
	createErr  error        // its outcome, once awaited
	// deferSupervisor leaves the supervisor's start to the last step (a OnceProcess), where it
	// starts in this process (superviseHere): on the way to ready its start-up would take the
	// CPU the sidecar and the runtime need.
	deferSupervisor bool
	// here is the in-process sidecar begun for a OnceProcess (beginSidecarHere), its log and
	// the error it failed to begin with, until startSidecarHere takes it over.
	here    HereSidecar
	hereLog *os.File
	hereErr error
}

// awaitCreate waits for the runtime's create of the container (a OnceProcess), once.
func (c *creation) awaitCreate() error {
	if c.created != nil {
		c.createErr, c.created = <-c.created, nil
	}
	return c.createErr
}

// createSteps is the table Create runs in order and undoes in reverse. The kernel programs are
// attached and pinned by the sidecar, not by a step of their own: the kernel step only checks
// them, and the cgroup's undo unpins them once nothing runs in the cgroup any more, so that a
// sandbox process is never left running without them.
func (m *Manager) createSteps() []createStep {
	return []createStep{
		{"netns", m.doNetns, m.undoNetns, "", false},
		{"veth", m.doVeth, m.undoVeth, "", true},
		{"cgroup", m.doCgroup, m.undoCgroup, "", false},
		{"files", m.doFiles, m.undoFiles, "", false},
		{"sidecar", m.doSidecar, m.undoSidecar, "", false},
		{"kernel", m.doKernel, nil, "", false},
		{"container", m.doContainer, m.undoContainer, "cgroup", false},
	}
}

// stepsFor is createSteps, but for a container made with its one command (OnceProcess): the
// runtime creates it right after the cgroup step, in the background, so that the files, the
// sidecar's start and the create overlap, and a last step waits for it. Its process starts
// only later (StartOnce), once the kernel programs are attached; until then only the
// runtime's own code runs in the container.
func (m *Manager) stepsFor(c *creation) []createStep {
	steps := m.createSteps()
	if c.o.OnceProcess == nil {
		return steps
	}
	byName := map[string]createStep{}
	for _, s := range steps {
		byName[s.name] = s
	}
	early := createStep{"container", m.doContainerEarly, func(ctx context.Context, st *State) (string, error) {
		_ = c.awaitCreate() // never delete under a create still running
		c.dropSidecarHere()
		return m.undoContainer(ctx, st)
	}, "cgroup", false}
	// The runtime's create, not the sidecar, is what the sandbox waits for longest, so it goes
	// first, even before the files (its bundle's /etc gets the rest of its files in the files
	// step: ContainerState.etcAfterCreate); an image's /etc files are bind-mount sources the
	// create needs, so there the files go first.
	first, second := early, byName["files"]
	if c.o.Image != "" {
		first, second = second, first
	}
	if m.RunSidecar != nil && c.st.Network != NetworkNone {
		// The in-process sidecar starts once its CA is there and the create is under way.
		do := second.do
		second.do = func(ctx context.Context, c *creation) (string, error) {
			line, err := do(ctx, c)
			if err == nil {
				m.beginSidecarHere(c)
			}
			return line, err
		}
	}
	c.deferSupervisor = true
	created := createStep{"created", func(context.Context, *creation) (string, error) {
		if err := c.awaitCreate(); err != nil {
			return "", err
		}
		if c.st.Network == NetworkNone || c.st.SidecarInProcess {
			return "the command waits for the sandbox to start it", nil
		}
		pid, _ := readPid(c.st.sidecarPidFile())
		if err := m.superviseHere(c.st, pid); err != nil {
			return "", err
		}
		if err := m.Store.Save(c.st); err != nil { // the supervisor's pid, for delete and reap
			return "", err
		}
		return fmt.Sprintf("the command waits for the sandbox to start it; supervised by this process (%d)", c.st.SupervisorPid), nil
	}, nil, "", false}
	// The veth only the sidecar needs (the runtime joins the namespace): after the create.
	return []createStep{byName["netns"], byName["cgroup"], first, byName["veth"], second,
		byName["sidecar"], byName["kernel"], created}
}

// Create builds the sandbox: state file, then the steps of createSteps (network namespace,
// veth pair, cgroup, CA bundle, env file and resolv.conf, the supervised sidecar, its kernel
// programs), with one progress line and its time per step. On failure the failed step and
// every step before it are undone in reverse and the error says which step failed and why.
// A development or staging sandbox without kernel enforcement comes with a *Warning.
func (m *Manager) Create(ctx context.Context, o CreateOptions) (*State, error) {
	c, err := m.plan(o)
	if err != nil {
		return nil, err
	}
	unlock, err := m.Store.Lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := m.reserve(c); err != nil {
		return nil, err
	}
	if err := m.build(ctx, c, m.stepsFor(c)); err != nil {
		return nil, err
	}
	m.progressf("sandbox %s ready in %s", c.st.Name, time.Since(c.began).Round(time.Millisecond))
	if c.warn != nil {
		return c.st, c.warn
	}
	return c.st, nil
}

// plan checks the options and works out what does not need the store: environment, subnet,
// policy, cgroup parent and the host's network namespace.
func (m *Manager) plan(o CreateOptions) (*creation, error) {
	c := &creation{o: o, began: time.Now()}
	if err := ValidateName(o.Name); err != nil {
		return nil, err
	}
	if m.Kernel == nil || m.LoadCA == nil {
		return nil, errors.New("sandbox manager: Kernel and LoadCA must be set")
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
	cgParent, err := m.cgroupParent(o.CgroupParent)
	if err != nil {
		return nil, err
	}
	hostNs, err := m.ops().CurrentNetns()
	if err != nil {
		return nil, err
	}
	c.profileDoc, c.raw = profileDoc, rawRoutes(pol)
	c.st = &State{
		Name: o.Name, Backend: "local", Phase: PhaseCreating,
		Policy: policyFile, Profile: o.Profile, Environment: env, Subnet: subnet.String(),
		Netns: NetnsName(o.Name), HostNetns: hostNs, HostVeth: hostVethName(m.Store.Dir, o.Name),
		Cgroup: filepath.Join(cgParent, o.Name), Dir: m.Store.SandboxDir(o.Name), Limits: o.Limits,
		Binary: m.Binary, CreatorPid: os.Getpid(),
	}
	for _, p := range c.raw {
		c.st.RawRoutes = append(c.st.RawRoutes, p.String())
	}
	root, err := m.Kernel.Cgroup2Root()
	if err != nil {
		return nil, fmt.Errorf("find the cgroup v2 hierarchy: %w", err)
	}
	if err := m.planContainer(c, root); err != nil {
		return nil, err
	}
	return c, nil
}

// cgroupParent is the given parent, or <cgroup2 root>/airlock; it must be on cgroup v2.
func (m *Manager) cgroupParent(parent string) (string, error) {
	if parent == "" {
		root, err := m.Kernel.Cgroup2Root()
		if err != nil {
			return "", fmt.Errorf("find the cgroup v2 hierarchy (give --cgroup-parent): %w", err)
		}
		parent = filepath.Join(root, "airlock")
	}
	if err := m.ops().CheckCgroup2Dir(parent); err != nil {
		return "", err
	}
	return parent, nil
}

// reserve takes the name and a /30 under the store lock: it refuses a name that a sandbox of
// this store, or a leftover namespace or cgroup, already has, then saves the state file in
// PhaseCreating before anything is built, so a crash from here on leaves a file naming it all.
func (m *Manager) reserve(c *creation) error {
	existing, err := m.Store.List()
	if err != nil {
		return err
	}
	st := c.st
	for _, s := range existing {
		if s.Name == st.Name {
			return fmt.Errorf("sandbox %s already exists (phase %s, created %s): delete it first", s.Name, s.Phase, s.Created.Format(time.RFC3339))
		}
	}
	if st.Network == NetworkNone {
		// No link: no /30 of the pool, no veth (and so nothing of them in the state or
		// `sandbox list`).
		st.Index, st.HostVeth = -1, ""
	} else {
		subnet := netip.MustParsePrefix(st.Subnet)
		inUse, err := m.ops().AddrsIn(subnet)
		if err != nil {
			return err
		}
		if st.Index, err = allocate(subnet, existing, inUse); err != nil {
			return err
		}
		c.link = linkAt(subnet, st.Index)
		st.HostAddr, st.SandboxAddr = c.link.Host.String(), c.link.Sandbox.String()
	}
	if m.ops().CgroupExists(st.Cgroup) {
		return fmt.Errorf("cgroup %s already exists: a leftover of an earlier sandbox? remove it or run `airlock sandbox reap`", st.Cgroup)
	}
	if m.ops().NetnsExists(st.Netns) {
		return fmt.Errorf("network namespace %s already exists: a leftover of an earlier sandbox, or another state directory's sandbox of the same name", st.Netns)
	}
	st.Created = time.Now().UTC()
	return m.Store.Save(st)
}

// build makes the sandbox's directory, runs steps in order and marks the sandbox ready. When
// anything fails, it undoes the failed step and every step before it, in reverse, and forgets
// the sandbox; when an undo fails too, the state file stays for `sandbox reap`.
func (m *Manager) build(ctx context.Context, c *creation, steps []createStep) error {
	err := m.makeDir(c)
	done, last := 0, time.Now()
	for i := 0; err == nil && i < len(steps); i++ {
		s := steps[i]
		done = i + 1
		detail, serr := s.do(ctx, c)
		if serr != nil {
			err = fmt.Errorf("step %s: %w", s.name, serr)
			break
		}
		now := time.Now()
		m.progressf("  [%d/%d] %-8s %s (%s)", i+1, len(steps), s.name, detail, now.Sub(last).Round(100*time.Microsecond))
		last = now
	}
	if err == nil {
		c.st.Phase, c.st.CreatorPid = PhaseReady, 0
		if err = m.Store.Save(c.st); err == nil {
			return nil
		}
	}
	if uerr := m.undo(context.WithoutCancel(ctx), c.st, steps[:done]); uerr != nil {
		return errors.Join(err, fmt.Errorf("undo: %w (run `airlock sandbox reap` to retry)", uerr))
	}
	if rerr := m.Store.RemoveState(c.st); rerr != nil {
		return errors.Join(err, fmt.Errorf("undo: %w", rerr))
	}
	return err
}

// makeDir creates the sandbox's directory with the sidecar's state directory, and writes the
// built-in profile's policy file.
func (m *Manager) makeDir(c *creation) error {
	if err := os.MkdirAll(c.st.sidecarStateDir(), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", c.st.Dir, err)
	}
	if c.profileDoc != nil {
		return writeFileAtomic(c.st.Policy, c.profileDoc, 0o600)
	}
	return nil
}

// undo runs the undos of steps in reverse, carrying on past a failed one so that one stuck
// piece does not keep the others, and prints a line for each with its time. An undo with
// undoBefore runs beside the undos up to that step's, which waits for it; one with undoEarly
// starts first and runs beside all of them.
func (m *Manager) undo(ctx context.Context, st *State, steps []createStep) error {
	var errs []error
	done := func(r undoResult) {
		if r.err != nil {
			errs = append(errs, r.err)
		}
		if r.line != "" {
			m.progressf("  %s (%s)", r.line, r.took.Round(100*time.Microsecond))
		}
	}
	// pending holds the undos running beside the others, by the step whose undo awaits them:
	// their undoBefore when that step is among steps, else their own.
	pending := map[string][]chan undoResult{}
	background := func(i int) {
		s, at := steps[i], steps[i].name
		if s.undoBefore != "" && slices.ContainsFunc(steps[:i], func(o createStep) bool { return o.name == s.undoBefore }) {
			at = s.undoBefore
		}
		ch := make(chan undoResult, 1)
		pending[at] = append(pending[at], ch)
		go func() { ch <- runUndo(ctx, st, s) }()
	}
	for i, s := range steps {
		if s.undoEarly && s.undo != nil {
			background(i)
		}
	}
	for i := len(steps) - 1; i >= 0; i-- {
		s := steps[i]
		for _, ch := range pending[s.name] {
			done(<-ch)
		}
		delete(pending, s.name)
		switch {
		case s.undo == nil || s.undoEarly:
		case s.undoBefore == "":
			done(runUndo(ctx, st, s))
		default:
			background(i)
			if pending[s.name] != nil { // its undoBefore is not among steps: await it here
				for _, ch := range pending[s.name] {
					done(<-ch)
				}
				delete(pending, s.name)
			}
		}
	}
	return errors.Join(errs...)
}

// undoResult is what one undo did and how long it took.
type undoResult struct {
	line string
	err  error
	took time.Duration
}

// runUndo runs s's undo and times it.
func runUndo(ctx context.Context, st *State, s createStep) undoResult {
	began := time.Now()
	line, err := s.undo(ctx, st)
	return undoResult{line, err, time.Since(began)}
}

func (m *Manager) doNetns(_ context.Context, c *creation) (string, error) {
	if err := m.ops().CreateNetns(c.st.Netns); err != nil {
		return "", err
	}
	return filepath.Join(NetnsDir, c.st.Netns), nil
}

func (m *Manager) undoNetns(_ context.Context, st *State) (string, error) {
	return "removed   netns " + st.Netns, m.ops().DeleteNetns(st.Netns)
}

func (m *Manager) doVeth(_ context.Context, c *creation) (string, error) {
	st := c.st
	if st.Network == NetworkNone {
		return "none: loopback only (--network none)", m.ops().LoopbackUp(st.Netns)
	}
	if err := m.ops().WireLink(st.Netns, st.HostVeth, c.link, c.raw); err != nil {
		return "", err
	}
	routes := ""
	if len(c.raw) > 0 {
		routes = ", raw TCP routes " + strings.Join(st.RawRoutes, " ")
	}
	return fmt.Sprintf("%s %s/30 <-> %s %s/30%s", st.HostVeth, st.HostAddr, sandboxVethName, st.SandboxAddr, routes), nil
}

// undoVeth leaves the pair to the netns step when the sandbox's namespace is still there: the
// kernel unregisters a veth pair with either of its namespaces, and a namespace's end is done
// in the background, while deleting the link waits for its unregistering (≈ 15 ms on the path
// of every delete). The host end loses its addresses first, so that a pair the namespace
// keeps a while longer (a process that entered it) never answers for a subnet the next
// sandbox is given. Without the namespace, the link is deleted.
func (m *Manager) undoVeth(_ context.Context, st *State) (string, error) {
	if st.Network == NetworkNone {
		return "removed   nothing of a link (--network none)", nil
	}
	if m.ops().NetnsExists(st.Netns) {
		return "released  veth " + st.HostVeth + " (it goes with netns " + st.Netns + ")",
			m.ops().ReleaseHostVeth(st.HostVeth, st.HostNetns, st.SupervisorPid)
	}
	return "removed   veth " + st.HostVeth, m.ops().DeleteHostVeth(st.HostVeth, st.HostNetns, st.SupervisorPid)
}

// doCgroup makes the sandbox's cgroup v2 directory, for the sidecar to attach the kernel
// programs to before any process of the sandbox runs. The limits are the container's: the
// runtime sets them in whichever hierarchy has the controller.
func (m *Manager) doCgroup(_ context.Context, c *creation) (string, error) {
	if err := m.ops().CreateCgroup(c.st.Cgroup, Limits{}); err != nil {
		return "", err
	}
	return c.st.Cgroup, nil
}

// undoCgroup kills what runs in the cgroup, removes it, and only then detaches and unpins the
// kernel programs attached to it: were they removed first, or while the cgroup still holds
// processes, those would run on unconfined. A cgroup that cannot be removed keeps its pins.
func (m *Manager) undoCgroup(ctx context.Context, st *State) (string, error) {
	line := "removed   cgroup " + st.Cgroup + ", kernel pins"
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := m.ops().RemoveCgroup(ctx, st.Cgroup); err != nil {
		return line, fmt.Errorf("%w (kernel pins kept while it may hold processes)", err)
	}
	if m.Kernel == nil {
		return line, errors.New("unpin kernel programs: sandbox manager: Kernel is not set")
	}
	if err := m.Kernel.RemovePins(st.Name); err != nil {
		return line, fmt.Errorf("unpin kernel programs: %w", err)
	}
	return line, nil
}

func (m *Manager) doFiles(_ context.Context, c *creation) (string, error) {
	st := c.st
	caPEM, err := m.LoadCA(st.sidecarStateDir(), !st.ephemeral())
	if err != nil {
		return "", fmt.Errorf("load the sidecar CA: %w", err)
	}
	corp, err := upstreamCA(c.o)
	if err != nil {
		return "", err
	}
	if len(corp) > 0 { // an inspecting upstream proxy re-signs the origins of passthrough tunnels
		caPEM = append(append(append([]byte(nil), caPEM...), '\n'), corp...)
	}
	bundle, err := trust.Build(c.o.Env, "airlock sidecar CA of sandbox "+st.Name, caPEM)
	if err != nil {
		return "", err
	}
	if err := st.writePublic(bundle); err != nil {
		return "", err
	}
	if err := m.ops().WriteNetnsResolvConf(st.Netns, st.resolvConf()); err != nil {
		return "", err
	}
	if err := m.ops().WriteBundleEtc(st); err != nil { // the part of its /etc that needs them
		return "", err
	}
	if st.Network == NetworkNone {
		return fmt.Sprintf("env %s, CA bundle %s, resolv.conf with no resolver", st.EnvFile(), st.CABundle()), nil
	}
	return fmt.Sprintf("env %s, CA bundle %s, resolv.conf -> %s:%d", st.EnvFile(), st.CABundle(), st.HostAddr, DNSPort), nil
}

func (m *Manager) undoFiles(_ context.Context, st *State) (string, error) {
	line := "removed   files " + st.PublicDir() + ", " + filepath.Join(etcNetnsDir, st.Netns)
	var errs []error
	if err := os.RemoveAll(st.PublicDir()); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", st.PublicDir(), err))
	}
	return line, errors.Join(append(errs, m.ops().RemoveNetnsEtc(st.Netns))...)
}

// doSidecar starts the sidecar and its supervisor and waits for /readyz.
func (m *Manager) doSidecar(ctx context.Context, c *creation) (string, error) {
	st := c.st
	if st.Network == NetworkNone {
		return "none (--network none: nothing to proxy, no DNS)", nil
	}
	timeout := c.o.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	if c.deferSupervisor && m.RunSidecar != nil {
		return m.doSidecarHere(c, timeout)
	}
	var err error
	if st.AdminAddr, err = freeLoopbackAddr(); err != nil {
		return "", err
	}
	st.SidecarArgs = sidecarArgs(st, c.o)
	// The supervisor reads the admin address and the sidecar's arguments from the state file as
	// it starts: they must be there before it is.
	if err := m.Store.Save(st); err != nil {
		return "", err
	}
	notify, err := listenReady(st.Dir)
	if err != nil {
		return "", err
	}
	env := withoutNotify(c.o.Env)
	sidecarEnv := env
	if notify != nil {
		defer notify.Close()
		sidecarEnv = append(slices.Clone(env), notify.Env())
	}
	sidecarDone, err := m.startSidecar(st, sidecarEnv, env, !c.deferSupervisor)
	if err != nil {
		return "", err
	}
	if err := m.Store.Save(st); err != nil { // the supervisor's pid, for delete and reap
		return "", err
	}
	if err := m.waitSidecar(ctx, st, sidecarDone, notify, timeout); err != nil {
		return "", err
	}
	sup := fmt.Sprintf("supervisor %d", st.SupervisorPid)
	if c.deferSupervisor {
		sup = "supervised by this process once the container is created"
	}
	return fmt.Sprintf("pid %d (%s), proxy %s:%d, DNS :%d, model API :%d, admin %s",
		m.sidecarPid(st), sup, st.HostAddr, ProxyPort, DNSPort, LLMPort, st.AdminAddr), nil
}

// doSidecarHere is doSidecar for a sandbox made for one command when Manager.RunSidecar is
// set: the sidecar runs in this process, supervised here.
func (m *Manager) doSidecarHere(c *creation, timeout time.Duration) (string, error) {
	st := c.st
	if err := m.startSidecarHere(c, timeout); err != nil {
		return "", err
	}
	if err := m.Store.Save(st); err != nil { // this process as sidecar and supervisor, for delete and reap
		return "", err
	}
	return fmt.Sprintf("in this process (%d), proxy %s:%d, DNS :%d, model API :%d, admin %s",
		st.SupervisorPid, st.HostAddr, ProxyPort, DNSPort, LLMPort, st.AdminAddr), nil
}

// undoSidecar stops the supervisor (which stops its sidecar gracefully: the sidecar revokes
// its Vault leases), then a sidecar left without one.
func (m *Manager) undoSidecar(_ context.Context, st *State) (string, error) {
	var errs []error
	switch {
	case st.SupervisorInProcess:
		// A goroutine of exec --ephemeral's process: stopped here when that process deletes its
		// sandbox; another process's delete leaves that process alone (it is waiting for its
		// command, which the container's undo ends) and stops the sidecar below, which the
		// supervisor then does not restart (the sandbox is being deleted).
		if err := m.stopHere(st.Name); err != nil {
			errs = append(errs, err)
		}
	default:
		if err := m.ops().StopProcess(st.SupervisorPid, st.SupervisorTick, StopGrace+5*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stop supervisor: %w", err))
		}
	}
	// A sidecar whose supervisor died (it gets SIGTERM then, but may be slow) or was killed.
	// Not one in exec --ephemeral's process: that process is the command's, stopHere ended
	// the sidecar if it is this one, and another process's delete leaves it alone (it ends
	// its sidecar itself once the container's undo has ended its command).
	if pid, start := readPid(st.sidecarPidFile()); pid > 0 && !st.SidecarInProcess {
		if err := m.ops().StopProcess(pid, start, StopGrace); err != nil {
			errs = append(errs, fmt.Errorf("stop sidecar: %w", err))
		}
	}
	return "stopped   sidecar and supervisor", errors.Join(errs...)
}

// startSidecar starts the first sidecar (with sidecarEnv) and, withSupervisor, its supervisor
// (with env: the sidecars it restarts have no ready socket to tell), both detached, side by
// side: the supervisor adopts the running sidecar, so its own start-up is not on the path to a
// ready sandbox.
func (m *Manager) startSidecar(st *State, sidecarEnv, env []string, withSupervisor bool) (sidecarDone <-chan struct{}, err error) {
	ops := m.ops()
	pid, done, err := ops.StartDetached(m.Binary, st.SidecarArgs, sidecarEnv, st.LogFile())
	if err != nil {
		return nil, fmt.Errorf("start sidecar: %w", err)
	}
	start, _ := ops.ProcStart(pid)
	if err := writePidFile(st.sidecarPidFile(), pid, start); err != nil {
		return nil, errors.Join(err, ops.StopProcess(pid, start, 0))
	}
	if withSupervisor {
		return done, m.startSupervisor(st, env, pid)
	}
	return done, nil
}

// startSupervisor starts the supervisor of st, detached, adopting its running sidecar pid.
func (m *Manager) startSupervisor(st *State, env []string, sidecar int) error {
	ops := m.ops()
	sup, _, err := ops.StartDetached(m.Binary, []string{"sandbox", "supervise", "--state-dir", m.Store.StateRoot, "--adopt", strconv.Itoa(sidecar), st.Name}, env, st.LogFile())
	if err != nil {
		return fmt.Errorf("start supervisor: %w", err)
	}
	st.SupervisorPid = sup
	st.SupervisorTick, _ = ops.ProcStart(sup)
	return nil
}

// doKernel checks that the sidecar attached and pinned the kernel programs. Production refuses
// a sandbox without them; the other environments go on with a warning.
func (m *Manager) doKernel(_ context.Context, c *creation) (string, error) {
	st := c.st
	if st.Network == NetworkNone {
		if err := m.Kernel.AttachDenyAll(st.Name, st.Cgroup); err != nil {
			return "", fmt.Errorf("attach the kernel programs (nothing allowed): %w", err)
		}
	}
	st.Kernel = m.Kernel.Pinned(st.Name)
	switch {
	case st.Kernel:
		return "eBPF attached to the cgroup, pinned at " + m.Kernel.PinDir(st.Name), nil
	case st.Environment == EnvProduction:
		return "", fmt.Errorf("production sandboxes need kernel enforcement, and the sidecar runs without it (see %s)", st.LogFile())
	}
	msg := fmt.Sprintf("WARN sandbox %s runs WITHOUT kernel enforcement (%s environment falls back to proxy + DNS filter only; see %s and `airlock sandbox doctor`)", st.Name, st.Environment, st.LogFile())
	c.warn = &Warning{Msg: msg}
	return "NOT attached: " + msg, nil
}
