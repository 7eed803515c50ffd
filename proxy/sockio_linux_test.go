package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// TestSockIOCarriesBytes writes more than the socket buffers hold (the write waits for room
// in the poller) and reads it all back through sockIO on the other end.
func TestSockIOCarriesBytes(t *testing.T) {
	a, b := tcpPair(t)
	wa, rb := newSockIO(a), newSockIO(b)
	if wa == nil || rb == nil {
		t.Fatal("no sockIO for a TCP socket")
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
	errc := make(chan error, 1)
	go func() {
		n, err := wa.Write(want)
		if err == nil && n != len(want) {
			err = io.ErrShortWrite
		}
		if err == nil {
			err = a.CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(rb) // ends at io.EOF: the half-close
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d written", len(got), len(want))
	}
	if n, err := rb.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("read after the end = %d, %v; want 0, io.EOF", n, err)
	}
}

// TestSockIOErrorsAsNet: a deadline, a Close and a reset give the errors net.Conn's Read and
// Write give (callers test them with errors.Is and net.Error).
func TestSockIOErrorsAsNet(t *testing.T) {
	a, b := tcpPair(t)
	ra := newSockIO(a)
	if err := a.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := ra.Read(make([]byte, 1))
	var ne net.Error
	var oe *net.OpError
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() || !errors.As(err, &oe) || oe.Op != "read" {
		t.Errorf("read past the deadline: %#v; want a read *net.OpError timing out", err)
	}
	_ = a.SetReadDeadline(time.Time{})

	// Close while a read waits.
	errc := make(chan error, 1)
	go func() {
		_, err := ra.Read(make([]byte, 1))
		errc <- err
	}()
	if _, err := b.Write([]byte("x")); err != nil { // the read takes this byte first
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("read of a byte: %v", err)
	}
	go func() {
		_, err := ra.Read(make([]byte, 1))
		errc <- err
	}()
	_ = a.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Errorf("read across Close: %v; want net.ErrClosed", err)
	}

	// A write to a peer that reset the connection fails with its errno.
	c, d := tcpPair(t)
	_ = d.SetLinger(0)
	_ = d.Close() // RST
	wc := newSockIO(c)
	var werr error
	for range 100 { // on loopback the reset is in before Close returns; a write or two at most
		if _, werr = wc.Write([]byte("data")); werr != nil {
			break
		}
	}
	if !errors.Is(werr, syscall.EPIPE) && !errors.Is(werr, syscall.ECONNRESET) || !errors.As(werr, &oe) || oe.Op != "write" {
		t.Errorf("write after a reset: %v; want a write *net.OpError with EPIPE or ECONNRESET", werr)
	}
}

func TestRawIOOnlyForTCP(t *testing.T) {
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	if rw := rawIO(p); rw != io.ReadWriter(p) {
		t.Errorf("rawIO of a pipe = %T, want the pipe itself", rw)
	}
	a, _ := tcpPair(t)
	if _, ok := rawIO(a).(*sockIO); !ok {
		t.Errorf("rawIO of a TCP socket = %T, want *sockIO", rawIO(a))
	}
}

// TestSockIONoAllocations: a read and a write allocate nothing (they run per request).
func TestSockIONoAllocations(t *testing.T) {
	a, b := tcpPair(t)
	wa, rb := newSockIO(a), newSockIO(b)
	msg, buf := []byte("GET / HTTP/1.1\r\n\r\n"), make([]byte, 64)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := wa.Write(msg); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(msg); {
			n, err := rb.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per write and read, want 0", allocs)
	}
}

// TestSockIONotForBlockingSockets: a socket put in blocking mode gets no sockIO (a raw call
// would hold its processor while it waits).
func TestSockIONotForBlockingSockets(t *testing.T) {
	a, _ := tcpPair(t)
	rc, err := a.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if s := newSockIO(a); s != nil {
		t.Error("sockIO for a blocking socket")
	}
}
