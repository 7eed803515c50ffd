package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// env is what every leg shares.
type env struct {
	cfg      config
	upstream *upstream
	progress func(format string, a ...any)
	// airlockBin is the binary the airlock leg ran, once it has; "" before.
	airlockBin string
}

// proxyRun is one started proxy.
type proxyRun struct {
	addr     string
	admin    string // airlock's admin listener; "" for other proxies
	stateDir string // airlock's --state-dir; "" for other proxies
	p        *proc
	// audit reads the proxy's audit trail after it stopped and proves audit was on; nil for
	// a reference leg, which has none.
	audit func() (auditStats, error)
	conf  []byte // the configuration file it ran with, printed in the report (Squid's); nil if none
}

// auditStats summarises a proxy's audit trail for the measured leg (warm-up included).
type auditStats struct {
	file    string
	lines   int64 // records
	allowed int64 // records of a request that was allowed / answered 200
}

// proxy is one proxy the bench compares: how to start it with policy (or ACL) and audit on.
type proxy struct {
	name  string
	start func(ctx context.Context, e *env, dir string) (*proxyRun, error)
	// reference marks a leg that is a yardstick, not a competitor: it has no policy and no
	// audit trail (its proxyRun.audit is nil), so the audit check does not apply to it.
	reference bool
}

// proxies lists the proxied targets in the order they run.
func proxies() []proxy {
	return []proxy{
		{name: "airlock", start: startAirlock},
		{name: targetAirlockInject, start: startAirlockInject},
		{name: "squid", start: startSquid},
		{name: targetAirlockSquid, start: startAirlockSquid},
		{name: "tinyproxy", start: startTinyproxy},
		{name: targetNetHTTP, start: startNetHTTP, reference: true},
	}
}

// isReference reports whether the named target is a reference leg.
func isReference(name string) bool {
	for _, p := range proxies() {
		if p.name == name {
			return p.reference
		}
	}
	return false
}

// ---- airlock ----------------------------------------------------------------------------

// benchPolicy allows exactly the upstream. Loopback is behind airlock's SSRF guard unless a
// rule names it by CIDR, so the rule uses cidrs, not hosts.
const benchPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: bench
spec:
  mode: enforce
  egress:
    - name: bench-upstream
      cidrs: ["127.0.0.1/32"]
      ports: [%d]
