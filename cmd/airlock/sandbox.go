package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/proxy"
	"github.com/airlock-dev/airlock/sandbox"
	"github.com/airlock-dev/airlock/sandbox/image"
	"golang.org/x/term"
)

const sandboxUsage = `Usage: airlock sandbox <command> [flags] [args]

Commands:
  create NAME   create a sandbox: network namespace, veth, cgroup, supervised sidecar, eBPF
  exec NAME     run a command inside a sandbox (exit code, stdin/stdout, TTY pass through)
  list          list sandboxes with health, bytes, denies, CPU, memory, model and compute spend (--json)
  delete NAME   stop the sidecar gracefully and remove everything of a sandbox (idempotent)
  reap          remove expired and orphaned sandboxes (--older-than D)
  doctor        check this machine can run sandboxes: a PASS/FAIL table with fixes
  thaw NAME     thaw a sandbox a usage cap froze (spec.usage.caps)
  approvals NAME list|grant|deny|revoke
                answer the asks of a sandbox's sidecar (spec.approval; see airlock approvals)

Every command takes --state-dir (env AIRLOCK_STATE_DIR). create, list and delete take
--backend kubernetes for sandbox pods with the sidecar injected by "airlock webhook".
Run "airlock sandbox <command> --help".
`

func sandboxCmd(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("sandbox", sandboxUsage, map[string]cli.RunFunc{
		"create": sandboxCreate, "exec": sandboxExec, "list": sandboxList, "delete": sandboxDelete,
		"reap": sandboxReap, "doctor": sandboxDoctor, "approvals": sandboxApprovals, "thaw": sandboxThaw,
		"supervise": sandboxSupervise, // internal: started by create
	}, args, stdout, stderr)
}

// manager opens the store of the state directory with this binary as the sidecar.
func manager(stateDir string, progress io.Writer) (*sandbox.Manager, error) {
	store, err := sandbox.OpenStore(stateDir)
	if err != nil {
		return nil, cli.Failf("%v", err)
	}
	bin, err := os.Executable()
	if err != nil {
		return nil, cli.Failf("find the airlock executable: %v", err)
	}
	loadCA := func(dir string, durable bool) ([]byte, error) {
		load := proxy.LoadOrCreateCA
		if !durable {
			load = proxy.LoadOrCreateCANoSync
		}
		ca, err := load(dir, time.Now)
		if err != nil {
			return nil, err
		}
		return ca.CertPEM(), nil
	}
	images, err := imageCache(stateDir)
	if err != nil {
		return nil, err
	}
	return &sandbox.Manager{Store: store, Binary: bin, Progress: progress, LoadCA: loadCA, Kernel: ebpf.Host{},
		Archive: archiveUsage(store.StateRoot), Images: images, RunSidecar: runHere}, nil
}

// imageCache is the layer cache of the state directory; registry pulls go out through the
// operator's dial path (direct, to any address: the operator named the registry), never a
// sandbox's policy.
func imageCache(stateDir string) (*image.Store, error) {
	op, err := egress.NewOperator(egress.Config{})
	if err != nil {
		return nil, cli.Failf("image pulls: %v", err)
	}
	return &image.Store{Dir: filepath.Join(stateDir, "images"), Transport: op.Transport(egress.AllRanges(), nil)}, nil
}

// createFlags are the flags of `sandbox create`, shared with `sandbox exec --ephemeral`.
type createFlags struct {
	stateDir, policy, profile, environment, subnet, cgroupParent, upstreamDNS, backend string
	runtime, workdir, network, tmpSize, disk, image                                    string
	imagePullSecret                                                                    string
	cpu                                                                                float64
	memory                                                                             string
	pids                                                                               int
	idBase                                                                             uint
	mounts                                                                             mountList
	readyTimeout                                                                       time.Duration
}

