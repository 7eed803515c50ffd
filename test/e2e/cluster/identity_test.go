package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/kubecluster"
)

// idPod is the pod with two identities (in k12NS, whose service account k12-agent logs in
// to the test Vault; names prefixed k12-).
const idPod = "k12-identities"

// idPolicy: the pod's own policy may reach the allowed host with a Vault credential;
// reviewer may only GET it and holds no secret, author has the credential.
const idPolicy = `apiVersion: v1
kind: ConfigMap
metadata: {name: k12-id-policy, namespace: ` + k12NS + `}
data:
  policy.yaml: |
    apiVersion: airlock/v1
    kind: EgressPolicy
    metadata: {name: k12-identities}
    spec:
      mode: enforce
      egress:
        - name: ssh-like
          protocol: tcp
          cidrs: ["` + rawTCPIP + `/32"]
          ports: [80]
        - name: allowed
          hosts: ["` + allowedHost + `"]
          ports: [80]
          allowCleartext: true
          inject:
            - header: Authorization
              value: 'Bearer {{ secret "upstream-token" }}'
      secrets:
        upstream-token:
          vault: {path: secret/data/k12/identities, field: token}
      usage: {interval: 1s}
      identities:
        reviewer:
          egress:
            - name: read-only
              hosts: ["` + allowedHost + `"]
              ports: [80]
              http: [{methods: [GET, HEAD]}]
        author:
          secrets: [upstream-token]
`

// rawTCPIP is the identities policy's raw TCP host (protocol: tcp, port 80: the denied test
// host's listener, which nothing else of that policy reaches): reviewer has an egress of
// its own without it, so no raw TCP; author none of its own, so the sandbox's.
const rawTCPIP = deniedIP

// identitiesPod is a pod of two probe containers, reviewer and author, mapped to the
// identities of the same names by annotation, in the shape Pod Security "restricted" admits.
func identitiesPod(name, annotation string) string {
	c := func(n string) string {
		return `
    - name: ` + n + `
      image: ` + kubecluster.ProbeImage + `
      imagePullPolicy: Never
      securityContext:
        allowPrivilegeEscalation: false
        capabilities: {drop: [ALL]}`
	}
	return `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: ` + k12NS + `
  labels: {airlock.dev/inject: "true"}
  annotations:
    airlock.dev/policy: k12-id-policy
    airlock.dev/identities: "` + annotation + `"
spec:
  serviceAccountName: k12-agent
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 5
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    seccompProfile: {type: RuntimeDefault}
  containers:` + c("reviewer") + c("author") + `
`
}

