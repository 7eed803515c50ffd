//go:build linux

// Package e2e runs the real airlock binary against real clients (the curl binary and Go's
// net/http) inside network namespaces built by test/testnet: upstream hosts at 198.18.0.x
// and 198.19.0.x, names from a test DNS server, TLS from a test CA. Every test but the policy
// check needs root (privtest.Require) and builds its own world, so tests run in parallel.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlock-dev/airlock/test/testnet"
)

// build is the airlock binary, built at most once per test process, on first use.
var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// airlockBinary returns the binary under test, $AIRLOCK_BIN or ./cmd/airlock built in the cache
// (cachedBinary) the first time; it fails t when the binary does not build.
func airlockBinary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		if p := os.Getenv(testnet.EnvBinary); p != "" {
			build.path = p
			return
		}
		build.dir, build.err = os.MkdirTemp("", "airlock-e2e-bin-")
		if build.err != nil {
			return
		}
		var cached string
		if cached, build.err = cachedBinary("./cmd/airlock"); build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "airlock")
		build.err = linkBinary(cached, build.path)
	})
	if build.err != nil {
		t.Fatalf("airlock binary: %v", build.err)
	}
	return build.path
}

// How the parallel tests share the machine. go test's -parallel (GOMAXPROCS by default, 2
// here) would hold the local sandbox tests, one after the other, and the world tests to two
// at a time, and the world tests would start only when the last sandbox test is done. Instead
// TestMain lifts -parallel (unless it is given) and two turns decide: up to sandboxSlots
// sandbox tests (newSandboxEnv) run at a time, and beside them up to worldSlots world tests
// (parallelWorld), which mostly wait on timers and on other processes. One sandbox slot: two
// sandbox tests at a time, beside the cluster tests on two cores, made the fork and allocation
// bounds of the hostile tests time out in CI. Sandbox tests do not collide: each has its own world (the sandboxes' veths and /30s live in its sidecar
// namespace), state directory, cgroup parent and sandbox names (netns, BPF pins), and uid
// ranges are claimed machine-wide. TestSandboxLoop, which counts this process's descriptors,
// is not parallel at all (newSandboxEnvAlone): it runs with no other test.
const (
	sandboxSlots  = 1
	worldSlots    = 2
	parallelLimit = 64 // -parallel when not given: above the number of parallel tests
)

var (
	sandboxTurn = &turns{free: sandboxSlots}
	worldTurn   = &turns{free: worldSlots}
)

// parallelWorld makes t parallel and waits for one of the world tests' slots, held until t
// and its cleanups are done.
func parallelWorld(t *testing.T) {
	t.Helper()
	t.Parallel()
	takeTurn(t, worldTurn, false)
}

// parallelSandbox makes t parallel and waits for one of the sandbox tests' slots. A long test
// (newLongSandboxEnv) gets the next free slot before the others waiting.
func parallelSandbox(t *testing.T, long bool) {
	t.Helper()
	t.Parallel()
	prefetchBinaries()
	takeTurn(t, sandboxTurn, long)
}

// takeTurn takes a slot of turn, given back after t's other cleanups (registered later, so
// run earlier) have run. The wait counts in the test's elapsed time, so it is logged.
func takeTurn(t *testing.T, turn *turns, long bool) {
	t.Helper()
	start := time.Now()
	turn.take(long)
	t.Cleanup(turn.give)
	if waited := time.Since(start); waited >= time.Second {
		t.Logf("waited %.1fs for its turn (parallelWorld, parallelSandbox)", waited.Seconds())
	}
}

// turns hands out a fixed number of slots: a freed one goes to the first long test waiting,
// else to the first test waiting.
type turns struct {
	mu      sync.Mutex
	free    int
	waiting []turnWaiter // the long ones first, each kind in the order they came
}

type turnWaiter struct {
	long  bool
	ready chan struct{}
}

// take blocks until a slot is the caller's.
func (q *turns) take(long bool) {
	q.mu.Lock()
	if q.free > 0 { // then nobody waits: give hands a slot to a waiter before freeing it
		q.free--
		q.mu.Unlock()
		return
	}
	w := turnWaiter{long: long, ready: make(chan struct{})}
	i := len(q.waiting)
	if long {
		i = 0
		for i < len(q.waiting) && q.waiting[i].long {
			i++
		}
	}
	q.waiting = slices.Insert(q.waiting, i, w)
	q.mu.Unlock()
	<-w.ready
}

// give hands the caller's slot to the first waiter, or back to the pool.
func (q *turns) give() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		q.free++
		return
	}
	close(q.waiting[0].ready)
	q.waiting = q.waiting[1:]
}

// liftParallel sets -test.parallel to parallelLimit unless the command line gave it.
func liftParallel() {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", fmt.Sprint(parallelLimit)); err != nil {
			panic(err)
		}
	}
}

func TestMain(m *testing.M) {
	// Kernel tests re-execute this binary as the sandbox probe (test/testnet).
	testnet.RunProbeIfRequested()
	liftParallel()
	code := m.Run()
	prefetch.wg.Wait()
	for _, dir := range []string{build.dir, hostileProbe.dir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
