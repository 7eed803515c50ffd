package policy

import (
	"errors"
	"testing"
)

func TestBuiltinProfilesLoad(t *testing.T) {
	for _, name := range BuiltinNames() {
		t.Run(name, func(t *testing.T) {
			p, err := Builtin(name)
			if err != nil {
				t.Fatalf("Builtin(%q): %v", name, err)
			}
			if p.Name() != name || p.Source() != "builtin:"+name || p.Mode() != ModeEnforce {
				t.Errorf("got name %q source %q mode %q, want %q, %q, enforce", p.Name(), p.Source(), p.Mode(), name, "builtin:"+name)
			}
		})
	}
	t.Run("unknown", func(t *testing.T) {
		_, err := Builtin("repo-reed")
		if !errors.Is(err, ErrUnknownProfile) {
			t.Errorf("got %v, want ErrUnknownProfile", err)
		}
	})
}

func TestBuiltinProfileDecisions(t *testing.T) {
	type verdict struct {
		allow  bool
		reason Reason
	}
	ok := verdict{true, ReasonRuleMatched}
	tests := []struct {
		profile string
		name    string
		req     Request
		want    verdict
	}{
		{"offline", "anything", Request{Scheme: "https", Host: "github.com"}, verdict{false, ReasonOffline}},

		{"repo-read", "browse github", Request{Scheme: "https", Host: "github.com", Method: "GET", Path: "/acme/widget"}, ok},
		{"repo-read", "clone refs", Request{Scheme: "https", Host: "github.com", Method: "GET", Path: "/acme/widget.git/info/refs?service=git-upload-pack"}, ok},
		{"repo-read", "clone pack", Request{Scheme: "https", Host: "github.com", Method: "POST", Path: "/acme/widget.git/git-upload-pack"}, ok},
		{"repo-read", "clone pack without .git", Request{Scheme: "https", Host: "github.com", Method: "POST", Path: "/acme/widget/git-upload-pack"}, ok},
		{"repo-read", "lfs batch", Request{Scheme: "https", Host: "github.com", Method: "POST", Path: "/acme/widget.git/info/lfs/objects/batch"}, ok},
		{"repo-read", "push denied", Request{Scheme: "https", Host: "github.com", Method: "POST", Path: "/acme/widget.git/git-receive-pack"}, verdict{false, ReasonPathNotAllowed}},
		{"repo-read", "other POST denied", Request{Scheme: "https", Host: "github.com", Method: "POST", Path: "/acme/widget/issues"}, verdict{false, ReasonPathNotAllowed}},
		{"repo-read", "api read", Request{Scheme: "https", Host: "api.github.com", Method: "GET", Path: "/repos/acme/widget"}, ok},
		{"repo-read", "graphql denied", Request{Scheme: "https", Host: "api.github.com", Method: "POST", Path: "/graphql"}, verdict{false, ReasonMethodNotAllowed}},
		{"repo-read", "codeload", Request{Scheme: "https", Host: "codeload.github.com", Method: "GET", Path: "/acme/widget/tar.gz/main"}, ok},
		{"repo-read", "release asset", Request{Scheme: "https", Host: "objects.githubusercontent.com", Method: "GET", Path: "/x"}, ok},
		{"repo-read", "gitlab nested fetch", Request{Scheme: "https", Host: "gitlab.com", Method: "POST", Path: "/g/sub/widget.git/git-upload-pack"}, ok},
		{"repo-read", "pypi", Request{Scheme: "https", Host: "pypi.org", Method: "GET", Path: "/simple/requests/"}, ok},
		{"repo-read", "pythonhosted", Request{Scheme: "https", Host: "files.pythonhosted.org", Method: "GET", Path: "/packages/x.whl"}, ok},
		{"repo-read", "npm", Request{Scheme: "https", Host: "registry.npmjs.org", Method: "GET", Path: "/left-pad"}, ok},
		{"repo-read", "npm publish denied", Request{Scheme: "https", Host: "registry.npmjs.org", Method: "PUT", Path: "/left-pad"}, verdict{false, ReasonMethodNotAllowed}},
		{"repo-read", "go proxy", Request{Scheme: "https", Host: "proxy.golang.org", Method: "GET", Path: "/golang.org/x/net/@v/list"}, ok},
		{"repo-read", "go sum", Request{Scheme: "https", Host: "sum.golang.org", Method: "GET", Path: "/lookup/golang.org/x/net@v0.1.0"}, ok},
		{"repo-read", "other host", Request{Scheme: "https", Host: "example.com"}, verdict{false, ReasonNoRule}},
		{"repo-read", "other port", Request{Host: "github.com", Port: 22}, verdict{false, ReasonPortNotAllowed}},

		{"repo-write", "push", Request{Scheme: "https", Host: "github.com", Method: "POST", Path: "/acme/widget.git/git-receive-pack"}, ok},
		{"repo-write", "api write", Request{Scheme: "https", Host: "api.github.com", Method: "PATCH", Path: "/repos/acme/widget/pulls/1"}, ok},
		{"repo-write", "graphql", Request{Scheme: "https", Host: "api.github.com", Method: "POST", Path: "/graphql"}, ok},
		{"repo-write", "gitlab push", Request{Scheme: "https", Host: "gitlab.com", Method: "POST", Path: "/g/sub/widget.git/git-receive-pack"}, ok},
		{"repo-write", "gitlab api write", Request{Scheme: "https", Host: "gitlab.com", Method: "PUT", Path: "/api/v4/projects/1/merge_requests/2"}, ok},
		{"repo-write", "release upload", Request{Scheme: "https", Host: "uploads.github.com", Method: "POST", Path: "/repos/acme/widget/releases/1/assets"}, ok},
		{"repo-write", "npm publish denied", Request{Scheme: "https", Host: "registry.npmjs.org", Method: "PUT", Path: "/left-pad"}, verdict{false, ReasonMethodNotAllowed}},

		{"deployment", "fetch", Request{Scheme: "https", Host: "github.com", Method: "POST", Path: "/acme/widget.git/git-upload-pack"}, ok},
		{"deployment", "no plain http", Request{Scheme: "http", Host: "github.com", Method: "GET", Path: "/"}, verdict{false, ReasonPortNotAllowed}},
		{"deployment", "no push", Request{Scheme: "https", Host: "github.com", Method: "POST", Path: "/acme/widget.git/git-receive-pack"}, verdict{false, ReasonPathNotAllowed}},
		{"deployment", "image pull", Request{Scheme: "https", Host: "ghcr.io", Method: "GET", Path: "/v2/acme/widget/manifests/1.0"}, ok},
		{"deployment", "image push denied", Request{Scheme: "https", Host: "ghcr.io", Method: "PUT", Path: "/v2/acme/widget/manifests/1.0"}, verdict{false, ReasonMethodNotAllowed}},
		{"deployment", "deployment status", Request{Scheme: "https", Host: "api.github.com", Method: "POST", Path: "/repos/acme/widget/deployments/7/statuses"}, ok},
		{"deployment", "pull request denied", Request{Scheme: "https", Host: "api.github.com", Method: "POST", Path: "/repos/acme/widget/pulls"}, verdict{false, ReasonPathNotAllowed}},
		{"deployment", "no registries", Request{Scheme: "https", Host: "pypi.org"}, verdict{false, ReasonNoRule}},
	}
	for _, tc := range tests {
		t.Run(tc.profile+"/"+tc.name, func(t *testing.T) {
			p, err := Builtin(tc.profile)
			if err != nil {
				t.Fatal(err)
			}
			d := p.Decide(tc.req)
			if got := (verdict{d.Allowed(), d.Reason}); got != tc.want {
				t.Errorf("got %+v (%s), want %+v", got, d.Detail, tc.want)
			}
		})
	}
}

// TestRepoWriteWidensRepoRead checks that every rule of repo-read is covered by repo-write,
// by loading a copy of repo-read's rules under repo-write: the narrowing check must accept
// it.
func TestRepoWriteWidensRepoRead(t *testing.T) {
	read, err := Builtin("repo-read")
	if err != nil {
		t.Fatal(err)
	}
	write, err := Builtin("repo-write")
	if err != nil {
		t.Fatal(err)
	}
	d := newDecoder("check")
	parentRules := write.rules
	for i, r := range read.rules {
		checkCovered(d, r, joinIndex("spec.egress", i), parentRules, "repo-write")
	}
	if err := joinErrors(d.errs); err != nil {
		t.Errorf("repo-write does not cover repo-read:\n%v", err)
	}
}
