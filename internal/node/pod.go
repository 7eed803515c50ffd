package node

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/ebpf"
)

// podState is one pod the agent serves: its listener in the pod's network namespace, the
// sidecar's session and the enforcer holding the pod's pins.
type podState struct {
	a *Agent

	// mu guards pod, cg, ln, nsIno, enf, closed, containers, changed and idContainers.
	mu     sync.Mutex
	pod    Pod
	cg     Cgroups
	ln     net.Listener
	nsIno  uint64 // the network namespace ln is bound in
	enf    *ebpf.Enforcer
	closed bool
	// containers are the cgroup ids of pod.Containers, by id (container names).
	containers map[uint64]string
	// changed is closed (and replaced) at every update: a peer lookup waiting for a
	// restarted container's new ID wakes up.
	changed chan struct{}
	// idContainers maps container names to identities (Hello.IdentityTCP) while the kernel
	// holds each identity to its own raw TCP rules; nil while it does not.
	idContainers map[string]string

	// lastRefusal is when a refused caller was last logged (accept's goroutine only): an app
	// container hammering the socket does not flood the agent's log.
	lastRefusal time.Time

	// smu guards sess. It is apart from mu because the enforcer's event goroutine takes it
	// (deny), and closing the enforcer under mu waits for that goroutine.
	smu  sync.Mutex
	sess *session
}

// setSession makes s the pod's session (nil: none), ending the previous one.
func (st *podState) setSession(s *session) {
	st.smu.Lock()
	old := st.sess
	st.sess = s
	st.smu.Unlock()
	if old != nil {
		old.close()
	}
}

func (st *podState) logger() *logrus.Entry {
	return st.a.log.WithField("sandbox", st.pod.Sandbox())
}

// update takes a newer view of the pod: once its sidecar runs, the cgroups are found and the
// socket bound; a new sidecar container (a restart) replaces the cgroup the caller check
// and the exemption use, and ends the old container's session.
func (st *podState) update(p Pod) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	defer st.containersChanged()
	st.pod.Containers = p.Containers
	if p.SidecarID == "" || (p.SidecarID == st.pod.SidecarID && st.ln != nil) {
		st.pod.SidecarID = p.SidecarID
		return nil
	}
	cg, err := FindCgroups(st.a.cfg.CgroupRoot, p.UID, p.SidecarID)
	if err != nil {
		return err
	}
	st.pod, st.cg = p, cg
	st.setSession(nil) // the old sidecar container's
	if err := st.bind(); err != nil {
		return err
	}
	st.logger().WithFields(logrus.Fields{"pod_cgroup": cg.Pod, "sidecar_cgroup": cg.Sidecar}).Info("serving the pod's sidecar")
	return nil
}

// containersChanged finds the cgroup ids of the pod's containers again, and wakes the peer
// lookups waiting for them. st.mu is held.
func (st *podState) containersChanged() {
	st.containers = containerCgroups(st.cg.Pod, st.pod.Containers)
	st.syncIdentityCgroups()
	if st.changed != nil {
		close(st.changed)
	}
	st.changed = make(chan struct{})
}

// peerWait bounds how long a peer lookup waits for the API server to report the container
// of a cgroup of the pod it does not know yet: a restarted container may connect before the
// kubelet's status update reaches the agent.
const peerWait = 3 * time.Second

// peerContainer returns the name of the pod's container whose process connected the TCP
// connection from peer, or, with query (a DNS message ID), sent that UDP query to the DNS
// filter from peer, as the kernel recorded it. A cgroup below the pod's that is no known
// container's waits (up to peerWait) for the pod's next update; any other cgroup (the pod's
// own, the sidecar's, another pod's) is an error.
func (st *podState) peerContainer(enf *ebpf.Enforcer, peer netip.AddrPort, query *uint16) (string, error) {
	var cgid uint64
	var err error
	if query != nil {
		cgid, err = enf.QueryCgroup(peer, *query)
	} else {
		cgid, err = enf.PeerCgroup(peer)
	}
	if err != nil {
		return "", err
	}
	timeout := time.NewTimer(peerWait)
	defer timeout.Stop()
	for {
		st.mu.Lock()
		name, ok := st.containers[cgid]
		if !ok { // a container's cgroup not there yet at the last update
			st.containers = containerCgroups(st.cg.Pod, st.pod.Containers)
			st.syncIdentityCgroups()
			name, ok = st.containers[cgid]
		}
		changed, podDir := st.changed, st.cg.Pod
		st.mu.Unlock()
		if ok {
			return name, nil
		}
		if !inCgroupDir(podDir, cgid) {
			return "", fmt.Errorf("cgroup %d of the connection from %v is no container's of the pod", cgid, peer)
		}
		select {
		case <-changed:
		case <-timeout.C:
			return "", fmt.Errorf("cgroup %d of the connection from %v is in the pod, but no running container the API server reported (waited %s)", cgid, peer, peerWait)
		}
	}
}

