package policy

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// This file is the strict decoder: it maps a yaml.v3 node tree onto the schema structs by
// their `yaml` tags and rejects, with the node's position, what a loose decoder would let
// through: unknown fields, wrong types, duplicate keys, aliases and non-standard tags. It
// records the position of every value it visits so that later stages (compile, validate,
// extends) can point at the field they complain about.

// pos is a 1-based line and column in a file.
type pos struct{ line, col int }

// decoder collects errors and positions while decoding one file.
type decoder struct {
	file string
	errs []*LoadError
	// pos holds the position of each visited value by field path.
	pos map[string]pos
	// failed holds the field paths that had a decode error; compile and validate errors on
	// these paths, their parents or their children are noise and are dropped.
	failed []string
}

func newDecoder(file string) *decoder {
	return &decoder{file: file, pos: make(map[string]pos)}
}

var durationType = reflect.TypeFor[time.Duration]()

// failf records a decode error at node n.
func (d *decoder) failf(n *yaml.Node, path, format string, args ...any) {
	d.failed = append(d.failed, path)
	d.errs = append(d.errs, &LoadError{File: d.file, Line: n.Line, Col: n.Column, Field: path,
		Message: fmt.Sprintf(format, args...), Err: ErrInvalidPolicy})
}

// at returns the position recorded for path, or for its nearest recorded ancestor.
func (d *decoder) at(path string) pos {
	for path != "" {
		if p, ok := d.pos[path]; ok {
			return p
		}
		path = parentPath(path)
	}
	return pos{}
}

// parentPath strips the last component of a field path: "a.b[2]" → "a.b" → "a" → "".
func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return ""
}

// related reports whether a and b are the same field path or one contains the other.
func related(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	return a == b || a == "" || (strings.HasPrefix(b, a) && (b[len(a)] == '.' || b[len(a)] == '['))
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// joinKey appends a map key or field name to a path, quoting keys that are not plain.
func joinKey(path, key string) string {
	if !plainKey.MatchString(key) {
		return fmt.Sprintf("%s[%q]", path, key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// joinIndex appends a list index to a path.
func joinIndex(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// decode maps node n onto v, which must be settable.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	d.pos[path] = pos{n.Line, n.Column}
	if n.Kind == yaml.AliasNode {
		d.failf(n, path, "aliases (*%s) are not supported in a policy; write the value out", n.Value)
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // the zero value; required fields are checked later
	}
	switch {
	case v.Type() == durationType:
		d.duration(n, v, path)
	case v.Kind() == reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		d.decode(n, v.Elem(), path)
	case v.Kind() == reflect.Struct:
		d.structure(n, v, path)
	case v.Kind() == reflect.Map:
		d.mapping(n, v, path)
	case v.Kind() == reflect.Slice:
		d.sequence(n, v, path)
	default:
		d.scalar(n, v, path)
	}
}

// describe names what a node is, for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	switch n.ShortTag() {
	case "!!str":
		return fmt.Sprintf("a string (%q)", n.Value)
	case "!!int":
		return fmt.Sprintf("an integer (%s)", n.Value)
	case "!!float":
		return fmt.Sprintf("a number (%s)", n.Value)
	case "!!bool":
		return fmt.Sprintf("a boolean (%s)", n.Value)
	case "!!null":
		return "null"
	}
	return fmt.Sprintf("a value tagged %s", n.Tag)
}

// checkTag rejects explicit tags other than the standard one of the node's kind.
func (d *decoder) checkTag(n *yaml.Node, path, want string) bool {
	if n.ShortTag() != want {
		d.failf(n, path, "unsupported tag %s; remove it", n.Tag)
		return false
	}
	return true
}

// yamlFields lists the `yaml` tag names of a struct type's fields, in declaration order.
func yamlFields(t reflect.Type) []string {
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// fieldByTag returns the field of struct v whose yaml tag is name.
func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// pairs walks the key/value pairs of a mapping node, rejecting non-string and duplicate keys,
// and calls fn for each good pair.
func (d *decoder) pairs(n *yaml.Node, path string, fn func(key string, k, val *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		d.failf(n, path, "want a mapping, got %s", describe(n))
		return
	}
	if !d.checkTag(n, path, "!!map") {
		return
	}
	seen := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!null" {
			d.failf(k, path, "keys must be plain strings, got %s", describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			d.failf(k, path, "merge keys (<<) are not supported in a policy; write the fields out")
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.failf(k, joinKey(path, k.Value), "duplicate key %q (first at line %d); remove one", k.Value, first.Line)
			continue
		}
		seen[k.Value] = k
		fn(k.Value, k, val)
		if val.Kind == yaml.MappingNode || val.Kind == yaml.SequenceNode {
			// Errors about a whole mapping or list read best at its key.
			d.pos[joinKey(path, k.Value)] = pos{k.Line, k.Column}
		}
	}
}

// structure decodes a mapping node onto a struct, rejecting unknown fields.
func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	d.pairs(n, path, func(key string, k, val *yaml.Node) {
		f, ok := fieldByTag(v, key)
		if !ok {
			d.failf(k, joinKey(path, key), "%s", unknownField(key, yamlFields(v.Type())))
			return
		}
		d.decode(val, f, joinKey(path, key))
	})
}

// unknownField builds the message for an unknown key, with the closest known one.
func unknownField(key string, known []string) string {
	if s := suggest(key, known); s != "" {
		return fmt.Sprintf("unknown field %q; did you mean %q?", key, s)
	}
	return fmt.Sprintf("unknown field %q; known fields: %s", key, strings.Join(known, ", "))
}

// mapping decodes a mapping node onto a map with string keys.
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	d.pairs(n, path, func(key string, _, val *yaml.Node) {
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(val, elem, joinKey(path, key))
		v.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), elem)
	})
}

