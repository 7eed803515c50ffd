//go:build !linux

package policy

import (
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// dirWatcher watches directories with fsnotify where there is no inotify: every change of
// an entry is reported (writes too), and attribute changes are not. Events carries the path
// of each entry an event names; Errors the watcher's errors.
type dirWatcher struct {
	w      *fsnotify.Watcher
	Events chan string
	Errors chan error
	quit   chan struct{}
	done   chan struct{}
}

func newDirWatcher() (*dirWatcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &dirWatcher{w: fw, Events: make(chan string, 16), Errors: make(chan error, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
	go w.relay()
	return w, nil
}

// Add watches dir (again: fsnotify ignores a second Add).
func (w *dirWatcher) Add(dir string) error { return w.w.Add(dir) }

// Close stops watching and waits for the relaying goroutine.
func (w *dirWatcher) Close() error {
	close(w.quit)
	err := w.w.Close()
	<-w.done
	return err
}

// relay passes fsnotify's events and errors on until it closes.
func (w *dirWatcher) relay() {
	defer close(w.done)
	defer close(w.Errors)
	defer close(w.Events)
	for {
		select {
		case ev, ok := <-w.w.Events:
			if !ok {
				return
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			select {
			case w.Events <- filepath.Clean(ev.Name):
			case <-w.quit:
				return
			}
		case err, ok := <-w.w.Errors:
			if !ok {
				return
			}
			select {
			case w.Errors <- err:
			case <-w.quit:
				return
			}
		}
	}
}
