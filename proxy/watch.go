package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"time"
)

// maxWatchBytes bounds what a clientWatch keeps of bytes the client sends while it is
// watched; past it the watch stops reading (a client sending that much has not gone).
const maxWatchBytes = 64 << 10

// clientWatch reads a client's connection in the background while the proxy waits on
// something for it with nothing of the client's left to read (an approval, a resolve, an
// upstream dial): EOF or a read error ends its context, as net/http's server ends a
// request's context when its client goes. Bytes that arrive instead (a pipelined request, a
// ClientHello sent before a tunnel's 200) are kept, up to maxWatchBytes, and handed back by
// stop, to be read before anything else of the connection.
type clientWatch struct {
	ctx    context.Context
	cancel context.CancelFunc
	conn   net.Conn  // whose read deadline stop moves
	r      io.Reader // what is read: conn, or a reader in front of it
	done   chan struct{}
	got    []byte
	ended  bool
}

// watchClient starts watching conn, reading from r (conn or a buffer in front of it), with a
// context derived from ctx. The caller must call stop. conn's read deadline must be clear.
func watchClient(ctx context.Context, conn net.Conn, r io.Reader) *clientWatch {
	w := &clientWatch{conn: conn, r: r, done: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(ctx)
	go w.run()
	return w
}

func (w *clientWatch) run() {
	defer close(w.done)
	buf := make([]byte, 512)
	for len(w.got) < maxWatchBytes {
		n, err := w.r.Read(buf[:min(len(buf), maxWatchBytes-len(w.got))])
		w.got = append(w.got, buf[:n]...)
		switch {
		case err == nil:
			continue
		case !isTimeout(err): // EOF, reset, closed: the client is gone
			w.cancel()
		}
		return // a timeout is stop's
	}
}

// stop ends the watch (its read returns at once) and its context, and returns the bytes it
// read, which the caller must read first. It may be called more than once.
func (w *clientWatch) stop() []byte {
	if w.ended {
		return w.got
	}
	w.ended = true
	_ = w.conn.SetReadDeadline(time.Unix(1, 0)) // in the past: the read returns now
	<-w.done
	_ = w.conn.SetReadDeadline(time.Time{})
	w.cancel()
	return w.got
}

// resume stops the watch and returns the client connection to go on with: client itself, or
// one that reads the watch's bytes first.
func (w *clientWatch) resume(client net.Conn) net.Conn {
	if got := w.stop(); len(got) > 0 {
		return &prefixConn{Conn: client, r: io.MultiReader(bytes.NewReader(got), client)}
	}
	return client
}
