/* Shared definitions of airlock's kernel enforcement programs (bpf/airlock.c).
 *
 * Every structure here is also decoded by the Go loader (ebpf/), which gets Go
 * declarations for them from bpf2go (-type). Changing a map's key or value layout
 * changes the schema hash the loader stores beside the pinned maps, and a sidecar
 * started with the new layout replaces the old maps (ebpf/pin.go).
 *
 * Addresses are always 16 bytes: an IPv4 address is stored in its IPv4-mapped
 * IPv6 form (::ffff:a.b.c.d), so connect6 applies the IPv4 policy to mapped
 * destinations with the very same lookups as connect4. Ports are in host byte order.
 */
#ifndef AIRLOCK_H
#define AIRLOCK_H

#include <linux/types.h>

/* Which hook produced a deny event or counter. */
enum hook {
	HOOK_CONNECT4 = 1,
	HOOK_CONNECT6 = 2,
	HOOK_SENDMSG4 = 3,
	HOOK_SENDMSG6 = 4,
	HOOK_SOCK_CREATE = 5,
	HOOK_EGRESS = 6,
};

/* Why a connection was denied (event reason). */
enum deny_reason {
	DENY_NOT_ALLOWED = 1,  /* destination is in no map */
	DENY_EXPIRED = 2,      /* destination was allowed, its entry expired */
	DENY_PROTOCOL = 3,     /* socket family/type/protocol not allowed */
	DENY_UDP = 4,          /* UDP to anything but the DNS filter */
	DENY_NO_TRANSPARENT6 = 5, /* native IPv6 to a transparent port, no IPv6 listener */
	DENY_IDENTITY = 6,     /* a task of an identity cgroup connecting around the sidecar */
};

/* Listener kinds (value of the listeners map). */
enum listener_kind {
	LISTENER_PROXY = 1,
	LISTENER_TRANSPARENT = 2,
	LISTENER_DNS = 3,
	LISTENER_LLM = 4,
};

/* allow map: one entry per (address, port) learned from an allowed DNS answer. */
struct allow_key {
	__u8 addr[16];
	__u16 port;
	__u16 pad;
};

struct allow_val {
	__u64 expires_ns; /* CLOCK_BOOTTIME (bpf_ktime_get_boot_ns) */
};

/* listeners map: the sidecar's own listeners a sandbox may reach. */
struct listener_key {
	__u8 addr[16];
	__u16 port;
	__u8 proto; /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;
};

/* cidr map (LPM trie): address ranges named by policy rules, with their ports. */
#define CIDR_PORTS 32

struct cidr_key {
	__u32 prefixlen; /* over addr, 96 + n for an IPv4 /n */
	__u8 addr[16];
};

struct cidr_val {
	__u32 n;                  /* ports used */
	__u16 ports[CIDR_PORTS];
	__u8 raw[CIDR_PORTS];     /* 1: protocol tcp rule, never redirected */
};

/* id_tcp map (LPM trie): an identity's protocol tcp ranges, with their ports (raw all 1).
 * The trie matches all 32 bits of ident before the address, so a lookup finds only the
 * ranges of the identity it names. */
struct id_cidr_key {
	__u32 prefixlen; /* over ident and addr: 32 + 96 + n for an IPv4 /n */
	__u32 ident;     /* the identity's index (id_cgroups' value); never 0 */
	__u8 addr[16];
};

/* id_cgroups map: the cgroup (v2 id) of an identity's tasks -> the identity's index, which
 * keys its ranges in id_tcp. Index 0 is the sandbox's own identity: its tasks are treated
 * like those of the enforced cgroup itself. A cgroup absent here has no raw TCP at all. */

/* config map: one entry. */
#define CFG_TRANSPARENT 1  /* redirect TCP to transparent ports */
#define CFG_TRANSPARENT6 2 /* an IPv6 transparent listener exists */
#define CFG_REPORT 4       /* policy in report mode: log what would be denied, deny nothing */
#define CFG_LOOPBACK 8     /* the sandbox's network namespace is its own: its loopback reaches
			    * only its own processes, so TCP and UDP to it are allowed */
#define CFG_IDENTITIES 16  /* the policy has identities: a task in any cgroup but open_cgid
			    * reaches only the sidecar (listeners, the transparent redirect),
			    * its own loopback and its own identity's protocol tcp ranges */

