package audit

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"testing"
)

// TestKindsListsEveryKind: Kinds holds every Kind constant declared in audit.go, so a
// rendering that places each kind (OCSF) cannot miss a new one.
func TestKindsListsEveryKind(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "audit.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []Kind
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); ok && id.Name == "Kind" {
				for _, val := range v.Values {
					lit := val.(*ast.BasicLit)
					declared = append(declared, Kind(lit.Value[1:len(lit.Value)-1]))
				}
			}
		}
	}
	if len(declared) == 0 || !slices.Equal(slices.Sorted(slices.Values(declared)), slices.Sorted(slices.Values(Kinds))) {
		t.Errorf("Kind constants %v, Kinds %v: want the same set", declared, Kinds)
	}
}