func addCreateFlags(fs *cli.FlagSet) *createFlags {
	c := &createFlags{}
	fs.StringVar(&c.stateDir, "state-dir", cli.DefaultStateDir(), "state directory; sandboxes live in DIR/sandboxes/")
	fs.StringVar(&c.policy, "policy", "", "policy YAML the sandbox's sidecar enforces (hot-reloaded when it changes)")
	fs.StringVar(&c.profile, "profile", "", "enforce a built-in profile instead of a policy file: offline | repo-read | repo-write | deployment")
	fs.StringVar(&c.environment, "environment", "development", "production | staging | development; production refuses a sandbox without kernel enforcement")
	fs.StringVar(&c.subnet, "subnet", sandbox.DefaultSubnet, "IPv4 pool for the sandboxes' links; each sandbox takes one /30 (.1 sidecar, .2 sandbox)")
	fs.StringVar(&c.cgroupParent, "cgroup-parent", "", "cgroup v2 directory holding the sandboxes' cgroups (default <cgroup2 root>/airlock)")
	fs.StringVar(&c.upstreamDNS, "upstream-dns", "", "resolver the sidecar uses (host:port); default: the policy's dns.upstreams, else /etc/resolv.conf")
	fs.Float64Var(&c.cpu, "cpu", 0, "CPU limit in CPUs (e.g. 0.5, 2); 0 means none")
	fs.StringVar(&c.memory, "memory", "2G", "memory limit, e.g. 512M or 4G")
	fs.IntVar(&c.pids, "pids", sandbox.DefaultPids, "task limit")
	fs.StringVar(&c.tmpSize, "tmp-size", "512M", "size cap of the private /tmp and of the working directory (each a tmpfs)")
	fs.StringVar(&c.disk, "disk", "", "put /tmp and the working directory on a disk of their own of this size (e.g. 10G): a hard cap on all the sandbox writes outside its rw mounts, reserved on the host at create (ext4 image in the state directory on a loop device); default: a tmpfs of --tmp-size each")
	fs.StringVar(&c.runtime, "runtime", sandbox.DefaultRuntime, "OCI runtime that runs the sandbox's container: runc | crun | runsc (gVisor) | PATH")
	fs.Var(&c.mounts, "mount", "show host path SRC at DST inside, `SRC:DST[:ro|rw]`, read-only unless rw (repeatable)")
	fs.StringVar(&c.workdir, "workdir", "", "the commands' working directory inside: a private tmpfs, or a --mount at the same path (default /work; with --image, the image's WorkingDir if it has one)")
	fs.StringVar(&c.network, "network", "", "none: loopback only (no veth, no sidecar, no DNS); default: the sidecar's network")
	fs.UintVar(&c.idBase, "id-base", sandbox.DefaultIDBase, "first host uid/gid handed to sandboxes (each takes 65536, host-wide, never overlapping)")
	fs.DurationVar(&c.readyTimeout, "ready-timeout", 30*time.Second, "how long to wait for the sidecar to become ready")
	fs.StringVar(&c.backend, "backend", "local", "local (network namespace + cgroup on this machine) | kubernetes (a pod with the sidecar injected)")
	fs.StringVar(&c.imagePullSecret, "image-pull-secret", "", "log in to --image's registry with `SECRET` of the policy's spec.secrets (its value USER:PASSWORD), fetched by the credential broker as the sidecar fetches secrets (Vault: VAULT_ADDR and the Vault flags after --); sent to that registry only")
	return c
}

// pullLogin gives m's image cache the registry login of --image-pull-secret, if any.
func (c *createFlags) pullLogin(ctx context.Context, m *sandbox.Manager, o sandbox.CreateOptions) error {
	if c.imagePullSecret == "" {
		return nil
	}
	cred, err := imagePullLogin(ctx, o, c.imagePullSecret)
	if err != nil {
		return err
	}
	return withPullLogin(m, cred)
}

// options turns the flags into CreateOptions for sandbox name.
func (c *createFlags) options(name string, runArgs []string) (sandbox.CreateOptions, error) {
	mem, err := parseBytes(c.memory)
	if err != nil {
		return sandbox.CreateOptions{}, cli.Failf("--memory %q: %v", c.memory, err)
	}
	tmp, err := parseBytes(c.tmpSize)
	if err != nil {
		return sandbox.CreateOptions{}, cli.Failf("--tmp-size %q: %v", c.tmpSize, err)
	}
	disk, err := parseBytes(c.disk)
	if err != nil {
		return sandbox.CreateOptions{}, cli.Failf("--disk %q: %v", c.disk, err)
	}
	if c.cpu < 0 || c.pids < 0 {
		return sandbox.CreateOptions{}, cli.Failf("--cpu and --pids must not be negative")
	}
	if c.idBase == 0 || c.idBase > 1<<32-1 {
		return sandbox.CreateOptions{}, cli.Failf("--id-base %d: give a uid above the host's users, below 4294901760", c.idBase)
	}
	return sandbox.CreateOptions{
		Name: name, PolicyFile: c.policy, Profile: c.profile, Environment: c.environment, Subnet: c.subnet,
		CgroupParent: c.cgroupParent, UpstreamDNS: c.upstreamDNS, RunArgs: runArgs, Env: os.Environ(),
		Limits:  sandbox.Limits{CPU: c.cpu, Memory: mem, Pids: c.pids},
		Runtime: c.runtime, Mounts: c.mounts, Workdir: c.workdir, Network: c.network, TmpSize: tmp,
		Disk: disk, IDBase: uint32(c.idBase), Image: c.image,
		ReadyTimeout: c.readyTimeout,
	}, nil
}

// parseBytes reads "512M", "4G", "1048576" (binary units).
func parseBytes(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	case "T":
		mult = 1 << 40
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("use a positive number of bytes, optionally with K, M, G or T")
	}
	return n * mult, nil
}

