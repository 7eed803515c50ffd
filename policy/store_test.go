package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// namedPolicy is a minimal valid policy called name.
func namedPolicy(name string) string {
	return policyYAML(name, "egress:", "  - {name: r, hosts: [example.com]}")
}

// writeAtomic writes a file the way editors and config tools do: a temporary file renamed
// over the target.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// report is one call of Watch's report function.
type report struct {
	p   *Policy
	err error
}

// watch starts s.Watch and returns the channel of its reports once it is watching. The
// watch stops, and the test waits for it, when the test ends.
func watch(t *testing.T, s *Store) <-chan report {
	t.Helper()
	ready := make(chan struct{})
	s.onWatching = func() { close(ready) }
	s.debounce = 10 * time.Millisecond
	reports := make(chan report, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Watch(ctx, func(p *Policy, err error) { reports <- report{p, err} })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Watch returned early: %v", err)
	}
	return reports
}

// next waits for the first report that satisfies ok; the timeout only keeps a broken test
// from hanging, it is not the synchronisation.
func next(t *testing.T, reports <-chan report, ok func(report) bool) report {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case r := <-reports:
			if ok(r) {
				return r
			}
		case <-timeout:
			t.Fatal("no matching report from Watch")
		}
	}
}

// named accepts a report of a successful reload to the policy called name.
func named(name string) func(report) bool {
	return func(r report) bool { return r.err == nil && r.p != nil && r.p.Name() == name }
}

// failed accepts a report of a failed reload.
func failed(r report) bool { return r.err != nil }

func TestStoreNilIsOffline(t *testing.T) {
	s := NewStore("unused.yaml", nil)
	if got := s.Current().Name(); got != "offline" {
		t.Errorf("got %q, want %q", got, "offline")
	}
}

func TestStoreReload(t *testing.T) {
	dir := writeFiles(t, map[string]string{"p.yaml": namedPolicy("one")})
	path := filepath.Join(dir, "p.yaml")
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(path, p)

	writeAtomic(t, path, namedPolicy("two"))
	if p, err := s.Reload(); err != nil || p.Name() != "two" || s.Current().Name() != "two" {
		t.Fatalf("Reload = %v, %v; current %q; want two", p, err, s.Current().Name())
	}

	writeAtomic(t, path, "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: Bad Name}\n")
	if _, err := s.Reload(); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("got %v, want ErrInvalidPolicy", err)
	}
	if got := s.Current().Name(); got != "two" {
		t.Errorf("after a failed reload got %q, want the old policy %q", got, "two")
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reload(); err == nil {
		t.Error("Reload of a missing file succeeded")
	}
	if got := s.Current().Name(); got != "two" {
		t.Errorf("after a failed reload got %q, want %q", got, "two")
	}
}

func TestStoreConcurrentReads(t *testing.T) {
	dir := writeFiles(t, map[string]string{"p.yaml": namedPolicy("one")})
	path := filepath.Join(dir, "p.yaml")
	s := NewStore(path, nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				s.Current().Decide(Request{Host: "example.com", Port: 443})
			}
		})
	}
	for range 10 {
		if _, err := s.Reload(); err != nil {
			t.Error(err)
		}
	}
	wg.Wait()
}

func TestStoreWatchRenameOver(t *testing.T) {
	dir := writeFiles(t, map[string]string{"p.yaml": namedPolicy("one")})
	path := filepath.Join(dir, "p.yaml")
	s := NewStore(path, nil)
	reports := watch(t, s)

	writeAtomic(t, path, namedPolicy("two"))
	next(t, reports, named("two"))
	if got := s.Current().Name(); got != "two" {
		t.Errorf("got %q, want %q", got, "two")
	}

	writeAtomic(t, path, "not: a policy\n")
	r := next(t, reports, failed)
	if !errors.Is(r.err, ErrInvalidPolicy) {
		t.Errorf("got %v, want ErrInvalidPolicy", r.err)
	}
	if got := s.Current().Name(); got != "two" {
		t.Errorf("after a bad write got %q, want the old policy %q", got, "two")
	}

	// An in-place write is seen too.
	if err := os.WriteFile(path, []byte(namedPolicy("three")), 0o600); err != nil {
		t.Fatal(err)
	}
	next(t, reports, named("three"))
}

