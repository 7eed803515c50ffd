// Command probe is the test cluster's only workload program, static and dependency-free in
// its image (test/kubecluster builds it): "pause" is the pod sandbox's process, "sleep"
// an app container that waits to be exec'd into, and "http", "post", "dial" and "dns" are what a test
// runs in a pod (kubectl exec) to see what the pod's network lets through; "find" looks for a
// string in the container's environment and files. Each prints one line of key=value results
// and exits 0 when it could tell.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
		fmt.Fprintln(os.Stderr, "usage: probe pause|sleep|http URL|post URL|dial HOST:PORT|dns NAME|find STRING|agent @SOCKET|tunnels N HOST:PORT")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "pause", "sleep":
		wait()
	case "http":
		err = get(os.Args[2])
	case "post":
		err = post(os.Args[2])
	case "dial":
		dial(os.Args[2])
	case "dns":
		err = lookup(os.Args[2])
	case "find":
		find(os.Args[2])
	case "agent":
		agent(os.Args[2])
	case "tunnels":
		err = tunnels(os.Args[2], os.Args[3])
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

// post sends an empty POST to url through the proxy the environment names, and prints the
// answer as get does.
func post(url string) error {
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Post(url, "text/plain", strings.NewReader(""))
	if err != nil {
		return fmt.Errorf("post %s: %w", url, err)
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

// agent talks to the airlock node agent's abstract socket as a sidecar would, asking it to
// open 198.19.101.20:80 as if it were a listener, and prints whether it was let in.
func agent(sock string) {
	conn, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		fmt.Printf("agent=unreachable err=%q\n", err.Error())
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	hello := `{"id":1,"op":"hello","hello":{"version":1,"listeners":[{"addr":"198.19.101.20:80","udp":false,"kind":"proxy"}],"cidrs":[],"report":false,"require_packet_guard":false}}` + "\n"
	// The agent may refuse (answer and close) before the hello is written: the write then
	// fails, and its answer is still there to read.
	_, werr := io.WriteString(conn, hello)
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil && werr != nil {
		err = werr
	}
	switch {
	case err != nil:
		fmt.Printf("agent=closed err=%q\n", err.Error())
	case strings.Contains(line, `"error"`):
		fmt.Printf("agent=refused reply=%q\n", strings.TrimSpace(line))
	default:
		fmt.Printf("agent=welcomed reply=%q\n", strings.TrimSpace(line))
	}
}

// tunnels opens n CONNECT tunnels to target through the proxy the environment names
// (HTTPS_PROXY), prints how many opened, and holds them for 20 seconds.
func tunnels(count, target string) error {
	n, err := strconv.Atoi(count)
	if err != nil {
		return fmt.Errorf("tunnel count %q: %w", count, err)
	}
	proxy := strings.TrimPrefix(os.Getenv("HTTPS_PROXY"), "http://")
	var mu sync.Mutex
	var conns []net.Conn
	sem := make(chan struct{}, 50)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if c := openTunnel(proxy, target); c != nil {
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("tunnels=%d failed=%d\n", len(conns), n-len(conns))
	time.Sleep(20 * time.Second)
	for _, c := range conns {
		c.Close()
	}
	return nil
}

func openTunnel(proxy, target string) net.Conn {
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		return nil
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, " 200") {
		c.Close()
		return nil
	}
	_ = c.SetDeadline(time.Time{})
	return c
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
