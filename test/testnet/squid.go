//go:build linux

package testnet

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SquidConfig says how to run a real Squid (Debian's squid-openssl) as the corporate proxy
// of a test: in which namespace, on which address, with which users and CONNECT ports.
type SquidConfig struct {
	// Addr is where Squid listens; it is added to the upstream namespace when Ns is the
	// world's upstream namespace (AddUpstreamAddr). Required.
	Addr netip.AddrPort
	// Users are the accepted Basic credentials (user → password); nil means no
	// authentication.
	Users map[string]string
	// ConnectPorts are the ports CONNECT may reach. Empty means 80 and 443.
	ConnectPorts []int
	// Bump, when set, makes Squid an inspecting proxy: it bumps every CONNECT (ssl-bump)
	// and re-signs origins with this CA (certificate and key PEM files), verifying the
	// origins against BumpTrust.
	Bump *SquidBump
}

// SquidBump is an inspecting Squid's CA and the roots it verifies origins with.
type SquidBump struct {
	// CertPEM and KeyPEM are the CA that re-signs origins (the key unencrypted PEM).
	CertPEM, KeyPEM []byte
	// TrustPEM is what Squid verifies origins against (the world's test CA).
	TrustPEM []byte
}

// Squid is a running Squid. Its access log has one line per transaction, written when the
// transaction ends (a tunnel: when it closes).
type Squid struct {
	// URL is http://Addr.
	URL string
	// Addr is where it listens.
	Addr netip.AddrPort

	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// SquidEntry is one access log line.
type SquidEntry struct {
	Client string // the client's address
	User   string // the authenticated user, "-" when none
	Method string // CONNECT, GET, ...
	URL    string // for CONNECT the authority asked for, "198.18.0.10:443"
	Status int    // the status Squid answered
	Server string // the address Squid connected to, "-" when none
	Line   string
}

// squidBinary is Debian's Squid.
const squidBinary = "/usr/sbin/squid"

// StartSquid writes a configuration and runs Squid in the foreground in ns until the test
// ends, waiting until it accepts connections. It skips nothing: a missing Squid fails t
// (tools/deps.sh installs squid-openssl).
func (w *World) StartSquid(t testing.TB, ns *Netns, cfg SquidConfig) *Squid {
	t.Helper()
	if _, err := os.Stat(squidBinary); err != nil {
		t.Fatalf("squid: %v (install squid-openssl: tools/deps.sh install)", err)
	}
	// Squid drops to the proxy user: its directory must be usable by it.
	dir, err := os.MkdirTemp("", "airlock-squid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	s := &Squid{URL: "http://" + cfg.Addr.String(), Addr: cfg.Addr, dir: dir, done: make(chan struct{})}
	conf := s.config(t, w, cfg)
	ctx := context.Background()
	s.cmd = ns.Command(ctx, squidBinary, "-N", "-f", conf)
	s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start squid: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(s.Stop)
	s.waitReady(t, ns)
	return s
}

// config writes squid.conf (and the auth helper) into s.dir.
func (s *Squid) config(t testing.TB, w *World, cfg SquidConfig) string {
	t.Helper()
	ports := cfg.ConnectPorts
	if len(ports) == 0 {
		ports = []int{80, 443}
	}
	var ps []string
	for _, p := range ports {
		ps = append(ps, strconv.Itoa(p))
	}
	var b strings.Builder
	listen := fmt.Sprintf("http_port %s", cfg.Addr)
	if cfg.Bump != nil {
		listen += fmt.Sprintf(" ssl-bump generate-host-certificates=on dynamic_cert_mem_cache_size=4MB tls-cert=%s tls-key=%s",
			s.write(t, "bump-ca.pem", string(cfg.Bump.CertPEM), 0o644), s.write(t, "bump-ca.key", string(cfg.Bump.KeyPEM), 0o644))
	}
	fmt.Fprintf(&b, `%s
pid_filename %[2]s/squid.pid
cache deny all
cache_mem 8 MB
cache_log %[2]s/cache.log
coredump_dir %[2]s
visible_hostname airlock-test-squid
dns_nameservers %[3]s
hosts_file none
shutdown_lifetime 0 seconds
read_timeout 3 seconds
logformat airlock %%>a %%un %%rm %%ru %%>Hs %%<a
access_log stdio:%[2]s/access.log airlock
acl connect_ports port %[4]s
acl CONNECT method CONNECT
http_access deny CONNECT !connect_ports
`, listen, s.dir, w.DNS.Addr.Addr(), strings.Join(ps, " "))
	if cfg.Users != nil {
		s.writeUsers(t, cfg.Users)
		fmt.Fprintf(&b, `auth_param basic program /bin/sh %[1]s/auth.sh
auth_param basic children 2
auth_param basic realm corp
auth_param basic credentialsttl 1 second
acl authed proxy_auth REQUIRED
http_access deny !authed
`, s.dir)
	}
	b.WriteString("http_access allow all\n")
	if cfg.Bump != nil {
		fmt.Fprintf(&b, `sslcrtd_program /usr/lib/squid/security_file_certgen -s %[1]s/ssl_db -M 4MB
sslcrtd_children 2
tls_outgoing_options cafile=%[2]s
acl step1 at_step SslBump1
ssl_bump peek step1
ssl_bump bump all
`, s.dir, s.write(t, "origin-trust.pem", string(cfg.Bump.TrustPEM), 0o644))
		initdb := exec.Command("/usr/lib/squid/security_file_certgen", "-c", "-s", filepath.Join(s.dir, "ssl_db"), "-M", "4MB")
		if out, err := initdb.CombinedOutput(); err != nil {
			t.Fatalf("squid: init ssl_db: %v: %s", err, out)
		}
		if out, err := exec.Command("chown", "-R", "proxy", filepath.Join(s.dir, "ssl_db")).CombinedOutput(); err != nil {
			t.Fatalf("squid: chown ssl_db: %v: %s", err, out)
		}
	}
	return s.write(t, "squid.conf", b.String(), 0o644)
}

// SetPassword replaces the users Squid accepts with user alone, with password (a rotation on
// the proxy's side). Squid re-checks credentials after one second.
func (s *Squid) SetPassword(t testing.TB, user, password string) {
	t.Helper()
	s.write(t, "users", user+" "+password+"\n", 0o644)
}

// writeUsers writes the users file and the helper that checks credentials against it (the
// helper reads "user password" lines, URL-escaped, and answers OK or ERR).
func (s *Squid) writeUsers(t testing.TB, users map[string]string) {
	t.Helper()
	var u strings.Builder
	for name, pw := range users {
		fmt.Fprintf(&u, "%s %s\n", name, pw)
	}
	s.write(t, "users", u.String(), 0o644)
	s.write(t, "auth.sh", fmt.Sprintf(`while read -r line; do
  if grep -qxF -- "$line" %s/users; then echo OK; else echo ERR; fi
done
`, s.dir), 0o755)
}

func (s *Squid) write(t testing.TB, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(s.dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitReady connects from ns until Squid accepts, it exits, or a deadline passes (polling
// another process's readiness, bounded).
func (s *Squid) waitReady(t testing.TB, ns *Netns) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := ns.DialContext(ctx, "tcp", s.Addr.String())
		cancel()
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-s.done:
			t.Fatalf("squid exited before accepting connections; cache.log:\n%s", s.CacheLog())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("squid not accepting on %s after 30s: %v; cache.log:\n%s", s.Addr, err, s.CacheLog())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops Squid (SIGKILL: a test stops it to see airlock fail closed) and waits for it.
// It is idempotent.
func (s *Squid) Stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-s.done
}

// CacheLog returns Squid's own log.
func (s *Squid) CacheLog() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "cache.log"))
	return string(b)
}

// Log returns the access log's entries so far.
func (s *Squid) Log() []SquidEntry {
	f, err := os.Open(filepath.Join(s.dir, "access.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []SquidEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 6 {
			continue
		}
		st, _ := strconv.Atoi(fs[4])
		out = append(out, SquidEntry{Client: fs[0], User: fs[1], Method: fs[2], URL: fs[3], Status: st, Server: fs[5], Line: sc.Text()})
	}
	return out
}

// WaitLog polls the access log until an entry matches or d passes, and returns it.
func (s *Squid) WaitLog(t testing.TB, d time.Duration, what string, match func(SquidEntry) bool) SquidEntry {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, e := range s.Log() {
			if match(e) {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("squid access log: no %s after %v; log:\n%s", what, d, s.logText())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *Squid) logText() string {
	var b strings.Builder
	for _, e := range s.Log() {
		b.WriteString(e.Line + "\n")
	}
	return b.String()
}

// Dial connects to Squid from ns (to check it is down).
func (s *Squid) Dial(ctx context.Context, ns *Netns) (net.Conn, error) {
	return ns.DialContext(ctx, "tcp", s.Addr.String())
}
