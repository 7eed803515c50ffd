// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* airlock's kernel enforcement for one sandbox cgroup (v2).
 *
 * Attached as bpf links to the sandbox's cgroup directory; the sidecar runs outside it,
 * or, in a Kubernetes pod, in the one cgroup below it the exempt map names (its own
 * container's), which every program passes before anything else: no counter, no event.
 * Deny by default: a sandbox process may connect only to the sidecar's listeners
 * (proxy, transparent, DNS, LLM; never admin), to addresses an allowed DNS answer put
 * in the allow map (TCP, the rule's ports, until the entry expires), and to ranges a
 * policy rule names by CIDR (TCP, the rule's ports). UDP goes only to the DNS filter.
 * Loopback (127.0.0.0/8, ::1, and the unspecified addresses, which connect to it) is
 * allowed only when the config says the sandbox's network namespace is its own
 * (CFG_LOOPBACK, a local sandbox); in a pod the sidecar shares the loopback, so it is
 * denied there but for the sidecar's listeners.
 * Only TCP and UDP sockets may be created in AF_INET/AF_INET6. No uid is exempt.
 *
 * Hooks and what they see (kernel behaviour):
 *  - connect4/connect6 run for connect(2) on TCP and UDP sockets, and for sendmsg with
 *    MSG_FASTOPEN on TCP (tcp_sendmsg_fastopen -> __inet_stream_connect -> pre_connect),
 *    so TCP Fast Open is decided here too. connect4 does not run for an AF_INET6 socket
 *    connecting to ::ffff:a.b.c.d: connect6 does, and applies the IPv4 entries, which are
 *    stored in that mapped form.
 *  - sendmsg4/sendmsg6 run for UDP sendmsg with a destination address.
 *  - sock_create runs when an AF_INET/AF_INET6 socket is created.
 *  - cgroup_skb/egress sees every packet the cgroup's full sockets send; cgroup_skb/ingress
 *    every packet delivered to them (counted only, never dropped).
 *  - The DNS filter learns which cgroup sent each UDP query: connect4/6 and sendmsg4/6, in the
 *    sending task's context, note its cgroup on the socket (dns_sk); egress, which sees the
 *    packet's real source, copies it under the source address, port and DNS message ID the
 *    filter receives (dns_cg). A TCP query's is its connection's (peer_cg).
 *  - sockops (established callbacks) re-keys the original destination of a redirected
 *    connection by the client's local address and port, which is what the transparent
 *    listener sees as the peer of the accepted connection.
 *
 * Helpers used are available since Linux 5.8 (ringbuf, ktime_get_boot_ns, sk_storage;
 * get_current_ancestor_cgroup_id in sock_addr and sock programs since 5.7).
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/if_ether.h>
#include <linux/socket.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "airlock.h"

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif
#ifndef AF_PACKET
#define AF_PACKET 17
#endif
#define SOCK_STREAM 1
#define SOCK_DGRAM 2

#define VERDICT_DENY 0
#define VERDICT_ALLOW 1

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Only userspace writes the allow map (the DNS filter), so its elements are allocated on
 * update (BPF_F_NO_PREALLOC) rather than all 65536 up front: a sandbox costs kernel memory
 * for the addresses it actually resolved, and its sidecar starts faster. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct allow_key);
	__type(value, struct allow_val);
} allow SEC(".maps");

/* Maps only userspace writes (the listeners, the identities' cgroups, the transparent
 * ports) are not preallocated either: every preallocated element is allocated and cleared
 * at every sandbox's start, and the programs only look these up. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct listener_key);
	__type(value, __u8);
} listeners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct cidr_key);
	__type(value, struct cidr_val);
} cidrs SEC(".maps");

/* Each identity's protocol tcp ranges (id_tcp), and which identity a cgroup's tasks are
 * (id_cgroups): both written by the sidecar only, as the policy and the identities' cgroups
 * come and go. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct id_cidr_key);
	__type(value, struct cidr_val);
} id_tcp SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, __u32);
} id_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct settings);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u16);
	__type(value, __u8);
} tports SEC(".maps");

/* The original destinations of redirected connections are needed only from connect until the
 * transparent proxy accepts (milliseconds on the veth, as conn_cg's handshakes): 1024 in
 * flight per sandbox is plenty, and LRU maps are preallocated, so a bigger one costs memory
 * and start-up time in every sandbox. An entry evicted before the accept makes the proxy
 * refuse that connection (no original destination): never another's destination. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct orig_dst);
} orig_cookie SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct tuple_key);
	__type(value, struct orig_dst);
} orig_tuple SEC(".maps");

/* The cgroup of the task that connected, by socket cookie from connect until the handshake
 * completes (sockops moves it to peer_cg), and then by the client's address and port for as
 * long as the sidecar may look it up: a keep-alive connection's every request does. An
 * entry evicted before its lookup makes the lookup fail, and the sidecar refuses the
 * connection (identity_unknown): never another connection's identity. conn_cg holds a
 * connection only for its handshake (microseconds on the veth), so 1024 handshakes in flight
 * per sandbox are plenty; peer_cg holds every open connection. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct peer_val);
} conn_cg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct tuple_key);
	__type(value, struct peer_val);
} peer_cg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mark);
} marks SEC(".maps");

/* The cgroup of the task that sent each UDP query to the DNS filter (dns_key), from the
 * egress of the query until the filter reads it (milliseconds); and, per socket, which
 * cgroup's task sends on it (dns_sk). An evicted entry makes the filter's lookup fail, and the
 * query is refused (identity_unknown): never another query's identity. 2048 queries between
 * the egress of one and the filter's read of it is more than the filter's socket buffer
 * holds; every entry of an LRU map is allocated when the map is made, at every sandbox's
 * start, so a larger one costs start-up time for nothing. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 2048);
	__type(key, struct dns_key);
	__type(value, struct peer_val);
} dns_cg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct peer_val);
} dns_sk SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counters);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct schema_info);
} meta SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct exemption);
} exempt SEC(".maps");

/* Keep the event type in the ELF's BTF for bpf2go -type. */
const struct event *unused_event __attribute__((unused));

static __always_inline struct counters *stats_slot(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&stats, &zero);
}

