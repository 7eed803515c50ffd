package ebpf

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// Enforcer is the kernel enforcement of one sandbox cgroup, as seen by a running sidecar.
// Its methods are safe for concurrent use.
type Enforcer struct {
	cfg     Config
	log     *logrus.Logger
	dir     string
	objs    objects
	links   []link.Link
	adopted bool
	// guardErr is why the packet socket guard did not load (nil when it did).
	guardErr error
	clock    *bootClock

	// allowMu serialises writers of the allow map, so "extend, never shorten" holds
	// between a lookup and the update that follows it. Guards nothing else.
	allowMu sync.Mutex

	cancel     func()
	wg         sync.WaitGroup
	suppressed atomic.Uint64 // deny events dropped by the rate limit

	// idMu guards ids, the identities' indices, raw TCP rules and cgroups (id_tcp,
	// id_cgroups), and serialises their writers.
	idMu sync.Mutex
	ids  identityState

	// cfgMu serialises SetReport (cfg.Report and the config map).
	cfgMu sync.Mutex

	// closeMu guards closed.
	closeMu sync.Mutex
	closed  bool
}

// objects are the loaded maps and programs. PacketGuard is loaded apart: it needs the BPF
// LSM, which many kernels have built in but not active, and it is optional unless
// Config.RequireAll is set.
type objects struct {
	airlockMaps
	corePrograms
	PacketGuard *ebpf.Program
}

// corePrograms are the programs every supported kernel must load.
type corePrograms struct {
	Connect4    *ebpf.Program `ebpf:"connect4"`
	Connect6    *ebpf.Program `ebpf:"connect6"`
	Egress      *ebpf.Program `ebpf:"egress"`
	Ingress     *ebpf.Program `ebpf:"ingress"`
	Established *ebpf.Program `ebpf:"established"`
	Sendmsg4    *ebpf.Program `ebpf:"sendmsg4"`
	Sendmsg6    *ebpf.Program `ebpf:"sendmsg6"`
	SockCreate  *ebpf.Program `ebpf:"sock_create"`
}

