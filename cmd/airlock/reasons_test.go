package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

// TestKernelDenyReasonsAreCatalogued checks that every ebpf.DenyReason constant, as the audit
// event carries it (policy.KernelReason), has an entry in the reason catalogue. It reads the
// constants from the ebpf package's source, so a new kernel reason cannot be forgotten.
func TestKernelDenyReasonsAreCatalogued(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../ebpf/events.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found int
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "DenyReason" {
			return true
		}
		for i, v := range vs.Values {
			lit, ok := v.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Fatalf("%s: DenyReason constant is not a string literal", vs.Names[i].Name)
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			found++
			code := policy.KernelReason(s)
			info, ok := code.Info()
			if !ok {
				t.Errorf("ebpf.%s (%q): audit reason %q is not in the reason catalogue", vs.Names[i].Name, s, code)
				continue
			}
			if info.Emitter != policy.EmitKernel {
				t.Errorf("%s: emitter %q, want %q", code, info.Emitter, policy.EmitKernel)
			}
		}
		return true
	})
	if found == 0 {
		t.Fatal("found no ebpf.DenyReason constants in ebpf/events.go")
	}
}