func TestStoreWatchConfigMapSwap(t *testing.T) {
	// The layout kubelet gives a mounted ConfigMap: the file is a symlink through "..data",
	// itself a symlink to a timestamped directory; an update swaps "..data" with a rename.
	dir := writeFiles(t, map[string]string{"..v1/p.yaml": namedPolicy("one"), "..v2/p.yaml": namedPolicy("two")})
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "p.yaml"), filepath.Join(dir, "p.yaml")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "p.yaml")
	p, err := Load(path)
	if err != nil || p.Name() != "one" {
		t.Fatalf("Load = %v, %v", p, err)
	}
	s := NewStore(path, p)
	reports := watch(t, s)

	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	next(t, reports, named("two"))
}

func TestStoreWatchParentFile(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"lib/base.yaml": namedPolicy("base"),
		"p.yaml":        policyYAML("child", "extends: [./lib/base.yaml]"),
	})
	path := filepath.Join(dir, "p.yaml")
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(path, p)
	reports := watch(t, s)

	// Narrowing the parent to nothing the child can use is seen through the child.
	writeAtomic(t, filepath.Join(dir, "lib", "base.yaml"), policyYAML("base", "egress:", "  - {name: r, hosts: [example.org]}"))
	r := next(t, reports, named("child"))
	if got := r.p.Decide(Request{Host: "example.org", Port: 443}); !got.Allowed() {
		t.Errorf("got %+v, want the reloaded parent's rule", got)
	}
}

func TestStoreWatchIgnoresOtherFiles(t *testing.T) {
	dir := writeFiles(t, map[string]string{"p.yaml": namedPolicy("one")})
	path := filepath.Join(dir, "p.yaml")
	s := NewStore(path, nil)
	reports := watch(t, s)

	// A change to another file of the directory causes no reload; the change to the policy
	// after it must be the first report.
	if err := os.WriteFile(filepath.Join(dir, "other.yaml"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, path, namedPolicy("two"))
	r := next(t, reports, func(report) bool { return true })
	if r.err != nil || r.p.Name() != "two" {
		t.Errorf("first report %v, %v; want the reload to two", r.p, r.err)
	}
}

func TestStoreWatchMissingDirectory(t *testing.T) {
	s := NewStore(filepath.Join(t.TempDir(), "absent", "p.yaml"), nil)
	if err := s.Watch(context.Background(), nil); err == nil {
		t.Error("Watch of a missing directory succeeded")
	}
}

// TestStoreWatchEveryReplacement replaces the policy in each way an operator or a tool does
// it, in the directory the watcher watches; each must reload.
func TestStoreWatchEveryReplacement(t *testing.T) {
	ways := map[string]func(t *testing.T, dir, path, content string){
		"in place (truncate and write)": func(t *testing.T, _, path, content string) {
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"rename over": func(t *testing.T, _, path, content string) { writeAtomic(t, path, content) },
		"remove, then create": func(t *testing.T, _, path, content string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"editor backup (rename away, write anew)": func(t *testing.T, _, path, content string) {
			if err := os.Rename(path, path+"~"); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"symlink renamed over": func(t *testing.T, dir, path, content string) {
			target := filepath.Join(dir, "elsewhere", "new.yaml")
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(target, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path+".link"); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path+".link", path); err != nil {
				t.Fatal(err)
			}
		},
		"hard link after removal": func(t *testing.T, dir, path, content string) {
			staged := filepath.Join(dir, "staged.yaml")
			if err := os.WriteFile(staged, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(staged, path); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, replace := range ways {
		t.Run(name, func(t *testing.T) {
			dir := writeFiles(t, map[string]string{"p.yaml": namedPolicy("one")})
			path := filepath.Join(dir, "p.yaml")
			s := NewStore(path, nil)
			reports := watch(t, s)
			replace(t, dir, path, namedPolicy("two"))
			next(t, reports, named("two"))
		})
	}
}

// TestStoreWatchAuditLogBeside keeps a file open and appends to it in the policy's
// directory, as the audit log does when it sits beside the policy: the appends wake
// nothing (the first report is the policy's change after them), and the policy is still
// reloaded.
func TestStoreWatchAuditLogBeside(t *testing.T) {
	dir := writeFiles(t, map[string]string{"p.yaml": namedPolicy("one")})
	path := filepath.Join(dir, "p.yaml")
	log, err := os.OpenFile(filepath.Join(dir, "audit.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	s := NewStore(path, nil)
	reports := watch(t, s)
	for range 100 {
		if _, err := log.WriteString(`{"kind":"http"}` + "\n"); err != nil {
			t.Fatal(err)
		}
	}
	writeAtomic(t, path, namedPolicy("two"))
	r := next(t, reports, func(report) bool { return true })
	if r.err != nil || r.p.Name() != "two" {
		t.Errorf("first report %v, %v; want the reload to two", r.p, r.err)
	}
}
