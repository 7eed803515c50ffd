// Command airlockimage builds airlock's container image offline (no daemon, no registry) and
// writes it as an image tarball: `make image` runs it. The digest it prints depends on the
// commit and the Go version only; timestamps come from SOURCE_DATE_EPOCH (the Unix epoch when
// unset).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/internal/imagebuild"
)

func main() {
	out := flag.String("out", "bin/airlock-image.tar", "image tarball to write")
	ref := flag.String("ref", "ghcr.io/airlock-dev/airlock:dev", "name and tag recorded in the tarball")
	arch := flag.String("arch", "amd64", "GOARCH of the image")
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	if err := run(*root, *out, *ref, *arch); err != nil {
		fmt.Fprintln(os.Stderr, "airlockimage:", err)
		os.Exit(1)
	}
}

func run(root, out, ref, arch string) error {
	created := time.Unix(0, 0)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since the epoch", s)
		}
		created = time.Unix(sec, 0)
	}
	spec, err := imagebuild.AirlockSpec(root, arch, created)
	if err != nil {
		return err
	}
	img, err := imagebuild.Build(spec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("create output directory: %w", err)
	}
	d, err := imagebuild.WriteTarball(img, ref, out)
	if err != nil {
		return err
	}
	fmt.Printf("image: %s\nname: %s\ndigest: %s\n", out, ref, d)
	return nil
}
