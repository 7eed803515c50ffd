package policy

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseIdentityMap(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]string
		err      string
	}{
		{"empty", "", map[string]string{}, ""},
		{"two", "reviewer=reviewer, author = author", map[string]string{"reviewer": "reviewer", "author": "author"}, ""},
		{"shared identity", "a=x,b=x", map[string]string{"a": "x", "b": "x"}, ""},
		{"no equals", "reviewer", nil, "want CONTAINER=IDENTITY"},
		{"empty item", "a=x,", nil, "want CONTAINER=IDENTITY"},
		{"upper-case container", "Reviewer=reviewer", nil, "not a DNS-1123 label"},
		{"identity too long", "a=" + strings.Repeat("x", 33), nil, "not one spec.identities allows"},
		{"identity with a slash", "a=../x", nil, "not one spec.identities allows"},
		{"container twice", "a=x,a=y", nil, `container "a" is mapped twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseIdentityMap(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
			if back, err := ParseIdentityMap(FormatIdentityMap(got)); err != nil || !reflect.DeepEqual(back, got) {
				t.Errorf("FormatIdentityMap(%v) = %q reads back as %v, %v", got, FormatIdentityMap(got), back, err)
			}
		})
	}
}

func TestCheckIdentityMap(t *testing.T) {
	p, err := Parse("p.yaml", []byte(`apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: two}
spec:
  egress: [{name: a, hosts: [a.test]}]
  identities: {reviewer: {}, author: {}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckIdentityMap(map[string]string{"r": "reviewer", "w": "author"}); err != nil {
		t.Errorf("defined identities: %v", err)
	}
	err = p.CheckIdentityMap(map[string]string{"r": "reviewer", "x": "admin"})
	if err == nil || !strings.Contains(err.Error(), `container "x" is mapped to identity "admin", which policy "two" does not define (its identities are author, reviewer)`) {
		t.Errorf("undefined identity: %v", err)
	}
	plain, err := Parse("p.yaml", []byte("apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: plain}\nspec:\n  egress: [{name: a, hosts: [a.test]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.CheckIdentityMap(map[string]string{"r": "reviewer"}); err == nil || !strings.Contains(err.Error(), "no spec.identities") {
		t.Errorf("a policy without identities: %v", err)
	}
	if err := plain.CheckIdentityMap(nil); err != nil {
		t.Errorf("no map: %v", err)
	}
}

// TestCheckIdentityMapSource: an identity the file lacks is reported at the file's
// spec.identities (or spec when it has none), with the file's name and line; a file that
// does not load reports its own load error.
func TestCheckIdentityMapSource(t *testing.T) {
	withIDs := "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: two}\nspec:\n  egress: [{name: a, hosts: [a.test]}]\n  identities:\n    reviewer: {}\n"
	withoutIDs := "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: none}\nspec:\n  egress: [{name: a, hosts: [a.test]}]\n"
	for _, tc := range []struct {
		name, data string
		m          map[string]string
		err        string
	}{
		{"defined", withIDs, map[string]string{"r": "reviewer"}, ""},
		{"missing", withIDs, map[string]string{"r": "reviewer", "w": "author"},
			`p.yaml:6:3: spec.identities: container "w" is mapped to identity "author", which policy "two" does not define (its identities are reviewer); define it under spec.identities`},
		{"no identities", withoutIDs, map[string]string{"w": "author"},
			`p.yaml:4:1: spec.identities: container "w" is mapped to identity "author", which policy "none" does not define (no spec.identities)`},
		{"invalid policy", "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: x}\nspec: {mode: sometimes}\n", map[string]string{"w": "author"}, "p.yaml:4:14: spec.mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := CheckIdentityMapSource("p.yaml", []byte(tc.data), tc.m)
			if tc.err == "" {
				if err != nil || p == nil {
					t.Fatalf("got %v, %v; want the policy", p, err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
				t.Fatalf("got %v; want an error starting %q", err, tc.err)
			}
		})
	}
}