const createLong = `
Create a sandbox on this machine: a network namespace (airlock-NAME) joined to this one by a
veth pair on a /30 of --subnet, a cgroup v2 directory, its own sidecar ("airlock run",
supervised and restarted on crash, logs in the state directory) with kernel enforcement (eBPF)
attached to the cgroup, and an OCI container (--runtime runc by default, or crun) in both:
its own user namespace (root inside is an unprivileged uid range of its own outside), PID,
IPC, UTS, mount and cgroup namespaces, no capabilities, no_new_privs, a seccomp profile, a
read-only root that shows the host's /usr, /bin, /lib* and /sbin and an allowlist of /etc,
and a private /tmp and working directory (--workdir, default /work), each a size-capped tmpfs,
or with --disk SIZE both on one ext4 disk of SIZE, which caps all they hold together.
Limits apply without flags (memory 2G, pids 1024), on pure cgroup v2 and hybrid hosts alike.
--mount SRC:DST[:ro|rw] shows a host path inside, read-only unless rw; what the sandbox writes
there is owned by its mapped uid (printed on the container line). --network none gives it
loopback only: no veth, no sidecar, no DNS, the kernel programs attached with nothing allowed.
--image REF builds the root from an image instead (an OCI layout directory, an OCI or
docker-save tarball, or a registry reference, pulled once): its layers are verified, unpacked
once into the state directory's cache and shared read-only, the sandbox writes its own upper
layer, the image's owners show inside (idmapped layers), and its USER, Env and WorkingDir
apply to every exec; airlock's /etc/hosts, hostname, resolv.conf and /etc/airlock win.

Inside, /etc/resolv.conf points at the sidecar's DNS filter and /etc/airlock/env (the env
file) sets HTTP_PROXY, HTTPS_PROXY, NO_PROXY, the CA bundle variables (SSL_CERT_FILE,
NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE, GIT_SSL_CAINFO -> /etc/airlock/ca/ca-bundle.pem) and
OPENAI_BASE_URL/ANTHROPIC_BASE_URL. Without the env file, TCP 80 and 443 are redirected to the
transparent proxy in the kernel.

Flags after "--" go to the sidecar's "airlock run" (e.g. -- --vault-addr https://vault:8200).
The sidecar inherits this command's environment (credential sources, VAULT_TOKEN, ...).

Production refuses to create a sandbox without kernel enforcement; staging and development
warn and fall back to the proxy and DNS filter alone. With --backend kubernetes, a pod
labelled for sidecar injection is created instead (see "airlock webhook").`

func sandboxCreate(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("sandbox create", "airlock sandbox create NAME (--policy FILE | --profile P) [flags] [-- RUN-FLAGS]", createLong, stderr)
	c := addCreateFlags(fs)
	kc := &cli.KubeCreate{}
	kc.Register(fs)
	asJSON := fs.Bool("json", false, "print the created sandbox's status as JSON instead of progress lines")
	rest, runArgs := splitDashDash(args)
	pos, err := fs.ParseArgs(rest, stdout, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return cli.Failf("sandbox create: give exactly one NAME")
	}
	name := pos[0]
	c.image = kc.Image // one --image for both backends
	switch c.backend {
	case "local":
		if kc.Identities != "" || kc.Containers != "" {
			return cli.Failf("sandbox create: --identities and --containers are for --backend kubernetes; a local sandbox's processes take an identity with sandbox exec --as IDENTITY")
		}
	case "kubernetes":
		if c.imagePullSecret != "" {
			return cli.Failf("sandbox create --backend kubernetes: --image-pull-secret is for local sandboxes; a pod pulls with its imagePullSecrets")
		}
		if len(runArgs) > 0 {
			return cli.Failf("sandbox create --backend kubernetes: sidecar flags after -- are set by the webhook, not here")
		}
		if c.profile != "" {
			return cli.Failf("sandbox create --backend kubernetes: --profile is for local sandboxes; write a policy that extends it and give --policy")
		}
		return kubeCreate(name, c.policy, kc)
	default:
		return cli.Failf("--backend %q: use local or kubernetes", c.backend)
	}
	o, err := c.options(name, runArgs)
	if err != nil {
		return err
	}
	progress := stdout
	if *asJSON {
		progress = nil
	} else {
		fmt.Fprintf(stdout, "creating sandbox %s (%s environment)\n", name, o.Environment)
	}
	m, err := manager(c.stateDir, progress)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.pullLogin(ctx, m, o); err != nil {
		return err
	}
	st, err := m.Create(ctx, o)
	var warn *sandbox.Warning
	if errors.As(err, &warn) {
		fmt.Fprintln(stderr, "airlock:", warn.Msg)
		err = nil
	}
	if err != nil {
		return cli.Failf("sandbox create %s: %v", name, err)
	}
	if *asJSON {
		statuses, _ := m.Statuses(ctx, 2*time.Second)
		for _, s := range statuses {
			if s.Name == st.Name {
				return cli.WriteJSON(stdout, s)
			}
		}
		return nil
	}
	printCreated(stdout, st, c.stateDir)
	return nil
}

