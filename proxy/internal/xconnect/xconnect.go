// Package xconnect turns on RFC 8441 extended CONNECT in net/http's HTTP/2 server, which
// the proxy uses for WebSocket over HTTP/2 on intercepted connections (proxy/h2ws.go).
//
// Go's HTTP/2 server (Go 1.26) leaves extended CONNECT off unless the GODEBUG environment
// variable holds "http2xconnect=1" when net/http initialises: it reads os.Getenv("GODEBUG")
// in an init function, and http2xconnect is not a registered setting, so a //go:debug
// directive is refused by the go command and would not reach that read anyway. This
// package's init adds the setting to the environment, and Restore (called from the proxy's
// init, which runs after net/http's) puts the environment back as it was, so processes the
// sidecar starts do not inherit it.
//
// Package initialisation order makes this hold: since Go 1.21 packages are initialised in
// the order of their import paths, each as soon as its imports are, and this package
// imports only os and strings (which net/http imports too) and sorts before "net/http"
// ("github.com/..." < "net/..."), so it is initialised first in every binary that links
// it. The proxy's tests check the server advertises SETTINGS_ENABLE_CONNECT_PROTOCOL.
//
// An operator's own http2xconnect value in GODEBUG (http2xconnect=0 turns the feature off)
// is left alone.
package xconnect

import (
	"os"
	"strings"
)

// setting is the GODEBUG key net/http reads.
const setting = "http2xconnect"

// orig is the GODEBUG environment before init changed it; changed says whether it did.
var (
	orig, hadOrig = os.LookupEnv("GODEBUG")
	changed       bool
)

func init() {
	if v, ok := with(orig); ok {
		changed = os.Setenv("GODEBUG", v) == nil
	}
}

// with returns the GODEBUG value godebug with http2xconnect=1 added, or false when godebug
// already sets http2xconnect (the operator chose).
func with(godebug string) (string, bool) {
	if strings.Contains(godebug, setting+"=") {
		return "", false
	}
	if godebug == "" {
		return setting + "=1", true
	}
	return godebug + "," + setting + "=1", true
}

// Restore puts the GODEBUG environment back as it was before this package's init. Call it
// after net/http has been initialised (from the init of a package that imports net/http).
func Restore() {
	if !changed {
		return
	}
	changed = false
	if hadOrig {
		_ = os.Setenv("GODEBUG", orig)
		return
	}
	_ = os.Unsetenv("GODEBUG")
}
