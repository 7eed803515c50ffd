//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An MCP server as an identity of its own (issue 34, item 5): test/mcpserver, a real MCP
// server of the official Go SDK speaking streamable HTTP on the sandbox's loopback, runs as
// mcp and may GET only api.allowed.test's /repos/acme/ paths, with the token injected for it
// alone; the agent beside it may reach allowed.test and nothing of api.allowed.test.
const sbMCPPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: sandbox-mcp
spec:
  egress:
    - name: allowed
      hosts: ["allowed.test"]
      ports: [80, 443, 8443]
    - name: api
      hosts: ["api.allowed.test"]
      ports: [80, 443]
      inject:
        - header: Authorization
          value: 'Bearer {{ secret "mcp-token" }}'
  secrets:
    mcp-token: {env: E2E_SANDBOX_TOKEN}
  identities:
    agent:
      egress:
        - name: agent-hosts
          hosts: ["allowed.test"]
          ports: [80, 443, 8443]
    mcp:
      secrets: [mcp-token]
      egress:
        - name: acme-repos
          hosts: ["api.allowed.test"]
          ports: [443]
          http:
            - methods: [GET]
              paths: ["/repos/acme/**"]
          inject:
            - header: Authorization
              value: 'Bearer {{ secret "mcp-token" }}'