static __always_inline struct exemption *exemption(void)
{
	__u32 zero = 0;
	struct exemption *x = bpf_map_lookup_elem(&exempt, &zero);
	return x && x->id ? x : NULL;
}

/* exempt_task reports whether the current task is in the exempt cgroup or below it. The
 * sock_addr, sock_create and LSM hooks run in the task's context (connect, sendmsg,
 * socket). */
static __always_inline int exempt_task(void)
{
	struct exemption *x = exemption();
	return x && bpf_get_current_ancestor_cgroup_id(x->level) == x->id;
}

/* exempt_skb reports whether the packet's socket belongs to the exempt cgroup or one below
 * it (a socket belongs to the cgroup of the task that created it). */
static __always_inline int exempt_skb(struct __sk_buff *skb)
{
	struct exemption *x = exemption();
	return x && bpf_skb_ancestor_cgroup_id(skb, x->level) == x->id;
}

static __always_inline void mapped4(__u8 addr[16], __u32 ip4)
{
	__builtin_memset(addr, 0, 10);
	addr[10] = 0xff;
	addr[11] = 0xff;
	__builtin_memcpy(&addr[12], &ip4, 4);
}

static __always_inline void copy6(__u8 addr[16], const __u32 w[4])
{
	__builtin_memcpy(addr, w, 16);
}

/* user_ip6 is read one 32-bit word at a time (volatile): the verifier rejects the 64-bit
 * loads clang would otherwise merge them into. It returns 1 when the address is IPv4-mapped
 * (::ffff:a.b.c.d), decided on the words: a byte-by-byte test multiplied the verifier's
 * states (connect6 took 20 ms to load). */
static __always_inline int user_ip6(__u8 addr[16], const struct bpf_sock_addr *ctx)
{
	__u32 w[4];
	w[0] = *(volatile __u32 *)&ctx->user_ip6[0];
	w[1] = *(volatile __u32 *)&ctx->user_ip6[1];
	w[2] = *(volatile __u32 *)&ctx->user_ip6[2];
	w[3] = *(volatile __u32 *)&ctx->user_ip6[3];
	copy6(addr, w);
	return (w[0] | w[1] | (w[2] ^ bpf_htonl(0xffff))) == 0;
}