// printCreated tells how to use the created sandbox st.
func printCreated(stdout io.Writer, st *sandbox.State, stateDir string) {
	sd := ""
	if stateDir != cli.DefaultStateDir() {
		sd = " --state-dir " + stateDir
	}
	ct := st.Container
	fmt.Fprintf(stdout, `
  run a command:   airlock sandbox exec%[9]s %[1]s -- CMD ...    (env file, CA bundle and DNS applied)
  container:       %[10]s, %[11]s, workdir %[13]s
  limits:          memory %[14]d bytes, pids %[15]d, cpu %[16]s, %[17]s
  env file:        %[2]s (inside: %[18]s)
  CA bundle:       %[3]s (inside: %[19]s)
  proxy:           http://%[4]s:%[5]d   model API: http://%[4]s:%[6]d/v1   DNS: %[4]s:53
  audit log:       %[7]s
  sidecar log:     %[8]s
  remove:          airlock sandbox delete%[9]s %[1]s
`, st.Name, st.EnvFile(), st.CABundle(), st.HostAddr, sandbox.ProxyPort, sandbox.LLMPort, st.AuditLog(), st.LogFile(), sd,
		ct.Runtime, idRange(ct), "" /* %[12] unused */, ct.Workdir,
		st.Limits.Memory, st.Limits.Pids, cpuLimit(st.Limits.CPU), writableLimit(ct), sandbox.InsideEnvFile, sandbox.InsideCABundle)
	if st.Network == sandbox.NetworkNone {
		fmt.Fprintln(stdout, "  network:         none (loopback only, no sidecar, no DNS)")
	}
}

// idRange is the ids line of the created container: its range, or for a rootless runtime
// (runsc) the one id mapped.
func idRange(ct *sandbox.ContainerState) string {
	if ct.Rootless {
		return fmt.Sprintf("uid/gid 0 inside = %d outside (rootless: only root is mapped)", ct.IDBase)
	}
	return fmt.Sprintf("uid/gid 0-65535 inside = %d-%d outside", ct.IDBase, uint64(ct.IDBase)+sandbox.IDRangeSize-1)
}

// writableLimit is what caps ct's /tmp and working directory, on create's limits line.
func writableLimit(ct *sandbox.ContainerState) string {
	if ct.Disk != nil {
		return fmt.Sprintf("/tmp and %s on a disk of %d bytes (%s)", ct.Workdir, ct.Disk.Size, ct.Disk.Loop)
	}
	return fmt.Sprintf("/tmp and %s %d bytes each", ct.Workdir, ct.TmpSize)
}

func cpuLimit(cpu float64) string {
	if cpu <= 0 {
		return "unlimited"
	}
	return strconv.FormatFloat(cpu, 'g', -1, 64)
}

// splitDashDash splits args at the first "--".
func splitDashDash(args []string) (before, after []string) {
	for i, a := range args {
		if a == "--" {
			return args[:i], args[i+1:]
		}
	}
	return args, nil
}

const execLong = `
Run CMD inside sandbox NAME's container, through its OCI runtime ("runc exec"): in its
namespaces, network namespace and cgroups, with no capabilities, no_new_privs and its seccomp
profile, as root of its user namespace (--user UID[:GID] for another uid of its range), in its
working directory. CMD gets a clean environment, as with docker exec: PATH, HOME (the working
directory), HOSTNAME (the sandbox name), LANG (and TERM on a terminal), the env file's
variables, and what --env names; never the rest of this environment (VAULT_TOKEN, secret
sources). stdin, stdout, stderr and the terminal are CMD's, and so is the exit status (128+N
for a death by signal N; 127 for a command that does not exist): this process becomes the
runtime, which passes signals on. (With --ephemeral it waits for it instead.)

--no-env leaves out the proxy, CA and model API variables: CMD then reaches out only through
the DNS filter and the kernel's redirect of TCP 80/443 to the transparent proxy.
--ephemeral creates sandbox NAME first (taking the create flags) and deletes it afterwards:
one sandbox per command (the per_tool mode). With --ephemeral --image REF the command runs
after the image's Entrypoint, and without a command the image's Cmd does (docker run IMAGE).
--as IDENTITY runs CMD as that identity of the sandbox's policy (spec.identities): in its own
cgroup below the sandbox's and as its own uid inside, so the sidecar decides, injects and
audits its requests by the identity's rules, and no other identity's process can trace,
signal or become it. Without --as, CMD is the sandbox's own identity.`

