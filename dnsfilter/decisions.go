package dnsfilter

import (
	"sync"
	"sync/atomic"

	"github.com/airlock-dev/airlock/policy"
)

// maxCachedDecisions bounds the decision cache: when it is full it starts again empty, so a
// sandbox asking for endless random names costs memory no larger than this.
const maxCachedDecisions = 4096

// decisions caches Policy.DecideName per question name for one policy. DecideName is a pure
// function of the policy and the name (it never does I/O), and normalising and matching a
// name is a measurable share of a query's work; a reload brings a new *policy.Policy, and the
// cache of the old one is dropped at the first query decided under the new one.
type decisions struct {
	cur atomic.Pointer[decisionCache]
}

// decisionCache holds the decisions of one policy, keyed by the question name as asked.
type decisionCache struct {
	pol *policy.Policy
	m   sync.Map // string → policy.NameDecision
	n   atomic.Int64
}

// decide returns pol.DecideName(name), from the cache when it holds it. The returned
// decision is shared: its Ports must not be modified.
func (d *decisions) decide(pol *policy.Policy, name string) policy.NameDecision {
	c := d.cur.Load()
	if c != nil && c.pol == pol {
		if nd, ok := c.m.Load(name); ok {
			return nd.(policy.NameDecision)
		}
	}
	nd := pol.DecideName(name)
	if c == nil || c.pol != pol || c.n.Load() >= maxCachedDecisions {
		fresh := &decisionCache{pol: pol}
		if !d.cur.CompareAndSwap(c, fresh) {
			return nd // another query replaced it first; this decision is simply not cached
		}
		c = fresh
	}
	if _, loaded := c.m.LoadOrStore(name, nd); !loaded {
		c.n.Add(1)
	}
	return nd
}
