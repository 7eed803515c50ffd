package imagebuild

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// layerFiles reads every entry of the image's single layer.
func layerFiles(t *testing.T, spec Spec) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	img, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	hdrs, data := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		hdrs[h.Name], data[h.Name] = h, b
	}
	return hdrs, data
}

func TestBuildIsDeterministic(t *testing.T) {
	spec := Spec{
		Files:   []File{{Path: "/b/x", Mode: 0o644, Data: []byte("x")}, {Path: "/a/y", Mode: 0o755, Data: []byte("y")}},
		User:    "65532:65532",
		Created: time.Unix(1700000000, 0),
	}
	dir := t.TempDir()
	var digests []string
	for i, s := range []Spec{spec, {Files: []File{spec.Files[1], spec.Files[0]}, User: spec.User, Created: spec.Created}} {
		img, err := Build(s)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "img"+string(rune('0'+i))+".tar")
		d, err := WriteTarball(img, "example.test/app:v1", file)
		if err != nil {
			t.Fatal(err)
		}
		// The tarball read back is the image pushed: same manifest digest.
		back, err := tarball.ImageFromPath(file, nil)
		if err != nil {
			t.Fatal(err)
		}
		if bd, _ := back.Digest(); bd != d {
			t.Fatalf("tarball read back has digest %s, Build gave %s", bd, d)
		}
		digests = append(digests, d.String())
	}
	if digests[0] != digests[1] {
		t.Fatalf("same files in another order gave another digest: %v", digests)
	}
	spec.Created = time.Unix(1700000001, 0)
	img, _ := Build(spec)
	if d, _ := img.Digest(); d.String() == digests[0] {
		t.Fatal("another timestamp gave the same digest: the test cannot tell images apart")
	}
}

func TestLayerEntriesAreSortedAndStamped(t *testing.T) {
	created := time.Unix(42, 0)
	hdrs, _ := layerFiles(t, Spec{Files: []File{{Path: "/z/f", Mode: 0o600, Data: []byte("1")}, {Path: "/a/b/g", Mode: 0o755}}, Created: created})
	for _, want := range []string{"a/", "a/b/", "a/b/g", "z/", "z/f"} {
		h := hdrs[want]
		if h == nil {
			t.Fatalf("layer lacks %s (has %v)", want, hdrs)
		}
		if !h.ModTime.Equal(created) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("%s: mtime %v uid %d gid %d uname %q, want %v, root, no names", want, h.ModTime, h.Uid, h.Gid, h.Uname, created)
		}
	}
	if _, err := Build(Spec{Files: []File{{Path: "rel"}}}); err == nil {
		t.Error("a relative path was accepted")
	}
	if _, err := Build(Spec{Files: []File{{Path: "/a"}, {Path: "/a/b"}}}); err == nil {
		t.Error("a path that is both a file and a directory was accepted")
	}
}

func TestAirlockImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds airlock")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := AirlockSpec(root, "amd64", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	img, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || strings.HasPrefix(cf.Config.User, "0") {
		t.Errorf("config user %q, want the non-root 65532:65532", cf.Config.User)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	hdrs, data := layerFiles(t, spec)
	for _, tc := range []struct {
		path string
		kube bool
	}{{AirlockBinary, false}, {AirlockKubeBinary, true}} {
		checkStaticBinary(t, hdrs, data, tc.path, tc.kube)
	}
	n, rest := 0, data[strings.TrimPrefix(CABundle, "/")]
	for {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			t.Fatalf("CA bundle: %v", err)
		}
		n++
	}
	if n < 100 {
		t.Errorf("CA bundle at %s holds %d certificates, want the pinned Mozilla roots", CABundle, n)
	}
	want, _ := os.ReadFile(filepath.Join(root, CABundleSource))
	if !bytes.Equal(data[strings.TrimPrefix(CABundle, "/")], want) {
		t.Error("CA bundle in the image is not the committed one")
	}
	if !strings.Contains(string(data["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Error("/etc/passwd lacks the nonroot user")
	}
}

// checkStaticBinary checks that the layer holds an executable, static ELF at path, built from
// cmd/airlock-kube (and linking the Kubernetes client) exactly when kube is set, else from
// cmd/airlock.
func checkStaticBinary(t *testing.T, hdrs map[string]*tar.Header, data map[string][]byte, path string, kube bool) {
	t.Helper()
	name := strings.TrimPrefix(path, "/")
	bin := data[name]
	if !bytes.HasPrefix(bin, []byte("\x7fELF")) || hdrs[name].Mode != 0o755 {
		t.Fatalf("layer lacks an executable ELF at %s", path)
	}
	ef, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a dynamic loader (PT_INTERP): not static", path)
		}
	}
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	wantPath := "github.com/airlock-dev/airlock/cmd/airlock"
	if kube {
		wantPath += "-kube"
	}
	linksKube := slices.ContainsFunc(bi.Deps, func(m *debug.Module) bool { return strings.HasPrefix(m.Path, "k8s.io/") })
	if bi.Path != wantPath || linksKube != kube {
		t.Errorf("%s: built from %s, links k8s.io modules: %v; want %s, linking them: %v", path, bi.Path, linksKube, wantPath, kube)
	}
}

// TestGoBinariesRefusesOneNameTwice: two packages whose binaries would share a name in the
// output directory are refused before anything is built, naming both.
func TestGoBinariesRefusesOneNameTwice(t *testing.T) {
	_, err := GoBinaries(t.TempDir(), "amd64", nil, "./cmd/airlock", "./other/airlock")
	if err == nil || !strings.Contains(err.Error(), "./cmd/airlock and ./other/airlock") {
		t.Fatalf("GoBinaries with two binaries named airlock: %v, want refused naming both", err)
	}
}
