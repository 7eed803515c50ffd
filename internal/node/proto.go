package node

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// The protocol between an injected sidecar and the node agent: the messages, their framing
// and the abstract unix socket the agent binds inside the pod's network namespace. Their
// bytes on the wire are held by testdata/wire (TestWireGolden): a new agent serves the
// sidecars an older webhook injected.
//
// Framing: one JSON object per line over a SOCK_STREAM unix socket, at most MaxMessage bytes.
// The sidecar sends Requests, each with a fresh ID; the agent answers each with a Reply of the
// same ID, in any order, and sends Replies with ID 0 and a Deny on its own (kernel deny
// events). The first request is always OpHello; its Version must equal the agent's
// ProtocolVersion.

// ProtocolVersion is the protocol version this build speaks. An agent refuses a hello of
// another version (with ErrVersion's text), so a sidecar and an agent of incompatible builds
// fail closed instead of misreading each other.
const ProtocolVersion = 1

// SocketName is the abstract unix socket (no file: a name in the network namespace) the
// agent binds in every enforced pod's network namespace. The leading '@' is Go's spelling of
// the abstract namespace's NUL byte.
const SocketName = "@airlock-node-v1"

// MaxMessage bounds one line of the protocol: a larger one ends the connection.
const MaxMessage = 1 << 20

// The operations a sidecar may ask for.
const (
	OpHello    = "hello"    // attach (or adopt) enforcement as Hello says; the first request
	OpAllow    = "allow"    // Addr reachable on Ports until Until
	OpRevoke   = "revoke"   // Addr no longer reachable on Ports
	OpCIDRs    = "cidrs"    // replace the CIDR rules with CIDRs
	OpReport   = "report"   // report mode on or off
	OpCounters = "counters" // read the pod's kernel counters
	OpOrigDst  = "origdst"  // where the redirected connection from the peer Addr was going
	// OpPeer asks which container of the pod connected the TCP connection from the peer
	// Addr (to one of the sidecar's listeners or through the transparent redirect), or, with
	// Request.Query, sent that UDP query to the DNS filter from Addr: the reply's Container.
	// Identities in pods (spec.identities; docs/kubernetes.md).
	OpPeer = "peer"
	// OpIdentities switches Hello.Identities on or off (a policy reload that adds or removes
	// spec.identities).
	OpIdentities = "identities"
	// OpIdentityTCP replaces Request.IdentityTCP (a policy reload): each identity's raw TCP
	// rules and which container is which identity. Nil switches the per-identity rule off.
	OpIdentityTCP = "identity_tcp"
	// OpUsage reads the CPU time and memory of each running app container of the asking
	// sidecar's own pod (never another pod's: the request names none), from the cgroups the
	// agent resolved: the reply's Usage. Each identity's compute usage in pods (meter).
	// Added to version 1: an older agent answers it with an unknown-operation error.
	OpUsage = "usage"
)

// ErrVersion is the error text an agent answers a hello of another version with.
var ErrVersion = errors.New("protocol version mismatch")

// Request is one message from the sidecar.
type Request struct {
	ID     uint64    `json:"id"`
	Op     string    `json:"op"`
	Hello  *Hello    `json:"hello,omitempty"`
	Addr   string    `json:"addr,omitempty"`
	Ports  []uint16  `json:"ports,omitempty"`
	Until  time.Time `json:"until,omitempty"`
	CIDRs  []CIDR    `json:"cidrs,omitempty"`
	Report bool      `json:"report,omitempty"`
	// Identities is OpIdentities' switch.
	Identities bool `json:"identities,omitempty"`
	// IdentityTCP is OpIdentityTCP's table.
	IdentityTCP *IdentityTCP `json:"identity_tcp,omitempty"`
	// Query, in an OpPeer, is the DNS message ID of a UDP query from Addr to the DNS filter.
	// An older agent refuses the field (strict decoding): the query is then refused.
	Query *uint16 `json:"query,omitempty"`
}

// Hello is what enforcement needs from the sidecar. The agent decides everything else (which
// cgroup, which is exempt, the pin directory's name) from the API server and the node.
type Hello struct {
	Version   int        `json:"version"`
	Listeners []Listener `json:"listeners"`
	CIDRs     []CIDR     `json:"cidrs"`
	Report    bool       `json:"report"`
	// RequirePacketGuard makes the attach fail when packet sockets cannot be refused.
	RequirePacketGuard bool `json:"require_packet_guard"`
	// Transparent, when set, redirects TCP connections to Ports to the listener Addr4.
	Transparent *Transparent `json:"transparent,omitempty"`
	// Identities says the policy has identities (spec.identities): the pod's app containers
	// may then connect only to the listeners, through the transparent redirect and to
	// protocol tcp ranges, never straight to what the allow map holds, since only the
	// sidecar applies an identity's rules (ebpf.Config.Identities; the pod's cgroup has no
	// processes of its own, so this holds for every app container, mapped or not). Omitted
	// when false, so a sidecar without identities sends the bytes an older agent reads.
	Identities bool `json:"identities,omitempty"`
	// IdentityTCP, when set, has the kernel hold each identity to its own protocol tcp
	// rules (ebpf.Config.IdentityTCP): the agent maps each app container's cgroup to its
	// identity (Containers; another container to the pod's own, ""), also after a restart.
	// Omitted (an older sidecar, or a policy without identities): every container has the
	// sandbox's raw TCP. An older agent refuses a hello that has it (strict decoding), so
	// the sidecar fails closed instead of running without the rule.
	IdentityTCP *IdentityTCP `json:"identity_tcp,omitempty"`
}

