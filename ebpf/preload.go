package ebpf

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
)

// preloaded is one set of kernel objects loaded ahead of an Open (Preload).
type preloaded struct {
	done     chan struct{} // closed once the load below ended
	spec     *ebpf.CollectionSpec
	objs     objects
	guardErr error // why the packet guard did not load; Open applies Config.RequireAll
	err      error // why the maps or core programs did not load: Open loads its own
}

// release closes p's objects (an Open that did not take them). Nil is a no-op.
func (p *preloaded) release() {
	if p != nil && p.err == nil {
		_ = p.objs.Close()
	}
}

// preload holds the one set Preload started and no Open has taken yet.
var preload struct {
	mu  sync.Mutex
	set *preloaded
}

// Preload starts loading, in the background, the maps and programs the next Open of this
// process needs for a new sandbox, so that the kernel's verification and map allocation run
// beside the rest of a sandbox's creation instead of on its path: exec --ephemeral calls it
// first thing, and its sidecar, which runs in the same process, takes them. An Open that finds
// the sandbox's maps pinned (a restarted sidecar) adopts those and releases the preloaded set;
// one that the load failed for loads its own and reports its own error. At most one set is
// held; Preload while one is held does nothing. An untaken set is freed when the process
// exits.
func Preload() {
	preload.mu.Lock()
	defer preload.mu.Unlock()
	if preload.set != nil {
		return
	}
	p := &preloaded{done: make(chan struct{})}
	preload.set = p
	go func() {
		defer close(p.done)
		var err error
		if p.spec, err = loadAirlock(); err != nil {
			p.err = fmt.Errorf("load bpf objects: %w", err)
			return
		}
		if err := p.spec.LoadAndAssign(&p.objs.airlockMaps, nil); err != nil {
			p.err = fmt.Errorf("load bpf maps: %w", notSupported(err))
			return
		}
		if p.guardErr, err = loadProgramsInto(&p.objs, p.spec); err != nil {
			_ = p.objs.Close()
			p.err = err
		}
	}()
}

// takePreloaded returns the set Preload started, once it has loaded, and forgets it; nil when
// there is none.
func takePreloaded() *preloaded {
	preload.mu.Lock()
	p := preload.set
	preload.set = nil
	preload.mu.Unlock()
	if p != nil {
		<-p.done
	}
	return p
}