func (o *objects) Close() error {
	errs := []error{o.airlockMaps.Close()}
	for _, p := range []*ebpf.Program{o.Connect4, o.Connect6, o.Egress, o.Ingress, o.Established, o.Sendmsg4, o.Sendmsg6, o.SockCreate, o.PacketGuard} {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	return errors.Join(errs...)
}

// loadPrograms loads the programs against the loaded maps. A packet guard the kernel
// cannot load is an error only with RequireAll; otherwise it is logged and skipped.
func (e *Enforcer) loadPrograms(spec *ebpf.CollectionSpec) error {
	guardErr, err := loadProgramsInto(&e.objs, spec)
	if err != nil {
		return err
	}
	return e.acceptGuard(guardErr)
}

// loadProgramsInto loads the programs of spec against the maps already in objs. guardErr is
// why the packet guard did not load (nil when it did); err is a core program's failure.
func loadProgramsInto(objs *objects, spec *ebpf.CollectionSpec) (guardErr, err error) {
	opts := &ebpf.CollectionOptions{MapReplacements: objs.mapsByName()}
	if err := spec.LoadAndAssign(&objs.corePrograms, opts); err != nil {
		return nil, fmt.Errorf("load bpf programs: %w", notSupported(err))
	}
	var guard struct {
		P *ebpf.Program `ebpf:"packet_guard"`
	}
	if err := spec.LoadAndAssign(&guard, opts); err != nil {
		return err, nil
	}
	objs.PacketGuard = guard.P
	return nil, nil
}

// acceptGuard applies Config.RequireAll to why the packet guard did not load (nil: it did).
func (e *Enforcer) acceptGuard(guardErr error) error {
	if guardErr == nil {
		return nil
	}
	if e.cfg.RequireAll {
		return fmt.Errorf("load packet socket guard (needs the BPF LSM active, lsm=...,bpf, and a kernel that allows LSM programs): %w", notSupported(guardErr))
	}
	e.guardErr = guardErr
	e.log.WithError(guardErr).Warn("packet sockets are not blocked in the sandbox: the kernel refused the BPF LSM guard (the BPF LSM is inactive, or LSM programs are not allowed; `airlock sandbox doctor` says which); keep CAP_NET_RAW out of the sandbox")
	return nil
}

// attachment is one program and where it attaches.
type attachment struct {
	name   string
	attach ebpf.AttachType
	prog   func(*objects) *ebpf.Program
}

// attachments lists the hooks in the order they are attached: the decisions first, the
// per-packet backstop and the sockops re-keying after.
var attachments = []attachment{
	{"sock_create", ebpf.AttachCGroupInetSockCreate, func(o *objects) *ebpf.Program { return o.SockCreate }},
	{"connect4", ebpf.AttachCGroupInet4Connect, func(o *objects) *ebpf.Program { return o.Connect4 }},
	{"connect6", ebpf.AttachCGroupInet6Connect, func(o *objects) *ebpf.Program { return o.Connect6 }},
	{"sendmsg4", ebpf.AttachCGroupUDP4Sendmsg, func(o *objects) *ebpf.Program { return o.Sendmsg4 }},
	{"sendmsg6", ebpf.AttachCGroupUDP6Sendmsg, func(o *objects) *ebpf.Program { return o.Sendmsg6 }},
	{"egress", ebpf.AttachCGroupInetEgress, func(o *objects) *ebpf.Program { return o.Egress }},
	{"ingress", ebpf.AttachCGroupInetIngress, func(o *objects) *ebpf.Program { return o.Ingress }},
	{"established", ebpf.AttachCGroupSockOps, func(o *objects) *ebpf.Program { return o.Established }},
	{"packet_guard", ebpf.AttachLSMCgroup, func(o *objects) *ebpf.Program { return o.PacketGuard }},
}

// Open loads the programs, adopts or creates the sandbox's pinned maps, writes the
// listeners, CIDRs and transparent settings, and attaches (or re-targets already pinned)
// bpf links on cfg.Cgroup. On error the sidecar's handles are released; links already
// attached and pinned (by this call or an earlier sidecar) stay in place, so a failed start
// leaves the cgroup more restricted, never less (fail closed). Remove clears them.
//
// Errors wrap ErrInvalidConfig for a bad cfg and ErrNotSupported when the kernel lacks
// something the programs need.
func Open(cfg Config) (_ *Enforcer, err error) {
	if cfg, err = cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkEnforcedCgroup(&cfg); err != nil {
		return nil, err
	}
	e := &Enforcer{cfg: cfg, log: cfg.Logger, dir: filepath.Join(cfg.PinRoot, PinDirName(cfg.Sandbox))}
	if e.log == nil {
		e.log = logrus.New()
		e.log.SetOutput(io.Discard)
	}
	exempt, err := exemptionOf(cfg)
	if err != nil {
		return nil, err
	}
	if e.clock, err = newBootClock(cfg.Now); err != nil {
		return nil, err
	}
	if err := ensureBPFFS(cfg.PinRoot); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pin directory: %w", err)
	}
	schema, err := e.loadObjects(takePreloaded())
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			e.closeHandles()
		}
	}()
	if err := writeTables(&e.objs, cfg, exempt); err != nil {
		return nil, err
	}
	if err := e.writeIdentityTables(); err != nil {
		return nil, err
	}
	if err := e.attach(); err != nil {
		return nil, err
	}
	if err := pinMaps(e.dir, e.mapsByName(), schema); err != nil {
		return nil, err
	}
	if err := e.startEvents(); err != nil {
		return nil, err
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(newCollector(e)); err != nil {
			return nil, fmt.Errorf("register kernel metrics: %w", err)
		}
	}
	fields := logrus.Fields{"cgroup": cfg.Cgroup, "pins": e.dir, "adopted": e.adopted}
	if cfg.ExemptCgroup != "" {
		fields["exempt_cgroup"] = cfg.ExemptCgroup
	}
	e.log.WithFields(fields).Info("kernel enforcement attached")
	return e, nil
}

