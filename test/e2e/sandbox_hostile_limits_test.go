//go:build linux

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/test/testnet"
)

// TestSandboxHostileLimits: resource caps on this host, whose memory and pids controllers
// live on cgroup v1 only. With --pids and --memory a bounded fork loop stops at the cap and an
// allocation past the memory cap is killed or refused; without flags create prints default
// limits, and they hold the same way. Every loop and allocation is bounded, so where a cap
// does not hold the host loses at most the bound.
func TestSandboxHostileLimits(t *testing.T) {
	runHostileLong(t, func(t *testing.T, h *hostile) {
		t.Run("flags", func(t *testing.T) {
			name, _, _ := h.createOut(t, "capped", "--pids", "64", "--memory", "128M")
			h.wantPidsCap(t, name, 64)
			h.wantMemoryCap(t, name, 128<<20)
		})
		t.Run("defaults", func(t *testing.T) {
			name, _, r := h.createOut(t, "defcap")
			pids, mem := defaultLimits(t, r.Stdout+r.Stderr)
			h.wantPidsCap(t, name, pids)
			h.wantMemoryCap(t, name, mem)
			h.wantTmpCap(t, name, defaultTmpSize(t, r.Stdout+r.Stderr))
		})
	})
}

// maxForkBound and maxAllocBound bound what the limit tests ask of the host when a default
// is larger than a test should try.
const (
	maxForkBound  = 16384
	maxAllocBound = 8 << 30
)

// forkScript starts children (cat, each waiting on a pipe), up to %d of them, stopping at the
// first failure, then lets them all exit: "forked=N errno=E" (E 0 when none failed). It
// spawns (clone with CLONE_VM|CLONE_VFORK, through posix_spawn) instead of forking the
// interpreter: the same task per child for the pids controller, without copying python's
// page tables a thousand times on a busy 2-core machine.
const forkScript = `
import os
r, w = os.pipe()
n, err = 0, 0
for i in range(%d):
    try:
        os.posix_spawn("/bin/cat", ["cat"], {}, file_actions=[(os.POSIX_SPAWN_DUP2, r, 0)])
    except OSError as e:
        err = e.errno
        break
    n += 1
os.close(w)
for i in range(n):
    os.wait()
print("forked=%%d errno=%%d" %% (n, err))
`

// wantPidsCap checks that a fork loop in sandbox name fails (EAGAIN) before limit processes.
func (h *hostile) wantPidsCap(t *testing.T, name string, limit int) {
	t.Helper()
	bound := min(limit+64, maxForkBound)
	r := h.exec(t, nil, name, nil, nil, h.python, "-c", fmt.Sprintf(forkScript, bound))
	var forked, errno int
	if _, err := fmt.Sscanf(strings.TrimSpace(r.Stdout), "forked=%d errno=%d", &forked, &errno); err != nil {
		t.Fatalf("resource caps: fork loop: %s", r)
	}
	t.Logf("resource caps: fork loop (bound %d, cap %d): forked %d, errno %d", bound, limit, forked, errno)
	if errno != 11 || forked >= limit { // EAGAIN: fork refused by the pids controller
		t.Errorf("resource caps: the fork loop (bound %d) forked %d processes, errno %d; want EAGAIN before %d", bound, forked, errno, limit)
	}
	if r := h.exec(t, nil, name, nil, nil, "true"); r.Code != 0 {
		t.Errorf("resource caps: after the fork loop, exec true: %s", r)
	}
}

// allocScript allocates %d bytes and fills them (one memset: every page is touched), then
// prints "allocated".
const allocScript = `
b = b"\x01" * %d
print("allocated")
`

// wantMemoryCap checks that touching limit+64M bytes in sandbox name is killed or refused.
func (h *hostile) wantMemoryCap(t *testing.T, name string, limit int64) {
	t.Helper()
	size := min(limit+64<<20, maxAllocBound)
	r := h.exec(t, nil, name, nil, nil, h.python, "-c", fmt.Sprintf(allocScript, size))
	t.Logf("resource caps: allocating %d bytes (cap %d): %s", size, limit, r)
	killed := r.Code == 137 || strings.Contains(r.Stderr, "MemoryError")
	if strings.Contains(r.Stdout, "allocated") || !killed {
		t.Errorf("resource caps: allocating %d bytes past a %d-byte cap: %s; want it killed (137) or a MemoryError", size, limit, r)
	}
	if r := h.exec(t, nil, name, nil, nil, "true"); r.Code != 0 {
		t.Errorf("resource caps: after the allocation, exec true: %s", r)
	}
}

// wantTmpCap checks that writing limit+64M bytes into /tmp in sandbox name stops short with
// "No space left on device".
func (h *hostile) wantTmpCap(t *testing.T, name string, limit int64) {
	t.Helper()
	mib := min(limit+64<<20, maxAllocBound) >> 20
	r := h.sh(t, name, fmt.Sprintf("dd if=/dev/zero of=/tmp/fill bs=1M count=%d 2>&1; echo size=$(wc -c < /tmp/fill); rm -f /tmp/fill", mib))
	t.Logf("resource caps: writing %d MiB into /tmp (cap %d): %s", mib, limit, r)
	var size int64
	for _, a := range attempts(r.Stdout) {
		if a.name == "size" {
			size, _ = strconv.ParseInt(a.result, 10, 64)
		}
	}
	if !strings.Contains(r.Stdout, "No space left") || size <= 0 || size > limit {
		t.Errorf("resource caps: writing %d MiB into /tmp past a %d-byte cap: %s; want ENOSPC at most at the cap", mib, limit, r)
	}
}

