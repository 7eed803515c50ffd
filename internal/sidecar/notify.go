package sidecar

import (
	"fmt"
	"net"
	"strings"
)

// notifyReady sends "READY=1" to the unix datagram socket at addr, as systemd's sd_notify
// does: addr is a path, or an abstract socket name written with a leading '@'. An empty addr
// does nothing. The message carries the sender's credentials (the kernel adds them for a
// receiver that asks), which is how a receiver tells its own child's message from another's.
func notifyReady(addr string) error {
	if addr == "" {
		return nil
	}
	name := addr
	if strings.HasPrefix(addr, "@") {
		name = "\x00" + addr[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify %s: %w", addr, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("READY=1\n")); err != nil {
		return fmt.Errorf("notify %s: %w", addr, err)
	}
	return nil
}
