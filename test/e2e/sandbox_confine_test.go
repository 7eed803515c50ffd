//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
)

// TestSandboxConfinement checks what `sandbox exec` takes away from a command even when it runs
// as root: it is root of a user namespace mapped to an unprivileged host uid range, the
// airlock state directory (CA key, other sandboxes) is not in its view at all (the env file
// and CA bundle are at /etc/airlock), the cgroup filesystem is masked, every capability is
// gone and no_new_privs is set, so the command can neither leave the network namespace nor the
// cgroup nor change the sandbox's routes.
func TestSandboxConfinement(t *testing.T) {
	e := newSandboxEnv(t)
	name := e.name("confine")
	info := e.create(t, name)
	sbDir := filepath.Join(e.stateDir, "sandboxes", name)

	script := strings.Join([]string{
		`echo "uid=$(id -u)"`,
		`grep -E '^(CapEff|CapBnd|CapPrm|NoNewPrivs):' /proc/self/status`,
		`cat ` + filepath.Join(sbDir, "sidecar", "ca.key") + ` >/dev/null 2>&1 && echo "cakey=readable" || echo "cakey=hidden"`,
		`echo "store=$(ls ` + filepath.Join(e.stateDir, "sandboxes") + ` 2>/dev/null | tr '\n' ' ')"`,
		`grep -q HTTPS_PROXY /etc/airlock/env && echo "envfile=readable" || echo "envfile=unreadable"`,
		`grep -q "BEGIN CERTIFICATE" /etc/airlock/ca/ca-bundle.pem && echo "cabundle=readable" || echo "cabundle=unreadable"`,
		`test -e ` + info.EnvFile + ` && echo "statedir=visible" || echo "statedir=absent"`,
		`head -1 /proc/self/uid_map | awk '{print "uidmap=" $1 "," ($2 != 0) "," $3}'`,
		`(echo $$ > ` + filepath.Join(e.cgParent, "cgroup.procs") + `) 2>/dev/null && echo "cgroup=escaped" || echo "cgroup=held"`,
		`nsenter --net=/proc/1/ns/net true 2>/dev/null && echo "netns=escaped" || echo "netns=held"`,
		`ip route add default via ` + info.HostAddr + ` 2>/dev/null && echo "route=changed" || echo "route=held"`,
		`grep nameserver /etc/resolv.conf`,
	}, "\n")
	r := e.sh(t, name, script)
	if r.Code != 0 {
		t.Fatalf("confinement script: %s", r)
	}
	out := r.Stdout
	for _, want := range []string{
		"uid=0", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "CapPrm:\t0000000000000000",
		"NoNewPrivs:\t1", "cakey=hidden", "store=\n", "envfile=readable", "cabundle=readable", "statedir=absent",
		"uidmap=0,1,65536", "cgroup=held",
		"netns=held", "route=held", "nameserver " + info.HostAddr,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inside the sandbox: want %q in the output:\n%s", want, out)
		}
	}

	// --user runs the command as another user, still confined.
	r = e.exec(t, []string{"--user", "65534:65534"}, name, nil, nil, "sh", "-c", "id -u; id -g")
	if r.Code != 0 || r.Stdout != "65534\n65534\n" {
		t.Errorf("exec --user 65534:65534: %s", r)
	}
	// A terminal passes through: under script(1), which gives airlock a pseudo-terminal, the
	// command's stdin is that terminal.
	ctx, cancel := context.WithTimeout(context.Background(), sbCommandTimeout)
	defer cancel()
	line := strings.Join([]string{e.bin, "sandbox", "exec", "--state-dir", e.stateDir, name, "--", "sh", "-c", "'test -t 0 && tty'"}, " ")
	cmd := e.command(ctx, nil)
	cmd.Args = []string{"nsenter", "--net=/run/netns/" + e.w.Sidecar.Name, "--", "script", "-qec", line, "/dev/null"}
	tty, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(tty), "/dev/pts/") {
		t.Errorf("exec under a terminal: %v, output %q: want the command's stdin to be a /dev/pts terminal", err, tty)
	}
	// A command that does not exist: 127 and a message, like a shell.
	r = e.exec(t, nil, name, nil, nil, "/nonexistent/program")
	if r.Code != 127 || !strings.Contains(r.Stderr, "/nonexistent/program") {
		t.Errorf("exec of a missing program: %s, want exit 127 naming it", r)
	}
}

// TestSandboxRawTCP checks a protocol tcp rule: the sandbox gets a route for the rule's CIDR
// through its veth, and the kernel lets exactly the rule's port through, unproxied.
func TestSandboxRawTCP(t *testing.T) {
	e := newSandboxEnv(t)
	db := netip.MustParseAddr("198.18.0.60")
	e.w.AddUpstreamAddr(t, db)
	banners := map[int]string{}
	for _, port := range []int{5432, 5433} {
		ln, err := e.w.Upstream.Listen("tcp", netip.AddrPortFrom(db, uint16(port)).String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		banner := fmt.Sprintf("db-%d", port)
		banners[port] = banner
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Fprintln(c, banner)
				c.Close()
			}
		}()
	}
	routeRawTCP(t, e)

	policy := `apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: raw-tcp}
spec:
  egress:
    - name: warehouse
      cidrs: ["` + db.String() + `/32"]
      ports: [5432]
      protocol: tcp
`
	file := e.w.WriteFile(t, "raw-tcp.yaml", []byte(policy))
	name := e.name("raw")
	e.create(t, name, "--policy", file)

	read := func(port int) string {
		addr := net.JoinHostPort(db.String(), fmt.Sprint(port))
		// bash's /dev/tcp keeps the test free of extra clients; the read proves the route back.
		r := e.exec(t, []string{"--no-env"}, name, nil, nil, "bash", "-c", "exec 3<>/dev/tcp/"+strings.Replace(addr, ":", "/", 1)+" && head -n1 <&3")
		return strings.TrimSpace(r.Stdout + " " + r.Stderr)
	}
	if got := read(5432); !strings.Contains(got, banners[5432]) {
		t.Errorf("raw TCP to the rule's port: %q, want the banner %q", got, banners[5432])
	}
	if got := read(5433); strings.Contains(got, banners[5433]) || !strings.Contains(got, "not permitted") {
		t.Errorf("raw TCP to another port: %q, want EPERM from the kernel and no banner", got)
	}
}