#define CFG_IDENTITY_TCP 32 /* identities' raw TCP is per cgroup (id_cgroups, id_tcp); unset,
			     * every identity task has the sandbox's protocol tcp ranges (pods,
			     * where nothing maps containers' cgroups yet) */

struct settings {
	__u32 flags;
	__u32 t4_addr;  /* transparent listener, network byte order */
	__u32 t6_addr[4];
	__u16 t4_port;  /* network byte order */
	__u16 t6_port;  /* network byte order */
	__u64 open_cgid; /* the enforced cgroup's id: its own tasks are the sandbox's identity */
};

/* Original destination of a redirected connection. */
struct orig_dst {
	__u8 addr[16];
	__u16 port;
	__u16 pad;
};

/* orig_tuple map key: the client's local address and port of a redirected connection,
 * which is the peer address the transparent listener sees on accept. */
struct tuple_key {
	__u8 addr[16];
	__u16 port;
	__u16 pad;
};

/* peer_cg map value: the cgroup (v2 id) of the task that connected a TCP socket to the
 * sidecar, keyed like orig_tuple by the client's local address and port, which is the peer
 * address the sidecar's listeners see on accept. The sidecar maps it to an identity. */
struct peer_val {
	__u64 cgid;
};

/* dns_cg map key: one UDP query to the DNS filter as the filter receives it: the client's
 * source address and port (read from the packet, so exactly what the filter's socket sees) and
 * the query's DNS message ID. The value (peer_val) is the cgroup of the task that sent it (see
 * dns_sk), 0 when it cannot be told: two sockets of different cgroups sent a query with the
 * same key, or a socket two cgroups sent on. The sidecar maps it to an identity. */
struct dns_key {
	__u8 addr[16];
	__u16 port; /* host byte order */
	__u16 id;   /* the DNS message ID, host byte order */
};

/* dns_sk (socket storage, peer_val): the cgroup of the task that sent on a UDP socket to the
 * DNS filter, taken where the kernel runs in that task's context: connect(2) to the filter,
 * and every sendmsg(2) with the filter's address. A socket a second cgroup sends on or
 * connects gets DNS_CG_MIXED for good: its queries' identity cannot be told. */
#define DNS_CG_MIXED ((__u64)-1)

/* marks (socket storage): the destination a socket was allowed to at connect time. The
 * egress backstop lets a marked socket's packets to that destination pass, so a connection
 * opened before its allow entry expired keeps working. */
#define MARK_ANY 1 /* inbound (accepted) connection: replies go anywhere it came from */

struct mark {
	__u8 addr[16];
	__u16 port;
	__u8 flags;
	__u8 pad;
};

/* Per-sandbox counters (per-CPU array, one entry). Bytes are skb->len: the IP packet,
 * headers included, without the link-layer header. */
struct counters {
	__u64 bytes;       /* sent: packets the egress backstop passed */
	__u64 packets;
	__u64 connections;
	__u64 denies;
	__u64 events_lost;
	__u64 rx_bytes;    /* received: packets delivered to the sandbox's sockets (ingress) */
	__u64 rx_packets;
};

/* Deny event sent through the ring buffer. */
struct event {
	__u64 time_ns; /* CLOCK_BOOTTIME */
	__u32 pid;
	__u32 uid;
	__u8 comm[16];
	__u8 addr[16];
	__u16 port;
	__u8 proto;
	__u8 hook;
	__u8 reason;
	__u8 family;
	__u8 type;
	__u8 report; /* 1: report mode, the hook allowed what enforce would deny */
	__u64 cgid;  /* the cgroup (v2 id) of the task, when the hook runs in its context */
};

/* exempt map: one entry. A cgroup whose processes, and those of every cgroup below it, the
 * programs leave alone: the sidecar's own container cgroup when the programs are attached
 * to its pod's cgroup (airlock run --pod-cgroup). A task is exempt when its ancestor at
 * `level` is the cgroup `id`, so sub-cgroups a container runtime makes stay exempt. */
struct exemption {
	__u64 id;    /* cgroup id (the inode number of its directory); 0: nothing is exempt */
	__u32 level; /* its depth in the cgroup v2 hierarchy, the root cgroup being 0 */
	__u32 pad;
};

/* meta map: the schema hash of the maps pinned beside it. */
struct schema_info {
	__u64 schema;
};

#endif