func sandboxExec(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("sandbox exec", "airlock sandbox exec [flags] NAME [--] CMD [ARGS...]", execLong, stderr)
	c := addCreateFlags(fs)
	noEnv := fs.Bool("no-env", false, "do not set the proxy, CA bundle and model API variables (transparent mode)")
	user := fs.String("user", "", "run CMD as UID[:GID] inside the sandbox, 0-65535 (default: its root, an unprivileged uid outside)")
	ephemeral := fs.Bool("ephemeral", false, "create the sandbox for this command and delete it afterwards")
	fs.StringVar(&c.image, "image", "", "with --ephemeral: the root filesystem's image, `REF` (an OCI layout directory, an OCI or docker-save tarball, or a registry reference); without a command, the image's Entrypoint and Cmd run")
	as := fs.String("as", "", "run CMD as this `IDENTITY` of the policy's spec.identities (its own cgroup and uid)")
	var pass envList
	fs.Var(&pass, "env", "give CMD the variable `KEY=VALUE`, or KEY with this environment's value (repeatable)")
	// Flags stop at NAME: everything after it is the command.
	if err := fs.ParseHead(args, stdout); err != nil {
		return err
	}
	name, argv, err := execCommand(fs, c, *ephemeral)
	if err != nil {
		return err
	}
	uid, gid, err := parseUser(*user)
	if err != nil {
		return err
	}
	switch {
	case *as != "" && *user != "":
		return cli.Failf("sandbox exec: --as and --user: an identity runs as its own uid; leave out --user")
	case *as != "" && *ephemeral:
		return cli.Failf("sandbox exec: --as needs a sandbox that outlives the command; create it first, then exec --as")
	}

	var progress io.Writer
	if *ephemeral {
		go sandbox.PrepareBundleEncoding() // beside the steps before the bundle
		progress = stderr
		if _, set := os.LookupEnv("GOGC"); !set {
			// The sidecar this process runs (runHere) sets it anyway; set first, it spares
			// the creation the collection its first few megabytes would cost.
			debug.SetGCPercent(defaultGCPercent)
		}
	}
	m, err := manager(c.stateDir, progress)
	if err != nil {
		return err
	}
	o := sandbox.ExecOptions{NoEnv: *noEnv, UID: uid, GID: gid, Env: os.Environ(), Pass: pass, As: *as}
	if *ephemeral {
		// Without a terminal the runtime creates the container with the command while the
		// sidecar starts; with one, the command starts it (runInSandbox).
		var once *sandbox.OnceProcess
		if !term.IsTerminal(int(os.Stdin.Fd())) && sandbox.CreatesOnce(c.runtime) {
			once = &sandbox.OnceProcess{Argv: argv, Exec: o, Stdio: [3]*os.File{os.Stdin, os.Stdout, os.Stderr}}
			if c.network != sandbox.NetworkNone {
				// The sidecar runs in this process (Manager.RunSidecar): its kernel objects
				// load beside the sandbox's other steps.
				ebpf.Preload()
			}
		}
		remove, err := createEphemeral(m, c, name, once, stderr)
		if err != nil {
			return err
		}
		defer remove()
		if once != nil {
			code, err := startCreated(m, name)
			return exitCode(name, code, err)
		}
	}
	if !*ephemeral {
		// Nothing is left to do once the command runs: become it (no helper process, and
		// the command's exit status and signals are its own).
		err := m.ExecInPlace(name, argv, o)
		var ee *sandbox.ExecError
		if errors.As(err, &ee) {
			return &cli.ExitError{Code: ee.Code, Msg: "sandbox exec: " + ee.Error()}
		}
		return cli.Failf("sandbox exec %s: %v", name, err)
	}
	code, err := runInSandbox(m, name, argv, o)
	return exitCode(name, code, err)
}

// execCommand is the sandbox's name and the command after the flags of sandbox exec. An
// ephemeral sandbox of an image may leave the command out: the image's Entrypoint and Cmd run.
func execCommand(fs *cli.FlagSet, c *createFlags, ephemeral bool) (name string, argv []string, err error) {
	rest := fs.Args()
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if c.image != "" && !ephemeral {
		return "", nil, cli.Failf("sandbox exec: --image needs --ephemeral (a running sandbox has its image; give it to sandbox create)")
	}
	imageCmd := ephemeral && c.image != ""
	if len(rest) < 1 || (len(rest) < 2 && !imageCmd) {
		fs.Usage()
		return "", nil, cli.Failf("sandbox exec: give NAME and a command")
	}
	name, argv = rest[0], rest[1:]
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 && !imageCmd {
		return "", nil, cli.Failf("sandbox exec: give a command after NAME")
	}
	return name, argv, nil
}

// exitCode is the error sandbox exec returns for the command's exit code, or for err.
func exitCode(name string, code int, err error) error {
	if err != nil {
		return cli.Failf("sandbox exec %s: %v", name, err)
	}
	if code != 0 {
		return &cli.ExitError{Code: code}
	}
	return nil
}

