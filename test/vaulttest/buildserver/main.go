// Command buildserver builds the Vault test server (test/vaulttest/server, a separate
// module) and its Transit plugin (test/vaulttest/transit, another) into .cache/ unless
// binaries for their current sources are there already, and prints their paths. `make test` runs it first, so the slow first build (minutes) happens outside any
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
	start = time.Now()
	transit, err := vaulttest.TransitPlugin()
	if err != nil {
		fmt.Fprintln(os.Stderr, "buildserver:", err)
		os.Exit(1)
	}
	fmt.Printf("vault transit plugin: %s (%s)\n", transit, time.Since(start).Round(time.Second))
}
