package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// maxFileSize bounds a policy file; real policies are a few kilobytes.
const maxFileSize = 1 << 20

// maxExtendsDepth bounds a chain of extends (cycles are rejected separately).
const maxExtendsDepth = 16

// loader loads policy files and their parents.
type loader struct {
	// readFile reads a policy file. Nil means files are off limits: only built-in profiles
	// can be extended (used for built-ins and by the fuzzer).
	readFile func(path string) ([]byte, error)
}

// Load reads, strictly decodes, compiles and validates the policy file at path, with the
// parents it extends. Errors are *LoadError (possibly several, joined with errors.Join and
// sorted by file and position); they unwrap to ErrInvalidPolicy, or to the I/O error (e.g.
// fs.ErrNotExist) when path cannot be read. The package documentation describes the stages
// and the semantics of extends.
func Load(path string) (*Policy, error) {
	l := &loader{readFile: readFileLimited}
	data, err := l.readFile(path)
	if err != nil {
		return nil, &LoadError{File: path, Message: fmt.Sprintf("cannot read policy: %v", err), Err: err}
	}
	return l.parse(path, data, []string{fileKey(path)})
}

// Parse is Load on bytes; filename is used in errors and to resolve file parents
// ("./base.yaml" is read from filename's directory).
func Parse(filename string, data []byte) (*Policy, error) {
	l := &loader{readFile: readFileLimited}
	return l.parse(filename, data, []string{fileKey(filename)})
}

// readFileLimited reads a file of at most maxFileSize bytes.
func readFileLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("read %s: larger than %d bytes: %w", path, maxFileSize, ErrInvalidPolicy)
	}
	return data, nil
}

// fileKey identifies a file in an extends chain.
func fileKey(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return filepath.Clean(path)
}