static __always_inline void emit(__u8 hook, __u8 reason, const __u8 addr[16], __u16 port,
				 __u8 proto, __u8 family, __u8 type, int with_task, int report)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		struct counters *s = stats_slot();
		if (s)
			s->events_lost++;
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->time_ns = bpf_ktime_get_boot_ns();
	if (with_task) {
		e->cgid = bpf_get_current_cgroup_id();
		e->pid = bpf_get_current_pid_tgid() >> 32;
		e->uid = (__u32)bpf_get_current_uid_gid();
		bpf_get_current_comm(e->comm, sizeof(e->comm));
	}
	__builtin_memcpy(e->addr, addr, 16);
	e->port = port;
	e->proto = proto;
	e->hook = hook;
	e->reason = reason;
	e->family = family;
	e->type = type;
	e->report = report;
	bpf_ringbuf_submit(e, 0);
}

static __always_inline void count_deny(void)
{
	struct counters *s = stats_slot();
	if (s)
		s->denies++;
}

static __always_inline int report_mode(void)
{
	__u32 zero = 0;
	struct settings *c = bpf_map_lookup_elem(&config, &zero);
	return c && (c->flags & CFG_REPORT);
}

/* own_loopback reports whether addr is loopback (or unspecified, which connect(2) sends
 * to loopback) and the sandbox's loopback is its own (CFG_LOOPBACK). */
static __always_inline int own_loopback(const __u8 addr[16])
{
	__u32 zero = 0;
	struct settings *c = bpf_map_lookup_elem(&config, &zero);
	if (!c || !(c->flags & CFG_LOOPBACK))
		return 0;
	__u32 w[4];
	__builtin_memcpy(w, addr, 16);
	if (w[0] | w[1])
		return 0;
	if (w[2] == bpf_htonl(0xffff)) /* IPv4, mapped: 127.0.0.0/8 or 0.0.0.0 */
		return addr[12] == 127 || w[3] == 0;
	return w[2] == 0 && (w[3] == bpf_htonl(1) || w[3] == 0); /* ::1 or :: */
}

/* refuse reports a denial and returns the verdict: VERDICT_DENY, or VERDICT_ALLOW when the
 * policy is in report mode (the event then says so, and the deny counter is left alone). */
static __always_inline int refuse(__u8 hook, __u8 reason, const __u8 addr[16], __u16 port,
				  __u8 proto, __u8 family, __u8 type, int with_task)
{
	int report = report_mode();
	if (!report)
		count_deny();
	emit(hook, reason, addr, port, proto, family, type, with_task, report);
	return report ? VERDICT_ALLOW : VERDICT_DENY;
}

static __always_inline int is_listener(const __u8 addr[16], __u16 port, __u8 proto)
{
	struct listener_key k = {};
	__builtin_memcpy(k.addr, addr, 16);
	k.port = port;
	k.proto = proto;
	return bpf_map_lookup_elem(&listeners, &k) != NULL;
}

/* cidr_match: 0 no rule, 1 a rule allows the port, 2 a protocol tcp rule allows it. */
static __always_inline int cidr_match(const __u8 addr[16], __u16 port)
{
	struct cidr_key k = {.prefixlen = 128};
	__builtin_memcpy(k.addr, addr, 16);
	struct cidr_val *v = bpf_map_lookup_elem(&cidrs, &k);
	if (!v)
		return 0;
	for (int i = 0; i < CIDR_PORTS; i++) {
		if (i >= v->n)
			break;
		if (v->ports[i] == port)
			return v->raw[i] ? 2 : 1;
	}
	return 0;
}

/* identity_tcp reports whether a protocol tcp rule of the identity whose cgroup is cgid
 * allows port on addr. A cgroup the sidecar has not mapped to an identity has none. Without
 * CFG_IDENTITY_TCP every identity has the sandbox's (the caller checked those). */
