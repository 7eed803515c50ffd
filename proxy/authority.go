package proxy

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/policy"
)

// authority is a destination as a client named it in a request target, a Host header or a
// CONNECT line: the host as given (IPv6 brackets removed) and the port, 0 when absent.
type authority struct {
	host string
	port int
}

var errBadAuthority = errors.New("malformed authority")

// parseAuthority splits "host[:port]". It does not normalise the host (policy.NormalizeHost
// does that) but rejects what cannot be an authority: an empty host, an unbracketed IPv6
// address, userinfo, a path, whitespace or control bytes, or a port outside 1-65535.
func parseAuthority(s string) (authority, error) {
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return authority{}, fmt.Errorf("parse authority %q: %w", s, errBadAuthority)
		}
		host, port = s[1:end], s[end+1:]
		if port != "" && port[0] != ':' {
			return authority{}, fmt.Errorf("parse authority %q: %w", s, errBadAuthority)
		}
		port = strings.TrimPrefix(port, ":")
	} else if i := strings.IndexByte(s, ':'); i >= 0 {
		if strings.Count(s, ":") > 1 {
			return authority{}, fmt.Errorf("parse authority %q: unbracketed IPv6: %w", s, errBadAuthority)
		}
		host, port = s[:i], s[i+1:]
	}
	if host == "" || strings.ContainsFunc(host, badHostRune) {
		return authority{}, fmt.Errorf("parse authority %q: %w", s, errBadAuthority)
	}
	a := authority{host: host}
	if port != "" {
		n, err := parsePort(port)
		if err != nil {
			return authority{}, fmt.Errorf("parse authority %q: %w", s, err)
		}
		a.port = n
	}
	return a, nil
}

// parsePort accepts 1 to 5 decimal digits naming a port in 1-65535.
func parsePort(s string) (int, error) {
	if len(s) == 0 || len(s) > 5 || strings.ContainsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, fmt.Errorf("parse port %q: %w", s, errBadAuthority)
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("parse port %q: out of range: %w", s, errBadAuthority)
	}
	return n, nil
}

func badHostRune(r rune) bool {
	return r <= ' ' || r == 0x7f || strings.ContainsRune("/\\@?#[]", r)
}

// withPort prints the authority as host:port, with def when the client gave no port.
func (a authority) withPort(def int) string {
	if a.port != 0 {
		def = a.port
	}
	return net.JoinHostPort(a.host, strconv.Itoa(def))
}

// agree checks that a Host header (or TLS server name, hdr) names the destination a request
// was decided on: wantHost (normalised) and wantPort (effective). A header without a port
// agrees on the name alone, since clients leave out default ports; a port, when present,
// must match. It returns "" when they agree, else a sentence for the audit trail.
func agree(wantHost string, wantPort int, hdr string) string {
	a, err := parseAuthority(hdr)
	if err != nil {
		return fmt.Sprintf("Host header %q is not a valid host", hdr)
	}
	h, err := policy.NormalizeHost(a.host)
	if err != nil || h.Name != wantHost {
		return fmt.Sprintf("Host header %q does not match destination %q", hdr, wantHost)
	}
	if a.port != 0 && a.port != wantPort {
		return fmt.Sprintf("Host header %q does not match destination port %d", hdr, wantPort)
	}
	return ""
}

// defaultPort is the port a scheme implies.
func defaultPort(scheme string) int {
	if scheme == "https" {
		return 443
	}
	return 80
}