// createEphemeral creates sandbox name for `exec --ephemeral` and returns its removal.
func createEphemeral(m *sandbox.Manager, c *createFlags, name string, once *sandbox.OnceProcess, stderr io.Writer) (remove func(), err error) {
	o, err := c.options(name, nil)
	if err != nil {
		return nil, err
	}
	// The command starts the container (runInSandbox), or with once the runtime creates it
	// with the command and startCreated starts it.
	o.Once, o.OnceProcess = true, once
	if err := c.pullLogin(context.Background(), m, o); err != nil {
		return nil, err
	}
	_, err = m.Create(context.Background(), o)
	var warn *sandbox.Warning
	if errors.As(err, &warn) {
		fmt.Fprintln(stderr, "airlock:", warn.Msg)
		err = nil
	}
	if err != nil {
		return nil, cli.Failf("sandbox exec --ephemeral: create %s: %v", name, err)
	}
	return func() {
		err := m.Delete(context.Background(), name)
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			fmt.Fprintf(stderr, "airlock: sandbox exec --ephemeral: %s was deleted by another command\n", name)
		case err != nil:
			fmt.Fprintf(stderr, "airlock: sandbox exec --ephemeral: delete %s: %v\n", name, err)
		}
	}, nil
}

// startCreated starts the command of sandbox name (created with it by createEphemeral) and
// returns its exit code. Signals that reach this process are passed on: the command's process
// is the container's first, in a session of its own, and this process is its parent (a child
// subreaper).
func startCreated(m *sandbox.Manager, name string) (int, error) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	pid, err := m.StartOnce(name)
	if err != nil {
		return 0, err
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = syscall.Kill(pid, s.(syscall.Signal))
			case <-done:
				return
			}
		}
	}()
	return sandbox.WaitContainer(pid)
}