static __always_inline int identity_tcp(__u64 cgid, const __u8 addr[16], __u16 port)
{
	__u32 zero = 0;
	struct settings *c = bpf_map_lookup_elem(&config, &zero);
	if (c && !(c->flags & CFG_IDENTITY_TCP))
		return 1;
	__u32 *ident = bpf_map_lookup_elem(&id_cgroups, &cgid);
	if (!ident)
		return 0;
	struct id_cidr_key k = {.prefixlen = 32 + 128, .ident = *ident};
	__builtin_memcpy(k.addr, addr, 16);
	struct cidr_val *v = bpf_map_lookup_elem(&id_tcp, &k);
	if (!v)
		return 0;
	for (int i = 0; i < CIDR_PORTS; i++) {
		if (i >= v->n)
			break;
		if (v->ports[i] == port)
			return 1;
	}
	return 0;
}

/* allow_state: 0 absent, 1 allowed, 2 expired. */
static __always_inline int allow_state(const __u8 addr[16], __u16 port)
{
	struct allow_key k = {};
	__builtin_memcpy(k.addr, addr, 16);
	k.port = port;
	struct allow_val *v = bpf_map_lookup_elem(&allow, &k);
	if (!v)
		return 0;
	return bpf_ktime_get_boot_ns() < v->expires_ns ? 1 : 2;
}

static __always_inline void set_mark(struct bpf_sock *sk, const __u8 addr[16], __u16 port, __u8 flags)
{
	if (!sk)
		return;
	struct mark *m = bpf_sk_storage_get(&marks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!m)
		return;
	__builtin_memcpy(m->addr, addr, 16);
	m->port = port;
	m->flags = flags;
}

static __always_inline void count_connection(void)
{
	struct counters *s = stats_slot();
	if (s)
		s->connections++;
}

/* redirect rewrites a TCP connect to a transparent port to the transparent listener and
 * records the original destination by socket cookie. It returns 1 when it redirected,
 * -1 when the connection must be denied, 0 when transparent mode does not apply. */
static __always_inline int redirect(struct bpf_sock_addr *ctx, const __u8 addr[16], __u16 port, int hook6, int v6native)
{
	__u32 zero = 0;
	struct settings *c = bpf_map_lookup_elem(&config, &zero);
	if (!c || !(c->flags & CFG_TRANSPARENT))
		return 0;
	if (!bpf_map_lookup_elem(&tports, &port))
		return 0;
	if (v6native && !(c->flags & CFG_TRANSPARENT6))
		return -1;

	struct orig_dst o = {};
	__builtin_memcpy(o.addr, addr, 16);
	o.port = port;
	__u64 cookie = bpf_get_socket_cookie(ctx);
	if (bpf_map_update_elem(&orig_cookie, &cookie, &o, BPF_ANY))
		return -1;

	__u8 to[16];
	__u16 to_port;
	/* hook6 is a constant after inlining: a connect4 program must not even contain
	 * stores to user_ip6 (the verifier rejects them). */
	if (!hook6) {
		ctx->user_ip4 = c->t4_addr;
		ctx->user_port = c->t4_port;
		mapped4(to, c->t4_addr);
		to_port = bpf_ntohs(c->t4_port);
	} else if (v6native) {
		ctx->user_ip6[0] = c->t6_addr[0];
		ctx->user_ip6[1] = c->t6_addr[1];
		ctx->user_ip6[2] = c->t6_addr[2];
		ctx->user_ip6[3] = c->t6_addr[3];
		ctx->user_port = c->t6_port;
		copy6(to, c->t6_addr);
		to_port = bpf_ntohs(c->t6_port);
	} else {
		/* An AF_INET6 socket to ::ffff:a.b.c.d: go to the IPv4 listener, mapped. */
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = bpf_htonl(0xffff);
		ctx->user_ip6[3] = c->t4_addr;
		ctx->user_port = c->t4_port;
		mapped4(to, c->t4_addr);
		to_port = bpf_ntohs(c->t4_port);
	}
	set_mark(ctx->sk, to, to_port, 0);
	return 1;
}

/* record_peer notes which cgroup's task connects a TCP socket to the sidecar (a listener,
 * or the transparent redirect), for the sidecar to tell its identity: the identity is
 * taken at connect(2), from the connecting task, not from whoever created the socket. */