`

func startAirlock(ctx context.Context, e *env, dir string) (*proxyRun, error) {
	return startAirlockPolicy(ctx, e, dir, benchPolicy)
}

// startAirlockPolicy starts airlock with policy, a format taking the upstream's port.
func startAirlockPolicy(ctx context.Context, e *env, dir, policy string) (*proxyRun, error) {
	_, portStr, _ := strings.Cut(e.upstream.addr, ":")
	port, _ := strconv.Atoi(portStr)
	return startAirlockWith(ctx, e, dir, fmt.Appendf(nil, policy, port), airlockOpts{upstreamDNS: "127.0.0.1:53"})
}

// airlockOpts are what the HTTP and HTTPS sections start airlock with differently.
type airlockOpts struct {
	upstreamDNS string   // --upstream-dns
	env         []string // added to the environment (SSL_CERT_FILE for the HTTPS section)
	pprof       bool     // --admin-pprof, so the bench can take profiles
	args        []string // further flags (the chained leg's --upstream-proxy)
	bin         string   // run this binary (-baseline-bin); "" = the airlock under test
}

// startAirlockWith starts airlock with the policy file body and opts.
func startAirlockWith(ctx context.Context, e *env, dir string, policy []byte, opts airlockOpts) (*proxyRun, error) {
	bin := opts.bin
	if bin == "" {
		// Built once per bench: every later start runs the same binary.
		if bin = e.airlockBin; bin == "" {
			var err error
			if bin, err = airlockBinary(ctx, e, dir); err != nil {
				return nil, err
			}
		}
		e.airlockBin = bin
	}
	policyPath := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyPath, policy, 0o644); err != nil {
		return nil, err
	}
	proxyAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	adminAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	stateDir := filepath.Join(dir, "state")
	auditPath := filepath.Join(dir, "audit.jsonl")
	args := []string{"run",
		"--policy", policyPath,
		"--proxy-addr", proxyAddr,
		"--admin-addr", adminAddr,
		"--state-dir", stateDir,
		"--audit-log", auditPath,
		"--sandbox", "bench",
	}
	args = append(args, optionalFlags(ctx, bin, opts)...)
	args = append(args, opts.args...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	// Neither the caller's proxy settings nor its AIRLOCK_* variables (which set any flag
	// not given) may change what is measured.
	cmd.Env = nil
	for _, kv := range withoutProxyEnv(os.Environ()) {
		if !strings.HasPrefix(kv, "AIRLOCK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, opts.env...)
	e.progress("%s %s", bin, strings.Join(args, " "))
	// stderr carries logs and a copy of every audit line: it goes to a file, never a pipe.
	p, err := startProc("airlock", cmd, filepath.Join(dir, "airlock.log"))
	if err != nil {
		return nil, err
	}
	readyz := "http://" + adminAddr + "/readyz"
	err = waitReady(ctx, p, 30*time.Second, func() error {
		resp, err := e.upstream.client.Get(readyz)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", readyz, resp.Status)
		}
		return nil
	})
	if err != nil {
		p.stop()
		return nil, err
	}
	return &proxyRun{addr: proxyAddr, admin: adminAddr, stateDir: stateDir, p: p, audit: func() (auditStats, error) {
		return airlockAudit(auditPath)
	}}, nil
}

// optionalFlags turns off the listeners the bench does not use, so they neither take CPU
// nor clash with another process on their default ports, and points the sidecar's resolver
// at opts.upstreamDNS (a dead loopback port for the HTTP legs: the upstream is an IP, and no
// DNS query may leave the machine). Only flags bin lists in its help are passed.
func optionalFlags(ctx context.Context, bin string, opts airlockOpts) []string {
	hctx, hcancel := context.WithTimeout(ctx, 10*time.Second)
	help, _ := exec.CommandContext(hctx, bin, "run", "--help").CombinedOutput()
	hcancel()
	var args []string
	for _, f := range [][2]string{
		{"transparent-addr", "off"}, {"dns-addr", "off"}, {"llm-addr", "off"},
		{"upstream-dns", opts.upstreamDNS},
	} {
		if regexp.MustCompile(`(?m)^\s*--?` + f[0] + `\b`).Match(help) {
			args = append(args, "--"+f[0], f[1])
		}
	}
	if opts.pprof {
		args = append(args, "--admin-pprof")
	}
	return args
}

// airlockBinary returns -airlock-bin, or builds ./cmd/airlock into dir.
func airlockBinary(ctx context.Context, e *env, dir string) (string, error) {
	if e.cfg.airlockBin != "" {
		return e.cfg.airlockBin, nil
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build airlock: go not in PATH (or pass -airlock-bin): %w", err)
	}
	gomod, err := exec.CommandContext(ctx, gobin, "env", "GOMOD").Output()
	modDir := filepath.Dir(strings.TrimSpace(string(gomod)))
	if err != nil || modDir == "." || strings.TrimSpace(string(gomod)) == os.DevNull {
		return "", fmt.Errorf("build airlock: run the bench inside the airlock module (go env GOMOD: %q, %v)", gomod, err)
	}
	bin := filepath.Join(dir, "airlock")
	e.progress("building ./cmd/airlock (static, as make build)")
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", bin, "./cmd/airlock")
	cmd.Dir = modDir
	// Static, as make build and the image build it: the bench measures what ships.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/airlock: %v\n%s", err, indent(firstLines(strings.TrimSpace(string(out)), 12)))
	}
	return bin, nil
}

// airlockAudit counts the audit events and checks that the bench's requests were allowed.
func airlockAudit(path string) (auditStats, error) {
	st := auditStats{file: path}
	f, err := os.Open(path)
	if err != nil {
		return st, fmt.Errorf("audit log: %w (was audit on?)", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	var denied int64
	var firstDeny string
	for sc.Scan() {
		var ev struct {
			Kind     string `json:"kind"`
			Decision string `json:"decision"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return st, fmt.Errorf("audit log %s line %d: %w", path, st.lines+1, err)
		}
		st.lines++
		switch ev.Decision {
		case "allow":
			st.allowed++
		case "deny":
			if denied++; firstDeny == "" {
				firstDeny = sc.Text()
			}
		}
	}
	if err := sc.Err(); err != nil {
		return st, fmt.Errorf("read audit log: %w", err)
	}
	if st.lines == 0 {
		return st, errors.New("audit log is empty: audit was not on")
	}
	if denied > 0 {
		return st, fmt.Errorf("%d requests denied by policy, first: %s", denied, firstDeny)
	}
	return st, nil
}

// withoutProxyEnv drops HTTP(S)_PROXY and friends, so no child proxies its own upstream
// traffic through whatever the caller's shell points at.
func withoutProxyEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "http_proxy", "https_proxy", "all_proxy", "no_proxy":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// ---- Squid ------------------------------------------------------------------------------

// squidConf is the smallest Squid configuration a user would run as an egress proxy with an
// allowlist and an access log: no cache (every request goes upstream, as with airlock), the
// access log through Squid's default logfile daemon, one worker by default (-squid-workers),
// and every file in the bench's directory.
const squidConf = `# generated by airlock's bench
http_port %[1]s
acl bench_client src 127.0.0.1/32
acl bench_upstream dst 127.0.0.1/32
acl bench_port port %[2]s
http_access allow bench_client bench_upstream bench_port
http_access deny all
cache deny all
cache_mem 0 MB
access_log daemon:%[3]s/access.log squid
cache_log %[3]s/cache.log
cache_store_log none
pid_filename %[3]s/squid.pid
coredump_dir %[3]s
visible_hostname localhost
# Keep every packet on loopback: the upstream is an IP, but Squid opens DNS sockets anyway.
dns_nameservers 127.0.0.1
pinger_enable off
shutdown_lifetime 0 seconds
workers %[5]d
%[4]s
`

