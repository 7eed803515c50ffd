package node

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/ebpf"
)

// Pod is what the agent needs to know of a labelled pod on its node.
type Pod struct {
	Namespace, Name, UID string
	// SidecarID is the runtime's ID of the running sidecar container (without the
	// "containerd://" prefix); empty while it is not running.
	SidecarID string
	// Containers are the runtime's IDs (without the prefix) of the pod's other running
	// containers (app and init containers), by container name: the agent resolves their
	// cgroups to answer which container connected (OpPeer). A restarted container has a new
	// ID, and with it a new cgroup. Nil: none known.
	Containers map[string]string
}

// Sandbox is the name the pod's enforcement is pinned under: NAMESPACE.POD (namespaces have
// no dots, so it is unambiguous).
func (p Pod) Sandbox() string { return p.Namespace + "." + p.Name }

// AgentConfig configures an Agent.
type AgentConfig struct {
	// CgroupRoot is the root of the node's cgroup v2 hierarchy (see V2Root). Required.
	CgroupRoot string
	// V1MemoryRoot is, on a hybrid node, the directory of the cgroup v1 memory hierarchy
	// that corresponds to CgroupRoot (see V1MemoryRoot), where a container's memory is
	// counted when the v2 hierarchy has no memory controller. Empty: memory figures come
	// from the v2 hierarchy alone (OpUsage).
	V1MemoryRoot string
	// PinRoot is the bpffs directory the pods' pins go in. Empty means ebpf.DefaultPinRoot.
	PinRoot string
	// SocketName is the abstract socket bound in each pod. Empty means SocketName.
	SocketName string
	// Logger gets the operational logs. Nil discards them.
	Logger *logrus.Logger
}

// Agent enforces for the labelled pods of one node. Its methods are safe for concurrent use.
type Agent struct {
	cfg AgentConfig
	log *logrus.Logger

	// mu guards pods (by Pod.Sandbox()) and closed.
	mu     sync.Mutex
	pods   map[string]*podState
	closed bool
}

// New returns an agent; it opens nothing.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	if cfg.CgroupRoot == "" {
		return nil, errors.New("node agent: CgroupRoot is required")
	}
	if cfg.PinRoot == "" {
		cfg.PinRoot = ebpf.DefaultPinRoot
	}
	if cfg.SocketName == "" {
		cfg.SocketName = SocketName
	}
	log := cfg.Logger
	if log == nil {
		log = logrus.New()
		log.SetOutput(io.Discard)
	}
	return &Agent{cfg: cfg, log: log, pods: map[string]*podState{}}, nil
}

// Resync makes the agent's pods exactly pods (the result of a full list): every one is
// upserted, every other one the agent knows is deleted, and pins whose cgroups are all gone
// (pods deleted while no agent ran) are removed. It returns the upsert errors joined; a pod
// that failed is retried at its next Upsert.
func (a *Agent) Resync(pods []Pod) error {
	// First, so that no sidecar's hello adopts the maps a deleted pod of the same name left.
	removed, err := ebpf.RemoveDefunct(a.cfg.PinRoot)
	if len(removed) > 0 {
		a.log.WithField("sandboxes", removed).Info("removed the pins of pods deleted while no agent ran")
	}
	keep := map[string]bool{}
	errs := []error{err}
	for _, p := range pods {
		keep[p.Sandbox()] = true
		errs = append(errs, a.Upsert(p))
	}
	a.mu.Lock()
	var gone []string
	for name := range a.pods {
		if !keep[name] {
			gone = append(gone, name)
		}
	}
	a.mu.Unlock()
	for _, name := range gone {
		errs = append(errs, a.Delete(name))
	}
	return errors.Join(errs...)
}

// Upsert starts serving p, or updates it (a restarted sidecar container has a new ID and
// cgroup). A pod whose sidecar is not running yet is remembered and served once it is.
func (a *Agent) Upsert(p Pod) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return errors.New("node agent: closed")
	}
	st := a.pods[p.Sandbox()]
	if st != nil && st.pod.UID != p.UID {
		// Another pod of the same name (the old one was deleted and a new one made): the old
		// one's pins go, or the new pod would adopt its allow entries.
		st.close()
		st = nil
		if err := ebpf.Remove(a.cfg.PinRoot, p.Sandbox()); err != nil {
			return fmt.Errorf("remove pins of the previous pod %s: %w", p.Sandbox(), err)
		}
	}
	if st == nil {
		st = &podState{a: a, pod: p}
		a.pods[p.Sandbox()] = st
	}
	return st.update(p)
}

// Delete stops serving the pod named sandbox (NAMESPACE.POD) and removes its pins: its
// enforcement ends. Deleting an unknown pod removes any pins it left.
func (a *Agent) Delete(sandbox string) error {
	a.mu.Lock()
	st := a.pods[sandbox]
	delete(a.pods, sandbox)
	a.mu.Unlock()
	if st != nil {
		st.close()
	}
	if err := ebpf.Remove(a.cfg.PinRoot, sandbox); err != nil {
		return fmt.Errorf("remove pins of %s: %w", sandbox, err)
	}
	a.log.WithField("sandbox", sandbox).Info("pod gone: enforcement removed")
	return nil
}

// Close stops serving every pod. The pins stay: every pod stays enforced (fail closed), and
// the next agent adopts them. Close is idempotent.
func (a *Agent) Close() error {
	a.mu.Lock()
	pods := a.pods
	a.pods, a.closed = map[string]*podState{}, true
	a.mu.Unlock()
	for _, st := range pods {
		st.close()
	}
	return nil
}

// podNetns returns the path and the inode of the network namespace of the cgroup's
// processes.
func podNetns(cg Cgroups) (string, uint64, error) {
	ns, err := netnsOf(cg.Sidecar)
	if err != nil {
		return "", 0, err
	}
	var st unix.Stat_t
	if err := unix.Stat(ns, &st); err != nil {
		return "", 0, fmt.Errorf("stat pod network namespace: %w", err)
	}
	return ns, st.Ino, nil
}
