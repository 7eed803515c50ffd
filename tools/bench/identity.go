package main

// The identity section of `make bench` (issue 34): what telling identities apart costs the
// sidecar. Two sidecars run with kernel enforcement on a cgroup of their own (--cgroup),
// the same rule allowing the bench's upstream: one's policy has no identities, the other's
// has one (bench), whose processes run in the child cgroup airlock-id-bench. A client (this
// binary re-executed with identityClientRole) started directly in the cgroup (the sandbox's
// own for the first, the identity's for the second; CLONE_INTO_CGROUP) sends the same plain
// HTTP GETs through the sidecar over keep-alive connections; with identities, the proxy asks
// the kernel's peer map which cgroup connected for every request and decides by that
// identity's policy. The figure is the sidecar's CPU per request, both ways, in turns.
// Every counted request must be a 2xx from the upstream (the client stops at the first that
// is not), and the upstream must have served them all. It needs root, cgroup v2 and bpffs;
// without them it reports why and is skipped.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/policy"
)

const (
	identityClientRole = "identity-client-child"
	identityRequests   = 20000
	identityConns      = 8
	identityRounds     = 3
	identityName       = "bench"
)

// identityPolicy is benchPolicy with one identity (the sandbox's rule, the same decision).
const identityPolicy = benchPolicy + `  identities:
    ` + identityName + `:
      egress:
        - name: bench-upstream
          cidrs: ["127.0.0.1/32"]
          ports: [%[1]d]
`

// identityReport holds the identity section's figures.
type identityReport struct {
	skipped                   string
	withoutUs, withUs         float64 // sidecar CPU µs per request, medians
	withoutRounds, withRounds []float64
	requests                  int // per round and way
	err                       error
}

// runIdentityClientChild sends os.Args[4] GETs of http://os.Args[3]/ through the HTTP proxy
// at os.Args[2] over identityConns keep-alive connections, and prints how many got a 2xx. A
// status outside 2xx or an error ends it with a message and exit status 1.
func runIdentityClientChild() int {
	n, err := strconv.Atoi(os.Args[4])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	proxyURL := &url.URL{Scheme: "http", Host: os.Args[2]}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(proxyURL), MaxIdleConnsPerHost: identityConns, DisableCompression: true}}
	target := "http://" + os.Args[3] + "/"
	var ok, next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for range identityConns {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := identityGet(client, target); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		fmt.Fprintf(os.Stderr, "after %d requests: %v\n", ok.Load(), firstErr)
		return 1
	}
	fmt.Println(ok.Load())
	return 0
}