// bind binds the pod's socket in the network namespace of its sidecar's processes, unless it
// is bound there already: a new pod sandbox (all containers restarted) has a new namespace,
// and the socket in the old one would be out of the new sidecar's reach.
func (st *podState) bind() error {
	ns, ino, err := podNetns(st.cg)
	if err != nil {
		return err
	}
	if st.ln != nil && ino == st.nsIno {
		return nil
	}
	if st.ln != nil {
		st.ln.Close()
		st.ln = nil
	}
	ln, err := listenInNetns(ns, st.a.cfg.SocketName)
	if err != nil {
		return err
	}
	st.ln, st.nsIno = ln, ino
	go st.accept(ln)
	return nil
}

// accept serves the pod's socket until it is closed: a caller that is not the pod's sidecar
// container is told so and dropped; an accepted one replaces the previous session.
func (st *podState) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				st.logger().WithError(err).Error("accept on the pod's agent socket")
			}
			return
		}
		st.mu.Lock()
		dir, closed := st.cg.Sidecar, st.closed
		st.mu.Unlock()
		if closed {
			c.Close()
			return
		}
		if err := checkPeer(c.(*net.UnixConn), dir); err != nil {
			if time.Since(st.lastRefusal) > 10*time.Second {
				st.lastRefusal = time.Now()
				st.logger().WithError(err).Warn("refused a caller on the pod's agent socket (logged at most every 10 s)")
			}
			_ = NewConn(c).Write(Reply{Error: err.Error()})
			c.Close()
			continue
		}
		s := newSession(st, c)
		st.setSession(s)
		go s.serve()
	}
}

// attach (re)opens the pod's enforcement as hello asks, exempting the current sidecar
// container. An enforcer already open is closed first; the new one adopts its pins.
func (st *podState) attach(h *Hello) (*Welcome, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return nil, errors.New("pod is gone")
	}
	cfg, err := ebpfConfig(h)
	if err != nil {
		return nil, err
	}
	cfg.Sandbox, cfg.Cgroup, cfg.ExemptCgroup, cfg.PinRoot = st.pod.Sandbox(), st.cg.Pod, st.cg.Sidecar, st.a.cfg.PinRoot
	cfg.Identities = h.Identities
	var idContainers map[string]string
	if it := h.IdentityTCP; it != nil {
		if cfg.IdentityTCP, err = ebpfIdentityTCP(it.Rules); err != nil {
			return nil, err
		}
		idContainers = nonNil(it.Containers)
	}
	cfg.Logger = st.a.log
	cfg.OnDeny = st.deny
	if st.enf != nil {
		_ = st.enf.Close()
		st.enf = nil
	}
	enf, err := ebpf.Open(cfg)
	if err != nil {
		return nil, err
	}
	st.enf, st.idContainers = enf, idContainers
	st.syncIdentityCgroups()
	w := &Welcome{Version: ProtocolVersion, Sandbox: st.pod.Sandbox(), Adopted: enf.Adopted()}
	if ok, why := enf.PacketGuard(); ok {
		w.PacketGuard = true
	} else if why != nil {
		w.PacketGuardError = why.Error()
	}
	return w, nil
}

// setIdentityTCP replaces each identity's raw TCP rules and which container is which
// identity (OpIdentityTCP; nil: every container has the sandbox's raw TCP again).
func (st *podState) setIdentityTCP(it *IdentityTCP) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.enf == nil {
		return errors.New("no enforcement attached")
	}
	if it == nil {
		st.idContainers = nil
		return st.enf.SetIdentityTCP(nil)
	}
	rules, err := ebpfIdentityTCP(it.Rules)
	if err != nil {
		return err
	}
	// The cgroups first: a container whose identity changed must not keep the old one's
	// rules, and until the rule is on (an enforcer opened without it) the map is unread.
	st.idContainers = nonNil(it.Containers)
	st.syncIdentityCgroups()
	return st.enf.SetIdentityTCP(rules)
}

// syncIdentityCgroups tells the kernel which identity each running app container's cgroup
// is: a container Hello.IdentityTCP names is its identity, any other the pod's own (""). A
// container the API server has not reported yet (a restart in flight) is left out, so its
// tasks get no raw TCP until it is (fail closed). st.mu is held.
func (st *podState) syncIdentityCgroups() {
	if st.enf == nil || st.idContainers == nil {
		return
	}
	want := make(map[uint64]string, len(st.containers))
	for cgid, name := range st.containers {
		want[cgid] = st.idContainers[name]
	}
	if err := st.enf.SetIdentityCgroups(want); err != nil {
		st.logger().WithError(err).Error("identity cgroups not updated: the changed containers get no raw TCP")
	}
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// enforcer returns the pod's open enforcer, or nil before the first hello.
func (st *podState) enforcer() *ebpf.Enforcer {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.enf
}

// deny sends a kernel deny event to the current sidecar session, if any.
func (st *podState) deny(ev ebpf.DenyEvent) {
	st.smu.Lock()
	s := st.sess
	st.smu.Unlock()
	if s != nil {
		s.send(Reply{Deny: denyEvent(ev)})
	}
}

// close ends the pod's listener, session and enforcer handles; the pins stay.
func (st *podState) close() {
	st.setSession(nil)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	if st.ln != nil {
		st.ln.Close()
	}
	if st.enf != nil {
		_ = st.enf.Close()
	}
}
