package ebpf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// bootClock converts wall-clock deadlines into CLOCK_BOOTTIME nanoseconds, the clock of
// bpf_ktime_get_boot_ns (it keeps counting across suspend, like a TTL should).
type bootClock struct {
	now func() time.Time
}

func newBootClock(now func() time.Time) (*bootClock, error) {
	if _, err := bootNow(); err != nil {
		return nil, err
	}
	return &bootClock{now: now}, nil
}

// bootNow reads CLOCK_BOOTTIME.
func bootNow() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, fmt.Errorf("read CLOCK_BOOTTIME: %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// deadline returns until on the boot clock: now plus the time left until until.
func (c *bootClock) deadline(until time.Time) (uint64, error) {
	b, err := bootNow()
	if err != nil {
		return 0, err
	}
	left := until.Sub(c.now())
	if left < 0 {
		left = 0
	}
	return uint64(b + left), nil
}

// Allow makes addr reachable over TCP on ports until the given wall-clock time; an existing
// entry is extended, never shortened. It returns once the kernel map holds every entry, so a
// connect that starts after Allow returns sees them. An IPv4 address also covers its
// IPv4-mapped IPv6 form. It may return ErrClosed.
func (e *Enforcer) Allow(addr netip.Addr, ports []uint16, until time.Time) error {
	if !addr.IsValid() {
		return fmt.Errorf("allow %v: invalid address", addr)
	}
	if e.isClosed() {
		return ErrClosed
	}
	exp, err := e.clock.deadline(until)
	if err != nil {
		return err
	}
	e.allowMu.Lock()
	defer e.allowMu.Unlock()
	for _, p := range ports {
		k := airlockAllowKey{Addr: addr16(addr), Port: p}
		var cur airlockAllowVal
		err := e.objs.Allow.Lookup(k, &cur)
		switch {
		case err == nil && cur.ExpiresNs >= exp:
			continue
		case err != nil && !errors.Is(err, ebpf.ErrKeyNotExist):
			return fmt.Errorf("allow %v port %d: read entry: %w", addr, p, err)
		}
		if err := e.putAllow(k, airlockAllowVal{ExpiresNs: exp}); err != nil {
			return fmt.Errorf("allow %v port %d: %w", addr, p, err)
		}
	}
	return nil
}

// putAllow writes one entry; when the map is full it removes expired entries and retries.
func (e *Enforcer) putAllow(k airlockAllowKey, v airlockAllowVal) error {
	err := e.objs.Allow.Put(k, v)
	if errors.Is(err, unix.E2BIG) || errors.Is(err, unix.ENOMEM) {
		if _, gcErr := e.gcLocked(); gcErr != nil {
			return errors.Join(err, gcErr)
		}
		err = e.objs.Allow.Put(k, v)
	}
	return err
}

// Revoke removes addr's entries for ports. Connections already open keep working.
func (e *Enforcer) Revoke(addr netip.Addr, ports []uint16) error {
	if e.isClosed() {
		return ErrClosed
	}
	e.allowMu.Lock()
	defer e.allowMu.Unlock()
	for _, p := range ports {
		err := e.objs.Allow.Delete(airlockAllowKey{Addr: addr16(addr), Port: p})
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("revoke %v port %d: %w", addr, p, err)
		}
	}
	return nil
}

// AllowedUntil reports until when (boot-clock nanoseconds) addr is allowed on port in the
// kernel map, and whether there is an entry at all. For tests and diagnostics.
func (e *Enforcer) AllowedUntil(addr netip.Addr, port uint16) (time.Duration, bool, error) {
	var v airlockAllowVal
	err := e.objs.Allow.Lookup(airlockAllowKey{Addr: addr16(addr), Port: port}, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("look up allow entry: %w", err)
	}
	return time.Duration(v.ExpiresNs), true, nil
}

// GC removes expired allow entries and returns how many it removed.
func (e *Enforcer) GC() (int, error) {
	e.allowMu.Lock()
	defer e.allowMu.Unlock()
	return e.gcLocked()
}

func (e *Enforcer) gcLocked() (int, error) {
	now, err := bootNow()
	if err != nil {
		return 0, err
	}
	var (
		k       airlockAllowKey
		v       airlockAllowVal
		expired []airlockAllowKey
	)
	it := e.objs.Allow.Iterate()
	for it.Next(&k, &v) {
		if v.ExpiresNs <= uint64(now) {
			expired = append(expired, k)
		}
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("iterate allow map: %w", err)
	}
	n := 0
	for _, k := range expired {
		if err := e.objs.Allow.Delete(k); err == nil {
			n++
		}
	}
	return n, nil
}

// gcLoop runs GC every GCInterval until ctx ends.
func (e *Enforcer) gcLoop(ctx context.Context) {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := e.GC(); err != nil {
				e.log.WithError(err).Warn("kernel allow map GC failed")
			} else if n > 0 {
				e.log.WithField("removed", n).Debug("kernel allow map GC")
			}
		}
	}
}

func (e *Enforcer) isClosed() bool {
	e.closeMu.Lock()
	defer e.closeMu.Unlock()
	return e.closed
}
