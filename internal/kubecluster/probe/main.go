// Command probe is the test cluster's only workload program, static and dependency-free in
// its image (internal/kubecluster builds it): "pause" is the pod sandbox's process, "sleep"
// an app container that waits to be exec'd into, and "http", "dial" and "dns" are what a test
// runs in a pod (kubectl exec) to see what the pod's network lets through; "find" looks for a
// string in the container's environment and files. Each prints one line of key=value results
// and exits 0 when it could tell.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func main() {
	if filepath.Base(os.Args[0]) == "sleep" { // installed as /bin/sleep too: "sleep infinity"
		wait()
		return
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe pause|sleep|http URL|dial HOST:PORT|dns NAME|find STRING")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "pause", "sleep":
		wait()
	case "http":
		err = get(os.Args[2])
	case "dial":
		dial(os.Args[2])
	case "dns":
		err = lookup(os.Args[2])
	case "find":
		find(os.Args[2])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

// wait blocks until SIGTERM or SIGINT, reaping children meanwhile (the pause process is PID 1
// of the pod's shared namespaces).
func wait() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

// get fetches url through the proxy the environment names (HTTPS_PROXY, SSL_CERT_FILE).
func get(url string) error {
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Printf("status=%d body=%q\n", resp.StatusCode, strings.TrimSpace(string(body)))
	return nil
}

// dial connects straight to addr, past any proxy, and prints how that went.
func dial(addr string) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	switch {
	case err == nil:
		conn.Close()
		fmt.Println("dial=ok")
	case errors.Is(err, syscall.EPERM):
		fmt.Println("dial=EPERM")
	case errors.Is(err, syscall.ECONNREFUSED):
		fmt.Println("dial=ECONNREFUSED")
	default:
		fmt.Printf("dial=error err=%q\n", err.Error())
	}
}

// lookup asks the pod's first nameserver for name's A record and prints the response code.
func lookup(name string) error {
	server, err := nameserver()
	if err != nil {
		return err
	}
	q, err := dnsmessage.NewName(strings.TrimSuffix(name, ".") + ".")
	if err != nil {
		return fmt.Errorf("name %q: %w", name, err)
	}
	msg := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 0x5a5a, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: q, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
	}
	pkt, err := msg.Pack()
	if err != nil {
		return fmt.Errorf("pack query: %w", err)
	}
	conn, err := net.DialTimeout("udp", net.JoinHostPort(server, "53"), 5*time.Second)
	if err != nil {
		return fmt.Errorf("dial %s: %w", server, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(pkt); err != nil {
		return fmt.Errorf("send query: %w", err)
	}
	buf := make([]byte, 1500)
	n, err := conn.Read(buf)
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	var ans dnsmessage.Message
	if err := ans.Unpack(buf[:n]); err != nil {
		return fmt.Errorf("unpack answer: %w", err)
	}
	fmt.Printf("rcode=%s answers=%d server=%s\n", strings.TrimPrefix(ans.RCode.String(), "RCode"), len(ans.Answers), server)
	return nil
}

func nameserver() (string, error) {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return "", fmt.Errorf("read resolv.conf: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "nameserver" {
			return f[1], nil
		}
	}
	return "", errors.New("resolv.conf names no nameserver")
}

// find looks for s in the environment and in every regular file of the container (outside
// /proc, /sys and /dev), and says whether the container has a service-account token
// directory: "found=none files=N secrets=absent" when s is nowhere.
func find(s string) {
	var found []string
	for _, e := range os.Environ() {
		if strings.Contains(e, s) {
			found = append(found, "env:"+strings.SplitN(e, "=", 2)[0])
		}
	}
	files := 0
	_ = filepath.WalkDir("/", func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case d.IsDir() && (path == "/proc" || path == "/sys" || path == "/dev"):
			return filepath.SkipDir
		case !d.Type().IsRegular():
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		files++
		if strings.Contains(string(b), s) {
			found = append(found, path)
		}
		return nil
	})
	secrets := "absent"
	if _, err := os.Stat("/var/run/secrets"); err == nil {
		secrets = "present"
	}
	if len(found) == 0 {
		found = []string{"none"}
	}
	fmt.Printf("found=%s files=%d secrets=%s\n", strings.Join(found, ","), files, secrets)
}
