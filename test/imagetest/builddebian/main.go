// Command builddebian builds the Debian test image (imagetest.Debian: mmdebstrap, as root) into
// .cache/ unless it is there already, and prints its paths. .ci/run runs it (make debianimage)
// before make test, as it builds the Vault test server, so a fresh clone's slow first build
// (about 100 s, network bound) is not spent beside the tests.
package main

import (
	"fmt"
	"os"

	"github.com/airlock-dev/airlock/test/imagetest"
)

func main() {
	layoutDir, archive, built, err := imagetest.BuildDebian()
	if err != nil {
		fmt.Fprintln(os.Stderr, "builddebian:", err)
		os.Exit(1)
	}
	how := "cached"
	if built > 0 {
		how = "built in " + built.Round(1e9).String()
	}
	fmt.Printf("debian test image: %s, %s (%s)\n", layoutDir, archive, how)
}