var tmpSizeRE = regexp.MustCompile(`/tmp and \S+ (\d+)([KMGT])`) // "/tmp and /work 512M each"

// defaultTmpSize reads the /tmp size cap create printed; it fails t when there is none.
func defaultTmpSize(t *testing.T, out string) int64 {
	t.Helper()
	m := tmpSizeRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("resource caps: create without flags printed no /tmp size cap:\n%s", out)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n << map[string]uint{"K": 10, "M": 20, "G": 30, "T": 40}[m[2]]
}

var (
	pidsLimitRE   = regexp.MustCompile(`(?i)pids\D{0,12}?(\d+)`)
	memoryLimitRE = regexp.MustCompile(`(?i)memory\D{0,12}?(\d+(?:\.\d+)?)\s*([KMGT]i?B?)?\b`)
)

// defaultLimits reads the default pids and memory limits create printed; it fails t when
// create printed none (a sandbox without flags must be capped).
func defaultLimits(t *testing.T, out string) (int, int64) {
	t.Helper()
	pm, mm := pidsLimitRE.FindStringSubmatch(out), memoryLimitRE.FindStringSubmatch(out)
	if pm == nil || mm == nil {
		t.Fatalf("resource caps: create without flags printed no default pids and memory limits:\n%s", out)
	}
	pids, _ := strconv.Atoi(pm[1])
	num, _ := strconv.ParseFloat(mm[1], 64)
	unit := map[byte]float64{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}
	mult := 1.0
	if mm[2] != "" {
		mult = unit[strings.ToUpper(mm[2])[0]]
	}
	if pids <= 0 || num <= 0 {
		t.Fatalf("resource caps: default limits pids %q memory %q: want positive numbers:\n%s", pm[1], mm[0], out)
	}
	return pids, int64(num * mult)
}

// TestSandboxHostileNetworkNone: --network none. The sandbox has only loopback, no veth and
// no sidecar; names do not resolve and nothing outside is reachable, by
// name, by address or through the proxy address the env file would name; the kernel
// programs stay attached.
func TestSandboxHostileNetworkNone(t *testing.T) {
	runHostile(t, func(t *testing.T, h *hostile) {
		before := len(vethsIn(t, h.w.Sidecar))
		name, info, _ := h.createOut(t, "nonet", "--network", "none")
		const class = "--network none"
		if info.SidecarPid != 0 || info.SupervisorPid != 0 {
			t.Errorf("%s: sidecar pid %d, supervisor pid %d: want no sidecar", class, info.SidecarPid, info.SupervisorPid)
		}
		if after := len(vethsIn(t, h.w.Sidecar)); after != before {
			t.Errorf("%s: %d sandbox veths on the host after create, %d before", class, after, before)
		}
		if _, err := os.Stat(filepath.Join(ebpf.DefaultPinRoot, name)); err != nil {
			t.Errorf("%s: the kernel programs are not pinned for the sandbox: %v", class, err)
		}
		script := scriptPrelude + loopbackPrelude + strings.NewReplacer("$PY", h.python, "$ALLOWED", h.w.Allowed.Addr.String(), "$DNS", testnet.DNSAddr.Addr().String(),
			"$SIDECAR", netip.MustParsePrefix(sbSubnet).Addr().Next().String()).Replace(`
echo "links=$(sed -n 's/^ *\([^:]*\):.*/\1/p' /proc/net/dev | tr '\n' ',')"
try dns.getent getent hosts allowed.test
try dns.python $PY -c 'import socket; socket.getaddrinfo("allowed.test", 443)'
try curl.name curl -sS --max-time 5 -o /dev/null https://allowed.test/
try curl.addr curl -sS --max-time 5 -o /dev/null http://$ALLOWED/
try tcp.addr bash -c 'exec 3<>/dev/tcp/$ALLOWED/443'
try curl.proxy curl -sS --max-time 5 -o /dev/null -x http://$SIDECAR:3128 https://allowed.test/
try udp.dns $PY -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("$DNS", 53)); s.send(b"x")'
echo "$(loopback_probe $PY)"
echo done=1
`)
		r := h.sh(t, name, script)
		wantNoneSucceeded(t, class, r, "dns.getent", "dns.python", "curl.name", "curl.addr", "tcp.addr", "curl.proxy", "done")
		if got := attemptResult(r.Stdout, "links"); got != "lo," {
			t.Errorf("%s: the sandbox's links are %q, want only lo", class, got)
		}
		// Loopback only: the sandbox's own loopback works, TCP and UDP, IPv4 and IPv6.
		wantLoopbackWorks(t, class, r)
	})
}
