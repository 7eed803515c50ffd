package ocsf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// schemaDir is the cited copy of the OCSF definitions (testdata/ocsf-schema-1.8.0/README.md).
var schemaDir = filepath.Join("testdata", "ocsf-schema-"+SchemaVersion)

// def is a class or object definition file of the schema.
type def struct {
	Name        string                     `json:"name"`
	Extends     string                     `json:"extends"`
	UID         int                        `json:"uid"`
	Category    string                     `json:"category"`
	Attributes  map[string]json.RawMessage `json:"attributes"`
	Constraints map[string][]string        `json:"constraints"`
}

type attrDef struct {
	Requirement string                     `json:"requirement"`
	Enum        map[string]json.RawMessage `json:"enum"`
	Type        string                     `json:"type"`
}

func readJSON(t *testing.T, rel string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(schemaDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

// merged is a definition with its extends chain folded in: the requirement and enum of
// each attribute (the nearest definition wins) and every constraint along the chain.
type merged struct {
	attrs       map[string]attrDef
	constraints []map[string][]string
	uid         int
	category    string
}

func load(t *testing.T, dir, name string) merged {
	t.Helper()
	m := merged{attrs: map[string]attrDef{}}
	for name != "" && name != "object" {
		var d def
		path := filepath.Join(dir, name+".json")
		if dir == "events" && name != "base_event" {
			path = filepath.Join("events", "network", name+".json")
		}
		readJSON(t, path, &d)
		for k, raw := range d.Attributes {
			if k == "$include" {
				continue
			}
			var a attrDef
			_ = json.Unmarshal(raw, &a)
			cur, seen := m.attrs[k]
			if !seen {
				m.attrs[k] = a
				continue
			}
			if cur.Requirement == "" {
				cur.Requirement = a.Requirement
			}
			if cur.Enum == nil {
				cur.Enum = a.Enum
			}
			m.attrs[k] = cur
		}
		if d.Constraints != nil && m.constraints == nil { // the nearest definition's constraints replace inherited ones
			m.constraints = append(m.constraints, d.Constraints)
		}
		if m.uid == 0 {
			m.uid = d.UID
		}
		if m.category == "" {
			m.category = d.Category
		}
		name = d.Extends
	}
	return m
}

// schema holds the dictionary (attribute types) and the category uids.
type schema struct {
	dict map[string]attrDef
	cats map[string]int
}

func loadSchema(t *testing.T) schema {
	t.Helper()
	var d struct {
		Attributes map[string]attrDef `json:"attributes"`
	}
	readJSON(t, "dictionary.json", &d)
	var c struct {
		Attributes map[string]struct {
			UID int `json:"uid"`
		} `json:"attributes"`
	}
	readJSON(t, "categories.json", &c)
	s := schema{dict: d.Attributes, cats: map[string]int{}}
	for k, v := range c.Attributes {
		s.cats[k] = v.UID
	}
	var v struct {
		Version string `json:"version"`
	}
	readJSON(t, "version.json", &v)
	if v.Version != SchemaVersion {
		t.Fatalf("testdata holds OCSF %s, SchemaVersion says %s", v.Version, SchemaVersion)
	}
	return s
}

// checkRequired reports every required attribute of m missing from obj, every constraint
// broken, and recurses into the objects obj carries.
func (s schema) checkRequired(t *testing.T, where string, m merged, obj map[string]any) (problems []string) {
	t.Helper()
	errorf := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	for k, a := range m.attrs {
		if a.Requirement == "required" && obj[k] == nil {
			errorf("%s: required attribute %q missing", where, k)
		}
	}
	for _, c := range m.constraints {
		for kind, names := range c {
			n := 0
			for _, k := range names {
				if obj[k] != nil {
					n++
				}
			}
			if (kind == "at_least_one" && n == 0) || (kind == "just_one" && n != 1) {
				errorf("%s: constraint %s of %v broken (%d present)", where, kind, names, n)
			}
		}
	}
	for k, v := range obj {
		typ := s.dict[k].Type
		if typ == "" || typ == "object" || strings.HasSuffix(typ, "_t") {
			continue
		}
		if _, err := os.Stat(filepath.Join(schemaDir, "objects", typ+".json")); err != nil {
			errorf("%s.%s: object %s is not among the copied definitions", where, k, typ)
			continue
		}
		sub := load(t, "objects", typ)
		switch v := v.(type) {
		case map[string]any:
			problems = append(problems, s.checkRequired(t, where+"."+k, sub, v)...)
		case []any:
			for _, item := range v {
				problems = append(problems, s.checkRequired(t, where+"."+k+"[]", sub, item.(map[string]any))...)
			}
		}
	}
	return problems
}

var classFiles = map[int]string{ClassNetworkActivity: "network_activity", ClassHTTPActivity: "http_activity", ClassDNSActivity: "dns_activity"}

// checkEvent checks one rendered event against its class's definition.
func (s schema) checkEvent(t *testing.T, ev map[string]any) (problems []string) {
	t.Helper()
	errorf := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	cls := int(ev["class_uid"].(float64))
	file, ok := classFiles[cls]
	if !ok {
		t.Fatalf("class_uid %d is not one of the classes used", cls)
	}
	m := load(t, "events", file)
	if want := s.cats[m.category]*1000 + m.uid; want != cls {
		errorf("class_uid %d, the schema says %s is %d", cls, file, want)
	}
	if got := int(ev["category_uid"].(float64)); got != s.cats[m.category] {
		errorf("category_uid %d, want %d", got, s.cats[m.category])
	}
	act := int(ev["activity_id"].(float64))
	if _, ok := m.attrs["activity_id"].Enum[jsonInt(act)]; !ok && act != 0 && act != 99 {
		errorf("%s: activity_id %d is not in the class's enum", file, act)
	}
	if got := int(ev["type_uid"].(float64)); got != cls*100+act {
		errorf("type_uid %d, want class_uid*100+activity_id = %d", got, cls*100+act)
	}
	for _, k := range []string{"severity_id", "action_id", "disposition_id", "status_id"} {
		if _, ok := s.dict[k].Enum[jsonInt(int(ev[k].(float64)))]; !ok {
			errorf("%s %v is not in the dictionary's enum", k, ev[k])
		}
	}
	if ev["metadata"].(map[string]any)["version"] != SchemaVersion {
		errorf("metadata.version %v, want %s", ev["metadata"].(map[string]any)["version"], SchemaVersion)
	}
	return append(problems, s.checkRequired(t, file, m, ev)...)
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

// nativeLines writes events through a real Logger and returns its chained lines.
func nativeLines(t *testing.T, events []audit.Event) [][]byte {
	t.Helper()
	var buf bytes.Buffer
	l, err := audit.New(audit.Options{Sandbox: "team-a.agent", Writer: &buf})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		l.Log(e)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte{'\n'})
}

func TestRenderedEventsHaveEveryRequiredFieldOfTheirClass(t *testing.T) {
	s := loadSchema(t)
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	events := []audit.Event{
		{Time: at, Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Rule: "github", Destination: "api.github.test:443", Addr: "198.18.0.10:443",
			Method: "GET", Path: "/repos/acme", Status: 200, BytesUp: 120, BytesDown: 4000, Duration: 30 * time.Millisecond, Client: "127.0.0.1:40000", RequestID: "r-1"},
		{Time: at, Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Reason: "no_rule", Detail: "no rule allows evil.test", Destination: "evil.test:443", Method: "POST", Path: "/", Status: 403},
		{Time: at, Kind: audit.KindHTTP, Decision: audit.DecisionReport, Reason: "no_rule", Destination: "maybe.test:80", Method: "BREW"},
		{Time: at, Kind: audit.KindConnect, Decision: audit.DecisionAllow, Destination: "pypi.test:443", Addr: "198.18.0.11:443", BytesUp: 10, BytesDown: 20},
		{Time: at, Kind: audit.KindConnect, Decision: audit.DecisionDeny, Reason: "internal_address", Destination: "10.0.0.1:5432", Count: 7},
		{Time: at, Kind: audit.KindDNS, Decision: audit.DecisionAllow, Destination: "pypi.test", Addr: "198.18.0.53:53", Detail: "answered A 198.18.0.11"},
		{Time: at, Kind: audit.KindDNS, Decision: audit.DecisionDeny, Reason: "no_rule", Destination: "exfil.evil.test"},
		{Time: at, Kind: audit.KindLLM, Decision: audit.DecisionAllow, Model: "gpt-4o-mini", Provider: "openai", Destination: "api.openai.test:443", Path: "/v1/chat/completions", Status: 200},
		{Time: at, Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Phase: audit.PhaseDecision, Destination: "api.github.test:443", Method: "GET"},
		{Time: at, Kind: audit.KindCredential, Decision: audit.DecisionAllow, Secrets: []string{"github-token"}},
		{Time: at, Kind: audit.KindPolicy, Decision: audit.DecisionAllow, Policy: "repo-write"},
	}
	lines := nativeLines(t, events)
	if len(lines) != len(events) {
		t.Fatalf("%d native lines, want %d", len(lines), len(events))
	}
	rendered := map[audit.Kind]int{}
	for i, line := range lines {
		e := events[i]
		out, err := Render(line, "test")
		_, exported := Classes[e.Kind]
		if !exported || e.Phase == audit.PhaseDecision {
			if !errors.Is(err, ErrSkipped) {
				t.Errorf("%s (phase %q): %v, want ErrSkipped", e.Kind, e.Phase, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("render %s: %v", line, err)
		}
		var ev map[string]any
		if err := json.Unmarshal(out, &ev); err != nil {
			t.Fatal(err)
		}
		t.Run(string(e.Kind)+"-"+e.Decision, func(t *testing.T) {
			for _, p := range s.checkEvent(t, ev) {
				t.Error(p)
			}
			a := ev["unmapped"].(map[string]any)["airlock"].(map[string]any)
			sum := sha256.Sum256(line)
			if int(a["seq"].(float64)) != i+1 || a["hash"] != hex.EncodeToString(sum[:]) || a["prev"] == "" {
				t.Errorf("unmapped.airlock %v: want native seq %d and the line's hash", a, i+1)
			}
			if e.Reason != "" && (a["reason"] != e.Reason || a["remedy"] == nil) {
				t.Errorf("unmapped.airlock %v: want reason %s and its remedy", a, e.Reason)
			}
			if e.Decision == audit.DecisionDeny && ev["disposition_id"].(float64) != 2 {
				t.Errorf("a denial rendered with disposition %v", ev["disposition"])
			}
		})
		rendered[e.Kind]++
	}
	for k := range Classes {
		if rendered[k] == 0 {
			t.Errorf("kind %s maps to a class but was not rendered", k)
		}
	}
}

// Every native kind is either rendered or listed as not exported, never both.
func TestEveryKindMapsOrIsListed(t *testing.T) {
	for _, k := range audit.Kinds {
		_, mapped := Classes[k]
		_, listed := NotExported[k]
		if mapped == listed {
			t.Errorf("kind %s: mapped=%v, listed as not exported=%v; want exactly one", k, mapped, listed)
		}
	}
}

// The checker itself finds what the schema requires: an event stripped of a required
// attribute, of a required object field, or of both members of an at_least_one constraint
// is reported.
func TestCheckerFindsMissingRequiredFields(t *testing.T) {
	s := loadSchema(t)
	lines := nativeLines(t, []audit.Event{{Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Destination: "a.test:443", Method: "GET", Status: 200}})
	for _, tc := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"no time", func(ev map[string]any) { delete(ev, "time") }, `required attribute "time"`},
		{"no metadata.product", func(ev map[string]any) { delete(ev["metadata"].(map[string]any), "product") }, `http_activity.metadata: required attribute "product"`},
		{"no request nor response", func(ev map[string]any) { delete(ev, "http_request"); delete(ev, "http_response") }, "at_least_one of [http_request http_response]"},
		{"no response code", func(ev map[string]any) { delete(ev["http_response"].(map[string]any), "code") }, `http_response: required attribute "code"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Render(lines[0], "test")
			if err != nil {
				t.Fatal(err)
			}
			var ev map[string]any
			if err := json.Unmarshal(out, &ev); err != nil {
				t.Fatal(err)
			}
			if p := s.checkEvent(t, ev); len(p) != 0 {
				t.Fatalf("before the edit: %v", p)
			}
			tc.edit(ev)
			p := s.checkEvent(t, ev)
			if !strings.Contains(strings.Join(p, "\n"), tc.want) {
				t.Errorf("problems %q, want one saying %s", p, tc.want)
			}
		})
	}
}
