//go:build !linux

package proxy

import (
	"io"
	"net"
)

// rawIO returns c: raw socket I/O (sockio_linux.go) is Linux's only.
func rawIO(c net.Conn) io.ReadWriter { return c }