`

// mcpServer is test/mcpserver serving in a sandbox.
type mcpServer struct {
	endpoint string // http://127.0.0.1:PORT, as seen inside the sandbox
	pid      string // its pid inside the sandbox
}

// TestSandboxMCPServerIdentity: the agent reaches the MCP server over the sandbox's loopback
// and gets the upstream's answer through it; the upstream sees the real token, the server only
// ever held a placeholder; each identity is refused the other's hosts, by name.
func TestSandboxMCPServerIdentity(t *testing.T) {
	runHostile(t, func(t *testing.T, h *hostile) {
		bin := buildMCPServer(t, h)
		pol := h.w.WriteFile(t, "mcp-policy-"+h.rt+".yaml", []byte(sbMCPPolicy))
		name, _ := h.create(t, "mcp", "--policy", pol)
		placeholder := sandboxPlaceholder(t, h, name, "mcp-token")
		srv := h.startMCPServer(t, name, bin, placeholder)

		t.Run("ToolReachesItsHost", func(t *testing.T) {
			before := len(h.w.API.Requests())
			res := h.mcpCall(t, name, "agent", bin, srv, "https://api.allowed.test/repos/acme/app")
			if res.IsError || !strings.Contains(res.Text, "status 200") || !strings.Contains(res.Text, "host=api.allowed.test method=GET path=/repos/acme/app") {
				t.Fatalf("agent calling the MCP server's fetch: %+v, want the upstream's answer", res)
			}
			reqs := h.w.API.Requests()[before:]
			if len(reqs) != 1 || reqs[0].Header.Get("Authorization") != "Bearer "+sbToken {
				t.Fatalf("the MCP server's request did not reach upstream with the real token (%d requests: %+v)", len(reqs), reqs)
			}
			if strings.Contains(res.Text, sbToken) {
				t.Errorf("the tool's answer holds the token: %q", res.Text)
			}
		})
		t.Run("ServerHoldsOnlyPlaceholder", func(t *testing.T) {
			r := h.asSh(t, name, "mcp", "tr '\\0' '\\n' < /proc/"+srv.pid+"/environ; tr '\\0' ' ' < /proc/"+srv.pid+"/cmdline")
			if r.Code != 0 || !strings.Contains(r.Stdout, "MCP_TOKEN="+placeholder) {
				t.Fatalf("the MCP server's environment: %s, want MCP_TOKEN=%s", r, placeholder)
			}
			if strings.Contains(r.Stdout, sbToken) {
				t.Errorf("the MCP server's environment or arguments hold the real token")
			}
		})
		t.Run("ServerOnlyItsRules", func(t *testing.T) { testMCPServerRules(t, h, name, bin, srv) })
		t.Run("AgentRefusedServersHost", func(t *testing.T) { testMCPAgentRefused(t, h, name, placeholder) })
		t.Run("StdioChildIsAgent", func(t *testing.T) { testMCPStdioChild(t, h, name, bin, placeholder) })
	})
}

// testMCPServerRules: through its own tool, the MCP server is refused what its identity does
// not allow (another path of its host, the agent's host), and the refusal names mcp.
func testMCPServerRules(t *testing.T, h *hostile, name, bin string, srv mcpServer) {
	for _, tc := range []struct{ url, reason string }{
		{"https://api.allowed.test/orgs/acme/members", "path_not_allowed"},
		{"http://allowed.test/agent-only", ""},
	} {
		res := h.mcpCall(t, name, "agent", bin, srv, tc.url)
		status, body, _ := strings.Cut(res.Text, "\n")
		var d identityDenial
		if !res.IsError || status != "status 403" || json.Unmarshal([]byte(body), &d) != nil || d.Identity != "mcp" ||
			(tc.reason != "" && d.Reason != tc.reason) {
			t.Errorf("MCP server fetching %s: %+v, want a 403 naming identity mcp (reason %q)", tc.url, res, tc.reason)
		}
	}
	// Nor can any other process of the identity: the agent's host is no_rule for mcp.
	body, code, _ := parseCurl(t, h.asSh(t, name, "mcp", curlScript("http://allowed.test/agent-only")))
	var d identityDenial
	if code != 403 || json.Unmarshal([]byte(body), &d) != nil || d.Identity != "mcp" || d.Reason != "no_rule" {
		t.Errorf("mcp to http://allowed.test: status %d body %q, want a 403 no_rule naming identity mcp", code, body)
	}
	// The control: the agent itself may reach allowed.test.
	if _, code, _ := parseCurl(t, h.asSh(t, name, "agent", curlScript("http://allowed.test/agent-only"))); code != 200 {
		t.Errorf("agent to allowed.test: status %d, want 200", code)
	}
}

// testMCPAgentRefused: the agent calling the MCP server's host itself is refused, naming its
// identity, with or without the server's placeholder, and no request of it carries the token.
func testMCPAgentRefused(t *testing.T, h *hostile, name, placeholder string) {
	before := len(h.w.API.Requests())
	body, code, _ := parseCurl(t, h.asSh(t, name, "agent", curlScript("http://api.allowed.test/repos/acme/app")))
	var d identityDenial
	if code != 403 || json.Unmarshal([]byte(body), &d) != nil || d.Identity != "agent" || d.Reason != "no_rule" {
		t.Errorf("agent to http://api.allowed.test: status %d body %q, want a 403 no_rule naming identity agent", code, body)
	}
	r := h.asSh(t, name, "agent", curlScript("-H 'Authorization: Bearer "+placeholder+"' https://api.allowed.test/repos/acme/app"))
	if _, code, connect := parseCurl(t, r); code != 403 && connect != 403 {
		t.Errorf("agent to https://api.allowed.test: %s, want 403", r)
	}
	for _, req := range h.w.API.Requests()[before:] {
		t.Errorf("an agent request reached api.allowed.test: %s %s (Authorization %q)", req.Method, req.Path,
			strings.ReplaceAll(req.Header.Get("Authorization"), sbToken, "THE-TOKEN"))
	}
	denied := 0
	for _, ev := range h.auditEvents(t, name) {
		if strings.HasPrefix(ev.Destination, "api.allowed.test:") && ev.Identity == "agent" && ev.Decision == "deny" {
			denied++
		}
	}
	if denied < 2 {
		t.Errorf("%d audit events deny agent api.allowed.test, want 2 (http and CONNECT)", denied)
	}
}

// testMCPStdioChild: a stdio MCP server the agent spawns itself is the agent's child, so it is
// the agent's identity whatever token it holds: its fetch of the server's host is refused,
// naming agent, and nothing reaches upstream.
func testMCPStdioChild(t *testing.T, h *hostile, name, bin, placeholder string) {
	before := len(h.w.API.Requests())
	r := h.exec(t, []string{"--as", "agent", "--env", "MCP_TOKEN=" + placeholder}, name, nil, nil,
		bin, "call", "-spawn", "-token-env", "MCP_TOKEN", "-url", "http://api.allowed.test/repos/acme/app")
	var res mcpCallResult
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &res) != nil {
		t.Fatalf("agent spawning a stdio MCP server: %s", r)
	}
	status, body, _ := strings.Cut(res.Text, "\n")
	var d identityDenial
	if !res.IsError || status != "status 403" || json.Unmarshal([]byte(body), &d) != nil || d.Identity != "agent" {
		t.Errorf("stdio MCP server spawned by agent fetching api.allowed.test: %+v, want a 403 naming identity agent", res)
	}
	if n := len(h.w.API.Requests()) - before; n != 0 {
		t.Errorf("%d requests of the agent's stdio MCP server reached api.allowed.test, want none", n)
	}
}

// buildMCPServer links ./test/mcpserver, built static in the cache (cachedBinary), into the
// fixture's shared directory and returns its path inside a sandbox.
func buildMCPServer(t *testing.T, h *hostile) string {
	t.Helper()
	cached, err := cachedBinary("./test/mcpserver", "CGO_ENABLED=0")
	if err == nil {
		err = linkBinary(cached, filepath.Join(h.out, "mcpserver"))
	}
	if err != nil {
		t.Fatalf("build the MCP server: %v", err)
	}
	return h.inside("mcpserver")
}

// sandboxPlaceholder reads the placeholder of secret from sandbox name's sidecar state.
func sandboxPlaceholder(t *testing.T, h *hostile, name, secret string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.stateDir, "sandboxes", name, "sidecar", "placeholders.json"))
	var ph map[string]string
	if err != nil || json.Unmarshal(b, &ph) != nil || !strings.HasPrefix(ph[secret], "airlock-placeholder:"+secret+":") {
		t.Fatalf("the sidecar's placeholders.json: %v %q", err, b)
	}
	return ph[secret]
}

// startMCPServer starts the MCP server as identity mcp on the sandbox's loopback, with the
// placeholder as its token, until t ends.
func (h *hostile) startMCPServer(t *testing.T, name, bin, placeholder string) mcpServer {
	t.Helper()
	args := []string{"sandbox", "exec", "--state-dir", h.stateDir, "--as", "mcp", "--env", "MCP_TOKEN=" + placeholder,
		name, "--", bin, "serve", "-listen", "127.0.0.1:0", "-token-env", "MCP_TOKEN"}
	var stderr strings.Builder
	line, err := h.startHeld(t, "the MCP server", &stderr, args...)
	f := strings.Fields(line)
	if err != nil || len(f) != 3 || f[0] != "listening" {
		t.Fatalf("MCP server: first line %q, %v; stderr %q", line, err, stderr.String())
	}
	return mcpServer{endpoint: "http://" + f[1], pid: f[2]}
}

// mcpCallResult is what `mcpserver call` prints.
type mcpCallResult struct {
	IsError bool   `json:"isError"`
	Text    string `json:"text"`
}

// mcpCall calls the server's fetch tool with url as identity, with the SDK's client.
func (h *hostile) mcpCall(t *testing.T, name, identity, bin string, srv mcpServer, url string) mcpCallResult {
	t.Helper()
	r := h.exec(t, []string{"--as", identity}, name, nil, nil, bin, "call", "-endpoint", srv.endpoint, "-url", url)
	var res mcpCallResult
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &res) != nil {
		t.Fatalf("MCP client as %s calling fetch %s: %s", identity, url, r)
	}
	return res
}
