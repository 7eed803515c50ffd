package depcheck

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/airlock-dev/airlock"

// pkg is the part of `go list -json` this test reads. Imports are the production imports
// (test files' imports are in other fields).
type pkg struct {
	ImportPath string
	Name       string
	Imports    []string
	Deps       []string
	// The files the build compiles.
	GoFiles, TestGoFiles, XTestGoFiles []string
}

// listPackages lists the module's packages as built with the given build tags ("" for the
// default build; -tags on the command line overrides any in $GOFLAGS).
func listPackages(t *testing.T, tags string, patterns ...string) []pkg {
	t.Helper()
	if len(patterns) == 0 {
		patterns = []string{module + "/..."}
	}
	cmd := exec.Command("go", append([]string{"list", "-json", "-tags=" + tags}, patterns...)...)
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

// may is what one of our packages may import of ours: each allowed package with the reason.
type may map[string]string

// ours says, for every production package of ours, which of our packages it may import
// (STYLE.md's diagram). A package missing here fails the test: a new package states its
// place in the diagram when it is added.
var ours = map[string]may{
	"cmd/airlock": {
		"internal/cli":      "the command table, flag sets and exit codes both mains share",
		"internal/sidecar":  "airlock run: flags and config only; the sidecar is wired in internal/sidecar",
		"sandbox":           "airlock sandbox: the lifecycle manager",
		"sandbox/image":     "sandbox create --image: the layer cache the manager gets images from",
		"egress":            "sandbox create --image pulls from a registry through the operator's dial path (egress.Operator)",
		"ebpf":              "passes ebpf.Host to the sandbox manager as its Kernel (sandbox does not link cilium/ebpf)",
		"policy":            "airlock policy check|explain|test, and loading a policy for sandbox and usage",
		"proxy":             "airlock ca export and sandbox create read the interception CA of a state directory (proxy.LoadOrCreateCA); run's limit flags default to proxy.Default*",
		"credentials":       "airlock policy placeholders computes placeholders with the state directory's key",
		"llmproxy":          "airlock usage reads the usage ledger",
		"learn":             "airlock policy learn|replay: candidate policies from audit trails",
		"audit":             "airlock audit verify|keygen|pubkey|export: checks audit trails, makes signing keys, packs evidence",
		"approval":          "airlock approvals and sandbox approvals: the operator socket's client",
		"audit/ship":        "airlock audit verify|export s3://...: reads shipped chains back from object storage",
		"audit/ocsf":        "airlock audit ocsf: renders audit lines as OCSF events",
		"credentials/vault": "airlock audit verify|pubkey --vault-transit-key: reads a Transit key's public keys from Vault",
		"meter":             "airlock usage, sandbox list and sandbox thaw read the usage ledgers and ask for a thaw",
	},
	"cmd/airlock-kube": {
		"internal/cli":  "the command table, flag sets and exit codes both mains share",
		"sandbox/kube":  "airlock-kube sandbox (the Kubernetes backend), webhook, and the pod watch of node",
		"internal/node": "airlock-kube node: flags only; the agent is internal/node, fed by sandbox/kube's pod watch",
	},
	"internal/cli": {},
	"internal/sidecar": {
		"proxy": "wires the proxy", "dnsfilter": "wires the DNS filter", "llmproxy": "wires the model API",
		"ebpf": "the in-process eBPF enforcer is its first kernel Enforcer", "credentials": "wires the credential broker",
		"credentials/vault": "wires the Vault source", "egress": "builds the one dial guard the proxy and the model API share",
		"audit": "builds the audit logger once", "policy": "owns the policy store and its reloads",
		"audit/ship":     "runs the audit shipper beside the logger, with the operator's transport",
		"internal/trust": "writes --ca-bundle-out",
		"internal/node":  "--node-agent: AttachNodeAgent adapts node.Client (the node agent's client) to the sidecar's Enforcer",
		"approval":       "wires the approval stage between the policy store and the proxy and DNS filter",
		"meter":          "wires the usage meter between the kernel counters, the model API's spend and the ledger",
	},
	"proxy": {"policy": "decides", "audit": "audits", "egress": "dials through the shared dial guard",
		"proxy/internal/xconnect": "turns on HTTP/2 extended CONNECT (WebSocket over HTTP/2) before net/http initialises"},
	"proxy/internal/xconnect": {},
	"llmproxy": {"policy": "decides", "audit": "audits", "egress": "dials through the shared dial guard",
		"llmproxy/translate": "translates calls between the OpenAI and Anthropic dialects",
		"internal/crcline":   "the usage ledger's line format"},
	"internal/crcline":   {},
	"llmproxy/translate": {},
	"dnsfilter":          {"policy": "decides", "audit": "audits"},
	"approval":           {"policy": "asks about misses and turns grants into rules", "audit": "audits asks and grants"},
	"credentials":        {"policy": "secret specs and decisions", "audit": "audits fetches"},
	"credentials/vault":  {"credentials": "implements its Source", "policy": "secret specs"},
	"egress":             {"policy": "the one address classifier and the reason catalogue"},
	"sandbox": {"policy": "checks the policy it starts a sidecar with",
		"internal/trust": "builds the sandbox's CA bundle"},
	"sandbox/kube":   {"policy": "checks the policy of the pods it creates", "sandbox": "shares the manager's types"},
	"sandbox/image":  {"sandbox": "implements sandbox.ImageSource with the manager's Image type"},
	"learn":          {"policy": "writes and decides candidate policies", "audit": "reads audit trails"},
	"internal/node":  {"ebpf": "the agent attaches and pins the programs on each pod's cgroup (the protocol and the client use none of ours)"},
	"ebpf":           {},
	"internal/trust": {},
	"policy":         {},
	"audit":          {},
	"meter":          {"policy": "spec.usage: interval, prices, caps", "audit": "audits freezes and thaws", "internal/crcline": "the usage ledger's line format"},
	"audit/ship":     {"audit": "ships the chain's sealed files and reads their ranges"},
	"audit/ocsf":     {"audit": "decodes the native lines it renders", "policy": "the reason catalogue's remedies"},
}

// support are test and tooling packages: heavy-dependency rules apply to them, the diagram
// does not.
var support = []string{
	"tools/bench", "test/e2e", "tools/demo", "tools/docgen", "test/depcheck", "test/fakellm", "test/privtest",
	"test/testnet", "test/vaulttest", "test/vaulttest/buildserver", "test/kubetest", "test/upstreamproxy",
	"test/kubecluster", "test/kubecluster/buildcluster", "test/cachedbuild", "test/s3test", "test/s3test/buildserver", "test/kubecluster/probe", "test/e2e/cluster", "test/hostileprobe", "test/mcpserver",
	"internal/imagebuild", "internal/imagebuild/airlockimage", "test/imagetest", "test/imagetest/builddebian",
}

// heavy bans importers outside allowed from importing any path with prefix banned.
type heavy struct {
	banned  string
	allowed []string // import paths (relative to the module) that may import it
	why     string
}

var heavies = []heavy{
	{"github.com/elazarl/goproxy", []string{"proxy"}, "goproxy lives in proxy only"},
	{"github.com/miekg/dns", []string{"dnsfilter", "test/testnet", "tools/demo"}, "miekg/dns lives in dnsfilter (and the outside resolver the tests and the demo play) only"},
	{"github.com/cilium/ebpf", []string{"ebpf"}, "cilium/ebpf lives in ebpf only"},
	{"github.com/hashicorp/vault", []string{"credentials/vault"}, "vault/api lives in credentials/vault only; Vault server code (BUSL) is never linked"},
	{"k8s.io/", []string{"sandbox/kube", "test/kubetest"}, "the Kubernetes client libraries live in sandbox/kube (and its test support) only"},
	{"sigs.k8s.io/", []string{"sandbox/kube", "test/kubetest"}, "the Kubernetes client libraries live in sandbox/kube (and its test support) only"},
	{"github.com/google/go-containerregistry", []string{"internal/imagebuild", "sandbox/image", "test/imagetest"}, "image building (make image) lives in internal/imagebuild; reading and pulling sandbox images in sandbox/image (the only importer in the airlock binary), and the test images in test/imagetest"},
	{"github.com/tiktoken-go/tokenizer", []string{"llmproxy", "test/fakellm"}, "the tokenizer vocabularies (~10 MB of binary) live in llmproxy (and the fake provider that counts like the real APIs) only"},
	{"github.com/opencontainers/runtime-spec", []string{"sandbox"}, "the OCI runtime-spec types (a local sandbox's config.json and exec process) live in sandbox only"},
	{"github.com/moby/profiles", []string{"sandbox"}, "the default seccomp profile (Docker's, kept by moby) of local sandboxes lives in sandbox only"},
	{"github.com/aws/aws-sdk-go-v2", []string{"audit/ship"}, "the S3 client (aws-sdk-go-v2) lives in audit/ship only"},
	{"github.com/aws/smithy-go", []string{"audit/ship"}, "the S3 client's runtime (smithy-go) lives in audit/ship only"},
	{"github.com/modelcontextprotocol/go-sdk", []string{"test/mcpserver"}, "the MCP SDK is the test MCP server's and client's only (airlock speaks no MCP itself)"},
	{"k8s.io/client-go/kubernetes", []string{"test/kubetest"}, "the generated clientset links and initialises every API group at every start: sandbox/kube uses a core/v1 REST client"},
}

func TestDependencyRules(t *testing.T) {
	checkRules(t, listPackages(t, ""))
}

// cmd/airlock, the sidecar, must not link the Kubernetes client: Go initialises every linked
// package at every start, and these fault in about 6 MiB of the binary in every injected
// sidecar. Only cmd/airlock-kube has them.
func TestSidecarBuildLinksNoKubernetes(t *testing.T) {
	kubePrefixes := []string{"k8s.io/", "sigs.k8s.io/", module + "/sandbox/kube"}
	linked := func(main string) []string {
		var out []string
		for _, p := range listPackages(t, "", module+"/"+main) {
			for _, d := range p.Deps {
				if slices.ContainsFunc(kubePrefixes, func(pre string) bool { return strings.HasPrefix(d, pre) }) {
					out = append(out, d)
				}
			}
		}
		return out
	}
	if got := linked("cmd/airlock"); len(got) > 0 {
		t.Errorf("cmd/airlock (the sidecar) links %s: the Kubernetes commands belong in cmd/airlock-kube", strings.Join(got, ", "))
	}
	if got := linked("cmd/airlock-kube"); !slices.Contains(got, module+"/sandbox/kube") {
		t.Errorf("cmd/airlock-kube does not link sandbox/kube (links %v): the check above proves nothing", got)
	}
}

// One main per deliverable: no file of ours is compiled only with a build tag (the sidecar and
// the Kubernetes commands were once one main built two ways, with twin stubs).
func TestNoBuildTagSplitsAPackage(t *testing.T) {
	files := func(p pkg) []string {
		return slices.Concat(p.GoFiles, p.TestGoFiles, p.XTestGoFiles)
	}
	plain := map[string][]string{}
	for _, p := range listPackages(t, "") {
		plain[p.ImportPath] = files(p)
	}
	for _, p := range listPackages(t, "kube") {
		if !slices.Equal(plain[p.ImportPath], files(p)) {
			t.Errorf("%s has files built only with -tags kube: give the deliverable its own main under cmd/", p.ImportPath)
		}
	}
}

func checkRules(t *testing.T, pkgs []pkg) {
	t.Helper()
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for _, imp := range p.Imports {
			checkHeavy(t, rel, imp)
			if strings.HasPrefix(imp, module+"/") {
				checkOurs(t, rel, strings.TrimPrefix(imp, module+"/"))
			}
		}
		if slices.Contains(support, rel) {
			continue
		}
		if _, ok := ours[rel]; !ok {
			t.Errorf("%s is not in the dependency rules: add what it may import, with reasons, to ours", rel)
		}
		if slices.Contains(p.Deps, "testing") {
			t.Errorf("%s depends on package testing: production code never imports it", rel)
		}
	}
}