static __always_inline void record_peer(struct bpf_sock_addr *ctx, __u64 cgid)
{
	if (ctx->protocol != IPPROTO_TCP)
		return;
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct peer_val v = {.cgid = cgid};
	bpf_map_update_elem(&conn_cg, &cookie, &v, BPF_ANY);
}

/* note_dns_sender records on a UDP socket that the task of cgroup cgid sends on it to the DNS
 * filter (connect(2) to it, or sendmsg(2) with its address). Both hooks run with the socket
 * locked (the _LOCK variants of the cgroup hooks), so two tasks never race here. A second
 * cgroup makes the socket DNS_CG_MIXED for good: its queries are then refused, whichever task
 * sends them, since the egress of one task's query may run after another's hook. A socket
 * whose storage cannot be had has none, and its queries are refused likewise. */
static __always_inline void note_dns_sender(struct bpf_sock *sk, __u64 cgid)
{
	if (!sk)
		return;
	struct peer_val *v = bpf_sk_storage_get(&dns_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!v)
		return;
	if (v->cgid == 0)
		v->cgid = cgid;
	else if (v->cgid != cgid)
		v->cgid = DNS_CG_MIXED;
}

/* identity_task: the policy has identities and the current task is not in the enforced
 * cgroup itself (but in an identity's cgroup below it), nor in a cgroup the sidecar mapped to
 * the sandbox's own identity (index 0: a pod's default container). */
static __always_inline int identity_task(__u64 cgid)
{
	__u32 zero = 0;
	struct settings *c = bpf_map_lookup_elem(&config, &zero);
	if (!c || !(c->flags & CFG_IDENTITIES) || cgid == c->open_cgid)
		return 0;
	__u32 *ident = bpf_map_lookup_elem(&id_cgroups, &cgid);
	return !ident || *ident != 0;
}

static __always_inline int decide_connect(struct bpf_sock_addr *ctx, const __u8 addr[16], __u8 hook, int hook6, int v6native)
{
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	__u8 proto = ctx->protocol;
	__u8 reason = DENY_NOT_ALLOWED;
	__u64 cgid = bpf_get_current_cgroup_id();

	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP) {
		reason = DENY_PROTOCOL;
		goto deny;
	}
	if (is_listener(addr, port, proto)) {
		record_peer(ctx, cgid);
		if (proto == IPPROTO_UDP)
			note_dns_sender(ctx->sk, cgid);
		goto allow;
	}
	if (own_loopback(addr))
		goto allow;
	if (proto == IPPROTO_UDP) {
		reason = DENY_UDP;
		goto deny;
	}
	/* Raw TCP: the sandbox's protocol tcp rules for its own tasks; for an identity's, its
	 * own rules, and only inside the sandbox's (the policy checks it, the kernel too). */
	int ident = identity_task(cgid);
	int cidr = cidr_match(addr, port);
	if (cidr == 2 && (!ident || identity_tcp(cgid, addr, port)))
		goto allow;
	int r = redirect(ctx, addr, port, hook6, v6native);
	if (r == 1) {
		record_peer(ctx, cgid);
		count_connection();
		return VERDICT_ALLOW;
	}
	if (r < 0) {
		reason = DENY_NO_TRANSPARENT6;
		goto deny;
	}
	/* An identity's rules are applied by the sidecar, which the addresses below bypass:
	 * the allow map and http-rule ranges are the whole sandbox's. */
	if (ident) {
		reason = DENY_IDENTITY;
		goto deny;
	}
	if (cidr == 1)
		goto allow;
	int st = allow_state(addr, port);
	if (st == 1)
		goto allow;
	if (st == 2)
		reason = DENY_EXPIRED;

deny:
	if (refuse(hook, reason, addr, port, proto, ctx->family, ctx->type, 1) == VERDICT_DENY)
		return VERDICT_DENY;

allow:
	set_mark(ctx->sk, addr, port, 0);
	count_connection();
	return VERDICT_ALLOW;
}

SEC("cgroup/connect4")
int connect4(struct bpf_sock_addr *ctx)
{
	if (exempt_task())
		return VERDICT_ALLOW;
	__u8 addr[16];
	mapped4(addr, ctx->user_ip4);
	return decide_connect(ctx, addr, HOOK_CONNECT4, 0, 0);
}

