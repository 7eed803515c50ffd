package sandbox

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestParseMount(t *testing.T) {
	src := t.TempDir()
	for _, tc := range []struct {
		in   string
		want Mount
		err  string
	}{
		{in: src + ":/work/src", want: Mount{Source: src, Dest: "/work/src"}},
		{in: src + ":/data:rw", want: Mount{Source: src, Dest: "/data", Writable: true}},
		{in: src + "/:/data/../data2:ro", want: Mount{Source: src, Dest: "/data2"}},
		{in: src, err: "want SRC:DST"},
		{in: "rel:/x", err: "absolute"},
		{in: src + ":/x:rwx", err: "ro or rw"},
		{in: src + ":/", err: "may not be /"},
		{in: src + ":/etc/airlock", err: "/etc belongs"},
		{in: src + ":/proc/x", err: "/proc belongs"},
		{in: src + ":/usr", err: "/usr belongs"},
		{in: src + ":/tmp/x", err: "/tmp belongs"},
		{in: src + ":rel", err: "absolute"},
		{in: src + "/missing:/x", err: "no such file"},
	} {
		got, err := ParseMount(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseMount(%q) = %+v, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseMount(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func testState() *State {
	return &State{Name: "sb", Cgroup: "/sys/fs/cgroup/airlock/sb", Limits: Limits{Memory: 1 << 30, Pids: 100, CPU: 1.5},
		Container: &ContainerState{IDBase: DefaultIDBase, CgroupsPath: "/airlock/sb", Workdir: "/work", TmpSize: 1 << 20,
			Mounts: []Mount{{Source: "/srv/a", Dest: "/work/a/b"}, {Source: "/srv/w", Dest: "/work/a", Writable: true}}}}
}

// The container is confined with no flags: its own namespaces but the network one (the
// runtime is started in the sandbox's), no capabilities, no_new_privs, a seccomp profile, a
// read-only root, an unprivileged id map, masked and read-only kernel paths, and limits.
func TestOCISpecConfines(t *testing.T) {
	st := testState()
	spec, err := ociSpec(st, rootView{sys: []string{"usr"}, etc: []string{"ssl/certs"}})
	if err != nil {
		t.Fatal(err)
	}
	var ns []specs.LinuxNamespaceType
	for _, n := range spec.Linux.Namespaces {
		if n.Path != "" {
			t.Errorf("namespace %s joins %s", n.Type, n.Path)
		}
		ns = append(ns, n.Type)
	}
	for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace, specs.UserNamespace, specs.CgroupNamespace} {
		if !slices.Contains(ns, want) {
			t.Errorf("no %s namespace: %v", want, ns)
		}
	}
	if slices.Contains(ns, specs.NetworkNamespace) {
		t.Error("the config names a network namespace: runc 1.1 exec would fail to join it")
	}
	p := spec.Process
	if !p.NoNewPrivileges || p.Capabilities == nil || len(p.Capabilities.Bounding)+len(p.Capabilities.Effective)+len(p.Capabilities.Permitted)+len(p.Capabilities.Ambient)+len(p.Capabilities.Inheritable) != 0 {
		t.Errorf("process privileges: no_new_privs %v, capabilities %+v", p.NoNewPrivileges, p.Capabilities)
	}
	if !spec.Root.Readonly || spec.Linux.Seccomp == nil || spec.Linux.Seccomp.DefaultAction != specs.ActErrno {
		t.Errorf("root read-only %v, seccomp %v", spec.Root.Readonly, spec.Linux.Seccomp != nil)
	}
	if a := spec.Linux.Seccomp.Architectures; nativeArch != "" && !slices.Equal(a, []specs.Arch{nativeArch}) {
		t.Errorf("seccomp architectures %v: want the native ABI %s alone", a, nativeArch)
	}
	want := []specs.LinuxIDMapping{{ContainerID: 0, HostID: DefaultIDBase, Size: IDRangeSize}}
	if !slices.Equal(spec.Linux.UIDMappings, want) || !slices.Equal(spec.Linux.GIDMappings, want) {
		t.Errorf("id maps %v %v, want %v", spec.Linux.UIDMappings, spec.Linux.GIDMappings, want)
	}
	for _, m := range []string{"/proc/kcore", "/sys/fs/cgroup", "/sys/fs/bpf", "/proc/keys"} {
		if !slices.Contains(spec.Linux.MaskedPaths, m) {
			t.Errorf("%s not masked", m)
		}
	}
	if !slices.Contains(spec.Linux.ReadonlyPaths, "/proc/sys") {
		t.Error("/proc/sys not read-only")
	}
	r := spec.Linux.Resources
	if *r.Memory.Limit != 1<<30 || r.Pids.Limit != 100 || *r.CPU.Quota != 150000 || *r.CPU.Period != 100000 {
		t.Errorf("limits %+v %+v %+v", r.Memory, r.Pids, r.CPU)
	}
	if len(r.Devices) != 1 || r.Devices[0].Allow {
		t.Errorf("device rules %+v: want every device denied (the runtime adds the usual ones)", r.Devices)
	}
	if spec.Linux.CgroupsPath != "/airlock/sb" {
		t.Errorf("cgroupsPath %q", spec.Linux.CgroupsPath)
	}
}

// Every bind of the host is read-only but the rw --mount; a mount under the working directory
// comes after its tmpfs; /sys is read-only.
func TestContainerMounts(t *testing.T) {
	st := testState()
	ms := containerMounts(st.Container, rootView{sys: []string{"usr", "lib64"}, etc: []string{"ssl/certs"}})
	index := map[string]int{}
	for i, m := range ms {
		index[m.Destination] = i
		ro := slices.Contains(m.Options, "ro")
		switch {
		case m.Type == "bind" && m.Destination == "/work/a":
			if ro {
				t.Errorf("rw mount %s is read-only", m.Destination)
			}
		case m.Type == "bind" && !ro:
			t.Errorf("bind %s -> %s is writable", m.Source, m.Destination)
		}
		if m.Type == "tmpfs" && (m.Destination == "/tmp" || m.Destination == "/work") && !slices.Contains(m.Options, "size=1048576") {
			t.Errorf("%s: options %v, want size=1048576", m.Destination, m.Options)
		}
	}
	for _, d := range []string{"/proc", "/sys", "/usr", "/lib64", "/etc/ssl/certs", "/tmp", "/work", "/work/a", "/work/a/b"} {
		if _, ok := index[d]; !ok {
			t.Errorf("no mount at %s", d)
		}
	}
	if !(index["/work"] < index["/work/a"] && index["/work/a"] < index["/work/a/b"]) {
		t.Errorf("mount order: /work %d, /work/a %d, /work/a/b %d", index["/work"], index["/work/a"], index["/work/a/b"])
	}
	// A --mount at the working directory replaces its tmpfs.
	st.Container.Mounts = []Mount{{Source: "/srv/w", Dest: "/work", Writable: true}}
	for _, m := range containerMounts(st.Container, rootView{}) {
		if m.Destination == "/work" && m.Type == "tmpfs" {
			t.Error("a tmpfs at /work although a --mount is there")
		}
	}
}

// The bundle's /etc holds the allowlist and the generated files, and nothing of the host's
// secrets; mount points exist for every mount.
func TestWriteBundle(t *testing.T) {
	dir := t.TempDir()
	st := testState()
	st.Dir, st.SandboxAddr, st.HostAddr = dir, "198.19.0.2", "198.19.0.1"
	st.Container.Bundle = filepath.Join(dir, "bundles", "b1")
	src := t.TempDir()
	st.Container.Mounts = []Mount{{Source: src, Dest: "/data/in"}}
	if err := os.MkdirAll(st.PublicDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(st.EnvFile(), []byte("HTTPS_PROXY=x\n"), 0o644)
	os.WriteFile(st.CABundle(), []byte("CA\n"), 0o644)
	if err := writeBundle(st); err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(st.Container.Bundle, "rootfs")
	read := func(p string) string { b, _ := os.ReadFile(filepath.Join(rootfs, p)); return string(b) }
	if !strings.HasPrefix(read("etc/passwd"), "root:x:0:0:root:/work:") || read("etc/airlock/env") != "HTTPS_PROXY=x\n" ||
		read("etc/airlock/ca/ca-bundle.pem") != "CA\n" || !strings.Contains(read("etc/resolv.conf"), "nameserver 198.19.0.1") ||
		!strings.Contains(read("etc/hosts"), "198.19.0.2\tsb") {
		t.Errorf("generated /etc: passwd %q env %q resolv %q hosts %q", read("etc/passwd"), read("etc/airlock/env"), read("etc/resolv.conf"), read("etc/hosts"))
	}
	for _, secret := range []string{"etc/shadow", "etc/gshadow", "etc/ssh", "etc/sudoers", "root", "home", "var"} {
		if _, err := os.Lstat(filepath.Join(rootfs, secret)); err == nil {
			t.Errorf("%s is in the sandbox's root", secret)
		}
	}
	for _, d := range []string{"proc", "sys", "dev", "tmp", "work", "data/in"} {
		if fi, err := os.Stat(filepath.Join(rootfs, d)); err != nil || !fi.IsDir() {
			t.Errorf("mount point %s: %v", d, err)
		}
	}
	var spec specs.Spec
	data, err := os.ReadFile(filepath.Join(st.Container.Bundle, "config.json"))
	if err != nil || json.Unmarshal(data, &spec) != nil || spec.Version != ociVersion {
		t.Fatalf("config.json: %v, version %q", err, spec.Version)
	}
	if fi, _ := os.Stat(filepath.Join(st.Container.Bundle, "config.json")); fi.Mode().Perm() != 0o600 {
		t.Errorf("config.json mode %v", fi.Mode().Perm())
	}
}

// A container made with its one command (Waiting) gets its bundle in two parts: what the
// runtime's create reads (passwd, group, the mount points, config.json) before the public files
// exist, the rest of /etc from writeBundleEtc once they do; any other bundle is whole at once.
// Its config.json is written once, with the command's process (setBundleProcess).
func TestWriteBundleEtcAfterCreate(t *testing.T) {
	dir := t.TempDir()
	st := testState()
	st.Dir, st.SandboxAddr, st.HostAddr = dir, "198.19.0.2", "198.19.0.1"
	st.Container.Bundle = filepath.Join(dir, "bundles", "b1")
	st.Container.Waiting, st.Container.Mounts = true, nil
	if err := writeBundle(st); err != nil { // no public files yet: they are not read
		t.Fatalf("writeBundle before the public files: %v", err)
	}
	etc := filepath.Join(st.Container.Bundle, "rootfs", "etc")
	exists := func(p string) bool { _, err := os.Lstat(filepath.Join(etc, p)); return err == nil }
	for _, p := range []string{"passwd", "group", "mtab"} {
		if !exists(p) {
			t.Errorf("%s missing before the create", p)
		}
	}
	config := filepath.Join(st.Container.Bundle, "config.json")
	if _, err := os.Stat(config); !errors.Is(err, fs.ErrNotExist) || st.Container.spec == nil {
		t.Errorf("config.json on disk before its process (%v), or not kept (%v)", err, st.Container.spec)
	}
	if err := setBundleProcess(st.Container, []string{"/bin/true", "x"}, []string{"A=b"}, 7, 8, false); err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if data, err := os.ReadFile(config); err != nil || json.Unmarshal(data, &spec) != nil {
		t.Fatalf("config.json after setBundleProcess: %v", err)
	}
	if p := spec.Process; p == nil || !slices.Equal(p.Args, []string{"/bin/true", "x"}) || p.User.UID != 7 || p.User.GID != 8 ||
		!p.NoNewPrivileges || spec.Linux == nil || len(spec.Linux.UIDMappings) != 1 || spec.Linux.Seccomp == nil {
		t.Errorf("config.json with the process: %+v", spec)
	}
	for _, p := range []string{"hosts", "hostname", "resolv.conf", "airlock/env", "nsswitch.conf"} {
		if exists(p) {
			t.Errorf("%s written before the public files exist", p)
		}
	}
	if err := os.MkdirAll(st.PublicDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(st.EnvFile(), []byte("HTTPS_PROXY=x\n"), 0o644)
	os.WriteFile(st.CABundle(), []byte("CA\n"), 0o644)
	if err := writeBundleEtc(st); err != nil {
		t.Fatalf("writeBundleEtc: %v", err)
	}
	for _, p := range []string{"hosts", "hostname", "resolv.conf", "airlock/env", "airlock/ca/ca-bundle.pem", "nsswitch.conf"} {
		if !exists(p) {
			t.Errorf("%s missing after writeBundleEtc", p)
		}
	}
	st.Container.Waiting, st.Container.Bundle = false, filepath.Join(dir, "bundles", "b2")
	if err := writeBundle(st); err != nil || !exists("hosts") {
		t.Fatalf("a bundle of a started container: %v", err)
	}
	if err := writeBundleEtc(st); err != nil {
		t.Errorf("writeBundleEtc of a whole bundle: %v, want a no-op", err)
	}
}

// Id ranges are claimed host-wide without overlap, skipping host ids and other bases' claims,
// released, and a claim whose state file is gone is stray.
func TestClaimIDRange(t *testing.T) {
	idClaimDir = filepath.Join(t.TempDir(), "idmap")
	defer func() { idClaimDir = "/run/airlock/idmap" }()
	store := t.TempDir()
	owner := filepath.Join(store, "a.json")
	os.WriteFile(owner, []byte("{}"), 0o600)
	a, claimA, err := claimIDRange(DefaultIDBase, owner)
	if err != nil || a != DefaultIDBase {
		t.Fatalf("first claim %d, %v", a, err)
	}
	b, claimB, err := claimIDRange(DefaultIDBase, filepath.Join(store, "b.json"))
	if err != nil || b != DefaultIDBase+IDRangeSize {
		t.Fatalf("second claim %d, %v", b, err)
	}
	// Another base that would overlap the first range starts after it.
	c, _, err := claimIDRange(DefaultIDBase+100, filepath.Join(store, "c.json"))
	if err != nil || c < b+IDRangeSize {
		t.Errorf("overlapping base: claim %d, %v; want at or after %d", c, err, b+IDRangeSize)
	}
	if stray := strayIDClaims(store); len(stray) != 2 || slices.Contains(stray, claimA) {
		t.Errorf("stray claims %v: want b's and c's (their state files do not exist), not %s", stray, claimA)
	}
	if err := releaseIDRange(claimB); err != nil {
		t.Fatal(err)
	}
	if again, _, err := claimIDRange(DefaultIDBase, owner); err != nil || again != b {
		t.Errorf("after release: %d, %v; want %d again", again, err, b)
	}
	if err := releaseIDRange(claimB + ".missing"); err != nil {
		t.Errorf("releasing a missing claim: %v", err)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{2 << 30: "2G", 512 << 20: "512M", 1536 << 20: "1536M", 1000: "1000", 4 << 10: "4K"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
