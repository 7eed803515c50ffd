package proxy

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDependencies holds the house rules on what this package may import (STYLE.md).
func TestDependencies(t *testing.T) {
	banned := map[string]string{
		"github.com/airlock-dev/airlock/dnsfilter":   "proxy, dnsfilter and llmproxy never import each other; cmd wires them",
		"github.com/airlock-dev/airlock/llmproxy":    "proxy, dnsfilter and llmproxy never import each other; cmd wires them",
		"github.com/airlock-dev/airlock/ebpf":        "the original destination comes through the OriginalDestination interface",
		"github.com/airlock-dev/airlock/sandbox":     "sandbox depends on proxy's neighbours, not the other way",
		"github.com/airlock-dev/airlock/cmd":         "nothing imports cmd",
		"github.com/airlock-dev/airlock/credentials": "credentials come through the Injector interface",
		"github.com/cilium/ebpf":                     "cilium/ebpf lives in ebpf only",
		"github.com/miekg/dns":                       "miekg/dns lives in dnsfilter only",
		"github.com/hashicorp/vault":                 "vault lives in credentials/vault only",
		"testing":                                    "production code never imports testing",
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for ban, why := range banned {
				if path == ban || strings.HasPrefix(path, ban+"/") {
					t.Errorf("%s imports %s: %s", name, path, why)
				}
			}
		}
	}
}
