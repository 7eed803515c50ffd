package kubecluster

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/privtest"
)

// EnvClusterTests turns the real-cluster tests on; without it they skip: they need the
// binaries `make kubecluster` builds, root, and minutes.
const EnvClusterTests = "AIRLOCK_CLUSTER_TESTS"

// Require skips t unless EnvClusterTests is 1, then requires root and the tools a cluster
// needs (privtest: a skip, or a failure under AIRLOCK_PRIVILEGED_TESTS=1), then builds or
// finds the binaries.
func Require(t testing.TB) *Binaries {
	t.Helper()
	if os.Getenv(EnvClusterTests) != "1" {
		t.Skipf("real-cluster test: set %s=1 (after make kubecluster) to run it", EnvClusterTests)
	}
	privtest.Require(t, "unshare", "nsenter", "ip", "mount", "apt-get", "dpkg-deb")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	b, err := Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
