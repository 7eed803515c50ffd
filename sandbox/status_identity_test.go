package sandbox

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A sandbox's status lists the identities that have run in it, by uid, with each one's
// model spend from the sidecar's /v1/usage (which outlives sidecar restarts).
func TestStatusIdentities(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz", "/metrics":
		case "/v1/usage":
			w.Write([]byte(`{"total":{"cost_usd":0.5},"identities":[{"identity":"reviewer","total":{"cost_usd":0.125}},{"identity":"author","total":{"cost_usd":0.25}}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	st := &State{Name: "s", Phase: PhaseReady, Dir: t.TempDir(), AdminAddr: strings.TrimPrefix(srv.URL, "http://"),
		IdentityUIDs: map[string]int{"reviewer": 20001, "author": 20000, "idle": 20002}}
	s := (&Manager{}).status(context.Background(), st, 5*time.Second)
	if s.Health != HealthOK || s.LLMSpendUSD != 0.5 {
		t.Fatalf("status: health %s spend %v", s.Health, s.LLMSpendUSD)
	}
	want := []IdentityStatus{{Name: "author", UID: 20000, LLMSpendUSD: 0.25}, {Name: "reviewer", UID: 20001, LLMSpendUSD: 0.125}, {Name: "idle", UID: 20002}}
	if len(s.Identities) != len(want) {
		t.Fatalf("identities %+v, want %+v", s.Identities, want)
	}
	for i := range want {
		if s.Identities[i] != want[i] {
			t.Errorf("identity %d = %+v, want %+v", i, s.Identities[i], want[i])
		}
	}
	// A sidecar that is down still lists who ran, without spend.
	srv.Close()
	if s := (&Manager{}).status(context.Background(), st, time.Second); s.Health != HealthDown || len(s.Identities) != 3 || s.Identities[0].LLMSpendUSD != 0 {
		t.Errorf("sidecar down: health %s identities %+v", s.Health, s.Identities)
	}
}