// identityGet sends one GET and insists on a 2xx.
func identityGet(client *http.Client, target string) error {
	resp, err := client.Get(target)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: %s: %s", target, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// identitySide is one of the two sidecars and the cgroup its client runs in.
type identitySide struct {
	identity string // the identity its requests must be decided as ("": the sandbox's own)
	label    string
	cgroup   string // the sidecar's --cgroup
	client   string // the cgroup the client runs in
	upstream string // the bench's upstream, host:port
	pr       *proxyRun
	sandbox  string
	// auditPath is the sidecar's audit log: every request must be an allow event of identity.
	auditPath string
}

func runIdentityBench(ctx context.Context, e *env, root string) identityReport {
	if os.Geteuid() != 0 {
		return identityReport{skipped: "not root"}
	}
	if err := ebpf.Probe(); err != nil {
		return identityReport{skipped: err.Error()}
	}
	cgRoot, err := ebpf.Cgroup2Root()
	if err != nil {
		return identityReport{skipped: err.Error()}
	}
	plain, err := startIdentitySide(ctx, e, root, cgRoot, "noid", benchPolicy, "")
	if err != nil {
		return identityReport{err: err}
	}
	defer plain.stop()
	withID, err := startIdentitySide(ctx, e, root, cgRoot, "id", identityPolicy, identityName)
	if err != nil {
		return identityReport{err: err}
	}
	defer withID.stop()
	rep := identityReport{requests: identityRequests}
	for round := range identityRounds {
		e.progress("identity: round %d/%d: %d GETs through a sidecar without identities, then as identity %s", round+1, identityRounds, identityRequests, identityName)
		for _, s := range []*identitySide{plain, withID} {
			us, err := s.measure(ctx, e)
			if err != nil {
				return identityReport{err: err}
			}
			if s == plain {
				rep.withoutRounds = append(rep.withoutRounds, us)
			} else {
				rep.withRounds = append(rep.withRounds, us)
			}
		}
	}
	rep.withoutUs, rep.withUs = median(rep.withoutRounds), median(rep.withRounds)
	for _, s := range []*identitySide{plain, withID} {
		s.stop() // the audit log is complete once the sidecar has stopped
		if err := s.checkAudit(1 + identityRounds*identityRequests); err != nil {
			return identityReport{err: err}
		}
	}
	return rep
}

// checkAudit reads the stopped sidecar's audit log: it must hold at least want allowed
// requests, each decided as s.identity, and nothing else denied or decided as another.
func (s *identitySide) checkAudit(want int) error {
	f, err := os.Open(s.auditPath)
	if err != nil {
		return fmt.Errorf("sidecar %s: audit log: %w", s.label, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	allowed := 0
	for line := 1; sc.Scan(); line++ {
		var ev struct {
			Kind     string `json:"kind"`
			Decision string `json:"decision"`
			Identity string `json:"identity"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("sidecar %s: audit log line %d: %w", s.label, line, err)
		}
		if ev.Kind != "http" {
			continue
		}
		if ev.Decision != "allow" || ev.Identity != s.identity {
			return fmt.Errorf("sidecar %s: audit log line %d: %s as identity %q, want allow as %q: %s", s.label, line, ev.Decision, ev.Identity, s.identity, sc.Text())
		}
		allowed++
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("sidecar %s: audit log: %w", s.label, err)
	}
	if allowed < want {
		return fmt.Errorf("sidecar %s: %d requests allowed in the audit log, want %d", s.label, allowed, want)
	}
	return nil
}

// startIdentitySide makes the sidecar's cgroup (and the identity's child cgroup when
// identity is not ""), starts airlock on it with policy, and checks one request by hand.
func startIdentitySide(ctx context.Context, e *env, root, cgRoot, label, pol, identity string) (*identitySide, error) {
	s := &identitySide{label: label, identity: identity, upstream: e.upstream.addr, sandbox: fmt.Sprintf("bench-%s-%d", label, os.Getpid()),
		cgroup: filepath.Join(cgRoot, fmt.Sprintf("airlock-bench-%s-%d", label, os.Getpid()))}
	s.client = s.cgroup
	if err := os.Mkdir(s.cgroup, 0o755); err != nil {
		return nil, fmt.Errorf("identity bench cgroup: %w", err)
	}
	if identity != "" {
		s.client = filepath.Join(s.cgroup, policy.IdentityCgroupDir(identity))
		if err := os.Mkdir(s.client, 0o755); err != nil {
			s.stop()
			return nil, fmt.Errorf("identity bench cgroup: %w", err)
		}
	}
	dir := filepath.Join(root, "identity-"+label)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.stop()
		return nil, err
	}
	_, portStr, _ := strings.Cut(e.upstream.addr, ":")
	port, _ := strconv.Atoi(portStr)
	pr, err := startAirlockWith(ctx, e, dir, fmt.Appendf(nil, pol, port), airlockOpts{upstreamDNS: "127.0.0.1:53",
		args: []string{"--cgroup", s.cgroup, "--sandbox", s.sandbox}})
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("identity bench, sidecar %s: %w", label, err)
	}
	s.pr = pr
	s.auditPath = filepath.Join(dir, "audit.jsonl")
	if _, err := s.runClient(ctx, 1); err != nil {
		s.stop()
		return nil, fmt.Errorf("identity bench, first request through sidecar %s: %w", label, err)
	}
	return s, nil
}

// measure runs one round and returns the sidecar's CPU µs per request.
func (s *identitySide) measure(ctx context.Context, e *env) (float64, error) {
	served0, err := e.upstream.served()
	if err != nil {
		return 0, err
	}
	cpu0 := treeCPU(s.pr.p.cmd.Process.Pid)
	n, err := s.runClient(ctx, identityRequests)
	if err != nil {
		return 0, err
	}
	cpu := treeCPU(s.pr.p.cmd.Process.Pid) - cpu0
	if done, err := s.pr.p.exited(); done {
		return 0, fmt.Errorf("sidecar %s exited (%s); last log lines:\n%s", s.label, exitStatus(err), indent(s.pr.p.logTail(15)))
	}
	served1, err := e.upstream.served()
	if err != nil {
		return 0, err
	}
	if n != identityRequests || served1-served0 < int64(n) {
		return 0, fmt.Errorf("sidecar %s: %d of %d requests answered 2xx, the upstream served %d", s.label, n, identityRequests, served1-served0)
	}
	return float64(cpu.Microseconds()) / float64(n), nil
}

// runClient runs the client child in s.client for n requests and returns how many got a 2xx.
func (s *identitySide) runClient(ctx context.Context, n int) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	f, err := os.Open(s.client)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, identityClientRole, s.pr.addr, s.upstream, strconv.Itoa(n))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd()), Pdeathsig: syscall.SIGKILL}
	cmd.Env = withoutProxyEnv(os.Environ())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("client in %s: %w: %s", s.client, err, strings.TrimSpace(stderr.String()))
	}
	return strconv.Atoi(strings.TrimSpace(string(out)))
}

// stop stops the sidecar, removes its pins and both cgroups.
func (s *identitySide) stop() {
	if s.pr != nil {
		s.pr.p.stop()
		_ = ebpf.Remove("", s.sandbox)
		s.pr = nil
	}
	if s.client != s.cgroup {
		_ = os.Remove(s.client)
	}
	_ = os.Remove(s.cgroup)
}

func printIdentityReport(w io.Writer, r identityReport) {
	fmt.Fprintln(w, "\nidentities (the proxy asks the kernel which cgroup connected, per request)")
	switch {
	case r.skipped != "":
		fmt.Fprintf(w, "  skipped: %s\n", r.skipped)
	case r.err != nil:
		fmt.Fprintf(w, "  failed: %v\n", r.err)
	default:
		fmt.Fprintf(w, "  plain-HTTP GET through a sidecar with kernel enforcement, %d keep-alive connections, %d requests per round, all 2xx (median of %d rounds)\n",
			identityConns, r.requests, identityRounds)
		fmt.Fprintf(w, "  sidecar CPU: %.1f µs/request without identities, %.1f µs/request with the client in an identity's cgroup (x%.2f, %+.1f µs)\n",
			r.withoutUs, r.withUs, r.withUs/r.withoutUs, r.withUs-r.withoutUs)
		fmt.Fprintf(w, "  rounds: without %s; with %s\n", fmtFloats(r.withoutRounds), fmtFloats(r.withRounds))
	}
}

func fmtFloats(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(s, " ")
}