SEC("cgroup/connect6")
int connect6(struct bpf_sock_addr *ctx)
{
	if (exempt_task())
		return VERDICT_ALLOW;
	__u8 addr[16];
	int mapped = user_ip6(addr, ctx);
	/* NAT64 (64:ff9b::/96), 6to4 (2002::/16) and Teredo (2001::/32) forms get no special
	 * treatment: like every other address they are denied unless an allow entry or a CIDR
	 * names them. Mapped addresses hit the IPv4 entries, stored in mapped form. */
	return decide_connect(ctx, addr, HOOK_CONNECT6, 1, !mapped);
}

static __always_inline int decide_sendmsg(struct bpf_sock_addr *ctx, const __u8 addr[16], __u8 hook)
{
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	if (ctx->protocol == IPPROTO_UDP && is_listener(addr, port, IPPROTO_UDP)) {
		note_dns_sender(ctx->sk, bpf_get_current_cgroup_id());
		return VERDICT_ALLOW;
	}
	if (ctx->protocol == IPPROTO_UDP && own_loopback(addr))
		return VERDICT_ALLOW;
	return refuse(hook, DENY_UDP, addr, port, ctx->protocol, ctx->family, ctx->type, 1);
}

SEC("cgroup/sendmsg4")
int sendmsg4(struct bpf_sock_addr *ctx)
{
	if (exempt_task())
		return VERDICT_ALLOW;
	__u8 addr[16];
	mapped4(addr, ctx->user_ip4);
	return decide_sendmsg(ctx, addr, HOOK_SENDMSG4);
}

SEC("cgroup/sendmsg6")
int sendmsg6(struct bpf_sock_addr *ctx)
{
	if (exempt_task())
		return VERDICT_ALLOW;
	__u8 addr[16];
	user_ip6(addr, ctx);
	return decide_sendmsg(ctx, addr, HOOK_SENDMSG6);
}

SEC("cgroup/sock_create")
int sock_create(struct bpf_sock *sk)
{
	if (exempt_task())
		return VERDICT_ALLOW;
	__u32 family = sk->family;
	__u32 type = sk->type;
	__u32 proto = sk->protocol;
	if (family == AF_INET || family == AF_INET6) {
		if (type == SOCK_STREAM && proto == IPPROTO_TCP)
			return VERDICT_ALLOW;
		if (type == SOCK_DGRAM && proto == IPPROTO_UDP)
			return VERDICT_ALLOW;
	} else if (family != AF_PACKET) {
		return VERDICT_ALLOW;
	}
	__u8 none[16] = {};
	return refuse(HOOK_SOCK_CREATE, DENY_PROTOCOL, none, 0, proto, family, type, 1);
}

static __always_inline int same_addr(const __u8 a[16], const __u8 b[16])
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;
	return x[0] == y[0] && x[1] == y[1];
}

/* cgroup/sock_create never sees AF_PACKET sockets (only inet_create and inet6_create run
 * it), and packet sockets send frames past every cgroup hook. This LSM program, attached
 * per cgroup (BPF_LSM_CGROUP, Linux 6.0, needs "bpf" among the active LSMs), refuses them
 * at socket(2). Its arguments are those of security_socket_create(family, type,
 * protocol, kern); kernel-internal sockets (kern != 0) are left alone. */
SEC("lsm_cgroup/socket_create")
int packet_guard(unsigned long long *ctx)
{
	int family = (int)ctx[0];
	int kern = (int)ctx[3];
	if (kern || family != AF_PACKET || exempt_task())
		return VERDICT_ALLOW;
	__u8 none[16] = {};
	return refuse(HOOK_SOCK_CREATE, DENY_PROTOCOL, none, 0, (__u8)ctx[2], family, (__u8)ctx[1], 1);
}

/* packet_dst reads the destination address, port and protocol of an egress packet. It
 * returns 0 when it could not (the packet is then judged on its socket's mark alone). */