// runInSandbox runs argv as the container of the sandbox (made by createEphemeral) with this
// process's stdio and returns its exit code.
// While it runs, SIGINT and SIGQUIT are left to the command (the terminal sends them to its
// process group, which the command shares); SIGTERM and SIGHUP are passed on.
func runInSandbox(m *sandbox.Manager, name string, argv []string, o sandbox.ExecOptions) (int, error) {
	cmd, st, err := m.OnceCommand(name, argv, o)
	if err != nil {
		return 0, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := sandbox.StartCommand(cmd, st); err != nil {
		return 0, err
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGTERM || s == syscall.SIGHUP {
					_ = cmd.Process.Signal(s)
				}
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return 0, err
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return cmd.ProcessState.ExitCode(), nil
}

// parseUser reads UID[:GID]; -1 means unchanged.
func parseUser(s string) (uid, gid int, err error) {
	if s == "" {
		return -1, -1, nil
	}
	u, g, hasG := strings.Cut(s, ":")
	if uid, err = strconv.Atoi(u); err != nil || uid < 0 {
		return 0, 0, cli.Failf("--user %q: give a numeric UID[:GID]", s)
	}
	gid = uid
	if hasG {
		if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
			return 0, 0, cli.Failf("--user %q: give a numeric UID[:GID]", s)
		}
	}
	return uid, gid, nil
}

func sandboxList(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("sandbox list", "airlock sandbox list [--json] [--backend kubernetes [--namespace NS | --all-namespaces]]", `
List the sandboxes of the state directory: name, age, policy, sidecar health, bytes the
sandbox sent and received, denials (kernel, proxy and DNS), model API spend from the usage
ledger, and the usage meter's CPU-seconds, memory peak and compute spend (spec.usage); a
sandbox a usage cap froze is named below the table with the cap's message.
With --backend kubernetes, list the sandbox pods "sandbox create --backend kubernetes" made
(label airlock.dev/sandbox): namespace, name, age, phase, sidecar state, policy ConfigMap, node.`, stderr)
	stateDir := fs.String("state-dir", cli.DefaultStateDir(), "state directory")
	asJSON := fs.Bool("json", false, "print a JSON array with every field")
	backend := fs.String("backend", "local", "local (this machine's state directory) | kubernetes (sandbox pods made by sandbox create --backend kubernetes)")
	var k cli.KubeCluster
	k.Register(fs)
	all := fs.Bool("all-namespaces", false, "kubernetes: list the sandboxes of every namespace")
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		fs.Usage()
		return cli.ErrUsage
	}
	switch *backend {
	case "local":
	case "kubernetes":
		return kubeList(&k, *all, *asJSON)
	default:
		return cli.Failf("--backend %q: use local or kubernetes", *backend)
	}
	m, err := manager(*stateDir, nil)
	if err != nil {
		return err
	}
	statuses, err := m.Statuses(context.Background(), 2*time.Second)
	if err != nil {
		fmt.Fprintf(stderr, "airlock: sandbox list: %v\n", err)
	}
	for i := range statuses {
		statuses[i].OpenAsks = openAsks(statuses[i].SidecarDir)
	}
	fillUsage(statuses)
	if *asJSON {
		if statuses == nil {
			statuses = []sandbox.Status{}
		}
		return cli.WriteJSON(stdout, statuses)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tAGE\tPHASE\tHEALTH\tKERNEL\tPOLICY\tBYTES\tRECEIVED\tDENIES\tASKS\tCPU-S\tMEM PEAK\tLLM SPEND\tCOMPUTE\tDISK")
	for _, s := range statuses {
		kernel := "on"
		if !s.Kernel {
			kernel = "OFF"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%.2f\t%dMiB\t$%.6f\t$%.6f\t%s\n", s.Name, cli.Age(time.Duration(s.AgeSeconds)*time.Second),
			s.Phase, s.Health, kernel, s.Policy, s.Bytes, s.RxBytes, s.Denies, s.OpenAsks, s.CPUSeconds, s.MemoryPeakBytes>>20, s.LLMSpendUSD, s.ComputeUSD, diskColumn(s))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range statuses {
		if len(s.Identities) > 0 {
			ids := make([]string, 0, len(s.Identities))
			for _, id := range s.Identities {
				ids = append(ids, fmt.Sprintf("%s (uid %d, CPU %.2fs, LLM $%.6f, proxy bytes %d, denies %d)",
					id.Name, id.UID, id.CPUSeconds, id.LLMSpendUSD, id.ProxyBytes, id.Denies))
			}
			fmt.Fprintf(stdout, "%s: identities: %s\n", s.Name, strings.Join(ids, ", "))
		}
		if s.Frozen != "" {
			fmt.Fprintf(stdout, "%s: FROZEN: %s (raise the cap and reload the policy, or airlock sandbox thaw %s)\n", s.Name, s.Frozen, s.Name)
		}
	}
	return nil
}

func sandboxDelete(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("sandbox delete", "airlock sandbox delete [--backend kubernetes [--namespace NS]] NAME [NAME...]", `
Stop each sandbox's sidecar gracefully (SIGTERM: it revokes its Vault leases; SIGKILL after
30 s), kill what still runs in its cgroup, detach and unpin its kernel programs, and remove its
network namespace, veth pair, cgroup and state. Deleting a sandbox that does not exist
succeeds; a failed step keeps the state file so that delete or reap can retry.
With --backend kubernetes, delete the sandbox pod (the kubelet stops the sidecar last, which
revokes its Vault leases), wait until it is gone, and delete the policy ConfigMap made for it
unless another sandbox uses it. Pods "sandbox create" did not make are refused.`, stderr)
	stateDir := fs.String("state-dir", cli.DefaultStateDir(), "state directory")
	backend := fs.String("backend", "local", "local (this machine's sandboxes) | kubernetes (a sandbox pod made by sandbox create --backend kubernetes, and the policy ConfigMap made for it)")
	var k cli.KubeCluster
	k.Register(fs)
	names, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		fs.Usage()
		return cli.Failf("sandbox delete: give at least one NAME")
	}
	switch *backend {
	case "local":
	case "kubernetes":
		return kubeDelete(&k, names)
	default:
		return cli.Failf("--backend %q: use local or kubernetes", *backend)
	}
	m, err := manager(*stateDir, stdout)
	if err != nil {
		return err
	}
	var errs []string
	for _, name := range names {
		began := time.Now()
		err := m.Delete(context.Background(), name)
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			fmt.Fprintf(stdout, "sandbox %s: not found (nothing to delete)\n", name)
		case err != nil:
			errs = append(errs, err.Error())
		default:
			fmt.Fprintf(stdout, "sandbox %s deleted in %s\n", name, time.Since(began).Round(time.Millisecond))
		}
	}
	if len(errs) > 0 {
		return cli.Failf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func sandboxReap(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("sandbox reap", "airlock sandbox reap --older-than DURATION", `
Remove sandboxes created longer ago than --older-than, and orphaned ones of any age: those a
crashed create or delete left half-built, those whose supervisor is gone, and cgroups under
the sandboxes' cgroup parent that no state file names; and the cached image layers no sandbox
holds that no create used for --older-than. Run it from cron or a systemd timer.`, stderr)
	stateDir := fs.String("state-dir", cli.DefaultStateDir(), "state directory")
	olderThan := fs.Duration("older-than", 0, "remove sandboxes older than this (e.g. 10m, 24h); required")
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 0 || !flagGiven(fs, "older-than") {
		fs.Usage()
		return cli.Failf("sandbox reap: --older-than is required (0s removes every sandbox)")
	}
	m, err := manager(*stateDir, nil)
	if err != nil {
		return err
	}
	results, err := m.Reap(context.Background(), *olderThan)
	var failed []string
	for _, r := range results {
		if r.Err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", r.Name, r.Err))
			continue
		}
		fmt.Fprintf(stdout, "reaped %s: %s\n", r.Name, r.Reason)
	}
	if len(results) == 0 {
		fmt.Fprintln(stdout, "nothing to reap")
	}
	if err != nil {
		failed = append(failed, err.Error())
	}
	if len(failed) > 0 {
		return cli.Failf("sandbox reap: %s", strings.Join(failed, "; "))
	}
	return nil
}

// flagGiven reports whether the flag was set on the command line or from its variable
// (applyEnv sets flags through fs.Set, so both count as visited).
func flagGiven(fs *cli.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

func sandboxDoctor(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("sandbox doctor", "airlock sandbox doctor [flags]", `
Check that this machine can run sandboxes: privileges, cgroup v2 and the cgroup layout (pure v2
or hybrid), the OCI runtime and its version, user namespaces, overlayfs, bpffs, the kernel's BPF
features, the BPF LSM, network namespaces and veth pairs, the --subnet, wildcard listeners on
the sidecar ports, the state directory and Vault (when VAULT_ADDR or --vault-addr is set).
Prints a PASS/FAIL table with the fix for each failure; exits 1 if anything failed.`, stderr)
	stateDir := fs.String("state-dir", cli.DefaultStateDir(), "state directory")
	subnet := fs.String("subnet", sandbox.DefaultSubnet, "the --subnet sandboxes will use")
	cgroupParent := fs.String("cgroup-parent", "", "the --cgroup-parent sandboxes will use")
	vaultAddr := fs.String("vault-addr", os.Getenv("VAULT_ADDR"), "Vault to check (default $VAULT_ADDR)")
	runtimeName := fs.String("runtime", sandbox.DefaultRuntime, "the --runtime sandboxes will use: runc | crun | PATH")
	asJSON := fs.Bool("json", false, "print the checks as JSON")
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		fs.Usage()
		return cli.ErrUsage
	}
	m, err := manager(*stateDir, nil)
	if err != nil {
		return err
	}
	checks := m.Doctor(context.Background(), sandbox.DoctorOptions{Subnet: *subnet, CgroupParent: *cgroupParent, VaultAddr: *vaultAddr, Runtime: *runtimeName})
	failed := 0
	for _, c := range checks {
		if c.Result == sandbox.Fail {
			failed++
		}
	}
	if *asJSON {
		if err := cli.WriteJSON(stdout, checks); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
		for _, c := range checks {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Result, c.Detail)
			if c.Fix != "" && c.Result != sandbox.Pass {
				fmt.Fprintf(tw, "\t\tfix: %s\n", c.Fix)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if failed > 0 {
		return cli.Failf("sandbox doctor: %d check(s) failed", failed)
	}
	return nil
}

// sandboxSupervise is the detached supervisor create starts: it runs and restarts the
// sandbox's sidecar until SIGTERM.
func sandboxSupervise(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("sandbox supervise", "airlock sandbox supervise NAME", "Internal: started by sandbox create.", stderr)
	stateDir := fs.String("state-dir", cli.DefaultStateDir(), "state directory")
	adopt := fs.Int("adopt", 0, "pid of the running first sidecar to supervise")
	rest, err := fs.ParseArgs(args, stdout, false)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return cli.ErrUsage
	}
	store, err := sandbox.OpenStore(*stateDir)
	if err != nil {
		return cli.Failf("%v", err)
	}
	st, err := store.Load(rest[0])
	if err != nil {
		return cli.Failf("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	signal.Ignore(syscall.SIGHUP)
	wanted := func() bool {
		cur, err := store.Load(st.Name)
		return err == nil && cur.Phase != sandbox.PhaseDeleting
	}
	if err := sandbox.Supervise(ctx, st, *adopt, wanted, os.Stderr); err != nil {
		return cli.Failf("supervise %s: %v", st.Name, err)
	}
	return nil
}

// mountList is the repeatable --mount flag.
type mountList []sandbox.Mount

func (l *mountList) String() string {
	var out []string
	for _, m := range *l {
		out = append(out, m.Source+":"+m.Dest)
	}
	return strings.Join(out, ",")
}

func (l *mountList) Set(s string) error {
	m, err := sandbox.ParseMount(s)
	if err != nil {
		return err
	}
	*l = append(*l, m)
	return nil
}

// envList is the repeatable --env flag of sandbox exec.
type envList []string

func (l *envList) String() string { return strings.Join(*l, ",") }

func (l *envList) Set(s string) error {
	k, _, _ := strings.Cut(s, "=")
	if k == "" || strings.ContainsAny(k, " \t\x00") {
		return fmt.Errorf("want KEY=VALUE or KEY, got %q", s)
	}
	*l = append(*l, s)
	return nil
}

// diskColumn is sandbox list's DISK: use against the cap of the sandbox's --disk, "-" for none.
func diskColumn(s sandbox.Status) string {
	switch {
	case s.DiskBytes == 0:
		return "-"
	case s.DiskUsedBytes < 0:
		return "?/" + humanBytes(s.DiskBytes)
	}
	return fmt.Sprintf("%s/%s (%d%%)", humanBytes(s.DiskUsedBytes), humanBytes(s.DiskBytes), s.DiskUsedBytes*100/s.DiskBytes)
}

// humanBytes writes n with one decimal in the largest binary unit below it.
func humanBytes(n int64) string {
	const units = "KMGT"
	if n < 1024 {
		return fmt.Sprintf("%dB", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v, i = v/1024, i+1
	}
	return fmt.Sprintf("%.1f%c", v, units[i])
}
