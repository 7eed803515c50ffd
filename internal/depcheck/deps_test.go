package depcheck

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/airlock-dev/airlock"

// pkg is the part of `go list -json` this test reads.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	return pkgs
}

// rule bans importers outside allowed from importing (directly) any path with prefix banned.
type rule struct {
	banned  string
	allowed []string // import paths (relative to the module) that may import it
	why     string
}

var rules = []rule{
	{"github.com/elazarl/goproxy", []string{"proxy"}, "goproxy lives in proxy only"},
	{"github.com/miekg/dns", []string{"dnsfilter", "internal/testnet", "internal/demo"}, "miekg/dns lives in dnsfilter (and the outside resolver the tests and the demo play) only"},
	{"github.com/cilium/ebpf", []string{"ebpf"}, "cilium/ebpf lives in ebpf only"},
	{"github.com/hashicorp/vault", []string{"credentials/vault"}, "vault/api lives in credentials/vault only; Vault server code (BUSL) is never linked"},
	{"k8s.io/", []string{"sandbox/kube", "sandbox/kube/kubetest"}, "the Kubernetes client libraries live in sandbox/kube (and its test support) only"},
	{"sigs.k8s.io/", []string{"sandbox/kube", "sandbox/kube/kubetest"}, "the Kubernetes client libraries live in sandbox/kube (and its test support) only"},
	{"k8s.io/client-go/kubernetes", []string{"sandbox/kube/kubetest"}, "the generated clientset links and initialises every API group at every start: sandbox/kube uses a core/v1 REST client"},
	{module + "/sandbox/kube/kubetest", nil, "test support only"},
	{module + "/cmd", nil, "nothing imports cmd"},
	{module + "/dnsfilter", []string{"cmd/airlock"}, "proxy, dnsfilter and llmproxy never import each other: cmd passes adapters"},
	{module + "/llmproxy", []string{"cmd/airlock"}, "proxy, dnsfilter and llmproxy never import each other: cmd passes adapters"},
	{module + "/proxy", []string{"cmd/airlock"}, "proxy, dnsfilter and llmproxy never import each other: cmd passes adapters"},
	{module + "/egress", []string{"proxy", "llmproxy", "cmd/airlock", "internal/sidecar"}, "the one SSRF dial guard is for the packages that dial out and the wiring"},
}

// forbidden bans one package (and those below it) from importing another, where a rule for
// every importer would be too wide.
var forbidden = []struct{ importer, banned, why string }{
	{"sandbox", module + "/ebpf", "sandbox reaches the kernel enforcement through the Kernel interface it declares (internal/sidecar adapts ebpf)"},
}

// leaves import nothing of ours.
var leaves = []string{"policy", "audit"}

func TestDependencyRules(t *testing.T) {
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for _, imp := range p.Imports {
			for _, r := range rules {
				if !strings.HasPrefix(imp, r.banned) || contains(r.allowed, rel) || strings.HasPrefix(rel, strings.TrimPrefix(strings.TrimPrefix(r.banned, module), "/")+"/") {
					continue
				}
				t.Errorf("%s imports %s: %s", rel, imp, r.why)
			}
			if rel == "egress" && strings.HasPrefix(imp, module+"/") && imp != module+"/policy" {
				t.Errorf("egress imports %s: egress imports policy (the classifier and CIDR rules) and nothing else of ours", imp)
			}
			for _, f := range forbidden {
				if (rel == f.importer || strings.HasPrefix(rel, f.importer+"/")) && strings.HasPrefix(imp, f.banned) {
					t.Errorf("%s imports %s: %s", rel, imp, f.why)
				}
			}
			if contains(leaves, rel) && strings.HasPrefix(imp, module+"/") {
				t.Errorf("%s imports %s: %s imports nothing of ours", rel, imp, rel)
			}
		}
		if strings.HasPrefix(rel, "cmd/") || !strings.HasPrefix(rel, "internal/") {
			if contains(p.Deps, "testing") {
				t.Errorf("%s depends on package testing: production code never imports it", rel)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