// parse runs the whole pipeline on one file: syntax → version check → strict decode →
// parents → compile → extends → validate. chain holds the keys of the files being loaded,
// this one last, to catch extends cycles.
func (l *loader) parse(source string, data []byte, chain []string) (*Policy, error) {
	d := newDecoder(source)
	root := parseYAML(d, data)
	if root == nil || !checkVersion(d, root) {
		return nil, joinErrors(d.errs)
	}
	var doc Document
	d.decode(root, reflect.ValueOf(&doc).Elem(), "")
	parents, parentsOK := l.loadParents(d, doc.Spec.Extends, source, chain)
	p := &Policy{name: doc.Metadata.Name, source: source, parents: parents}
	p.mode = compileMeta(d, &doc)
	p.interceptAll = doc.Spec.Report.InterceptAll && p.mode == ModeReport
	compileDNS(d, doc.Spec.DNS)
	compileSecrets(d, doc.Spec.Secrets)
	compileLLM(d, doc.Spec.LLM)
	compileUsage(d, doc.Spec.Usage)
	own := compileRules(d, doc.Spec.Egress, p.name)
	never := compileApproval(d, doc.Spec.Approval)
	if !parentsOK {
		p.parents = nil // the narrowing checks would only add noise
	}
	inherit(d, p, &doc, own)
	inheritApproval(d, p, doc.Spec.Approval, never)
	p.usage = inheritUsage(d, p.parents, doc.Spec.Usage)
	validateRefs(d, &doc, p.secrets, p.llm.Providers)
	if len(d.errs) > 0 {
		return nil, joinErrors(d.errs)
	}
	return p, nil
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML parses data as exactly one YAML document and returns its root node, or nil after
// recording why not.
func parseYAML(d *decoder, data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.failf(&yaml.Node{Line: 1, Column: 1}, "", "empty policy; a policy starts with apiVersion: %s", APIVersion)
		} else {
			syntaxError(d, err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		syntaxError(d, err)
		return nil
	default:
		d.failf(&extra, "", "a second YAML document starts here; a policy file holds exactly one (remove the \"---\")")
		return nil
	}
	if len(doc.Content) == 0 {
		d.failf(&doc, "", "empty policy; a policy starts with apiVersion: %s", APIVersion)
		return nil
	}
	return doc.Content[0]
}

// syntaxError records a YAML syntax error, with its line when yaml.v3 gives one.
func syntaxError(d *decoder, err error) {
	n := &yaml.Node{}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		n.Line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	d.failf(n, "", "invalid YAML: %s", msg)
}

// checkVersion checks apiVersion and kind before anything else is decoded: a document of
// another version must not be read with this version's schema.
func checkVersion(d *decoder, root *yaml.Node) bool {
	if root.Kind != yaml.MappingNode {
		d.failf(root, "", "a policy is a mapping that starts with apiVersion: %s, not %s", APIVersion, describe(root))
		return false
	}
	ok := true
	for _, want := range [][2]string{{"apiVersion", APIVersion}, {"kind", Kind}} {
		v := mappingValue(root, want[0])
		switch {
		case v == nil:
			d.failf(root, want[0], "required; add %s: %s", want[0], want[1])
			ok = false
		case v.Kind != yaml.ScalarNode || v.Value != want[1]:
			got := v.Value
			if v.Kind != yaml.ScalarNode {
				got = describe(v)
			}
			d.failf(v, want[0], "unsupported %s %q; use %q", want[0], got, want[1])
			ok = false
		}
	}
	return ok
}

// mappingValue returns the value of the first key named key in a mapping node, or nil.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// loadParents loads the parents named in spec.extends. ok is false when one of them could
// not be loaded (the errors are recorded).
func (l *loader) loadParents(d *decoder, extends []string, source string, chain []string) (parents []*Policy, ok bool) {
	ok = true
	for i, name := range extends {
		field := joinIndex("spec.extends", i)
		if slices.Contains(extends[:i], name) {
			d.errorf(field, "%q is listed twice; remove one", name)
			continue
		}
		p := l.loadParent(d, name, field, source, chain)
		if p == nil {
			ok = false
			continue
		}
		parents = append(parents, p)
	}
	return parents, ok
}

// isFileRef reports whether an extends entry names a file rather than a built-in profile.
func isFileRef(name string) bool {
	return strings.ContainsAny(name, `/\`) || strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// loadParent loads one parent: a built-in profile or a file relative to the child's.
func (l *loader) loadParent(d *decoder, name, field, source string, chain []string) *Policy {
	var key, psource string
	var data []byte
	switch {
	case name == "":
		d.errorf(field, "empty parent; name a profile (%s) or a file", strings.Join(BuiltinNames(), ", "))
		return nil
	case len(chain) >= maxExtendsDepth:
		d.errorf(field, "extends chain is deeper than %d policies", maxExtendsDepth)
		return nil
	case isFileRef(name):
		if l.readFile == nil {
			d.errorf(field, "a built-in profile cannot extend a file")
			return nil
		}
		psource = name
		if !filepath.IsAbs(name) {
			psource = filepath.Join(filepath.Dir(source), name)
		}
		key = fileKey(psource)
	default:
		var ok bool
		if data, ok = profileData(name); !ok {
			d.errorf(field, "%s", unknownProfile(name))
			return nil
		}
		key, psource = "builtin:"+name, "builtin:"+name
	}
	if i := slices.Index(chain, key); i >= 0 {
		d.errorf(field, "extends cycle: %s; remove one of the extends", cycleText(append(slices.Clone(chain[i:]), key)))
		return nil
	}
	if data == nil {
		var err error
		if data, err = l.readFile(psource); err != nil {
			d.errorf(field, "cannot read parent %q: %v", name, err)
			return nil
		}
	}
	p, err := l.parse(psource, data, append(slices.Clone(chain), key))
	if err != nil {
		d.errs = append(d.errs, loadErrors(err)...)
		d.errorf(field, "parent %q does not load; fix its errors first", name)
		return nil
	}
	return p
}

// unknownProfile is the message for an extends entry that is neither a profile nor a file.
func unknownProfile(name string) string {
	if s := suggest(name, BuiltinNames()); s != "" {
		return fmt.Sprintf("unknown profile %q; did you mean %q?", name, s)
	}
	return fmt.Sprintf("unknown profile %q; use one of %s, or a file path such as \"./base.yaml\"",
		name, strings.Join(BuiltinNames(), ", "))
}

// cycleText prints an extends cycle by file base names and profile names.
func cycleText(keys []string) string {
	names := make([]string, len(keys))
	for i, k := range keys {
		if n, ok := strings.CutPrefix(k, "builtin:"); ok {
			names[i] = n
		} else {
			names[i] = filepath.Base(k)
		}
	}
	return strings.Join(names, " → ")
}

// loadErrors flattens an error of this package's loader into its *LoadErrors.
func loadErrors(err error) []*LoadError {
	switch e := err.(type) {
	case *LoadError:
		return []*LoadError{e}
	case interface{ Unwrap() []error }:
		var out []*LoadError
		for _, inner := range e.Unwrap() {
			out = append(out, loadErrors(inner)...)
		}
		return out
	}
	return []*LoadError{{Message: err.Error(), Err: err}}
}
