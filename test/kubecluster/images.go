package kubecluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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

// images are the image tarballs of this process's clusters, built once (three go builds and
// the layers): every cluster imports the same bytes. Start begins the build before it boots
// the control plane, so the two overlap; importImages waits for it.
var images struct {
	once sync.Once
	done chan struct{}
	tars map[string][]byte // ref -> image tarball
	err  error
}

// buildImages starts building the images (once per process) and returns at once.
func buildImages() {
	images.once.Do(func() {
		images.done = make(chan struct{})
		go func() {
			defer close(images.done)
			images.tars, images.err = imageTarballs()
		}()
	})
}

// imageTarballs builds the pause, probe and airlock images as tarballs, by reference.
func imageTarballs() (map[string][]byte, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	probe, err := imagebuild.GoBinary(root, "./test/kubecluster/probe", "amd64")
	if err != nil {
		return nil, err
	}
	airlock, err := imagebuild.AirlockSpec(root, "amd64", time.Unix(0, 0))
	if err != nil {
		return nil, err
	}
	probeFiles := []imagebuild.File{{Path: "/probe", Mode: 0o755, Data: probe}, {Path: "/bin/sleep", Mode: 0o755, Data: probe}}
	specs := map[string]imagebuild.Spec{
		PauseImage:   {Files: probeFiles, Entrypoint: []string{"/probe", "pause"}, User: "65535:65535"},
		ProbeImage:   {Files: probeFiles, Entrypoint: []string{"/probe"}, Cmd: []string{"sleep"}},
		AirlockImage: airlock,
	}
	dir, err := os.MkdirTemp("", "kubecluster-images-")
	if err != nil {
		return nil, fmt.Errorf("create image directory: %w", err)
	}
	defer os.RemoveAll(dir)
	tars := map[string][]byte{}
	for ref, spec := range specs {
		img, err := imagebuild.Build(spec)
		if err != nil {
			return nil, err
		}
		file := filepath.Join(dir, filepath.Base(ref)+".tar")
		if _, err := imagebuild.WriteTarball(img, ref, file); err != nil {
			return nil, err
		}
		if tars[ref], err = os.ReadFile(file); err != nil {
			return nil, fmt.Errorf("read image tarball: %w", err)
		}
	}
	return tars, nil
}

// importImages imports the pause, probe and airlock images (buildImages) into containerd.
func (c *Cluster) importImages(ctx context.Context) error {
	buildImages()
	select {
	case <-images.done:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the images: %w", ctx.Err())
	}
	if images.err != nil {
		return images.err
	}
	for ref, tar := range images.tars {
		file := c.path(filepath.Base(ref) + ".tar")
		if err := os.WriteFile(file, tar, 0o644); err != nil {
			return fmt.Errorf("write image tarball: %w", err)
		}
		out, err := c.Command(ctx, filepath.Join(c.Bins.Root, "usr/bin/ctr"), "--address", containerdSock, "-n", "k8s.io", "images", "import", file).CombinedOutput()
		if err != nil {
			return fmt.Errorf("import %s: %w: %s", ref, err, out)
		}
	}
	return nil
}
