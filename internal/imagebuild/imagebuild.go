// Package imagebuild builds container images offline, with no daemon and no registry: static
// files in one layer on an empty base, written as an image tarball (docker-archive format,
// which `crane push`, `skopeo copy docker-archive:`, `docker load` and `ctr images import`
// read). Manifests and configs are go-containerregistry's; this package only decides what
// goes into the layer, and makes the output a function of its inputs alone: fixed timestamps,
// sorted entries, root-owned files, so that the same inputs give the same digest anywhere.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one regular file of an image's layer.
type File struct {
	Path string // absolute path in the image, e.g. /usr/local/bin/airlock
	Mode int64  // permission bits, e.g. 0o755
	Data []byte
}

// Spec is what an image holds and how it runs.
type Spec struct {
	Files      []File
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string            // numeric uid[:gid], e.g. "65532:65532"
	Labels     map[string]string // OCI annotations-style labels in the config
	Arch       string            // GOARCH of the files; default amd64
	Created    time.Time         // every timestamp in the image; the zero value means the Unix epoch
}

// Build assembles the image described by spec.
func Build(spec Spec) (v1.Image, error) {
	created := spec.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC()
	layerTar, err := layerTar(spec.Files, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("make layer: %w", err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "airlock imagebuild"},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cf = cf.DeepCopy()
	arch := spec.Arch
	if arch == "" {
		arch = "amd64"
	}
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: created}
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.Cmd = spec.Cmd
	cf.Config.Env = spec.Env
	cf.Config.User = spec.User
	cf.Config.Labels = spec.Labels
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// layerTar is the layer's uncompressed tar: the files and every parent directory, sorted by
// path, owned by root, all stamped with created.
func layerTar(files []File, created time.Time) ([]byte, error) {
	dirs := map[string]bool{}
	byPath := map[string]File{}
	for _, f := range files {
		p := path.Clean(f.Path)
		if !path.IsAbs(p) || p == "/" {
			return nil, fmt.Errorf("layer file %q: want an absolute file path", f.Path)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("layer file %q: given twice", p)
		}
		byPath[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var names []string
	for d := range dirs {
		if _, clash := byPath[d]; clash {
			return nil, fmt.Errorf("layer path %q: both a file and a directory", d)
		}
		names = append(names, d)
	}
	for p := range byPath {
		names = append(names, p)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		hdr := &tar.Header{Name: strings.TrimPrefix(p, "/"), ModTime: created, Format: tar.FormatPAX}
		if dirs[p] {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
		} else {
			f := byPath[p]
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, f.Mode, int64(len(f.Data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("write layer entry %s: %w", p, err)
		}
		if !dirs[p] {
			if _, err := tw.Write(byPath[p].Data); err != nil {
				return nil, fmt.Errorf("write layer entry %s: %w", p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close layer: %w", err)
	}
	return buf.Bytes(), nil
}

// WriteTarball writes img to file as an image tarball tagged ref and returns the image's
// manifest digest (what a registry reports after a push of that tarball).
func WriteTarball(img v1.Image, ref, file string) (v1.Hash, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("parse image name %q: %w", ref, err)
	}
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		return v1.Hash{}, fmt.Errorf("write image tarball %s: %w", file, err)
	}
	d, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("digest image: %w", err)
	}
	return d, nil
}

// GoBinary builds the Go package pkg (run from dir) with the build tags as a static,
// reproducible binary for linux/arch and returns its bytes: CGO off, -trimpath, no build id,
// symbol tables stripped. The result depends on the sources, the tags, the Go version and the
// module's dependencies only.
func GoBinary(dir, pkg, arch string, tags ...string) ([]byte, error) {
	bins, err := GoBinaries(dir, arch, tags, pkg)
	if err != nil {
		return nil, err
	}
	return bins[pkg], nil
}

// GoBinaries builds the Go packages pkgs as GoBinary builds one, with one go build: the go
// command loads the module once and links the binaries side by side. It returns each
// binary's bytes by its package as given. The packages' last path elements (the binaries'
// names) must differ.
func GoBinaries(dir, arch string, tags []string, pkgs ...string) (map[string][]byte, error) {
	out, err := os.MkdirTemp("", "imagebuild-bin-")
	if err != nil {
		return nil, fmt.Errorf("create temp directory: %w", err)
	}
	defer os.RemoveAll(out)
	names := map[string]string{}
	for _, pkg := range pkgs {
		name := path.Base(pkg)
		if other, ok := names[name]; ok {
			return nil, fmt.Errorf("go build %s and %s: both binaries would be named %s", other, pkg, name)
		}
		names[name] = pkg
	}
	args := append([]string{"build", "-trimpath", "-ldflags=-s -w -buildid=", "-tags=" + strings.Join(tags, ","), "-o", out + "/"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, stderr.String())
	}
	bins := map[string][]byte{}
	for name, pkg := range names {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			return nil, fmt.Errorf("read built binary of %s: %w", pkg, err)
		}
		bins[pkg] = b
	}
	return bins, nil
}
