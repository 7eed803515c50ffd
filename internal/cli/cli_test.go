package cli

import (
	"io"
	"slices"
	"testing"
	"time"
)

func TestAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{59 * time.Second, "59s"}, {time.Minute, "1m"}, {59 * time.Minute, "59m"},
		{time.Hour, "1h"}, {47 * time.Hour, "47h"}, {48 * time.Hour, "2d"},
	} {
		if got := Age(tc.d); got != tc.want {
			t.Errorf("Age(%v): got %q, want %q", tc.d, got, tc.want)
		}
	}
}

// The command line airlock hands to airlock-kube carries exactly the flags that were set (and
// --wait always), so airlock-kube parses back the same options.
func TestKubeCreateArgsRoundTrip(t *testing.T) {
	for _, args := range [][]string{
		{"--image", "python:3"},
		{"--namespace", "team a", "--kubeconfig", "/k", "--kube-context", "c", "--image", "i",
			"--policy-configmap", "pm", "--policy-key", "k.yaml", "--command", "sleep 1", "--pod-environment", "production", "--wait", "0"},
	} {
		var first KubeCreate
		fs := NewFlagSet("create", "", "", io.Discard)
		first.Register(fs)
		if _, err := fs.ParseArgs(args, io.Discard, false); err != nil {
			t.Fatal(err)
		}
		var second KubeCreate
		fs2 := NewFlagSet("create", "", "", io.Discard)
		second.Register(fs2)
		if _, err := fs2.ParseArgs(first.Args(), io.Discard, false); err != nil {
			t.Fatalf("airlock-kube cannot parse %q: %v", first.Args(), err)
		}
		if first != second {
			t.Errorf("%q → %q parses back as %+v, want %+v", args, first.Args(), second, first)
		}
		if !slices.Contains(first.Args(), "--wait") {
			t.Errorf("%q: --wait missing (its zero means do not wait)", first.Args())
		}
	}
}
