package sandbox

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "run-42", "w0", strings.Repeat("a", MaxNameLen)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a_b", "a.b", "../x", "a/b", strings.Repeat("a", MaxNameLen+1)} {
		if err := ValidateName(bad); err == nil {
			t.Errorf("ValidateName(%q) = nil, want an error", bad)
		}
	}
}

func TestHostVethName(t *testing.T) {
	a := hostVethName("/var/lib/airlock/sandboxes", "agent")
	if len(a) > 15 || !strings.HasPrefix(a, "al") {
		t.Fatalf("hostVethName = %q: want an interface name of at most 15 bytes starting with al", a)
	}
	if b := hostVethName("/tmp/other/sandboxes", "agent"); b == a {
		t.Errorf("two state directories give the same veth name %q", a)
	}
	if c := hostVethName("/var/lib/airlock/sandboxes", "agent"); c != a {
		t.Errorf("hostVethName is not stable: %q then %q", a, c)
	}
}

func TestSubnetAllocation(t *testing.T) {
	subnet, err := parseSubnet("10.200.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	l := linkAt(subnet, 0)
	if l.Host.String() != "10.200.0.1" || l.Sandbox.String() != "10.200.0.2" || l.Prefix.String() != "10.200.0.0/30" {
		t.Errorf("linkAt(0) = %+v", l)
	}
	if l := linkAt(subnet, 65); l.Host.String() != "10.200.1.5" {
		t.Errorf("linkAt(65).Host = %s, want 10.200.1.5", l.Host)
	}
	existing := []*State{
		{Subnet: "10.200.0.0/16", Index: 0, HostAddr: "10.200.0.1"},
		{Subnet: "10.200.0.0/16", Index: 2, HostAddr: "10.200.0.9"},
		{Subnet: "10.200.0.0/24", Index: 1, HostAddr: "10.200.0.5"}, // an overlapping pool
	}
	if got, err := allocate(subnet, existing, nil); err != nil || got != 3 {
		t.Errorf("allocate = %d, %v; want 3 (0 and 2 taken, 1 taken by an overlapping pool)", got, err)
	}
	// Addresses on the host's interfaces (another state directory's sandboxes) take their /30.
	inUse := []netip.Addr{netip.MustParseAddr("10.200.0.13"), netip.MustParseAddr("10.200.0.18"), netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")}
	if got, err := allocate(subnet, existing, inUse); err != nil || got != 5 {
		t.Errorf("allocate with host addresses in .12/30 and .16/30 = %d, %v; want 5", got, err)
	}

	small, _ := parseSubnet("198.19.200.0/29") // two /30s
	full := []*State{{Subnet: small.String(), Index: 0}, {Subnet: small.String(), Index: 1}}
	if _, err := allocate(small, full, nil); err == nil || !strings.Contains(err.Error(), "full") {
		t.Errorf("allocate in a full subnet = %v, want a 'full' error", err)
	}
	for _, bad := range []string{"10.200.0.0/31", "2001:db8::/64", "nonsense"} {
		if _, err := parseSubnet(bad); err == nil {
			t.Errorf("parseSubnet(%q) = nil error", bad)
		}
	}
}

func TestStoreRoundTripAndLock(t *testing.T) {
	store, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := &State{Name: "one", Backend: "local", Phase: PhaseCreating, Created: time.Now().UTC().Round(time.Second),
		Netns: "airlock-one", SidecarEnv: []string{"SECRET=hunter2"}}
	if err := store.Save(st); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(store.Dir, "one.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "hunter2") {
		t.Errorf("the state file holds the sidecar's environment: %s", data)
	}
	if fi, _ := os.Stat(filepath.Join(store.Dir, "one.json")); fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v, want 0600", fi.Mode().Perm())
	}
	got, err := store.Load("one")
	if err != nil || got.Netns != "airlock-one" || got.Phase != PhaseCreating || !got.Created.Equal(st.Created) {
		t.Fatalf("Load = %+v, %v", got, err)
	}
	if _, err := store.Load("two"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load of a missing sandbox = %v, want ErrNotFound", err)
	}
	// A torn temporary file from a crashed writer is not a sandbox.
	if err := os.WriteFile(filepath.Join(store.Dir, ".one.json.tmp123"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := store.List()
	if err != nil || len(list) != 1 || list[0].Name != "one" {
		t.Fatalf("List = %v, %v", list, err)
	}

	// The lock is exclusive across holders: the second Lock returns only after the first
	// holder released it, which the first records before releasing.
	unlock, err := store.Lock()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	got2 := make(chan struct{})
	go func() {
		u, err := store.Lock()
		if err != nil {
			t.Error(err)
			close(got2)
			return
		}
		mu.Lock()
		order = append(order, "second")
		mu.Unlock()
		u()
		close(got2)
	}()
	mu.Lock()
	order = append(order, "first")
	mu.Unlock()
	unlock()
	<-got2
	if strings.Join(order, ",") != "first,second" {
		t.Errorf("lock order %v", order)
	}

	if err := store.Remove("one"); err != nil {
		t.Fatal(err)
	}
	if err := store.Remove("one"); err != nil {
		t.Errorf("second Remove = %v, want nil", err)
	}
}

func TestEnvVars(t *testing.T) {
	st := &State{Name: "s", HostAddr: "10.200.0.1", Dir: "/var/lib/airlock/sandboxes/s"}
	env := map[string]string{}
	for _, kv := range st.EnvVars() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	want := map[string]string{
		"HTTP_PROXY": "http://10.200.0.1:3128", "HTTPS_PROXY": "http://10.200.0.1:3128",
		"https_proxy": "http://10.200.0.1:3128", "OPENAI_BASE_URL": "http://10.200.0.1:4000/v1",
		"ANTHROPIC_BASE_URL": "http://10.200.0.1:4000", "SSL_CERT_FILE": InsideCABundle,
		"NODE_EXTRA_CA_CERTS": InsideCABundle, "REQUESTS_CA_BUNDLE": InsideCABundle, "GIT_SSL_CAINFO": InsideCABundle,
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if !strings.Contains(env["NO_PROXY"], "10.200.0.1") || !strings.Contains(env["NO_PROXY"], LLMName) {
		t.Errorf("NO_PROXY = %q: the model API must not go through the proxy", env["NO_PROXY"])
	}
}

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"A=1", "HTTP_PROXY=http://elsewhere", "B=2"}, []string{"HTTP_PROXY=http://10.200.0.1:3128"})
	if strings.Join(got, " ") != "A=1 B=2 HTTP_PROXY=http://10.200.0.1:3128" {
		t.Errorf("mergeEnv = %v", got)
	}
}

func TestLastError(t *testing.T) {
	f := filepath.Join(t.TempDir(), "log")
	log := `{"level":"info","msg":"starting"}
airlock: --environment production requires kernel enforcement
{"level":"error","msg":"sidecar exited before it was ready; not restarting"}
airlock: supervise s: the sidecar exited before it was ready
`
	if err := os.WriteFile(f, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := lastError(f); got != "airlock: --environment production requires kernel enforcement" {
		t.Errorf("lastError = %q, want the sidecar's one-line reason", got)
	}
}

func TestMetricSums(t *testing.T) {
	text := `# TYPE airlock_proxy_requests_total counter
airlock_proxy_requests_total{decision="allow",kind="http",rule="a"} 5
airlock_proxy_requests_total{decision="deny",kind="http",rule=""} 2
airlock_proxy_requests_total{decision="deny",kind="connect",rule=""} 1
# TYPE airlock_kernel_denies_total counter
airlock_kernel_denies_total{sandbox="s"} 4
# TYPE airlock_llm_cost_usd_total counter
airlock_llm_cost_usd_total{model="m1"} 0.25
airlock_llm_cost_usd_total{model="m2"} 0.5
`
	fams, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := sum(fams, "airlock_proxy_requests_total", map[string]string{"decision": "deny"}); got != 3 {
		t.Errorf("proxy denies = %v, want 3", got)
	}
	if got := sum(fams, "airlock_kernel_denies_total", nil); got != 4 {
		t.Errorf("kernel denies = %v, want 4", got)
	}
	if got := sum(fams, "airlock_llm_cost_usd_total", nil); got != 0.75 {
		t.Errorf("spend = %v, want 0.75", got)
	}
	if got := sum(fams, "airlock_missing_total", nil); got != 0 {
		t.Errorf("missing family = %v, want 0", got)
	}
}

func TestSidecarArgsAndRawRoutes(t *testing.T) {
	st := &State{Name: "s", HostAddr: "10.200.0.1", Policy: "/p.yaml", Environment: EnvDevelopment,
		Cgroup: "/sys/fs/cgroup/airlock/s", Dir: "/d", AdminAddr: "127.0.0.1:40000", Netns: "airlock-s"}
	args := strings.Join(sidecarArgs(st, CreateOptions{UpstreamDNS: "198.18.255.53:53"}), " ")
	for _, want := range []string{"--proxy-addr 10.200.0.1:3128", "--dns-addr 10.200.0.1:53", "--llm-addr 10.200.0.1:4000",
		"--transparent-addr 10.200.0.1:15001", "--admin-addr 127.0.0.1:40000", "--cgroup /sys/fs/cgroup/airlock/s",
		"--sandbox s", "--upstream-dns 198.18.255.53:53", "--packet-guard best-effort", "--sandbox-netns /run/netns/airlock-s"} {
		if !strings.Contains(args, want) {
			t.Errorf("sidecar args %q lack %q", args, want)
		}
	}
	args = strings.Join(sidecarArgs(st, CreateOptions{RunArgs: []string{"--packet-guard=required"}}), " ")
	if strings.Contains(args, "best-effort") {
		t.Errorf("an explicit --packet-guard must win: %q", args)
	}

	f := filepath.Join(t.TempDir(), "p.yaml")
	doc := `apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: db}
spec:
  egress:
    - name: warehouse
      cidrs: ["10.20.0.0/16", "2001:db8:20::/48"]
      ports: [5432]
      protocol: tcp
    - name: internal-http
      cidrs: ["10.30.0.0/16"]
      ports: [8080]
`
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	got := rawRoutes(pol)
	if len(got) != 1 || got[0] != netip.MustParsePrefix("10.20.0.0/16") {
		t.Errorf("rawRoutes = %v, want only the IPv4 CIDR of the protocol tcp rule", got)
	}
}

// TestUpstreamCA: the sidecar's --upstream-proxy-ca (a flag, or its AIRLOCK_* variable) is
// what the sandbox's CA bundle gains; none set is none; an unreadable file is an error.
func TestUpstreamCA(t *testing.T) {
	file := filepath.Join(t.TempDir(), "corp.pem")
	if err := os.WriteFile(file, []byte("CORP-CA"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    CreateOptions
		want string
		err  bool
	}{
		{name: "none", o: CreateOptions{RunArgs: []string{"--upstream-proxy", "http://p:3128"}}},
		{name: "flag", o: CreateOptions{RunArgs: []string{"--upstream-proxy-ca", file}}, want: "CORP-CA"},
		{name: "flag with =", o: CreateOptions{RunArgs: []string{"--upstream-proxy-ca=" + file}}, want: "CORP-CA"},
		{name: "environment", o: CreateOptions{Env: []string{"AIRLOCK_UPSTREAM_PROXY_CA=" + file}}, want: "CORP-CA"},
		{name: "missing file", o: CreateOptions{RunArgs: []string{"--upstream-proxy-ca", file + ".missing"}}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := upstreamCA(tc.o)
			if (err != nil) != tc.err || string(got) != tc.want {
				t.Fatalf("got %q, %v; want %q (error %t)", got, err, tc.want, tc.err)
			}
		})
	}
}

// TestIdentityNetwork: each identity's proxy bytes and denials come from the metrics with its
// label, apart from the sandbox's own and from each other's.
func TestIdentityNetwork(t *testing.T) {
	text := `# TYPE airlock_proxy_requests_total counter
airlock_proxy_requests_total{decision="allow",identity="reviewer",kind="http",rule="a"} 5
airlock_proxy_requests_total{decision="deny",identity="reviewer",kind="http",rule=""} 2
airlock_proxy_requests_total{decision="deny",identity="",kind="connect",rule=""} 7
# TYPE airlock_proxy_bytes_total counter
airlock_proxy_bytes_total{direction="up",identity="reviewer"} 100
airlock_proxy_bytes_total{direction="down",identity="reviewer"} 1000
airlock_proxy_bytes_total{direction="down",identity="author"} 5
airlock_proxy_bytes_total{direction="down",identity=""} 9999
# TYPE airlock_dns_queries_total counter
airlock_dns_queries_total{decision="deny",identity="reviewer",reason="no_rule"} 3
airlock_dns_queries_total{decision="allow",identity="author",reason=""} 4
`
	fams, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	ids := []IdentityStatus{{Name: "author"}, {Name: "reviewer"}}
	identityNetwork(ids, fams)
	want := []IdentityStatus{{Name: "author", ProxyBytes: 5}, {Name: "reviewer", ProxyBytes: 1100, Denies: 5}}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("got %+v, want %+v", ids, want)
	}
	identityNetwork(ids, nil) // no metrics read: zeros
	if ids[1].ProxyBytes != 0 || ids[1].Denies != 0 {
		t.Errorf("without metrics: %+v, want zeros", ids[1])
	}
}