// loadObjects loads the maps and programs of e, adopting the sandbox's pinned maps when there
// are some of the same schema (whose hash it returns); a new sandbox takes pre's objects
// (Preload) when they loaded. On error nothing of e's is left open.
func (e *Enforcer) loadObjects(pre *preloaded) (schema uint64, err error) {
	var spec *ebpf.CollectionSpec
	if pre != nil && pre.spec != nil {
		spec = pre.spec
	} else {
		if spec, err = loadAirlock(); err != nil {
			return 0, fmt.Errorf("load bpf objects: %w", err)
		}
	}
	use := false
	defer func() {
		if !use {
			pre.release()
		}
	}()
	if e.cfg.ExemptCgroup != "" {
		if err := checkPinsOwner(e.dir, e.cfg.Cgroup); err != nil {
			return 0, err
		}
	}
	schema = schemaHash(spec)
	pinned, err := pinnedMaps(e.dir, spec, schema)
	if err != nil {
		return 0, err
	}
	if pinned == nil && pre != nil && pre.err == nil {
		use, e.objs = true, pre.objs
		if err := e.acceptGuard(pre.guardErr); err != nil {
			e.closeHandles()
			return 0, err
		}
		return schema, nil
	}
	e.adopted = pinned != nil
	err = spec.LoadAndAssign(&e.objs.airlockMaps, &ebpf.CollectionOptions{MapReplacements: pinned})
	closeMaps(pinned) // LoadAndAssign holds its own references
	if err != nil {
		return 0, fmt.Errorf("load bpf maps: %w", notSupported(err))
	}
	if err := e.loadPrograms(spec); err != nil {
		e.closeHandles()
		return 0, err
	}
	return schema, nil
}

// Adopted reports whether Open found and adopted pinned maps of the same schema.
func (e *Enforcer) Adopted() bool { return e.adopted }

// PacketGuard reports whether packet (AF_PACKET) sockets are refused in the sandbox, and
// if not, why: the guard needs the BPF LSM (Config.RequireAll makes it mandatory).
func (e *Enforcer) PacketGuard() (bool, error) { return e.guardErr == nil, e.guardErr }

// PinDir is the sandbox's pin directory.
func (e *Enforcer) PinDir() string { return e.dir }

// mapsByName returns the maps of the loaded objects by their names in bpf/airlock.c.
func (e *Enforcer) mapsByName() map[string]*ebpf.Map { return e.objs.mapsByName() }

// mapsByName returns the loaded maps by their names in bpf/airlock.c.
func (o *objects) mapsByName() map[string]*ebpf.Map {
	m := o.airlockMaps
	return map[string]*ebpf.Map{
		"allow": m.Allow, "cidrs": m.Cidrs, "config": m.Config, "events": m.Events, "exempt": m.Exempt,
		"listeners": m.Listeners, "marks": m.Marks, "meta": m.Meta, "orig_cookie": m.OrigCookie,
		"orig_tuple": m.OrigTuple, "stats": m.Stats, "tports": m.Tports, "conn_cg": m.ConnCg, "peer_cg": m.PeerCg,
		"id_tcp": m.IdTcp, "id_cgroups": m.IdCgroups, "dns_cg": m.DnsCg, "dns_sk": m.DnsSk,
	}
}

// attach points every hook at the freshly loaded programs: a pinned link on the same cgroup
// is updated in place (atomically); a missing one is created and pinned; a pinned link on
// another cgroup is replaced.
func (e *Enforcer) attach() error {
	cgID, err := cgroupID(e.cfg.Cgroup)
	if err != nil {
		return err
	}
	for _, a := range attachments {
		prog := a.prog(&e.objs)
		path := filepath.Join(e.dir, linkPrefix+a.name)
		if prog == nil {
			continue // an optional program this kernel cannot run
		}
		l, err := adoptLink(path, cgID)
		if err != nil {
			return err
		}
		if l != nil {
			if err := l.Update(prog); err != nil {
				l.Close()
				return fmt.Errorf("update link %s: %w", a.name, err)
			}
			e.links = append(e.links, l)
			continue
		}
		l, err = link.AttachCgroup(link.CgroupOptions{Path: e.cfg.Cgroup, Attach: a.attach, Program: prog})
		if err != nil {
			return fmt.Errorf("attach %s to %s: %w", a.name, e.cfg.Cgroup, notSupported(err))
		}
		_ = os.Remove(path) // a link of another cgroup, detached by adoptLink
		if err := l.Pin(path); err != nil {
			l.Close()
			return fmt.Errorf("pin link %s (bpf links on cgroups are needed): %v: %w", a.name, err, ErrNotSupported)
		}
		e.links = append(e.links, l)
	}
	return nil
}

// adoptLink opens the link pinned at path when it is attached to the cgroup cgID. A pinned
// link attached elsewhere (or whose cgroup is gone) is unpinned and closed, which detaches
// it, and nil is returned.
func adoptLink(path string, cgID uint64) (link.Link, error) {
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open pinned link %s: %w", path, err)
	}
	info, err := l.Info()
	if err == nil {
		if c := info.Cgroup(); c != nil && c.CgroupId == cgID {
			return l, nil
		}
	}
	// Attached to another cgroup (the sandbox's --cgroup changed) or defunct.
	_ = l.Unpin()
	l.Close()
	return nil, nil
}

