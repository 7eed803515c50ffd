package depcheck

import (
	"slices"
	"strings"
	"testing"
)

// layers is the house's plan, bottom to top: a package imports only packages of its own layer or
// of layers below it (which ones exactly, `ours` says). The top level reads the same way: the
// contract, the data plane and the kernel, composition, lifecycle, the mains, then test/ and
// tools/. A package missing here fails the test: a new package states its layer when it is
// added.
var layers = [][]string{
	// The contract: what a policy says and what the audit trail records.
	{"policy", "audit"},
	// Leaves of the data plane and the kernel: the dial guard, the credential broker's
	// interfaces, the kernel enforcement, and small helpers that import nothing above them.
	{"egress", "credentials", "ebpf", "internal/trust", "internal/imagebuild", "llmproxy/translate",
		"proxy/internal/xconnect", "internal/crcline"},
	// The data plane, and what reads the contract's records.
	{"proxy", "dnsfilter", "llmproxy", "credentials/vault", "learn", "audit/ship", "audit/ocsf", "approval",
		"meter"},
	// The node agent, its protocol and the sidecar's client.
	{"internal/node"},
	// Composition: one running sidecar.
	{"internal/sidecar"},
	// Lifecycle: the manager starts sidecars (as processes) and sandboxes.
	{"sandbox", "sandbox/kube", "sandbox/image"},
	// What both mains share, then the mains.
	{"internal/cli"},
	{"cmd/airlock", "cmd/airlock-kube", "internal/imagebuild/airlockimage"},
}

// topLayers are the folders above every layer: they may import any package of ours but cmd/.
var topLayers = []string{"test/", "tools/"}

func layerOf(rel string) (int, bool) {
	for i, l := range layers {
		if slices.Contains(l, rel) {
			return i, true
		}
	}
	for _, top := range topLayers {
		if strings.HasPrefix(rel, top) {
			return len(layers), true
		}
	}
	return 0, false
}

func TestNoPackageImportsOneAboveIt(t *testing.T) {
	for _, p := range listPackages(t, "") {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		mine, ok := layerOf(rel)
		if !ok {
			t.Errorf("%s is in no layer: add it to layers in layers_test.go", rel)
			continue
		}
		for _, imp := range p.Imports {
			imp, ours := strings.CutPrefix(imp, module+"/")
			if !ours {
				continue
			}
			if theirs, ok := layerOf(imp); ok && theirs > mine {
				t.Errorf("%s (layer %d) imports %s (layer %d): an arrow that runs back up the layout", rel, mine, imp, theirs)
			}
		}
	}
}

// internal/ holds only what ships: a package there that nothing but tests and tools import
// belongs under test/ (or tools/).
func TestInternalHoldsOnlyWhatShips(t *testing.T) {
	pkgs := listPackages(t, "")
	importers := map[string][]string{}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for _, imp := range p.Imports {
			if imp, ok := strings.CutPrefix(imp, module+"/"); ok {
				importers[imp] = append(importers[imp], rel)
			}
		}
	}
	shipped := func(rel string) bool { return !strings.HasPrefix(rel, "test/") && !strings.HasPrefix(rel, "tools/") }
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if !strings.HasPrefix(rel, "internal/") || p.Name == "main" {
			continue
		}
		if !slices.ContainsFunc(importers[rel], shipped) {
			t.Errorf("%s is imported only by %v: internal/ holds what ships; move it under test/ or tools/", rel, importers[rel])
		}
	}
}
