package cluster

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/testnet"
)

// cli is airlock with airlock-kube next to it (testnet.BuildAirlockWithKube), built once per
// test process: startEnv begins the build, so it runs while the first cluster boots, and every
// test that runs the CLI on the host waits for it (airlockCLI).
var cli struct {
	once sync.Once
	done chan struct{}
	dir  string
	path string
	err  error
}

// buildCLI starts building the CLI (once per process) and returns at once.
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
			cli.path, cli.err = testnet.BuildAirlockWithKube(ctx, cli.dir)
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
		t.Fatalf("build airlock and airlock-kube: %v", cli.err)
	}
	return cli.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cli.done != nil {
		<-cli.done
		os.RemoveAll(cli.dir)
	}
	os.Exit(code)
}
