package dnsfilter

import (
	crand "crypto/rand"
	"math/rand/v2"
	"sync"
)

// idSources hands out ChaCha8 generators, each seeded from crypto/rand: a cryptographically
// strong source for upstream query IDs (RFC 5452: with the random source port, the ID is
// what an off-path attacker must guess), without miekg/dns.Id's crypto/rand read and
// reflection on every query.
var idSources = sync.Pool{New: func() any {
	var seed [32]byte
	crand.Read(seed[:]) // never fails (crypto/rand: it crashes the program rather than return an error)
	return rand.NewChaCha8(seed)
}}

// queryID returns a random 16-bit DNS message ID.
func queryID() uint16 {
	g := idSources.Get().(*rand.ChaCha8)
	id := uint16(g.Uint64())
	idSources.Put(g)
	return id
}