// sequence decodes a sequence node onto a slice.
func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		hint := ""
		if n.Kind == yaml.ScalarNode {
			hint = fmt.Sprintf("; write a list: [%s]", n.Value)
		}
		d.failf(n, path, "want a list, got %s%s", describe(n), hint)
		return
	}
	if !d.checkTag(n, path, "!!seq") {
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		d.decode(item, s.Index(i), joinIndex(path, i))
	}
	v.Set(s)
}

// scalar decodes a scalar node onto a string, integer, float or boolean.
func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string) {
	var want, tag string
	switch v.Kind() {
	case reflect.String:
		want, tag = "a string", "!!str"
	case reflect.Int, reflect.Int64:
		want, tag = "an integer", "!!int"
	case reflect.Float64:
		want, tag = "a number", "!!float"
	case reflect.Bool:
		want, tag = "true or false", "!!bool"
	default:
		panic(fmt.Sprintf("policy: no decoder for %s at %s", v.Type(), path)) // a schema bug
	}
	got := n.ShortTag()
	if n.Kind != yaml.ScalarNode || (got != tag && !(tag == "!!float" && got == "!!int")) {
		hint := ""
		if tag == "!!str" && n.Kind == yaml.ScalarNode {
			hint = fmt.Sprintf("; quote it: %q", n.Value)
		}
		d.failf(n, path, "want %s, got %s%s", want, describe(n), hint)
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(n.Value)
	case reflect.Int, reflect.Int64:
		var i int64
		if err := n.Decode(&i); err != nil {
			d.failf(n, path, "integer %s is out of range", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		var f float64
		if err := n.Decode(&f); err != nil {
			d.failf(n, path, "invalid number %s", n.Value)
			return
		}
		v.SetFloat(f)
	case reflect.Bool:
		var b bool
		if err := n.Decode(&b); err != nil {
			d.failf(n, path, "want true or false, got %s", describe(n))
			return
		}
		v.SetBool(b)
	}
}

// duration decodes a Go duration string ("5s", "1m30s").
func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.failf(n, path, "want a duration such as \"5s\", got %s", describe(n))
		return
	}
	if n.ShortTag() == "!!int" {
		d.failf(n, path, "a duration needs a unit; use \"%ss\"", n.Value)
		return
	}
	dur, err := time.ParseDuration(n.Value)
	if err != nil || n.ShortTag() != "!!str" {
		d.failf(n, path, "invalid duration %q; use a Go duration such as \"5s\" or \"1m\"", n.Value)
		return
	}
	v.SetInt(int64(dur))
}
