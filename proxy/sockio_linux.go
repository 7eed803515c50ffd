package proxy

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
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

	// The state of the read and of the write under way, with the functions the poller
	// calls made once: a closure per call would be an allocation per call. Each mutex
	// keeps concurrent callers in one direction apart, as net.Conn allows them.
	rmu    sync.Mutex
	rbuf   []byte
	rn     int
	rerrno syscall.Errno
	readFn func(fd uintptr) bool

	wmu     sync.Mutex
	wbuf    []byte
	wn      int
	werrno  syscall.Errno
	writeFn func(fd uintptr) bool
}

// newSockIO returns a sockIO for c when c is a TCP socket, else nil.
func newSockIO(c net.Conn) *sockIO {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil || !nonBlocking(rc) {
		return nil
	}
	s := &sockIO{rc: rc, local: tc.LocalAddr(), peer: tc.RemoteAddr()}
	s.readFn, s.writeFn = s.read, s.write
	return s
}

// nonBlocking reports whether the descriptor is in non-blocking mode (net's sockets always
// are): a raw call on a blocking one could hold its processor for as long as it waits.
func nonBlocking(rc syscall.RawConn) bool {
	flags := 0
	var ferr error
	if err := rc.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil {
		return false
	}
	return flags&unix.O_NONBLOCK != 0
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
	s.rmu.Lock()
	s.rbuf, s.rn, s.rerrno = p, 0, 0
	err := s.rc.Read(s.readFn)
	n, errno := s.rn, s.rerrno
	s.rbuf = nil
	s.rmu.Unlock()
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

// read is the poller's function for Read: false waits for readiness.
func (s *sockIO) read(fd uintptr) bool {
	p := s.rbuf
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.rn, s.rerrno = int(r), e
		return true
	}
}

// Write writes all of p, as net.Conn's Write.
func (s *sockIO) Write(p []byte) (int, error) {
	s.wmu.Lock()
	s.wbuf, s.wn, s.werrno = p, 0, 0
	err := s.rc.Write(s.writeFn)
	n, errno := s.wn, s.werrno
	s.wbuf = nil
	s.wmu.Unlock()
	switch {
	case err != nil:
		return n, s.opError("write", err)
	case errno != 0:
		return n, s.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// write is the poller's function for Write: false waits for room.
func (s *sockIO) write(fd uintptr) bool {
	p := s.wbuf
	for s.wn < len(p) {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[s.wn])), uintptr(len(p)-s.wn))
		switch {
		case e == 0 && r == 0:
			s.werrno = syscall.EIO // cannot happen on a socket; as net, no endless loop
			return true
		case e == 0:
			s.wn += int(r)
		case e == syscall.EINTR:
		case e == syscall.EAGAIN:
			return false
		default:
			s.werrno = e
			return true
		}
	}
	return true
}
