package main

import (
	"bytes"
	"testing"
)

// airlock runs the airlock-kube CLI in-process and returns exit code, stdout and stderr.
func airlock(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := program.Main(args, &out, &errb)
	return code, out.String(), errb.String()
}
