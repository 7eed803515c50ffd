// Command buildserver builds the S3 test server (versitygw, from test/s3test/server, a
// separate module) into .cache/ unless a binary for its current go.mod and go.sum is there
// already, and prints its path and how long that took. `make s3test` runs it, so the first
// build happens outside any test's timeout.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/airlock-dev/airlock/test/s3test"
)

func main() {
	start := time.Now()
	bin, err := s3test.Binary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "buildserver:", err)
		os.Exit(1)
	}
	fmt.Printf("S3 test server (versitygw %s): %s (%s)\n", s3test.Version, bin, time.Since(start).Round(time.Second))
}