// checkHeavy holds the heavy third-party dependencies to their one package.
func checkHeavy(t *testing.T, rel, imp string) {
	t.Helper()
	for _, h := range heavies {
		if strings.HasPrefix(imp, h.banned) && !slices.Contains(h.allowed, rel) {
			t.Errorf("%s imports %s: %s", rel, imp, h.why)
		}
	}
}

// checkOurs holds an import of one of our packages to the diagram.
func checkOurs(t *testing.T, rel, imp string) {
	t.Helper()
	switch {
	case strings.HasPrefix(imp, "cmd/"):
		t.Errorf("%s imports %s: nothing imports cmd", rel, imp)
		return
	case imp == "test/kubetest" && !slices.Contains(support, rel):
		t.Errorf("%s imports %s: test support only", rel, imp)
		return
	}
	allowed, ok := ours[rel]
	if !ok {
		return // support packages, and packages missing from ours (reported once)
	}
	if _, ok := allowed[imp]; !ok {
		t.Errorf("%s imports %s: not in its dependency rules (%s); proxy, dnsfilter and llmproxy never import each other: internal/sidecar passes adapters", rel, imp, allowedList(allowed))
	}
}

func allowedList(m may) string {
	if len(m) == 0 {
		return "it imports nothing of ours"
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return "it may import " + strings.Join(out, ", ")
}