func startSquid(ctx context.Context, e *env, dir string) (*proxyRun, error) {
	bin, err := findBinary("squid", "squid-openssl")
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(e.upstream.addr, ":")
	userLine, err := dropPrivileges(dir, "cache_effective_user proxy")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "squid.conf")
	body := fmt.Appendf(nil, squidConf, addr, port, dir, userLine, e.cfg.squidWorkers)
	if err := os.WriteFile(conf, body, 0o644); err != nil {
		return nil, err
	}
	// -N: one process in the foreground, so the bench owns it. SMP workers need Squid's
	// master process; --foreground keeps that master attached to the bench instead.
	// -d1: startup errors to stderr.
	mode := "-N"
	if e.cfg.squidWorkers > 1 {
		mode = "--foreground"
	}
	p, err := startListening(ctx, "squid", exec.Command(bin, mode, "-d1", "-f", conf), dir, addr)
	if err != nil {
		return nil, err
	}
	return &proxyRun{addr: addr, p: p, conf: body, audit: func() (auditStats, error) {
		return countLog(filepath.Join(dir, "access.log"), "", " TCP_MISS/200 ")
	}}, nil
}

// ---- tinyproxy --------------------------------------------------------------------------

// tinyproxyConf allows the loopback client, logs every request (LogLevel Connect writes
// one line per connection and per request) and has room for every bench connection.
const tinyproxyConf = `# generated by airlock's bench
Port %[2]s
Listen 127.0.0.1
Timeout 60
Allow 127.0.0.1
MaxClients %[5]d
LogFile "%[3]s/tinyproxy.log"
LogLevel Connect
PidFile "%[3]s/tinyproxy.pid"
%[4]s
`

func startTinyproxy(ctx context.Context, e *env, dir string) (*proxyRun, error) {
	bin, err := findBinary("tinyproxy", "tinyproxy")
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	userLine, err := dropPrivileges(dir, "User proxy\nGroup proxy")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "tinyproxy.conf")
	body := fmt.Appendf(nil, tinyproxyConf, addr, port, dir, userLine, 2*e.cfg.connections+16)
	if err := os.WriteFile(conf, body, 0o644); err != nil {
		return nil, err
	}
	// -d: foreground.
	p, err := startListening(ctx, "tinyproxy", exec.Command(bin, "-d", "-c", conf), dir, addr)
	if err != nil {
		return nil, err
	}
	return &proxyRun{addr: addr, p: p, audit: func() (auditStats, error) {
		return countLog(filepath.Join(dir, "tinyproxy.log"), "]: Request (file descriptor", "")
	}}, nil
}

// ---- shared -----------------------------------------------------------------------------

// startListening starts a third-party proxy in dir, without the bench's proxy environment,
// logging to dir/NAME.out, and waits until addr accepts connections.
func startListening(ctx context.Context, name string, cmd *exec.Cmd, dir, addr string) (*proc, error) {
	cmd.Dir = dir
	cmd.Env = withoutProxyEnv(os.Environ())
	p, err := startProc(name, cmd, filepath.Join(dir, name+".out"))
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, p, 30*time.Second, dialCheck(addr)); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// dropPrivileges returns the config line that makes a proxy started as root drop to the
// Debian "proxy" user (as its packaged service does), after giving that user dir. As any
// other user it returns "" and the proxy runs as that user.
func dropPrivileges(dir, line string) (string, error) {
	if os.Geteuid() != 0 {
		return "", nil
	}
	u, err := user.Lookup("proxy")
	if err != nil {
		return "", fmt.Errorf("look up user proxy (created by Debian's base-passwd): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return "", fmt.Errorf("give %s to user proxy: %w", dir, err)
	}
	return line, nil
}

// findBinary looks name up in PATH and in /usr/sbin (not in a non-root PATH on Debian).
func findBinary(name, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", name)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found; install it with: apt-get install -y %s", name, pkg)
}

// countLog counts the lines of a proxy's log that contain record (all lines when "") and,
// of those, the ones that contain ok (all of them when "").
func countLog(path, record, ok string) (auditStats, error) {
	st := auditStats{file: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, fmt.Errorf("log %s was not written: logging was not on", path)
	}
	if err != nil {
		return st, err
	}
	for line := range strings.Lines(string(b)) {
		if record != "" && !strings.Contains(line, record) {
			continue
		}
		st.lines++
		if ok == "" || strings.Contains(line, ok) {
			st.allowed++
		}
	}
	if st.lines == 0 {
		return st, fmt.Errorf("log %s has no request lines: logging was not on", path)
	}
	return st, nil
}

// firstLines returns the first n lines of s, saying how many it left out.
func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n... (%d more lines)", len(lines)-n)
}
