package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"time"
)

// recordTypeHandshake is the first byte of a TLS handshake record (RFC 8446 section 5.1).
const recordTypeHandshake = 0x16

// maxHelloBytes bounds what the proxy reads to find a ClientHello: crypto/tls accepts a
// handshake message of up to 64 KiB, which may span several 16 KiB records.
const maxHelloBytes = 80 << 10

// clientHello is what the proxy learns from a client's first bytes.
type clientHello struct {
	tls bool   // the bytes start a TLS handshake record
	sni string // the server_name extension, "" when absent
}

// readClientHello looks at the client's first bytes in br. When they start a TLS handshake
// record it parses the ClientHello with crypto/tls, which never writes to the client here,
// and returns the server name with the bytes it consumed from br; the caller sends those
// upstream first. Bytes that are not TLS are left unread in br. A TLS record that does not
// hold a well-formed ClientHello is an error.
func readClientHello(br *bufio.Reader) (clientHello, []byte, error) {
	first, err := br.Peek(1)
	if err != nil {
		return clientHello{}, nil, fmt.Errorf("read client hello: %w", err)
	}
	if first[0] != recordTypeHandshake {
		return clientHello{}, nil, nil
	}
	rc := &recordingConn{r: io.LimitReader(br, maxHelloBytes)}
	var hello *tls.ClientHelloInfo
	srv := tls.Server(rc, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			hello = h
			return nil, errNoHello // stop the handshake: we only wanted to read
		},
	})
	err = srv.HandshakeContext(context.Background())
	if hello == nil {
		return clientHello{tls: true}, rc.buf.Bytes(), fmt.Errorf("read client hello: %w", err)
	}
	return clientHello{tls: true, sni: hello.ServerName}, rc.buf.Bytes(), nil
}

// recordingConn is the net.Conn crypto/tls parses a ClientHello from: it reads from r,
// records what it read, and swallows what crypto/tls writes (the alert it sends when the
// handshake is stopped).
type recordingConn struct {
	r   io.Reader
	buf bytes.Buffer
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.buf.Write(p[:n])
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *recordingConn) Close() error                     { return nil }
func (c *recordingConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *recordingConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *recordingConn) SetDeadline(time.Time) error      { return nil }
func (c *recordingConn) SetReadDeadline(time.Time) error  { return nil }
func (c *recordingConn) SetWriteDeadline(time.Time) error { return nil }
