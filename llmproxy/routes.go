package llmproxy

import (
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// route is one model of the policy, resolved against its provider.
type route struct {
	name      string // the model name the sandbox sends
	upstream  string // the model name sent to the provider
	provider  string // key of llm.providers
	ptype     policy.ProviderType
	base      *url.URL
	apiKey    string // secret name; "" sends no key
	price     policy.Price
	maxOut    int64 // output cap, defaults applied
	fallbacks []*route

	allowInternal             bool
	connect, firstByte, chunk time.Duration
	retries                   int
}

// family is the wire format the route's provider speaks.
func (r *route) family() family {
	if r.ptype == policy.ProviderAnthropic {
		return familyAnthropic
	}
	return familyOpenAI
}

// routeTable is the compiled llm section of one policy.
type routeTable struct {
	pol        *policy.Policy
	models     map[string]*route
	names      []string // model names in policy order
	budget     policy.Budget
	logPrompts bool
	// own is an identity's own budget caps (spec.identities.NAME.llm.budget), charged
	// beside budget, the sandbox's; zero for the sandbox's own calls.
	own policy.Budget
}

// routesCache holds the table of the policy in force, rebuilt when the policy changes.
type routesCache struct {
	cur atomic.Pointer[routeTable]
}

// get returns the table for pol, building it if pol is not the cached one.
func (c *routesCache) get(pol *policy.Policy) *routeTable {
	if t := c.cur.Load(); t != nil && t.pol == pol {
		return t
	}
	t := buildRoutes(pol)
	c.cur.Store(t)
	return t
}

// buildRoutes compiles pol's llm section. The policy was validated, so every model names a
// defined provider with a well-formed base URL; a model that still does not resolve is left
// out (denied), never guessed.
func buildRoutes(pol *policy.Policy) *routeTable {
	c := pol.LLM()
	t := &routeTable{pol: pol, models: make(map[string]*route, len(c.Models)), budget: c.Budget, logPrompts: c.LogPrompts}
	for _, m := range c.Models {
		p, ok := c.Providers[m.Provider]
		if !ok {
			continue
		}
		base, err := url.Parse(strings.TrimRight(p.BaseURL, "/"))
		if err != nil {
			continue
		}
		r := &route{name: m.Name, upstream: m.UpstreamModel, provider: m.Provider, ptype: p.EffectiveType(m.Provider),
			base: base, apiKey: p.APIKey.Secret, price: m.Price, maxOut: m.MaxOutputTokens,
			allowInternal: p.AllowInternal, connect: p.ConnectTimeout, firstByte: p.FirstByteTimeout,
			chunk: p.ChunkTimeout, retries: p.Retries}
		if r.upstream == "" {
			r.upstream = m.Name
		}
		if r.maxOut == 0 {
			r.maxOut = policy.DefaultMaxOutputTokens
		}
		r.connect = orDefault(r.connect, DefaultConnectTimeout)
		r.firstByte = orDefault(r.firstByte, DefaultFirstByteTimeout)
		r.chunk = orDefault(r.chunk, DefaultChunkTimeout)
		switch r.retries {
		case 0:
			r.retries = DefaultRetries
		case -1:
			r.retries = 0
		}
		t.models[m.Name] = r
		t.names = append(t.names, m.Name)
	}
	for _, m := range c.Models {
		r := t.models[m.Name]
		if r == nil {
			continue
		}
		for _, f := range m.Fallbacks {
			if fr := t.models[f]; fr != nil && fr.family() == r.family() && !slices.Contains(r.fallbacks, fr) {
				r.fallbacks = append(r.fallbacks, fr)
			}
		}
	}
	return t
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// upstreamURL is the provider URL for an API path such as "/v1/chat/completions": the base
// URL's path is prefixed, and a base URL that already ends in "/v1" (as OpenAI-compatible
// servers are often written, "http://vllm:8000/v1") does not get a second one.
func (r *route) upstreamURL(path string) string {
	u := *r.base
	if strings.HasSuffix(u.Path, "/v1") {
		path = strings.TrimPrefix(path, "/v1")
	}
	u.Path += path
	u.RawPath = ""
	return u.String()
}

// candidates returns the route and its fallbacks, in order.
func (r *route) candidates() []*route {
	return append([]*route{r}, r.fallbacks...)
}
