package policy

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// This file reads the container-to-identity map of a pod: the airlock.dev/identities
// annotation the webhook checks, and the sidecar's --identity-containers flag it becomes.

// containerNameRE: a Kubernetes container name is a DNS-1123 label.
var containerNameRE = nameMatcher{max: 63, inner: "-"}

// ParseIdentityMap reads "CONTAINER=IDENTITY,..." (spaces around the items allowed): which
// identity of spec.identities each named container of a pod is. Container names are
// DNS-1123 labels, identity names follow spec.identities' rule, a container appears once,
// and several containers may share an identity. The empty string is an empty map. It
// checks the syntax only: CheckIdentityMap checks the identities against a policy.
func ParseIdentityMap(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, item := range strings.Split(s, ",") {
		c, id, ok := strings.Cut(strings.TrimSpace(item), "=")
		c, id = strings.TrimSpace(c), strings.TrimSpace(id)
		switch {
		case !ok:
			return nil, fmt.Errorf("%q: want CONTAINER=IDENTITY, e.g. reviewer=reviewer", strings.TrimSpace(item))
		case !containerNameRE.MatchString(c):
			return nil, fmt.Errorf("%q: container name %q is not a DNS-1123 label (lower-case letters, digits and '-', at most 63)", item, c)
		case !identityNameRE.MatchString(id):
			return nil, fmt.Errorf("%q: identity name %q is not one spec.identities allows (lower-case letters, digits and '-', at most 32)", item, id)
		case out[c] != "":
			return nil, fmt.Errorf("container %q is mapped twice (to %q and %q): give each container one identity", c, out[c], id)
		}
		out[c] = id
	}
	return out, nil
}

// FormatIdentityMap writes m as ParseIdentityMap reads it, sorted by container name.
func FormatIdentityMap(m map[string]string) string {
	items := make([]string, 0, len(m))
	for c, id := range m {
		items = append(items, c+"="+id)
	}
	slices.Sort(items)
	return strings.Join(items, ",")
}

// CheckIdentityMap checks that every identity m (container to identity) names is one of
// p's spec.identities; the error names the container, the identity and the ones p has.
func (p *Policy) CheckIdentityMap(m map[string]string) error {
	for _, c := range identityMapKeys(m) {
		if _, ok := p.Identity(m[c]); !ok {
			have := "no spec.identities"
			if names := p.IdentityNames(); len(names) > 0 {
				have = "its identities are " + strings.Join(names, ", ")
			}
			return fmt.Errorf("container %q is mapped to identity %q, which policy %q does not define (%s)", c, m[c], p.Name(), have)
		}
	}
	return nil
}

func identityMapKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// CheckIdentityMapSource is CheckIdentityMap for the policy file filename whose bytes are
// data (Parse's arguments): it parses the policy (its load errors are returned as they are)
// and, when an identity m names is not defined, returns a *LoadError at the file's
// spec.identities (at spec, or the document, when it has none), so the error names the
// file and line where the identity is missing. Identities come from the file itself: a
// parent cannot add any.
func CheckIdentityMapSource(filename string, data []byte, m map[string]string) (*Policy, error) {
	p, err := Parse(filename, data)
	if err != nil {
		return nil, err
	}
	if err := p.CheckIdentityMap(m); err != nil {
		e := &LoadError{File: filename, Field: "spec.identities", Err: ErrInvalidPolicy,
			Message: err.Error() + "; define it under spec.identities, or map the container to one that is"}
		if n := identitiesNode(data); n != nil {
			e.Line, e.Col = n.Line, n.Column
		}
		return nil, e
	}
	return p, nil
}

// identitiesNode returns the key node of spec.identities in a policy's YAML, else spec's,
// else the document's root; nil when data is not YAML (Parse has accepted it by then).
func identitiesNode(data []byte) *yaml.Node {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	spec := mappingKey(root, "spec")
	if spec == nil {
		return root
	}
	if ids := mappingKey(mappingValue(root, "spec"), "identities"); ids != nil {
		return ids
	}
	return spec
}

// mappingKey returns the key node of key in mapping m, or nil.
func mappingKey(m *yaml.Node, key string) *yaml.Node {
	if m == nil {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
			return k
		}
	}
	return nil
}
