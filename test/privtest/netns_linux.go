package privtest

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// probeNetns creates a network namespace on a thread that is then thrown away: the goroutine
// never unlocks its OS thread, so the Go runtime terminates the thread (and with it the only
// reference to the namespace) when the goroutine exits. No named namespace is left behind.
func probeNetns() error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread, on purpose: this thread's network namespace is no longer the
		// process's, so it must die with the goroutine.
		err := unix.Unshare(unix.CLONE_NEWNET)
		switch {
		case err == nil:
			errc <- nil
		case errors.Is(err, unix.EPERM), errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
			// EPERM: no CAP_SYS_ADMIN (e.g. an unprivileged container); EINVAL/ENOSYS: kernel
			// built without CONFIG_NET_NS.
			errc <- fmt.Errorf("%w: cannot create a network namespace: %v", ErrNotSupported, err)
		default:
			errc <- fmt.Errorf("create probe network namespace: %w", err)
		}
	}()
	return <-errc
}
