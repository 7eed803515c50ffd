package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestNormalizePath(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // "" means an error is expected
	}{
		{"root", "/", "/"},
		{"empty", "", "/"},
		{"query dropped", "/a/b?x=1", "/a/b"},
		{"query only", "?x=/..", "/"},
		{"fragment dropped", "/a#/../b", "/a"},
		{"plain", "/repos/acme/x", "/repos/acme/x"},
		{"trailing slash kept", "/repos/acme/", "/repos/acme/"},
		{"dot", "/a/./b", "/a/b"},
		{"dot at end", "/a/.", "/a/"},
		{"dotdot", "/a/b/../c", "/a/c"},
		{"dotdot at end", "/a/b/..", "/a/"},
		{"dotdot to root", "/a/..", "/"},
		{"dotdot above root", "/..", ""},
		{"dotdot above root later", "/a/../../b", ""},
		{"encoded dotdot", "/a/%2e%2e/b", "/b"},
		{"encoded dotdot upper", "/a/%2E%2E/b", "/b"},
		{"half encoded dotdot", "/a/.%2e/b", "/b"},
		{"encoded dotdot above root", "/%2e%2e/etc/passwd", ""},
		{"encoded slash", "/repos%2Facme/x", "/repos/acme/x"},
		{"encoded slash dotdot", "/public%2F..%2Fadmin", "/admin"},
		{"encoded space", "/a%20b", "/a b"},
		{"utf-8", "/caf%C3%A9", "/café"},
		{"double-encoded dot", "/a/%252e%252e/b", ""},
		{"double-encoded slash", "/a%252Fb", ""},
		{"double-encoded backslash", "/a%255cb", ""},
		{"invalid escape", "/a%zzb", ""},
		{"truncated escape", "/a%2", ""},
		{"percent at end", "/a%", ""},
		{"NUL", "/a%00b", ""},
		{"raw control", "/a\x01b", ""},
		{"encoded newline", "/a%0Ab", ""},
		{"DEL", "/a%7Fb", ""},
		{"backslash", `/a\..\b`, ""},
		{"encoded backslash", "/a%5C..%5Cb", ""},
		{"no leading slash", "a/b", ""},
		{"asterisk form", "*", ""},
		{"servlet dotdot param", "/public/..;/admin", ""},
		{"servlet dot param", "/public/.;x/admin", ""},
		{"double slash with dotdot", "/a//../b", ""},
		{"leading double slash with dotdot", "//a/../b", ""},
		{"double slash alone", "/a//b", "/a//b"},
		{"dotdot-like name", "/a/..b/c", "/a/..b/c"},
		// Text a server may read as another path (issue 15, class 3).
		{"overlong dot 2 bytes", "/a/%C0%AE%C0%AE/b", ""},
		{"overlong dot 3 bytes", "/a/%E0%80%AE%E0%80%AE/b", ""},
		{"overlong dot 4 bytes", "/a/%F0%80%80%AE/b", ""},
		{"overlong slash", "/a%C0%AFb", ""},
		{"overlong dot lower hex", "/a/%c0%ae/b", ""},
		{"raw overlong bytes", "/a/\xc0\xae\xc0\xae/b", ""},
		{"stray continuation byte", "/a/%80/b", ""},
		{"surrogate", "/a/%ED%A0%80/b", ""},
		{"truncated sequence", "/a/%E2%80", ""},
		{"fullwidth dot", "/a/%EF%BC%8E%EF%BC%8E/b", ""},
		{"fullwidth dot raw", "/a/\uff0e\uff0e/b", ""},
		{"fullwidth slash", "/a%EF%BC%8Fb", ""},
		{"fullwidth backslash", "/a%EF%BC%BCb", ""},
		{"one dot leader", "/a/%E2%80%A4%E2%80%A4/b", ""},
		{"two dot leader", "/a/%E2%80%A5/b", ""},
		{"small full stop", "/a/%EF%B9%92%EF%B9%92/b", ""},
		{"fullwidth percent", "/a/%EF%BC%85%32%65/b", ""},
		{"fullwidth semicolon", "/a/..%EF%BC%9B/b", ""},
		{"division slash", "/a%E2%88%95b", ""},
		{"ideographic full stop", "/a/%E3%80%82%E3%80%82/b", ""},
		{"double-encoded overlong", "/a/%25c0%25ae/b", ""},
		{"triple-encoded dot", "/a/%25252e/b", ""},
		{"double-encoded percent", "/a/%2525/b", ""},
		{"other unicode stays", "/wiki/%E6%97%A5%E6%9C%AC", "/wiki/日本"},
		{"fullwidth letter stays", "/a/%EF%BD%81", "/a/ａ"},
		{"literal percent letters", "/a/100%25done", "/a/100%done"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NormalizePath(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("NormalizePath(%q) = %q, want an error", tc.in, got)
				}
				if !errors.Is(err, ErrInvalidPath) {
					t.Errorf("error %v does not wrap ErrInvalidPath", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NormalizePath(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Errorf("NormalizePath(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestPathPatternMatch(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"/repos/acme/**", "/repos/acme", true},
		{"/repos/acme/**", "/repos/acme/", true},
		{"/repos/acme/**", "/repos/acme/x", true},
		{"/repos/acme/**", "/repos/acme/x/y", true},
		{"/repos/acme/**", "/repos/acmeevil", false},
		{"/repos/acme/**", "/repos/other/x", false},
		{"/repos/acme/**", "/repos", false},
		{"/**", "/", true},
		{"/**", "/anything/at/all", true},
		{"/", "/", true},
		{"/", "/a", false},
		{"/a", "/a/", false},
		{"/a/", "/a/", true},
		{"/*/*/git-upload-pack", "/acme/repo.git/git-upload-pack", true},
		{"/*/*/git-upload-pack", "/acme/repo/git-upload-pack", true},
		{"/*/*/git-upload-pack", "/acme/git-upload-pack", false},
		{"/*/*/git-upload-pack", "/a/b/c/git-upload-pack", false},
		{"/*/*/git-upload-pack", "/acme//git-upload-pack", false},
		{"/**/git-upload-pack", "/g/sub/repo.git/git-upload-pack", true},
		{"/**/git-upload-pack", "/git-upload-pack", true},
		{"/**/git-upload-pack", "/g/git-upload-pack/x", false},
		{"/a/*", "/a/b", true},
		{"/a/*", "/a/", false},
		{"/a/*", "/a/b/c", false},
		{"/a/*.json", "/a/x.json", true},
		{"/a/*.json", "/a/x.yaml", false},
		{"/a/x*y", "/a/xy", true},
		{"/a/x*y", "/a/xaby", true},
		{"/a/x*y*z", "/a/xyyz", true},
		{"/a/x*y*z", "/a/xzy", false},
		{"/a/**/b/**", "/a/x/y/b", true},
		{"/a/**/b/**", "/a/b/c", true},
		{"/a/**/b/**", "/a/x/c", false},
		{"/**/**/**/x", "/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t/y", false},
	}
	for _, tc := range tests {
		t.Run(tc.pattern+" "+tc.path, func(t *testing.T) {
			p, msg := parsePathPattern(tc.pattern)
			if msg != "" {
				t.Fatalf("parsePathPattern(%q): %s", tc.pattern, msg)
			}
			if got := p.match(tc.path); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPathPatternErrors(t *testing.T) {
	tests := []struct {
		pattern string
		want    string
	}{
		{"repos/**", `start with "/"; use "/repos/**"`},
		{"", `start with "/"`},
		{"/a?x=1", `without its query; use "/a"`},
		{"/a%20b", `decoded path; use "/a b"`},
		{"/a%zz", `decoded path`},
		{"/a/../b", `remove "." and ".." segments`},
		{"/a/./b", `remove "." and ".." segments`},
		{"/a**", `"**" must be a whole segment`},
		{"/a/***", `"**" must be a whole segment`},
		{`/a\b`, "backslashes"},
	}
	for _, tc := range tests {
		t.Run(tc.pattern, func(t *testing.T) {
			_, msg := parsePathPattern(tc.pattern)
			if !strings.Contains(msg, tc.want) {
				t.Errorf("parsePathPattern(%q) = %q, want it to contain %q", tc.pattern, msg, tc.want)
			}
		})
	}
}

func TestPathPatternCovers(t *testing.T) {
	tests := []struct {
		parent, child string
		want          bool
	}{
		{"/repos/acme/**", "/repos/acme/**", true},
		{"/**", "/anything/**", true},
		{"/**", "/", true},
		{"/repos/**", "/repos/acme/**", true},
		{"/repos/**", "/repos/acme/x", true},
		{"/repos/**", "/repos", true},
		{"/repos/*/x", "/repos/acme/x", true},
		{"/repos/*/x", "/repos/*/x", true},
		{"/repos/*/x", "/repos/a*/x", true},
		{"/*/*/git-upload-pack", "/acme/repo.git/git-upload-pack", true},
		{"/**/git-upload-pack", "/*/*/git-upload-pack", true},
		{"/repos/a*/x", "/repos/ab/x", true},
		{"/repos/acme/**", "/repos/**", false},
		{"/repos/acme/**", "/repos/acmeevil/x", false},
		{"/repos/*/x", "/repos/**/x", false},
		{"/repos/*/x", "/repos//x", false},
		{"/repos/a*/x", "/repos/*/x", false},
		{"/repos/a*/x", "/repos/b*/x", false},
		{"/a", "/a/", false},
		{"/a/b", "/a/**", false},
		{"/*/*/git-upload-pack", "/**/git-upload-pack", false},
	}
	for _, tc := range tests {
		t.Run(tc.parent+" covers "+tc.child, func(t *testing.T) {
			p, msg := parsePathPattern(tc.parent)
			c, msg2 := parsePathPattern(tc.child)
			if msg != "" || msg2 != "" {
				t.Fatalf("bad pattern: %s %s", msg, msg2)
			}
			if got := p.covers(c); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
