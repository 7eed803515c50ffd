package main

import (
	"io"
	"strings"
	"testing"
)

func TestPodFlagsValidate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" when valid
	}{
		{[]string{"--pod-cgroup", "--cgroup-root", "/host/sys/fs/cgroup"}, ""},
		{[]string{"--pod-cgroup", "--environment", "production"}, ""},
		{[]string{"--pod-cgroup", "--cgroup", "/sys/fs/cgroup/x"}, "mutually exclusive"},
		{[]string{"--cgroup-root", "/host/sys/fs/cgroup"}, "only with --pod-cgroup"},
		{[]string{"--environment", "production"}, "--node-agent in a Kubernetes pod"},
		{[]string{"--node-agent", "--environment", "production"}, ""},
		{[]string{"--node-agent", "--transparent-addr", "off", "--environment", "production"}, ""},
		{[]string{"--node-agent", "--transparent-addr", "off", "--pod-cgroup"}, "exclusive"},
		{[]string{"--cgroup", "/sys/fs/cgroup/x", "--sandbox-netns", "/run/netns/x"}, ""},
		{[]string{"--pod-cgroup", "--sandbox-netns", "/run/netns/x"}, "never a pod"},
		{[]string{"--node-agent", "--sandbox-netns", "/run/netns/x"}, "never a pod"},
		{[]string{"--sandbox-netns", "/run/netns/x"}, ""},
	} {
		fs, c := runFlags(io.Discard)
		if _, err := fs.ParseArgs(append([]string{"--policy", "p.yaml"}, tc.args...), io.Discard, false); err != nil {
			t.Fatalf("%v: parse: %v", tc.args, err)
		}
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: got %v, want valid", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: got %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