// checkIdentities: two containers of one pod are two identities by the pod's annotation:
// the node agent tells the unprivileged sidecar which container connected. reviewer may GET
// but not POST (the refusal names it) and its requests never carry author's credential;
// author may POST with it; author may connect to the raw TCP host and reviewer may not. After the reviewer container is killed and restarted by the
// kubelet (a new container, a new cgroup), the mapping still holds.
func (e *env) checkIdentities(ctx context.Context, t *testing.T) {
	e.configureVault(ctx, t) // and the pod's service account
	if out, err := e.c.Apply(ctx, identitiesPod("k12-id-ghost", "ghost=reviewer")); err == nil || !strings.Contains(out, `maps container "ghost", which the pod does not have`) {
		t.Errorf("a pod mapping a container it does not have: %v %s, want refused by the webhook", err, out)
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	secret := "k12-id-" + hex.EncodeToString(b)
	e.vault.srv.PutKV(t, "k12/identities", map[string]any{"token": secret})
	e.apply(ctx, t, idPolicy)
	e.apply(ctx, t, identitiesPod(idPod, "reviewer=reviewer,author=author"))
	if err := e.c.WaitPod(ctx, k12NS, idPod); err != nil {
		e.dumpLogs(ctx, t, k12NS, idPod)
		t.Fatal(err)
	}
	p := e.fullPod(ctx, t, k12NS, idPod)
	if args := strings.Join(p.Spec.InitContainers[0].Args, " "); !strings.Contains(args, "--identity-containers author=author,reviewer=reviewer") {
		t.Errorf("sidecar args %q, want --identity-containers from the annotation", args)
	}
	e.checkTwoIdentities(ctx, t, secret, "")
	e.checkIdentityUsage(ctx, t)
	if t.Failed() {
		e.dumpLogs(ctx, t, k12NS, idPod)
		return
	}

	uid, before, restarts := e.appContainer(ctx, t, "reviewer")
	for _, pid := range e.containerPIDs(t, uid, before) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	var after string
	waitFor(t, "the reviewer container restarted", 3*time.Minute, func() bool {
		var n int
		_, after, n = e.appContainer(ctx, t, "reviewer")
		return n > restarts && after != "" && after != before
	})
	e.checkTwoIdentities(ctx, t, secret, " after the reviewer's restart")
	if t.Failed() {
		e.dumpLogs(ctx, t, k12NS, idPod)
	}
	if logs := e.kubectl(ctx, t, "-n", k12NS, "logs", idPod, "-c", "airlock"); strings.Contains(logs, secret) {
		t.Error("the secret is in the sidecar's log")
	}
	e.kubectl(ctx, t, "-n", k12NS, "delete", "pod", idPod, "--wait=true", "--timeout=2m")
}

// checkIdentityUsage: the reviewer's compute is metered apart (the node agent reads its
// container's cgroup for the sidecar): after the probes it ran, `airlock usage --identity
// reviewer` in the sidecar shows CPU time.
func (e *env) checkIdentityUsage(ctx context.Context, t *testing.T) {
	t.Helper()
	var last string
	deadline := time.Now().Add(time.Minute)
	for { // the sidecar samples every second (spec.usage.interval): observe, bounded
		out, err := e.c.Kubectl(ctx, "-n", k12NS, "exec", idPod, "-c", "airlock", "--",
			"airlock", "usage", "--state-dir", "/var/lib/airlock", "--identity", "reviewer", "--json")
		last = out
		var u struct {
			Sandboxes []struct {
				Identity   string  `json:"identity"`
				CPUSeconds float64 `json:"cpu_seconds"`
				MemoryPeak uint64  `json:"memory_peak_bytes"`
			} `json:"sandboxes"`
		}
		if err == nil && json.Unmarshal([]byte(out), &u) == nil {
			for _, s := range u.Sandboxes {
				if s.Identity == "reviewer" && s.CPUSeconds > 0 {
					t.Logf("reviewer metered: %.3f CPU-seconds, memory peak %d bytes", s.CPUSeconds, s.MemoryPeak)
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("airlock usage --identity reviewer in the sidecar: no CPU time for reviewer within a minute; last answer: %v %s", err, last)
			return
		}
		time.Sleep(time.Second)
	}
}

// checkTwoIdentities runs the requests of both containers and reads what the upstream saw.
func (e *env) checkTwoIdentities(ctx context.Context, t *testing.T, secret, when string) {
	run := func(c string, args ...string) (int, string) { return probeHTTP(t, e.idProbe(ctx, t, c, args...)) }
	url := "http://" + allowedHost + "/identities"
	seen := len(e.allowed.headers())
	if code, body := run("reviewer", "http", url); code != 200 {
		t.Errorf("reviewer GET%s: %d %s, want 200", when, code, body)
	}
	if h := e.allowed.headers()[seen:]; len(h) != 1 || h[0].Get("Authorization") != "" {
		t.Errorf("reviewer GET%s: upstream saw %d requests, Authorization %q; want one, without author's credential", when, len(h), authOf(h))
	}
	code, body := run("reviewer", "post", url)
	var d struct{ Reason, Identity string }
	if code != 403 || json.Unmarshal([]byte(body), &d) != nil || d.Identity != "reviewer" || d.Reason != "method_not_allowed" {
		t.Errorf("reviewer POST%s: %d %s, want 403 method_not_allowed naming identity reviewer", when, code, body)
	}
	seen = len(e.allowed.headers())
	if code, body := run("author", "post", url); code != 200 {
		t.Errorf("author POST%s: %d %s, want 200", when, code, body)
	}
	if h := e.allowed.headers()[seen:]; len(h) != 1 || h[0].Get("Authorization") != "Bearer "+secret {
		t.Errorf("author POST%s: upstream saw %d requests, Authorization %q; want author's credential", when, len(h), authOf(h))
	}
	// With identities, an app container reaches out only through the sidecar: a DNS answer
	// (which opens the address in the kernel for the pod) does not open it to reviewer.
	if out := e.idProbe(ctx, t, "reviewer", "dns", allowedHost); !strings.HasPrefix(out, "rcode=Success") {
		t.Errorf("reviewer DNS%s: %s, want rcode=Success", when, out)
	}
	if out := e.idProbe(ctx, t, "reviewer", "dial", allowedIP+":80"); out != "dial=EPERM" {
		t.Errorf("reviewer straight to the allowed address%s: %s, want dial=EPERM (only through the sidecar)", when, out)
	}
	// Raw TCP is per identity in the kernel, in a pod too: author has the sandbox's
	// protocol tcp rule, reviewer none (the node agent maps each container's cgroup).
	if out := e.idProbe(ctx, t, "author", "dial", rawTCPIP+":80"); out != "dial=ok" {
		t.Errorf("author to the raw TCP host%s: %s, want dial=ok", when, out)
	}
	if out := e.idProbe(ctx, t, "reviewer", "dial", rawTCPIP+":80"); out != "dial=EPERM" {
		t.Errorf("reviewer to the raw TCP host%s: %s, want dial=EPERM (no protocol tcp rule of its own)", when, out)
	}
}

// idProbe runs the probe in container c of the identities pod.
func (e *env) idProbe(ctx context.Context, t *testing.T, c string, args ...string) string {
	t.Helper()
	out, err := e.c.Kubectl(ctx, append([]string{"-n", k12NS, "exec", idPod, "-c", c, "--", "/probe"}, args...)...)
	if err != nil {
		t.Errorf("%s: probe %v: %v %s", c, args, err, out)
	}
	return strings.TrimSpace(out)
}

// probeHTTP reads the probe's "status=N body=QUOTED" line.
func probeHTTP(t *testing.T, out string) (int, string) {
	t.Helper()
	status, body, _ := strings.Cut(strings.TrimSpace(out), " body=")
	code, err := strconv.Atoi(strings.TrimPrefix(status, "status="))
	if err != nil {
		t.Errorf("probe output %q", out)
		return 0, ""
	}
	if b, err := strconv.Unquote(body); err == nil {
		body = b
	}
	return code, body
}

// appContainer returns the pod's UID and the running ID and restart count of its app
// container name ("" while it is not running).
func (e *env) appContainer(ctx context.Context, t *testing.T, name string) (uid, id string, restarts int) {
	t.Helper()
	var p struct {
		Metadata struct{ UID string } `json:"metadata"`
		Status   struct {
			ContainerStatuses []struct {
				Name         string         `json:"name"`
				ContainerID  string         `json:"containerID"`
				RestartCount int            `json:"restartCount"`
				State        map[string]any `json:"state"`
			} `json:"containerStatuses"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(e.kubectl(ctx, t, "-n", k12NS, "get", "pod", idPod, "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == name {
			if _, running := s.State["running"]; running {
				_, id, _ = strings.Cut(s.ContainerID, "://")
			}
			return p.Metadata.UID, id, s.RestartCount
		}
	}
	return p.Metadata.UID, "", 0
}