static __always_inline int packet_dst(struct __sk_buff *skb, __u8 addr[16], __u16 *port, __u8 *proto)
{
	__u32 off;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		__u8 vihl;
		__u32 daddr;
		if (bpf_skb_load_bytes(skb, 0, &vihl, 1) || bpf_skb_load_bytes(skb, 9, proto, 1) ||
		    bpf_skb_load_bytes(skb, 16, &daddr, 4))
			return 0;
		mapped4(addr, daddr);
		off = (vihl & 0xf) * 4;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		if (bpf_skb_load_bytes(skb, 6, proto, 1) || bpf_skb_load_bytes(skb, 24, addr, 16))
			return 0;
		off = 40;
	} else {
		return 0;
	}
	*port = 0;
	if (*proto == IPPROTO_TCP || *proto == IPPROTO_UDP) {
		__u16 p;
		if (bpf_skb_load_bytes(skb, off + 2, &p, 2))
			return 0;
		*port = bpf_ntohs(p);
	}
	return 1;
}

/* dns_query_key reads the source address and port and the DNS message ID of a UDP packet
 * (protocol already known to be UDP). It returns 0 when it could not, or when the packet is a
 * fragment past the first (no UDP header). */
static __always_inline int dns_query_key(struct __sk_buff *skb, struct dns_key *k)
{
	__u32 off;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		__u8 vihl;
		__u16 frag;
		__u32 saddr;
		if (bpf_skb_load_bytes(skb, 0, &vihl, 1) || bpf_skb_load_bytes(skb, 6, &frag, 2) ||
		    bpf_skb_load_bytes(skb, 12, &saddr, 4))
			return 0;
		if (bpf_ntohs(frag) & 0x1fff)
			return 0;
		mapped4(k->addr, saddr);
		off = (vihl & 0xf) * 4;
	} else {
		if (bpf_skb_load_bytes(skb, 8, k->addr, 16))
			return 0;
		off = 40;
	}
	__u16 port, id;
	if (bpf_skb_load_bytes(skb, off, &port, 2) || bpf_skb_load_bytes(skb, off + 8, &id, 2))
		return 0;
	k->port = bpf_ntohs(port);
	k->id = bpf_ntohs(id);
	return 1;
}

/* record_dns notes which cgroup's task sent a UDP query to the DNS filter (dns_sk, 0 when it
 * cannot be told), keyed as the filter receives it (dns_key). Two queries with one key from
 * different cgroups (two sockets sharing an address and port, SO_REUSEADDR; or a port and ID
 * used again while the first query's entry lives) make the key's entry 0, so the filter
 * refuses rather than guess: the first is inserted (BPF_NOEXIST, atomic), any other that
 * differs overwrites it with 0. It returns 0 for a packet it cannot key: the caller drops it,
 * since the filter would look up an entry another query left. A UDP GSO super-packet
 * (UDP_SEGMENT) is one of those: the filter receives each segment as a datagram, and only the
 * first one's ID is here. */
static __always_inline int record_dns(struct __sk_buff *skb, struct bpf_sock *sk)
{
	struct dns_key k = {};
	if (skb->gso_size || !dns_query_key(skb, &k))
		return 0;
	struct peer_val v = {};
	struct peer_val *snd = bpf_sk_storage_get(&dns_sk, sk, 0, 0);
	if (snd && snd->cgid != DNS_CG_MIXED)
		v.cgid = snd->cgid;
	if (bpf_map_update_elem(&dns_cg, &k, &v, BPF_NOEXIST) == 0)
		return 1;
	struct peer_val *old = bpf_map_lookup_elem(&dns_cg, &k);
	if (old && old->cgid != v.cgid) {
		struct peer_val none = {};
		bpf_map_update_elem(&dns_cg, &k, &none, BPF_ANY);
	}
	return 1;
}

