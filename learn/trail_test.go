package learn

import (
	"strings"
	"testing"
)

// TestReadTrailOneEventPerRequest: an allowed request's decision event and its canonical
// event count once (the canonical one), and a flood summary counts as its count of denials.
func TestReadTrailOneEventPerRequest(t *testing.T) {
	const trail = `{"time":"2026-11-23T20:00:01Z","sandbox":"sb","kind":"http","decision":"allow","rule":"api","reason":"rule_matched","destination":"api.test:443","method":"GET","path":"/v1/a","request_id":"r1","phase":"decision","level":"info","msg":"audit"}
{"time":"2026-11-23T20:00:02Z","sandbox":"sb","kind":"http","decision":"allow","rule":"api","reason":"rule_matched","destination":"api.test:443","method":"GET","path":"/v1/a","status":200,"request_id":"r1","level":"info","msg":"audit"}
{"time":"2026-11-23T20:00:03Z","sandbox":"sb","kind":"http","decision":"allow","rule":"api","reason":"rule_matched","destination":"api.test:443","method":"GET","path":"/v1/b","request_id":"r2","phase":"decision","level":"info","msg":"audit"}
{"time":"2026-11-23T20:00:04Z","sandbox":"sb","kind":"http","decision":"deny","rule":"","reason":"no_rule","destination":"evil.test:80","method":"GET","path":"/","status":403,"request_id":"r3","count":5,"level":"info","msg":"audit"}
`
	recs, err := ReadTrail(strings.NewReader(trail), "audit.log")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Source+" "+r.Event.RequestID+" "+r.Event.Phase)
	}
	if want := []string{"audit.log:2 r1 ", "audit.log:4 r3 "}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("ReadTrail kept %q, want %q", got, want)
	}
	l := &learner{}
	l.all.add(recs[1].Event.Time, weight(recs[1].Event))
	if l.all.count != 5 {
		t.Errorf("a flood summary of 5 denials counted %d", l.all.count)
	}
}
