package kube

import (
	"strconv"
	"strings"
)

// PatchOp is one RFC 6902 JSON Patch operation. The webhook adds (which replaces an existing
// member) and removes its own scheduling gate.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// pointer builds an RFC 6901 JSON Pointer from reference tokens, escaping "~" as "~0" and
// "/" as "~1" (in that order, RFC 6901 section 3): label and annotation keys such as
// "airlock.dev/injected" contain "/".
func pointer(tokens ...string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

// index is an array index token.
func index(i int) string { return strconv.Itoa(i) }

// add is an "add" operation: it creates the member or replaces an existing one (RFC 6902
// section 4.1), and inserts before the index in an array ("-" appends).
func add(path string, v any) PatchOp { return PatchOp{Op: "add", Path: path, Value: v} }

// remove is a "remove" operation (RFC 6902 section 4.2).
func remove(path string) PatchOp { return PatchOp{Op: "remove", Path: path} }
