package image

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/sandbox"
	"github.com/airlock-dev/airlock/test/imagetest"
	"github.com/airlock-dev/airlock/test/privtest"
)

// owner makes a file standing for a sandbox's state file (pins of a missing owner are stale).
func owner(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name+".json")
	if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGetEverySource: the busybox image as an OCI layout, an OCI archive, a docker archive
// and from an in-process registry is one image (same config digest and layers), unpacked
// once into the cache, with the second layer's whiteout in overlayfs's form.
func TestGetEverySource(t *testing.T) {
	privtest.Require(t)
	img := imagetest.Busybox(t)
	dir := t.TempDir()
	refs := map[string]string{
		"layout":         imagetest.WriteLayout(t, img, filepath.Join(dir, "layout")),
		"oci archive":    imagetest.WriteOCIArchive(t, img, filepath.Join(dir, "oci.tar")),
		"docker archive": imagetest.WriteDockerArchive(t, img, filepath.Join(dir, "docker.tar")),
		"registry":       imagetest.ServeRegistry(t, img, "busybox"),
	}
	s := &Store{Dir: filepath.Join(t.TempDir(), "images"), Transport: http.DefaultTransport}
	var first *sandbox.Image
	unpacked := 0
	for _, kind := range []string{"layout", "oci archive", "docker archive", "registry"} {
		got, err := s.Get(context.Background(), refs[kind], owner(t, "s"))
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		unpacked += got.Unpacked
		if first == nil {
			first = got
			continue
		}
		if got.Digest != first.Digest || strings.Join(got.Layers, " ") != strings.Join(first.Layers, " ") {
			t.Errorf("%s: %s %v, want the layout's %s %v", kind, got.Digest, got.Layers, first.Digest, first.Layers)
		}
	}
	if len(first.Layers) != 2 || unpacked != 2 {
		t.Fatalf("%d layers, %d unpacks over four gets; want 2 and 2", len(first.Layers), unpacked)
	}
	if c := first.Config; c.WorkingDir != "/home/app" || strings.Join(c.Cmd, " ") != "echo from-cmd" || len(c.Env) != 2 {
		t.Errorf("config %+v", c)
	}
	if fi, err := os.Lstat(filepath.Join(first.Layers[1], "opt", "old")); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("layer 2 opt/old: %v, %v; want a whiteout (character device)", fi, err)
	}
}

// TestConcurrentGetsUnpackOnce: two creates of one new image at once unpack each layer once.
func TestConcurrentGetsUnpackOnce(t *testing.T) {
	privtest.Require(t)
	ref := imagetest.WriteLayout(t, imagetest.Busybox(t), filepath.Join(t.TempDir(), "layout"))
	s := &Store{Dir: filepath.Join(t.TempDir(), "images")}
	var wg sync.WaitGroup
	got := make([]*sandbox.Image, 4)
	errs := make([]error, 4)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A Store of its own for each, as two airlock processes would have.
			got[i], errs[i] = (&Store{Dir: s.Dir}).Get(context.Background(), ref, owner(t, "s"))
		}()
	}
	wg.Wait()
	unpacked := 0
	for i := range got {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		unpacked += got[i].Unpacked
	}
	if unpacked != 2 {
		t.Errorf("%d layer unpacks for 4 concurrent gets of a 2-layer image, want 2", unpacked)
	}
	if left, _ := os.ReadDir(filepath.Join(s.Dir, "tmp")); len(left) != 0 {
		t.Errorf("tmp holds %d entries after the unpacks, want none", len(left))
	}
}

// TestReleaseThenPrune: a layer stays while a sandbox pins it, and after the last pin too (the
// next sandbox of the image finds it unpacked), until a prune finds it unused for longer than
// it is given; a pin whose owner is gone holds nothing.
func TestReleaseThenPrune(t *testing.T) {
	privtest.Require(t)
	ref := imagetest.WriteLayout(t, imagetest.Busybox(t), filepath.Join(t.TempDir(), "layout"))
	s := &Store{Dir: filepath.Join(t.TempDir(), "images")}
	a, b, c := owner(t, "a"), owner(t, "b"), owner(t, "c")
	var img *sandbox.Image
	for _, o := range []string{a, b, c} {
		var err error
		if img, err = s.Get(context.Background(), ref, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Release(a); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(c); err != nil { // c's state file is gone (a crashed create)
		t.Fatal(err)
	}
	for _, l := range img.Layers {
		if _, err := os.Stat(l); err != nil {
			t.Errorf("layer %s gone while b pins it: %v", l, err)
		}
	}
	if err := s.Release(b); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(time.Hour); err != nil || n != 0 {
		t.Errorf("Prune(1h) right after the last release = %d, %v; want 0: the layers were used just now", n, err)
	}
	for _, l := range img.Layers {
		if _, err := os.Stat(l); err != nil {
			t.Errorf("layer %s gone after the last release: %v, want it cached", l, err)
		}
	}
	again, err := s.Get(context.Background(), ref, a)
	if err != nil || again.Unpacked != 0 {
		t.Fatalf("Get after the last release: %+v, %v; want the cached layers (0 unpacked)", again, err)
	}
	if n, err := s.Prune(0); err != nil || n != 0 {
		t.Errorf("Prune(0) while a pins the image = %d, %v; want 0", n, err)
	}
	if err := s.Release(a); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(0); err != nil || n != len(img.Layers) {
		t.Errorf("Prune(0) with no pin = %d, %v; want %d", n, err, len(img.Layers))
	}
	for _, l := range img.Layers {
		if _, err := os.Stat(l); !os.IsNotExist(err) {
			t.Errorf("layer %s still there after the prune (%v)", l, err)
		}
	}
}

// TestTamperedLayerRefused: a layer blob whose content is not the image's (its diff id) is
// refused and leaves nothing of it in the cache (the layers before it, verified, may stay
// cached like any released layer).
func TestTamperedLayerRefused(t *testing.T) {
	privtest.Require(t)
	img := imagetest.Busybox(t)
	dir := imagetest.WriteLayout(t, img, filepath.Join(t.TempDir(), "layout"))
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := layers[1].Digest()
	if err != nil {
		t.Fatal(err)
	}
	// Replace layer 2's blob by layer 1's bytes (a valid layer, just not this one).
	d1, _ := layers[0].Digest()
	data, err := os.ReadFile(filepath.Join(dir, "blobs", d1.Algorithm, d1.Hex))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "blobs", d.Algorithm, d.Hex), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Store{Dir: filepath.Join(t.TempDir(), "images")}
	_, err = s.Get(context.Background(), dir, owner(t, "s"))
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("get: %v, want a digest mismatch", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	tampered := cfg.RootFS.DiffIDs[1]
	entries, _ := os.ReadDir(filepath.Join(s.Dir, "layers"))
	tmp, _ := os.ReadDir(filepath.Join(s.Dir, "tmp"))
	for _, e := range entries {
		if e.Name() == tampered.Algorithm+"-"+tampered.Hex {
			t.Errorf("the refused layer %s is in the cache", e.Name())
		}
	}
	if len(entries) > 1 || len(tmp) != 0 {
		t.Errorf("cache holds %d layers and %d tmp entries after a refused image, want at most the verified first layer and no tmp entry", len(entries), len(tmp))
	}
}
