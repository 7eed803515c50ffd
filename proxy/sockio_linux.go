package proxy

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// sockIO reads and writes a TCP socket of the fast path with raw system calls on its
// non-blocking descriptor, waiting for readiness through Go's poller as net does (deadlines
// and Close hold as for the socket's own Read and Write).
//
// Why: net's Read and Write enter the runtime's system-call state, and a write on loopback
// runs the receiver's side in the kernel and wakes it; on a busy machine the writer is often
// preempted there, the runtime's monitor then takes its processor away for another thread
// (a thread hand-off, and the monitor polling every 20 µs for the next millisecond or more),
// and the writer must find a processor again when it returns. The socket never blocks (it is
// non-blocking: EAGAIN waits in the poller, off the processor), so its calls keep their
// processor as any short computation does.
type sockIO struct {
	rc          syscall.RawConn
	local, peer net.Addr // for errors, as net.Conn's
}

// newSockIO returns a sockIO for c when c is a TCP socket, else nil.
func newSockIO(c net.Conn) *sockIO {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return &sockIO{rc: rc, local: tc.LocalAddr(), peer: tc.RemoteAddr()}
}

// opError wraps err as net.Conn's Read and Write do, so callers see the same errors.
func (s *sockIO) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: s.local, Addr: s.peer, Err: err}
}

// rawIO returns c's reader and writer: a sockIO when c is a TCP socket, else c.
func rawIO(c net.Conn) io.ReadWriter {
	if s := newSockIO(c); s != nil {
		return s
	}
	return c
}

// Read reads once, as net.Conn's Read: 0 bytes read is io.EOF.
func (s *sockIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := s.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait for readiness
			}
			n, errno = int(r), e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, s.opError("read", err)
	case errno != 0:
		return 0, s.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p, as net.Conn's Write.
func (s *sockIO) Write(p []byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := s.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n))
			switch {
			case e == 0 && r == 0:
				errno = syscall.EIO // cannot happen on a socket; as net, no endless loop
				return true
			case e == 0:
				n += int(r)
			case e == syscall.EINTR:
			case e == syscall.EAGAIN:
				return false // wait for room
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return n, s.opError("write", err)
	case errno != 0:
		return n, s.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}
