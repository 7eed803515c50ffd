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

// probePackage is the probe program's package (relative to the repository root).
const probePackage = "./test/kubecluster/probe"

// images are the image tarballs of this process's clusters, built once (one go build of the
// probe and airlock's two commands, and the layers): every cluster imports the same bytes.
// Start begins the build before it boots the control plane, so the two overlap;
// importImages waits for it. AirlockCLI hands out the same airlock binaries for the host.
var images struct {
	once sync.Once
	done chan struct{}
	tars map[string][]byte // ref -> image tarball
	bins map[string][]byte // imagebuild.AirlockPackage, AirlockKubePackage -> binary
	err  error
}

// buildImages starts building the images (once per process) and returns at once.
func buildImages() {
	images.once.Do(func() {
		images.done = make(chan struct{})
		go func() {
			defer close(images.done)
			images.tars, images.bins, images.err = imageTarballs()
		}()
	})
}

// waitImages starts the image build if it has not started and waits for it.
func waitImages(ctx context.Context) error {
	buildImages()
	select {
	case <-images.done:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the images: %w", ctx.Err())
	}
	return images.err
}

// AirlockCLI writes the airlock and airlock-kube binaries of airlock's image (static, built
// once per process with the images) into dir and returns the airlock one's path, with
// airlock-kube next to it where airlock looks for it: the host's CLI is then the build the
// cluster's sidecars, webhook and node agent run, and the test builds airlock once.
func AirlockCLI(ctx context.Context, dir string) (string, error) {
	if err := waitImages(ctx); err != nil {
		return "", err
	}
	for pkg, name := range map[string]string{imagebuild.AirlockPackage: "airlock", imagebuild.AirlockKubePackage: "airlock-kube"} {
		if err := os.WriteFile(filepath.Join(dir, name), images.bins[pkg], 0o755); err != nil {
			return "", fmt.Errorf("write %s: %w", name, err)
		}
	}
	return filepath.Join(dir, "airlock"), nil
}

// imageTarballs builds the pause, probe and airlock images as tarballs, by reference, and
// returns airlock's binaries with them.
func imageTarballs() (map[string][]byte, map[string][]byte, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, nil, err
	}
	bins, err := imagebuild.GoBinaries(root, "amd64", nil, probePackage, imagebuild.AirlockPackage, imagebuild.AirlockKubePackage)
	if err != nil {
		return nil, nil, err
	}
	airlock, err := imagebuild.AirlockSpecFrom(root, bins, "amd64", time.Unix(0, 0))
	if err != nil {
		return nil, nil, err
	}
	probe := bins[probePackage]
	probeFiles := []imagebuild.File{{Path: "/probe", Mode: 0o755, Data: probe}, {Path: "/bin/sleep", Mode: 0o755, Data: probe}}
	specs := map[string]imagebuild.Spec{
		PauseImage:   {Files: probeFiles, Entrypoint: []string{"/probe", "pause"}, User: "65535:65535"},
		ProbeImage:   {Files: probeFiles, Entrypoint: []string{"/probe"}, Cmd: []string{"sleep"}},
		AirlockImage: airlock,
	}
	dir, err := os.MkdirTemp("", "kubecluster-images-")
	if err != nil {
		return nil, nil, fmt.Errorf("create image directory: %w", err)
	}
	defer os.RemoveAll(dir)
	tars := map[string][]byte{}
	for ref, spec := range specs {
		img, err := imagebuild.Build(spec)
		if err != nil {
			return nil, nil, err
		}
		file := filepath.Join(dir, filepath.Base(ref)+".tar")
		if _, err := imagebuild.WriteTarball(img, ref, file); err != nil {
			return nil, nil, err
		}
		if tars[ref], err = os.ReadFile(file); err != nil {
			return nil, nil, fmt.Errorf("read image tarball: %w", err)
		}
	}
	delete(bins, probePackage)
	return tars, bins, nil
}

// importImages imports the pause, probe and airlock images (buildImages) into containerd.
func (c *Cluster) importImages(ctx context.Context) error {
	if err := waitImages(ctx); err != nil {
		return err
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
