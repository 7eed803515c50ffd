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