// cgroupID returns the id of the cgroup v2 directory: its inode number.
func cgroupID(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat cgroup %s: %w", path, err)
	}
	return st.Ino, nil
}

// checkEnforcedCgroup checks that cfg.Cgroup is a cgroup v2 directory other than the root,
// and records its id (the config map's open_cgid).
func checkEnforcedCgroup(cfg *Config) error {
	if err := checkCgroup2(cfg.Cgroup); err != nil {
		return err
	}
	if err := checkNotRoot(cfg.Cgroup); err != nil {
		return err
	}
	id, err := cgroupID(cfg.Cgroup)
	cfg.cgid = id
	return err
}

// checkCgroup2 checks that path is a directory on a cgroup v2 filesystem.
func checkCgroup2(path string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fmt.Errorf("cgroup %s: %w", path, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("cgroup %s is not on a cgroup v2 filesystem: %w", path, ErrNotSupported)
	}
	return nil
}

// notSupported wraps ErrNotSupported around errors that say the kernel lacks a feature.
func notSupported(err error) error {
	if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) ||
		errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	return err
}

// SetReport switches report mode on or off (on a policy reload that changes the mode).
func (e *Enforcer) SetReport(report bool) error {
	e.cfgMu.Lock()
	defer e.cfgMu.Unlock()
	e.cfg.Report = report
	if err := e.objs.Config.Put(uint32(0), settings(&e.cfg)); err != nil {
		return fmt.Errorf("update config map: %w", err)
	}
	return nil
}

// SetIdentities switches Config.Identities on or off (on a policy reload that adds or
// removes spec.identities).
func (e *Enforcer) SetIdentities(on bool) error {
	e.cfgMu.Lock()
	defer e.cfgMu.Unlock()
	e.cfg.Identities = on
	if err := e.objs.Config.Put(uint32(0), settings(&e.cfg)); err != nil {
		return fmt.Errorf("update config map: %w", err)
	}
	return nil
}

// SetCIDRs replaces the policy's CIDR rules (on a policy reload). New ranges are in force
// before stale ones go. Errors wrap ErrInvalidConfig for bad rules.
func (e *Enforcer) SetCIDRs(rules []CIDRRule) error {
	cidrs, err := compileCIDRs(rules)
	if err != nil {
		return err
	}
	return syncMap(e.objs.Cidrs, cidrs)
}

// Close stops reading events and releases the sidecar's handles. The pinned links and maps
// stay: the cgroup stays enforced (fail closed) until a new sidecar adopts them or Remove
// detaches them. Close is idempotent.
func (e *Enforcer) Close() error {
	e.closeMu.Lock()
	if e.closed {
		e.closeMu.Unlock()
		return nil
	}
	e.closed = true
	e.closeMu.Unlock()
	if e.cancel != nil {
		e.cancel()
	}
	e.wg.Wait()
	return e.closeHandles()
}

func (e *Enforcer) closeHandles() error {
	var errs []error
	for _, l := range e.links {
		errs = append(errs, l.Close())
	}
	e.links = nil
	errs = append(errs, e.objs.Close())
	return errors.Join(errs...)
}

// Remove detaches and unpins every link and map of sandbox under pinRoot (empty:
// DefaultPinRoot), ending its kernel enforcement. It is for deleting a sandbox; a sidecar
// that merely stops must not call it. Removing a sandbox that has no pins is not an error.
func Remove(pinRoot, sandbox string) error {
	cfg, err := Config{Sandbox: sandbox, Cgroup: "-", PinRoot: pinRoot}.validate()
	if err != nil {
		return err
	}
	dir := filepath.Join(cfg.PinRoot, PinDirName(sandbox))
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read pin directory: %w", err)
	}
	var errs []error
	for _, ent := range entries {
		p := filepath.Join(dir, ent.Name())
		if len(ent.Name()) > len(linkPrefix) && ent.Name()[:len(linkPrefix)] == linkPrefix {
			// Detach explicitly: another process may still hold the link open.
			if l, err := link.LoadPinnedLink(p, nil); err == nil {
				if err := l.Detach(); err != nil && !errors.Is(err, unix.EINVAL) {
					errs = append(errs, fmt.Errorf("detach %s: %w", ent.Name(), err))
				}
				l.Close()
			}
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("unpin %s: %w", ent.Name(), err))
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove pin directory: %w", err))
	}
	return errors.Join(errs...)
}
