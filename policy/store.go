package policy

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// defaultDebounce is how long Watch waits after the last change before it reloads: editors
// and kubelet change a file in several steps (write temp, rename, chmod, swap symlink).
const defaultDebounce = 100 * time.Millisecond

// Store holds the current policy of a running sidecar and replaces it atomically on reload.
// It is safe for concurrent use.
type Store struct {
	path     string
	debounce time.Duration
	// onWatching, when set (by tests), is called once Watch watches its directories, so a
	// test can change the file knowing the change will be seen.
	onWatching func()

	// mu serialises Reload (load, then swap of cur), so a slow load never replaces the
	// policy a later one installed. Readers use cur without it.
	mu  sync.Mutex
	cur atomic.Pointer[Policy]

	// reloaded gets a token after each successful Reload, so Notify watches the directories
	// of files the new policy extends.
	reloaded chan struct{}
	// watching is closed (once, by watchingOnce) when a Watch or Notify first watches.
	watching     chan struct{}
	watchingOnce sync.Once
}

// NewStore returns a store serving p, reloading from path. It has no side effects. A nil p
// serves the offline profile: a store never fails open.
func NewStore(path string, p *Policy) *Store {
	if p == nil {
		p = offlinePolicy()
	}
	s := &Store{path: path, debounce: defaultDebounce, reloaded: make(chan struct{}, 1),
		watching: make(chan struct{})}
	s.cur.Store(p)
	return s
}

// offlinePolicy returns the offline profile, or, should it ever fail to load, an empty
// enforce policy, which is the same thing.
func offlinePolicy() *Policy {
	if p, err := Builtin("offline"); err == nil {
		return p
	}
	return &Policy{name: "offline", mode: ModeEnforce, source: "builtin:offline"}
}

// Current returns the policy in force. Never nil.
func (s *Store) Current() *Policy { return s.cur.Load() }

// Reload loads the file again; on error the old policy stays and the error is returned. The
// new policy is fully built and validated before it replaces the old one. Errors are as from
// Load.
func (s *Store) Reload() (*Policy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := Load(s.path)
	if err != nil {
		return nil, err
	}
	s.cur.Store(p)
	select {
	case s.reloaded <- struct{}{}:
	default: // a token is already waiting
	}
	return p, nil
}

// Watch reloads when the file changes (inotify on its directory, so editors' rename-writes
// and Kubernetes ConfigMap symlink swaps are seen; a file written in place is seen when its
// writer closes it, see dirWatchMask) until ctx ends, calling report after each
// attempt with the new policy or the error that kept the old one.
//
// Changes to files the policy extends are watched too. Bursts of events are debounced into
// one reload. A watcher error is passed to report (with a nil policy) and watching goes on.
// report may be nil. Watch returns nil when ctx ends, or an error if it cannot watch.
//
// Watch reloads on its own goroutine: a caller that also reloads elsewhere (on SIGHUP) and
// acts on the policy each reload returns should use Notify and reload in one place.
func (s *Store) Watch(ctx context.Context, report func(*Policy, error)) error {
	if report == nil {
		report = func(*Policy, error) {}
	}
	return s.Notify(ctx, func(err error) {
		if err != nil {
			report(nil, err)
			return
		}
		report(s.Reload())
	})
}

// Watching is closed once a Watch or Notify watches the policy's directories: from then on a
// change of the file is seen.
func (s *Store) Watching() <-chan struct{} { return s.watching }

// Notify watches the policy file and the files it extends like Watch, but does not reload:
// after each debounced burst of changes it calls changed(nil), and the caller reloads. A
// watcher error is passed as changed(err) and watching goes on. After every successful
// Reload (by anyone) the directories of the files the new policy extends are watched too.
// changed is called on Notify's goroutine, one call at a time. Notify returns nil when ctx
// ends, or an error if it cannot watch or its watcher stops.
func (s *Store) Notify(ctx context.Context, changed func(error)) error {
	w, err := newDirWatcher()
	if err != nil {
		return fmt.Errorf("watch policy: %w", err)
	}
	defer w.Close()
	if err := s.watchDirs(w); err != nil {
		return err
	}
	if s.onWatching != nil {
		s.onWatching()
	}
	s.watchingOnce.Do(func() { close(s.watching) })
	timer := time.NewTimer(s.debounce)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case name, ok := <-w.Events:
			if !ok {
				return errWatcherStopped
			}
			if s.relevant(name) {
				timer.Reset(s.debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errWatcherStopped
			}
			changed(fmt.Errorf("watch policy: %w", err))
		case <-s.reloaded:
			if err := s.watchDirs(w); err != nil {
				changed(err)
			}
		case <-timer.C:
			changed(nil)
		}
	}
}

// errWatcherStopped is Notify's error when its watcher stops on its own (a failed read).
var errWatcherStopped = errors.New("watch policy: the watcher stopped")

// files returns the policy file and the files its current policy extends, cleaned.
func (s *Store) files() []string {
	files := []string{filepath.Clean(s.path)}
	var walk func(p *Policy)
	walk = func(p *Policy) {
		for _, parent := range p.parents {
			if !strings.HasPrefix(parent.source, "builtin:") {
				files = append(files, filepath.Clean(parent.source))
			}
			walk(parent)
		}
	}
	walk(s.Current())
	return files
}

// watchDirs watches the directory of each file (the watcher skips those it watches).
func (s *Store) watchDirs(w *dirWatcher) error {
	for _, f := range s.files() {
		dir := filepath.Dir(f)
		if err := w.Add(dir); err != nil {
			return fmt.Errorf("watch policy directory %s: %w", dir, err)
		}
	}
	return nil
}

// relevant reports whether an event may have changed the policy: it names one of the files,
// or it is the swap of a Kubernetes ConfigMap's "..data" symlink in one of their directories
// (the files themselves are symlinks through "..data" and get no event of their own), or
// events were lost (name "").
func (s *Store) relevant(name string) bool {
	if name == "" {
		return true
	}
	base, dir := filepath.Base(name), filepath.Dir(name)
	for _, f := range s.files() {
		if name == f || (base == "..data" && dir == filepath.Dir(f)) {
			return true
		}
	}
	return false
}
