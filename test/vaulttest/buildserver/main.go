// Command buildserver builds the Vault test server (test/vaulttest/server, a separate
// module) into .cache/ unless a binary for its current sources is there already, and prints
// its path. `make test` runs it first, so the slow first build (minutes) happens outside any
// test's timeout.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/airlock-dev/airlock/test/vaulttest"
)

func main() {
	start := time.Now()
	bin, err := vaulttest.Binary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "buildserver:", err)
		os.Exit(1)
	}
	fmt.Printf("vault test server: %s (%s)\n", bin, time.Since(start).Round(time.Second))
}
