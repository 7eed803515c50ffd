// Package dnsfilter is airlock's DNS filter: a DNS server (UDP and TCP, on
// github.com/miekg/dns) for one sandbox that answers only the names the policy allows, forwards
// those queries to the sidecar's upstream resolvers, and records every address of an allowed
// answer in the kernel allow map (AllowMap) before the answer is written to the client, so a
// connect() right after the answer never races the map update.
//
// What it decides, in order, for each query (ServeDNS):
//
//  1. Shape: one question, opcode QUERY, class IN, EDNS version 0; ANY, AXFR, IXFR and other
//     meta types are refused (RFC 8482 lets a server decline ANY).
//  2. The reserved name llm.airlock.internal answers the sidecar's LLM endpoint (reserved.go).
//  3. The policy (policy.Policy.DecideName): a name no rule's hosts name gets REFUSED (or
//     NXDOMAIN with dns.onDeny: nxdomain) and is never forwarded.
//  4. The exfiltration brakes, for names allowed only through a wildcard host: label length
//     and new names per minute per wildcard (brake.go).
//  5. Forward upstream (UDP over pooled sockets, retried over TCP when truncated); a failure
//     or timeout is SERVFAIL, and nothing is inserted (upstream.go).
//  6. Clean the answer: keep only the CNAME chain of the question name, strip address hints
//     and ECH from HTTPS/SVCB records, drop additional records, raise TTLs to dns.minTTL
//     (answer.go).
//  7. Record the addresses (address book, book.go): each address whose ports the policy
//     allows goes to the AllowMap until max(TTL, minTTL)+grace; the per-name cap evicts (and
//     revokes) the least recently answered address. A failing AllowMap is SERVFAIL.
//  8. Write the answer, truncated with TC when it does not fit the client's UDP size.
//
// After a policy reload, PolicyChanged narrows what earlier answers opened to what the new
// policy grants.
//
// Every query gets one audit event (audit.KindDNS) and is counted in the airlock_dns_*
// metrics. In report mode (spec.mode: report) a query enforce would deny is forwarded and
// answered, audited with decision "report"; the addresses of a name no rule names are not
// put in the allow map, because no rule gives them ports.
//
// The package owns the DNS wire protocol and the name-to-address bookkeeping; it does not own
// the kernel map (package ebpf implements AllowMap, internal/sidecar passes it in) nor the policy.
// It imports policy and audit; only internal/sidecar imports it.
package dnsfilter
