package depcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function may be, from its func line to its closing brace
// (STYLE.md: a function past ~60 lines is a sign to split by responsibility).
const maxFuncLines = 80

// lengthChecked are the directories (with their subdirectories) whose functions are held to
// maxFuncLines: cmd, the sidecar's wiring and the packages it wires.
var lengthChecked = []string{
	"cmd", "internal/sidecar", "proxy", "dnsfilter", "llmproxy", "ebpf", "credentials",
	"egress", "audit", "policy", "approval",
}

// longExempt are the functions known to be too long, each with why it is not split here.
// Remove an entry when its function is split.
var longExempt = map[string]string{}

func TestFunctionLength(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, dir := range lengthChecked {
		base := filepath.Join(root, dir)
		if _, err := os.Stat(base); os.IsNotExist(err) {
			continue // a package another branch adds
		}
		err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			checkFuncLengths(t, root, path)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// checkFuncLengths reports every function of a (non-generated) file longer than
// maxFuncLines.
func checkFuncLengths(t *testing.T, root, path string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	if ast.IsGenerated(f) {
		return // bpf2go output
	}
	rel, _ := filepath.Rel(root, path)
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start, end := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
		if _, ok := longExempt[filepath.ToSlash(rel)+":"+funcName(fn)]; ok {
			continue
		}
		if n := end - start + 1; n > maxFuncLines {
			t.Errorf("%s:%d: %s is %d lines, more than %d: split it by responsibility", rel, start, funcName(fn), n, maxFuncLines)
		}
	}
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if idx, ok := typ.(*ast.IndexExpr); ok {
		typ = idx.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