// IdentityTCP is what the agent needs to enforce each identity's protocol tcp rules in a
// pod.
type IdentityTCP struct {
	// Containers maps a container's name (as the API server names it) to its identity
	// (the pod's airlock.dev/identities annotation). Other app containers are the pod's own.
	Containers map[string]string `json:"containers"`
	// Rules are each identity's protocol tcp rules, by identity name (each treated as raw
	// TCP, and only within the sandbox's CIDRs). An identity absent has no raw TCP.
	Rules map[string][]CIDR `json:"rules"`
}

// Transparent is transparent mode: TCP connections to Ports go to the listener Addr4.
type Transparent struct {
	Addr4 string   `json:"addr4"` // ip:port
	Ports []uint16 `json:"ports"`
}

// Listener is one of the sidecar's listeners the pod's containers may reach.
type Listener struct {
	Addr string `json:"addr"` // ip:port
	UDP  bool   `json:"udp"`
	Kind string `json:"kind"` // proxy, transparent, dns, llm
}

// CIDR is one of the policy's address ranges.
type CIDR struct {
	Prefix string   `json:"prefix"`
	Ports  []uint16 `json:"ports"`
	Raw    bool     `json:"raw"`
}

// Reply is one message from the agent: the answer to the request of the same ID, or (ID 0) a
// deny event.
type Reply struct {
	ID       uint64     `json:"id"`
	Error    string     `json:"error,omitempty"`
	Welcome  *Welcome   `json:"welcome,omitempty"`
	Counters *Counters  `json:"counters,omitempty"`
	Deny     *DenyEvent `json:"deny,omitempty"`
	// OrigDst answers OpOrigDst: the original destination, ip:port.
	OrigDst string `json:"orig_dst,omitempty"`
	// Container answers OpPeer: the name of the pod's container (as the API server names it)
	// whose process connected.
	Container string `json:"container,omitempty"`
	// Usage answers OpUsage: one entry per running app container whose cgroup the agent
	// found, sorted by container name; empty when there is none.
	Usage []ContainerUsage `json:"usage,omitempty"`
}

// ContainerUsage is one running container's cgroup counters (OpUsage): what its processes,
// living and dead, used since the container (this run of it) started.
type ContainerUsage struct {
	// Container is the container's name, as the API server names it.
	Container string `json:"container"`
	// ID is the runtime's ID of this run of the container: a restarted container has a new
	// one, with a new cgroup whose counters start from zero.
	ID string `json:"id"`
	// CPUUserUsec and CPUSystemUsec are the cgroup's cpu.stat user_usec and system_usec.
	CPUUserUsec   uint64 `json:"cpu_user_usec"`
	CPUSystemUsec uint64 `json:"cpu_system_usec"`
	// Memory says the node counts the cgroup's memory (v2 memory controller, or the v1
	// memory hierarchy of a hybrid node); MemoryBytes is then memory.current (v1
	// memory.usage_in_bytes), MemoryPeakBytes memory.peak (v1 memory.max_usage_in_bytes; the
	// current value on kernels before 5.19).
	Memory          bool   `json:"memory"`
	MemoryBytes     uint64 `json:"memory_bytes"`
	MemoryPeakBytes uint64 `json:"memory_peak_bytes"`
}

// Welcome answers a hello: enforcement is attached to the pod's cgroup.
type Welcome struct {
	Version int `json:"version"`
	// Sandbox is the name the agent pins the pod's enforcement under (NAMESPACE.POD).
	Sandbox string `json:"sandbox"`
	// Adopted says the pinned maps of an earlier attach were kept (allow entries survive).
	Adopted bool `json:"adopted"`
	// PacketGuard says packet sockets are refused; PacketGuardError why not.
	PacketGuard      bool   `json:"packet_guard"`
	PacketGuardError string `json:"packet_guard_error,omitempty"`
}

// Counters are the pod's kernel counters. The fields have no JSON tags, so their Go names
// are on the wire ("Bytes", ...): renaming one changes the protocol.
type Counters struct {
	Bytes, Packets, Connections, Denies, EventsLost uint64
}

// DenyEvent is a kernel denial in the pod.
type DenyEvent struct {
	Time       time.Time `json:"time"`
	Hook       string    `json:"hook"`
	Reason     string    `json:"reason"`
	PID        uint32    `json:"pid,omitempty"`
	UID        uint32    `json:"uid,omitempty"`
	Comm       string    `json:"comm,omitempty"`
	Dest       string    `json:"dest,omitempty"`
	Proto      uint8     `json:"proto"`
	Report     bool      `json:"report,omitempty"`
	Suppressed uint64    `json:"suppressed,omitempty"`
}

// Conn frames messages over a stream. Read and Write may be used from one goroutine each.
type Conn struct {
	r *bufio.Reader
	w io.Writer
}

// NewConn frames rw.
func NewConn(rw io.ReadWriter) *Conn {
	return &Conn{r: bufio.NewReaderSize(rw, 64<<10), w: rw}
}

// Read decodes the next message into v, strictly: unknown fields and trailing data are
// errors, and a line over MaxMessage ends the stream.
func (c *Conn) Read(v any) error {
	line, err := c.readLine()
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode message: %w", err)
	}
	if dec.More() {
		return errors.New("decode message: trailing data")
	}
	return nil
}

func (c *Conn) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := c.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxMessage {
			return nil, fmt.Errorf("read message: longer than %d bytes", MaxMessage)
		}
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// Write encodes v as one line. Callers serialise writes.
func (c *Conn) Write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	if len(b) >= MaxMessage {
		return fmt.Errorf("encode message: longer than %d bytes", MaxMessage)
	}
	_, err = c.w.Write(append(b, '\n'))
	return err
}
