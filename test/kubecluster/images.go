package kubecluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/internal/imagebuild"
)

// The images every cluster has, built locally and imported: nothing is ever pulled.
const (
	// AirlockImage is airlock's image (internal/imagebuild), under the name
	// deploy/kustomization.yaml gives it.
	AirlockImage = "ghcr.io/airlock-dev/airlock:dev"
	// ProbeImage holds the probe program (test/kubecluster/probe) at /probe, the
	// entrypoint: `probe sleep` waits, `probe http URL` and the like report what the network
	// lets through.
	ProbeImage = "airlock.test/probe:v1"
)

// repoRoot is the repository's root directory.
func repoRoot() (string, error) {
	dir, err := sourceDir()
	if err != nil {
		return "", err
	}
	return filepath.Abs(filepath.Join(dir, "..", "..", ".."))
}

// importImages builds the pause, probe and airlock images and imports them into containerd.
func (c *Cluster) importImages(ctx context.Context) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	probe, err := imagebuild.GoBinary(root, "./test/kubecluster/probe", "amd64")
	if err != nil {
		return err
	}
	airlock, err := imagebuild.AirlockSpec(root, "amd64", time.Unix(0, 0))
	if err != nil {
		return err
	}
	probeFiles := []imagebuild.File{{Path: "/probe", Mode: 0o755, Data: probe}, {Path: "/bin/sleep", Mode: 0o755, Data: probe}}
	images := map[string]imagebuild.Spec{
		PauseImage:   {Files: probeFiles, Entrypoint: []string{"/probe", "pause"}, User: "65535:65535"},
		ProbeImage:   {Files: probeFiles, Entrypoint: []string{"/probe"}, Cmd: []string{"sleep"}},
		AirlockImage: airlock,
	}
	for ref, spec := range images {
		img, err := imagebuild.Build(spec)
		if err != nil {
			return err
		}
		file := c.path(filepath.Base(ref) + ".tar")
		if _, err := imagebuild.WriteTarball(img, ref, file); err != nil {
			return err
		}
		out, err := c.Command(ctx, filepath.Join(c.Bins.Root, "usr/bin/ctr"), "--address", containerdSock, "-n", "k8s.io", "images", "import", file).CombinedOutput()
		if err != nil {
			return fmt.Errorf("import %s: %w: %s", ref, err, out)
		}
	}
	return nil
}
