package node

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/testnet"
)

// memoryCounted makes the pod's container cgroups count memory: on a hybrid host (this
// one) in the v1 memory hierarchy at the same relative path, as kubelet lays it out, which
// the agent is told of (the returned V1MemoryRoot); on a cgroup v2 host by enabling the
// memory controller down to the pod's cgroup.
func (p *pod) memoryCounted(t *testing.T) (v1Root string) {
	t.Helper()
	if hybrid := V1MemoryRoot("/sys/fs/cgroup"); hybrid != "" {
		v2, err := testnet.Cgroup2Root()
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(v2, p.root.Path)
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Join(hybrid, rel)
	}
	for dir := p.root.Path; ; {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory"), 0o644); err != nil {
			t.Fatalf("enable the memory controller in %s: %v", dir, err)
		}
		if dir == p.podCg.Path {
			return ""
		}
		rel, _ := filepath.Rel(dir, p.podCg.Path)
		dir = filepath.Join(dir, strings.Split(rel, string(filepath.Separator))[0])
	}
}

// v1Container starts container id's helper with its memory counted in the v1 hierarchy
// below v1Root (when set), as a hybrid node's runtime puts it.
func (p *pod) v1Container(ctx context.Context, t *testing.T, v1Root, id, role string) *helper {
	t.Helper()
	if v1Root == "" {
		return p.container(ctx, id, role)
	}
	rel, err := filepath.Rel(p.root.Path, filepath.Join(p.podCg.Path, id))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(v1Root, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered before the helper's own cleanup (of the pod's test), so it runs after the
	// helper is gone.
	p.t.Cleanup(func() {
		for d := dir; d != filepath.Dir(v1Root); d = filepath.Dir(d) {
			if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				break // still used by another container of the test
			}
		}
	})
	h := p.container(ctx, id, role)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(h.pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	return h
}

// usageOf parses the sidecar helper's usage answer: NAME -> "ID:CPU-USEC:PEAK".
func usageOf(t *testing.T, line string) map[string][3]string {
	t.Helper()
	rest, ok := strings.CutPrefix(line, "OK")
	if !ok {
		t.Fatalf("usage: %s", line)
	}
	out := map[string][3]string{}
	for _, f := range strings.Fields(rest) {
		p := strings.Split(f, ":")
		if len(p) != 4 {
			t.Fatalf("usage entry %q", f)
		}
		out[p[0]] = [3]string{p[1], p[2], p[3]}
	}
	return out
}

func atoi(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// TestAgentUsage: the agent answers each running app container's CPU time and memory
// peak from its cgroup (the v1 memory hierarchy on a hybrid node), by name and run ID; a
// restarted container is a new run counting from zero. Hostile: a pod's sidecar gets only
// its own pod's containers, even when another pod on the node has a container of the same
// name, and even when its pod's reported containers name another pod's container ID; the
// sidecar's own container is never in the answer.
func TestAgentUsage(t *testing.T) {
	p := newPod(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	v1 := p.memoryCounted(t)
	a := p.agent()
	a.cfg.V1MemoryRoot = v1
	side := p.container(ctx, "side1", "sidecar")
	busy := p.v1Container(ctx, t, v1, "busy1", "app")
	hog := p.v1Container(ctx, t, v1, "hog1", "app")
	p.p.SidecarID, p.p.Containers = "side1", map[string]string{"reviewer": "busy1", "author": "hog1"}
	if err := a.Upsert(p.p); err != nil {
		t.Fatal(err)
	}
	if got := side.next(); got != "attached" {
		t.Fatalf("sidecar: %s, want attached", got)
	}
	if got := busy.do("burn 300"); got != "OK" {
		t.Fatalf("burn: %s", got)
	}
	if got := hog.do("hog 64"); got != "OK" {
		t.Fatalf("hog: %s", got)
	}
	u := usageOf(t, side.do("usage"))
	if len(u) != 2 || u["reviewer"][0] != "busy1" || u["author"][0] != "hog1" {
		t.Fatalf("usage %v, want the pod's two app containers (not the sidecar's) by name and run ID", u)
	}
	if cpu := atoi(t, u["reviewer"][1]); cpu < 250_000 {
		t.Errorf("reviewer's CPU %d µs, want at least the 300 ms it burnt (less a tick)", cpu)
	}
	if u["reviewer"][2] == "-" || u["author"][2] == "-" {
		t.Fatalf("usage %v: memory not counted", u)
	}
	if peak := atoi(t, u["author"][2]); peak < 64<<20 {
		t.Errorf("author's memory peak %d, want at least the 64 MiB it touched", peak)
	}
	if peak := atoi(t, u["reviewer"][2]); peak >= 64<<20 {
		t.Errorf("reviewer's memory peak %d: the 64 MiB are author's", peak)
	}

	t.Run("restarted container", func(t *testing.T) {
		busy.in.Close()
		p.v1Container(ctx, t, v1, "busy2", "app")
		p.p.Containers = map[string]string{"reviewer": "busy2", "author": "hog1"}
		if err := a.Upsert(p.p); err != nil {
			t.Fatal(err)
		}
		u := usageOf(t, side.do("usage"))
		if u["reviewer"][0] != "busy2" || atoi(t, u["reviewer"][1]) >= 250_000 {
			t.Errorf("restarted reviewer %v, want run busy2 counting from zero", u["reviewer"])
		}
	})

	t.Run("another pod", func(t *testing.T) {
		other := &pod{t: t, tp: testnet.NewTopology(t), root: p.root, sock: p.sock}
		uid := p.p.UID[:len(p.p.UID)-1] + map[bool]string{true: "e", false: "f"}[strings.HasSuffix(p.p.UID, "f")]
		other.podCg = p.root.Child(t, "kubepods-other").Child(t, "pod"+uid)
		other.p = Pod{Namespace: p.p.Namespace, Name: p.p.Name + "-b", UID: uid}
		t.Cleanup(func() { _ = os.RemoveAll(pinDir(other.p)) })
		side2 := other.container(ctx, "side-b", "sidecar")
		other.container(ctx, "rev-b", "app")
		// Its reported containers even name the first pod's container run: the agent reads
		// only below this pod's own cgroup.
		other.p.SidecarID, other.p.Containers = "side-b", map[string]string{"reviewer": "rev-b", "stolen": "hog1"}
		if err := a.Upsert(other.p); err != nil {
			t.Fatal(err)
		}
		if got := side2.next(); got != "attached" {
			t.Fatalf("other pod's sidecar: %s, want attached", got)
		}
		u := usageOf(t, side2.do("usage"))
		if len(u) != 1 || u["reviewer"][0] != "rev-b" {
			t.Errorf("the other pod's usage %v, want its own reviewer only (no hog1 of the first pod)", u)
		}
		if u := usageOf(t, side.do("usage")); u["reviewer"][0] != "busy2" || len(u) != 2 {
			t.Errorf("the first pod's usage %v, want its own containers only", u)
		}
	})
}
