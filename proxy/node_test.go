package proxy

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/test/testnet"
)

// The Node HTTP client, pinned; installed from the npm registry once into the repository's
// .cache (shared by worktrees, never committed), as llmproxy's Node SDK tests do.
const nodeUndici = "undici@6.29.1"

// nodeModules returns the node_modules directory holding undici (testnet.NodeModules).
func nodeModules(t *testing.T) string { return testnet.NodeModules(t, nodeUndici) }

// TestNodeFetchThroughProxy runs Node's fetch (undici with its ProxyAgent) through an
// intercepted tunnel: the credential arrives upstream, and an L7 rule denies a path with the
// proxy's JSON denial. undici 6's ProxyAgent speaks HTTP/1.1 inside the tunnel (it does not
// offer h2 there), so this is the HTTP/1.1 client side, and the upstream protocol follows
// the client's: HTTP/1.1 there too, though the upstream offers h2 (upstreamProtocol).
func TestNodeFetchThroughProxy(t *testing.T) {
	mods := nodeModules(t)
	h := newStreamHarness(t)
	s := &seen{}
	h.route(addrAPI, 443, h.h2Upstream(t, protoEcho(s), "api.test"))
	script, _ := filepath.Abs(filepath.Join("testdata", "node", "fetch.cjs"))
	cmd := exec.Command("node", script, "http://"+h.addr, h.caFile(t), "https://api.test/ok/node", "https://api.test/denied")
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got []struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var r struct {
			Status int    `json:"status"`
			Body   string `json:"body"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("node printed %q: %v", sc.Text(), err)
		}
		got = append(got, r)
	}
	if len(got) != 2 || got[0].Status != 200 || !strings.Contains(got[0].Body, "proto=HTTP/1.1 path=/ok/node") {
		t.Fatalf("node got %+v, want the upstream's answer first", got)
	}
	if got[1].Status != 403 || deniedJSON(t, got[1].Body).Reason != "path_not_allowed" {
		t.Fatalf("node got %+v, want the path denial second", got[1])
	}
	s.checkInjected(t, 1)
}
