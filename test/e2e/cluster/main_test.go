package cluster

import (
	"context"
	"flag"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/kubecluster"
	"github.com/airlock-dev/airlock/test/testnet"
)

// cli is airlock with airlock-kube next to it, once per test process: the binaries of
// airlock's image (kubecluster.AirlockCLI), which the first cluster's boot builds, or
// testnet.BuildAirlockWithKube's when testnet.EnvBinary names a prebuilt airlock. startEnv
// begins it, so it runs while the first cluster boots, and every test that runs the CLI on
// the host waits for it (airlockCLI).
var cli struct {
	once sync.Once
	done chan struct{}
	dir  string
	path string
	err  error
}

// buildCLI starts getting the CLI (once per process) and returns at once.
func buildCLI() {
	cli.once.Do(func() {
		cli.done = make(chan struct{})
		go func() {
			defer close(cli.done)
			if cli.dir, cli.err = os.MkdirTemp("", "airlock-cluster-bin-"); cli.err != nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			if os.Getenv(testnet.EnvBinary) != "" {
				cli.path, cli.err = testnet.BuildAirlockWithKube(ctx, cli.dir)
				return
			}
			cli.path, cli.err = kubecluster.AirlockCLI(ctx, cli.dir)
		}()
	})
}

// airlockCLI returns the airlock binary (with airlock-kube next to it); it fails t when the
// build failed.
func airlockCLI(ctx context.Context, t *testing.T) string {
	t.Helper()
	buildCLI()
	select {
	case <-cli.done:
	case <-ctx.Done():
		t.Fatalf("waiting for the airlock build: %v", ctx.Err())
	}
	if cli.err != nil {
		t.Fatalf("airlock and airlock-kube: %v", cli.err)
	}
	return cli.path
}

// clusterTests is how many tests of this package boot a cluster of their own and run in
// parallel (TestAirlockOnARealCluster, TestNodeAgentOnARealCluster,
// TestEvidenceOnARealCluster).
const clusterTests = 3

// allowClusterTestsInParallel lets every cluster test run at once unless -test.parallel was
// given: its default is GOMAXPROCS (2 on the CI machine), which would hold the third cluster
// back until one of the others is done, though the tests spend most of their time waiting
// on their clusters (the kubelet starting pods, rollouts, sync periods), not on the CPU. Each
// cluster is its own world (network and mount namespaces, bpffs, cgroup root, Vault, S3), so
// running them side by side changes no test's result.
func allowClusterTestsInParallel() {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if f := flag.Lookup("test.parallel"); f != nil && !set {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n < clusterTests {
			_ = f.Value.Set(strconv.Itoa(clusterTests))
		}
	}
}

func TestMain(m *testing.M) {
	allowClusterTestsInParallel()
	code := m.Run()
	if cli.done != nil {
		<-cli.done
		os.RemoveAll(cli.dir)
	}
	os.Exit(code)
}