SEC("cgroup_skb/egress")
int egress(struct __sk_buff *skb)
{
	if (exempt_skb(skb))
		return VERDICT_ALLOW;
	struct counters *s = stats_slot();
	__u8 addr[16] = {};
	__u16 port = 0;
	__u8 proto = 0;
	int parsed = packet_dst(skb, addr, &port, &proto);

	struct bpf_sock *sk = skb->sk;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	if (!sk) {
		/* Request and time-wait sockets: kernel-generated SYN-ACKs, ACKs and RSTs of
		 * connections that already exist. */
		goto pass;
	}
	if (parsed && proto == IPPROTO_UDP && is_listener(addr, port, IPPROTO_UDP) && !record_dns(skb, sk)) {
		/* Never sent, report mode or not: the filter could take it for another query. */
		count_deny();
		emit(HOOK_EGRESS, DENY_PROTOCOL, addr, port, proto, sk->family, sk->type, 0, 0);
		return VERDICT_DENY;
	}
	struct mark *m = bpf_sk_storage_get(&marks, sk, 0, 0);
	if (m) {
		if (m->flags & MARK_ANY)
			goto pass;
		if (parsed && m->port == port && same_addr(m->addr, addr))
			goto pass;
	}
	if (sk->state == BPF_TCP_LISTEN)
		goto pass;
	if (parsed && (proto == IPPROTO_TCP || proto == IPPROTO_UDP)) {
		if (is_listener(addr, port, proto) || own_loopback(addr))
			goto pass;
		if (proto == IPPROTO_TCP && (cidr_match(addr, port) || allow_state(addr, port) == 1))
			goto pass;
	}
	if (refuse(HOOK_EGRESS, DENY_NOT_ALLOWED, addr, port, proto, sk->family, sk->type, 0) == VERDICT_ALLOW)
		goto pass;
	return VERDICT_DENY;

pass:
	if (s) {
		s->bytes += skb->len;
		s->packets++;
	}
	return VERDICT_ALLOW;
}

/* ingress counts what the sandbox's sockets receive, for usage accounting (issue 35); it
 * never drops: the decisions are taken on the way out. A packet of the exempt cgroup (the
 * sidecar's own in pod mode) is not the sandbox's and is not counted. */
SEC("cgroup_skb/ingress")
int ingress(struct __sk_buff *skb)
{
	if (exempt_skb(skb))
		return VERDICT_ALLOW;
	struct counters *s = stats_slot();
	if (s) {
		s->rx_bytes += skb->len;
		s->rx_packets++;
	}
	return VERDICT_ALLOW;
}

/* sockops has no exemption check, and needs none: an exempt task's connections are never
 * redirected (so never in orig_cookie), and the marks it puts on accepted sockets are read
 * only by the egress program, which passes the exempt cgroup's packets before reading them. */
SEC("sockops")
int established(struct bpf_sock_ops *skops)
{
	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB: {
		__u64 cookie = bpf_get_socket_cookie(skops);
		struct tuple_key k = {};
		if (skops->family == AF_INET) {
			mapped4(k.addr, skops->local_ip4);
		} else {
			__u32 w[4];
			w[0] = *(volatile __u32 *)&skops->local_ip6[0];
			w[1] = *(volatile __u32 *)&skops->local_ip6[1];
			w[2] = *(volatile __u32 *)&skops->local_ip6[2];
			w[3] = *(volatile __u32 *)&skops->local_ip6[3];
			copy6(k.addr, w);
		}
		k.port = (__u16)skops->local_port;
		/* A connection that was not recorded (or whose record was evicted) clears what an
		 * earlier connection from the same address and port left: never its identity. */
		struct peer_val *pv = bpf_map_lookup_elem(&conn_cg, &cookie);
		if (pv) {
			struct peer_val pcopy = *pv;
			bpf_map_update_elem(&peer_cg, &k, &pcopy, BPF_ANY);
			bpf_map_delete_elem(&conn_cg, &cookie);
		} else {
			bpf_map_delete_elem(&peer_cg, &k);
		}
		struct orig_dst *o = bpf_map_lookup_elem(&orig_cookie, &cookie);
		if (!o)
			break;
		struct orig_dst copy = *o;
		bpf_map_update_elem(&orig_tuple, &k, &copy, BPF_ANY);
		bpf_map_delete_elem(&orig_cookie, &cookie);
		break;
	}
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB: {
		/* An accepted connection is inbound, not egress: its replies may go back. */
		struct bpf_sock *sk = skops->sk;
		if (sk) {
			__u8 none[16] = {};
			set_mark(sk, none, 0, MARK_ANY);
		}
		break;
	}
	}
	return 1;
}
