package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	regtransport "github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// platform is the image platform sandboxes run: Linux on this machine's architecture.
func platform() v1.Platform { return v1.Platform{OS: "linux", Architecture: runtime.GOARCH} }

// Credential is a registry's login: Basic credentials, which the pull sends to the registry
// (or to the token service its challenge names, for a bearer token), never elsewhere.
type Credential struct {
	Username string
	Password string // never logged: String leaves it out
}

// String names the credential without its password.
func (c *Credential) String() string { return "registry login " + c.Username }

// ParseCredential reads a login written USER:PASSWORD (the form of a Docker config's `auth`
// once decoded); a registry that takes a token alone takes it as the password of any user
// name it documents.
func ParseCredential(v string) (*Credential, error) {
	user, pass, ok := strings.Cut(strings.TrimRight(v, "\r\n"), ":")
	if !ok || user == "" || pass == "" {
		return nil, errors.New("a registry login is USER:PASSWORD (for a token-only registry, the user name it documents, a colon and the token)")
	}
	return &Credential{Username: user, Password: pass}, nil
}

// openImage reads ref: an OCI image layout directory, a tarball (an OCI layout, as `docker
// buildx --output type=oci` and `skopeo copy oci-archive:` write it, or `docker save`'s
// format), or a registry reference, pulled through transport with cred (nil: anonymously).
// tmp is where an OCI archive is unpacked; the returned cleanup removes it.
func openImage(ctx context.Context, ref, tmp string, transport http.RoundTripper, cred *Credential) (v1.Image, func(), error) {
	nothing := func() {}
	if _, err := os.Stat(ref); err == nil && cred != nil {
		return nil, nothing, fmt.Errorf("--image %s: a registry login is for registry references, and this is a file", ref)
	}
	if fi, err := os.Stat(ref); err == nil {
		if fi.IsDir() {
			img, err := fromLayout(ref)
			return img, nothing, err
		}
		return fromTarball(ref, tmp)
	}
	if strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, ".") {
		return nil, nothing, fmt.Errorf("--image %s: no such file or directory", ref)
	}
	if transport == nil {
		return nil, nothing, fmt.Errorf("--image %s: pulling from a registry is not set up here", ref)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, nothing, fmt.Errorf("--image %s: not a file, a directory or an image reference: %w", ref, err)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithTransport(transport), remote.WithPlatform(platform())}
	if cred != nil {
		// go-containerregistry sends it to the reference's registry only (and to the token
		// service of that registry's challenge), never along a redirect to another host.
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: cred.Username, Password: cred.Password}))
	}
	img, err := remote.Image(r, opts...)
	var terr *regtransport.Error
	if errors.As(err, &terr) && terr.StatusCode == http.StatusUnauthorized && cred == nil {
		return nil, nothing, fmt.Errorf("pull %s: the registry wants a login: give --image-pull-secret NAME, a secret of the policy's spec.secrets holding USER:PASSWORD: %w", ref, err)
	}
	if err != nil {
		return nil, nothing, fmt.Errorf("pull %s: %w", ref, err)
	}
	return img, nothing, nil
}

// fromLayout reads the image of an OCI layout directory: the only image of its index (or of a
// nested index), or the one for this machine's platform.
func fromLayout(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	img, err := pickImage(idx, 0)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	return img, nil
}

// pickImage chooses the image of idx for platform(): the only manifest, or the one whose
// platform matches, descending into nested indexes.
func pickImage(idx v1.ImageIndex, depth int) (v1.Image, error) {
	if depth > 4 {
		return nil, errors.New("image indexes nested too deep")
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	want := platform()
	var match []v1.Descriptor
	for _, d := range im.Manifests {
		if len(im.Manifests) == 1 || d.Platform == nil || d.Platform.Satisfies(want) {
			match = append(match, d)
		}
	}
	if len(match) != 1 {
		return nil, fmt.Errorf("%d manifests, %d for %s/%s: give a layout with one image", len(im.Manifests), len(match), want.OS, want.Architecture)
	}
	d := match[0]
	if d.MediaType.IsIndex() {
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		return pickImage(child, depth+1)
	}
	return idx.Image(d.Digest)
}

// fromTarball reads an image tarball: an OCI layout (it has an oci-layout file), unpacked
// under tmp first, or `docker save`'s format.
func fromTarball(file, tmp string) (v1.Image, func(), error) {
	nothing := func() {}
	isOCI, err := tarHas(file, "oci-layout")
	if err != nil {
		return nil, nothing, fmt.Errorf("image tarball %s: %w", file, err)
	}
	if !isOCI {
		img, err := tarball.ImageFromPath(file, nil)
		if err != nil {
			return nil, nothing, fmt.Errorf("image tarball %s: %w", file, err)
		}
		return img, nothing, nil
	}
	dir, err := os.MkdirTemp(tmp, "oci-archive-")
	if err != nil {
		return nil, nothing, fmt.Errorf("image tarball %s: %w", file, err)
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	if err := extractLayout(file, dir); err != nil {
		cleanup()
		return nil, nothing, fmt.Errorf("image tarball %s: %w", file, err)
	}
	img, err := fromLayout(dir)
	if err != nil {
		cleanup()
		return nil, nothing, err
	}
	return img, cleanup, nil
}

// tarHas reports whether the tar file has an entry called name (a leading "./" ignored).
func tarHas(file, name string) (bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return false, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if path.Clean(hdr.Name) == name {
			return true, nil
		}
	}
}

// extractLayout writes the regular files of an OCI archive (oci-layout, index.json,
// blobs/ALG/HEX) into dir; anything else (links, other paths) is refused.
func extractLayout(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := path.Clean(hdr.Name)
		if hdr.Typeflag == tar.TypeDir && (p == "." || p == "blobs" || strings.Count(p, "/") == 1 && strings.HasPrefix(p, "blobs/")) {
			continue
		}
		if !layoutFile(p) || hdr.Typeflag != tar.TypeReg {
			return fmt.Errorf("entry %q: an OCI archive holds oci-layout, index.json and blobs/ALG/HEX files only", hdr.Name)
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}

// layoutFile reports whether p (cleaned) is a file of an OCI layout.
func layoutFile(p string) bool {
	if p == "oci-layout" || p == "index.json" {
		return true
	}
	parts := strings.Split(p, "/")
	if len(parts) != 3 || parts[0] != "blobs" {
		return false
	}
	for _, s := range parts[1:] {
		if s == "" || strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
			return false
		}
	}
	return true
}
