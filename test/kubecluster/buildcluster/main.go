// Command buildcluster builds (or finds in .cache/) the binaries of the test cluster
// (test/kubecluster) and prints where they are. `make kubecluster` runs it, so the slow
// first build (minutes) happens outside any test's timeout.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/airlock-dev/airlock/test/kubecluster"
)

func main() {
	start := time.Now()
	b, err := kubecluster.Build(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "buildcluster:", err)
		os.Exit(1)
	}
	fmt.Printf("kubecluster: Kubernetes %s in %s, Debian packages in %s (%s)\n", kubecluster.KubeVersion, b.Bin, b.Root, time.Since(start).Round(time.Second))
}
