package kubecluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Versions of what the cluster runs. The Kubernetes and etcd versions are build/go.mod's; the
// Debian packages are bookworm's current ones (their versions are recorded in the cache).
const (
	KubeVersion = "v1.37.2"
	kubeMajor   = "1"
	kubeMinor   = "37"
)

// kubeCommands are built from build/ (the etcd server package is `package main`).
var kubeCommands = map[string]string{
	"kube-apiserver":          "k8s.io/kubernetes/cmd/kube-apiserver",
	"kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
	"kube-scheduler":          "k8s.io/kubernetes/cmd/kube-scheduler",
	"kube-proxy":              "k8s.io/kubernetes/cmd/kube-proxy",
	"kubelet":                 "k8s.io/kubernetes/cmd/kubelet",
	"kubectl":                 "k8s.io/kubernetes/cmd/kubectl",
	"etcd":                    "go.etcd.io/etcd/server/v3",
}

// debPackages are unpacked (never installed) into the private prefix: containerd and its
// shim, runc, the CNI plugins, and nft with the libraries it links.
var debPackages = []string{
	"containerd", "runc", "containernetworking-plugins",
	"nftables", "libnftables1", "libnftnl11", "libjansson4", "libmnl0", "libxtables12", "libgmp10", "libedit2",
}

// Binaries says where the cluster's programs are.
type Binaries struct {
	Bin  string // the built Kubernetes and etcd commands
	Root string // the unpacked Debian packages (usr/bin, usr/sbin, usr/lib/cni, ...)
}

// Path returns the built command name (kubectl, etcd, ...).
func (b *Binaries) Path(name string) string { return filepath.Join(b.Bin, name) }

// Env is the environment the Debian programs run with: their directories first on PATH,
// their libraries (nft's) on LD_LIBRARY_PATH.
func (b *Binaries) Env() []string {
	return []string{
		"PATH=" + strings.Join([]string{filepath.Join(b.Root, "usr/sbin"), filepath.Join(b.Root, "usr/bin"), b.Bin, "/usr/sbin", "/usr/bin", "/sbin", "/bin"}, ":"),
		"LD_LIBRARY_PATH=" + filepath.Join(b.Root, "usr/lib/x86_64-linux-gnu"),
	}
}

// ldflags stamp the version Kubernetes reports (without them nodes say v0.0.0-master, which
// kubectl cannot parse).
func ldflags() string {
	v := "k8s.io/component-base/version"
	return strings.Join([]string{"-s", "-w", "-buildid=",
		"-X", v + ".gitVersion=" + KubeVersion, "-X", v + ".gitMajor=" + kubeMajor,
		"-X", v + ".gitMinor=" + kubeMinor, "-X", v + ".gitTreeState=clean"}, " ")
}

// sourceDir is build/, the wrapper module.
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the kubecluster package")
	}
	return filepath.Join(filepath.Dir(file), "build"), nil
}

// cacheKey hashes what the binaries depend on: the wrapper module's go.mod and go.sum, the Go
// version, the build flags and the package lists.
func cacheKey(dir string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n", runtime.Version(), ldflags(), strings.Join(debPackages, ","), runtime.GOARCH)
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return "", fmt.Errorf("read wrapper module: %w", err)
		}
		h.Write(b)
	}
	for _, name := range sortedCommands() {
		fmt.Fprintf(h, "%s=%s\n", name, kubeCommands[name])
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Build builds (or finds in .cache/) the cluster's binaries and returns where they are. A
// cold build takes several minutes; a file lock keeps parallel callers from building twice.
func Build(ctx context.Context) (*Binaries, error) {
	dir, err := sourceDir()
	if err != nil {
		return nil, err
	}
	key, err := cacheKey(dir)
	if err != nil {
		return nil, err
	}
	cache := filepath.Join(dir, "..", "..", "..", ".cache", "kubecluster")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, fmt.Errorf("create cache: %w", err)
	}
	b := &Binaries{Bin: filepath.Join(cache, "bin-"+key), Root: filepath.Join(cache, "debs-"+key)}
	if done(b.Bin) && done(b.Root) {
		return b, nil
	}
	lock, err := os.OpenFile(filepath.Join(cache, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open build lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("lock cache: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	if !done(b.Root) {
		if err := unpackDebs(ctx, b.Root); err != nil {
			return nil, err
		}
	}
	if !done(b.Bin) {
		if err := buildKube(ctx, dir, b.Bin); err != nil {
			return nil, err
		}
	}
	removeStale(cache, key)
	return b, nil
}

// done reports whether dir was completed (a finished build renames its directory into place).
func done(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".complete"))
	return err == nil
}

func markDone(tmp, dir string) error {
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return fmt.Errorf("mark build complete: %w", err)
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("move build into place: %w", err)
	}
	return nil
}

// buildKube builds every command of kubeCommands into out with one niced go build (the
// commands share most packages; the machine is shared).
func buildKube(ctx context.Context, dir, out string) error {
	tmp := out + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("create build directory: %w", err)
	}
	args := []string{"-n", "10", "go", "build", "-trimpath", "-ldflags", ldflags(), "-o", tmp + "/"}
	for _, name := range sortedCommands() {
		args = append(args, kubeCommands[name])
	}
	if err := runIn(ctx, dir, "nice", args...); err != nil {
		return err
	}
	// go build names a main package whose path ends in /v3 after the element before it.
	if err := os.Rename(filepath.Join(tmp, "server"), filepath.Join(tmp, "etcd")); err != nil {
		return fmt.Errorf("name the etcd binary: %w", err)
	}
	return markDone(tmp, out)
}

func sortedCommands() []string {
	names := make([]string, 0, len(kubeCommands))
	for n := range kubeCommands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// unpackDebs downloads the Debian packages with apt-get download and unpacks them into out
// with dpkg-deb -x: nothing is installed on this machine.
func unpackDebs(ctx context.Context, out string) error {
	tmp := out + ".tmp"
	_ = os.RemoveAll(tmp)
	debs := filepath.Join(tmp, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return fmt.Errorf("create package directory: %w", err)
	}
	if err := runIn(ctx, debs, "apt-get", append([]string{"download", "-q"}, debPackages...)...); err != nil {
		return fmt.Errorf("%w (run apt-get update first)", err)
	}
	files, err := filepath.Glob(filepath.Join(debs, "*.deb"))
	if err != nil || len(files) != len(debPackages) {
		return fmt.Errorf("apt-get download gave %d packages, want %d", len(files), len(debPackages))
	}
	var versions []string
	for _, f := range files {
		if err := runIn(ctx, tmp, "dpkg-deb", "-x", f, tmp); err != nil {
			return err
		}
		versions = append(versions, filepath.Base(f))
	}
	if err := os.WriteFile(filepath.Join(tmp, "PACKAGES"), []byte(strings.Join(versions, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("record package versions: %w", err)
	}
	if err := os.RemoveAll(debs); err != nil {
		return fmt.Errorf("remove downloaded packages: %w", err)
	}
	return markDone(tmp, out)
}

// removeStale removes the builds of other keys (500 MB each).
func removeStale(cache, key string) {
	for _, pat := range []string{"bin-*", "debs-*"} {
		old, _ := filepath.Glob(filepath.Join(cache, pat))
		for _, o := range old {
			if !strings.HasSuffix(o, key) {
				_ = os.RemoveAll(o)
			}
		}
	}
}

func runIn(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}
