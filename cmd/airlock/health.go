package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/cli"
)

const healthLong = `
Exit 0 when an HTTP GET of URL (a loopback admin endpoint such as /readyz) answers 200, 1
otherwise. It is the injected sidecar's exec probe: the admin listener binds loopback only, so
the kubelet (which probes from the node) cannot reach it with an httpGet probe.`

func healthCmd(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("health", "airlock health URL", healthLong, stderr)
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 1 || !strings.HasPrefix(rest[0], "http://127.0.0.1:") && !strings.HasPrefix(rest[0], "http://[::1]:") {
		return cli.Failf("health: want one loopback URL, e.g. http://127.0.0.1:9090/readyz")
	}
	client := &http.Client{Timeout: *timeout}
	resp, err := client.Get(rest[0])
	if err != nil {
		return &cli.ExitError{Code: 1, Msg: "health: " + cli.OneLineErr(err)}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &cli.ExitError{Code: 1, Msg: fmt.Sprintf("health: %s answered %s", rest[0], resp.Status)}
	}
	return nil
}
