package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dirWatchMask is what the kernel reports of a watched directory: the ends of writes
// (IN_CLOSE_WRITE: an editor or tool writing the file in place), names arriving or leaving
// (IN_MOVED_TO, IN_MOVED_FROM: a rename over the file, the swap of a ConfigMap's "..data"
// symlink; IN_CREATE, IN_DELETE: a new file, link or symlink, a removal) and the directory
// itself going. It has no IN_MODIFY on purpose: the kernel cannot filter by name, and a
// file written often in the same directory (the audit log beside the policy) would wake the
// watcher at every write; a change of the policy file is seen when its writer closes it.
const dirWatchMask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_CREATE |
	unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// dirWatcher watches directories with inotify (dirWatchMask). Events carries the path of
// each entry an event names, or "" when events were lost (the queue overflowed: anything
// may have changed). Errors carries read errors and directories no longer watched.
type dirWatcher struct {
	f      *os.File
	Events chan string
	Errors chan error
	quit   chan struct{} // closed by Close: a blocked send gives up
	done   chan struct{} // closed when readLoop has returned

	mu    sync.Mutex
	dirs  map[int32]string // watch descriptor → directory
	watch map[string]int32 // directory → watch descriptor
}

func newDirWatcher() (*dirWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &dirWatcher{f: os.NewFile(uintptr(fd), "inotify"), Events: make(chan string, 16),
		Errors: make(chan error, 1), quit: make(chan struct{}), done: make(chan struct{}),
		dirs: make(map[int32]string), watch: make(map[string]int32)}
	go w.readLoop()
	return w, nil
}

// Add watches dir, unless it is watched already.
func (w *dirWatcher) Add(dir string) error {
	dir = filepath.Clean(dir)
	w.mu.Lock()
	_, watched := w.watch[dir]
	w.mu.Unlock()
	if watched {
		return nil
	}
	rc, err := w.f.SyscallConn()
	if err != nil {
		return err
	}
	var wd int
	var addErr error
	if err := rc.Control(func(fd uintptr) { wd, addErr = unix.InotifyAddWatch(int(fd), dir, dirWatchMask) }); err != nil {
		return err
	}
	if addErr != nil {
		return &os.PathError{Op: "inotify_add_watch", Path: dir, Err: addErr}
	}
	w.mu.Lock()
	w.dirs[int32(wd)] = dir
	w.watch[dir] = int32(wd)
	w.mu.Unlock()
	return nil
}

// Close stops watching and waits for the reading goroutine; Events and Errors are closed.
func (w *dirWatcher) Close() error {
	close(w.quit)
	err := w.f.Close()
	<-w.done
	return err
}

// readLoop reads events until the file is closed or a read fails.
func (w *dirWatcher) readLoop() {
	defer close(w.done)
	defer close(w.Errors)
	defer close(w.Events)
	buf := make([]byte, 16*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil || n < unix.SizeofInotifyEvent {
			if err == nil {
				err = fmt.Errorf("short inotify read (%d bytes)", n)
			}
			w.send(nil, fmt.Errorf("read inotify events: %w", err)) // and stop: it would repeat
			return
		}
		if !w.dispatch(buf[:n]) {
			return
		}
	}
}

// dispatch sends the events of one read; false when the watcher is closing.
func (w *dirWatcher) dispatch(b []byte) bool {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return true // cannot happen: the kernel returns whole events
		}
		name := string(trimNUL(b[unix.SizeofInotifyEvent:end]))
		b = b[end:]
		w.mu.Lock()
		dir, known := w.dirs[ev.Wd]
		if ev.Mask&unix.IN_IGNORED != 0 && known {
			delete(w.dirs, ev.Wd)
			delete(w.watch, dir) // a later Add watches it again
		}
		w.mu.Unlock()
		var ok bool
		switch {
		case ev.Mask&unix.IN_Q_OVERFLOW != 0:
			ok = w.send(ptr(""), nil)
		case ev.Mask&unix.IN_IGNORED != 0 && known:
			ok = w.send(nil, fmt.Errorf("directory %s is no longer watched (removed or unmounted)", dir))
		case known && name != "":
			ok = w.send(ptr(filepath.Join(dir, name)), nil)
		default:
			ok = true // the directory's own IN_DELETE_SELF, IN_MOVE_SELF: IN_IGNORED follows
		}
		if !ok {
			return false
		}
	}
	return true
}

// send delivers an event or an error; false when the watcher closed meanwhile.
func (w *dirWatcher) send(name *string, err error) bool {
	if name != nil {
		select {
		case w.Events <- *name:
			return true
		case <-w.quit:
			return false
		}
	}
	select {
	case w.Errors <- err:
		return true
	case <-w.quit:
		return false
	}
}

func ptr(s string) *string { return &s }

// trimNUL cuts a name at its first NUL (the kernel pads names with NULs).
func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
