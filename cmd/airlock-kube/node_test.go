package main

import (
	"strings"
	"testing"
)

func TestNodeRefusesBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"node"}, "--node-name is required"},
		{[]string{"node", "--node-name", "n1", "--cgroup-root", t.TempDir()}, "--cgroup-root"},
		{[]string{"node", "--node-name", "n1", "--log-level", "loud"}, "--log-level"},
		{[]string{"node", "--node-name", "n1", "extra"}, "unexpected argument"},
	}
	for _, tc := range cases {
		code, _, stderr := airlock(t, tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("airlock %v: exit %d, stderr %q; want a failure naming %q", tc.args, code, stderr, tc.want)
		}
	}
}
