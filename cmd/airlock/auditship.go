package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/ship"
	"github.com/airlock-dev/airlock/internal/cli"
)

// exitOpen is verify's exit status for a shipped chain that is intact so far but has no
// closing marker (still running, or its sidecar never shipped its end).
const exitOpen = 4

// storeFlags are the flags that reach shipped evidence: an S3 bucket (read-only
// credentials suffice) or a directory a DirStore wrote.
type storeFlags struct {
	endpoint, region string
}

func (s *storeFlags) register(fs *cli.FlagSet) {
	fs.StringVar(&s.endpoint, "s3-endpoint", "", "S3 endpoint URL of S3-compatible storage, e.g. https://minio.example:9000 (default: AWS for --s3-region); credentials come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN")
	fs.StringVar(&s.region, "s3-region", "us-east-1", "region of the bucket")
}

// isShipped reports whether a verify or export argument names shipped evidence.
func isShipped(arg string) bool {
	return strings.HasPrefix(arg, "s3://") || strings.HasPrefix(arg, "file://")
}

// open parses s3://bucket/prefix or file:///dir[/prefix... as the whole root] into a
// store and a key prefix.
func (s *storeFlags) open(arg string) (ship.Store, string, error) {
	u, err := url.Parse(arg)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %v", arg, err)
	}
	switch u.Scheme {
	case "file":
		if u.Path == "" {
			return nil, "", fmt.Errorf("%s: use file:///absolute/dir", arg)
		}
		return ship.DirStore{Root: u.Path}, "", nil
	case "s3":
		if u.Host == "" {
			return nil, "", fmt.Errorf("%s: use s3://bucket/prefix/", arg)
		}
		id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		if id == "" || secret == "" {
			return nil, "", errors.New("s3: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (read-only credentials suffice)")
		}
		token := os.Getenv("AWS_SESSION_TOKEN")
		st, err := ship.NewS3Store(ship.S3Config{Bucket: u.Host, Region: s.region, Endpoint: s.endpoint,
			Credentials: func(context.Context) (string, string, string, error) { return id, secret, token, nil }})
		if err != nil {
			return nil, "", err
		}
		return st, strings.TrimPrefix(u.Path, "/"), nil
	}
	return nil, "", fmt.Errorf("%s: use s3://bucket/prefix/ or file:///dir", arg)
}

// fetchShipped downloads the chains under arg into a temporary directory (removed by the
// returned cleanup).
func (s *storeFlags) fetchShipped(arg string) ([]ship.Chain, func(), error) {
	store, prefix, err := s.open(arg)
	if err != nil {
		return nil, nil, err
	}
	tmp, err := os.MkdirTemp("", "airlock-shipped-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { _ = os.RemoveAll(tmp) }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	chains, err := ship.Fetch(ctx, store, prefix, tmp)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	if len(chains) == 0 {
		cleanup()
		return nil, nil, fmt.Errorf("%s: no shipped audit chain under this prefix", arg)
	}
	return chains, cleanup, nil
}

// verifyShipped verifies every chain under arg and prints one verdict per chain.
func verifyShipped(arg string, sf *storeFlags, keys []ed25519.PublicKey, every time.Duration, stdout io.Writer) error {
	chains, cleanup, err := sf.fetchShipped(arg)
	if err != nil {
		return cli.Failf("%v", err)
	}
	defer cleanup()
	worst := 0
	var first string
	for _, c := range chains {
		rep, err := c.Verify(audit.VerifyOptions{Keys: keys, CheckpointEvery: every})
		if err != nil {
			return cli.Failf("%v", err)
		}
		line, ok := c.Verdict(rep)
		fmt.Fprintf(stdout, "%s: %s\n", c.Dir, line)
		for _, n := range c.Notes {
			fmt.Fprintf(stdout, "  note: %s\n", n)
		}
		for _, m := range c.Missing[min(1, len(c.Missing)):] {
			fmt.Fprintf(stdout, "  missing: %s\n", m)
		}
		code := 0
		switch {
		case ok:
		case strings.HasPrefix(line, "open,"):
			code = exitOpen
		case strings.HasPrefix(line, "UNANCHORED"):
			code = exitUnanchored
		default:
			code = 1
		}
		if code != 0 && (worst == 0 || code == 1) {
			worst, first = code, c.Dir+": "+line
		}
	}
	if worst != 0 {
		return &cli.ExitError{Code: worst, Msg: first}
	}
	return nil
}

// exportShipped writes the evidence pack of the one chain under arg.
func exportShipped(arg string, sf *storeFlags, keys []ed25519.PublicKey, out string, stdout io.Writer) error {
	chains, cleanup, err := sf.fetchShipped(arg)
	if err != nil {
		return cli.Failf("%v", err)
	}
	defer cleanup()
	if len(chains) != 1 {
		var dirs []string
		for _, c := range chains {
			dirs = append(dirs, c.Dir)
		}
		return cli.Failf("%s holds %d chains (%s): name one chain's prefix", arg, len(chains), strings.Join(dirs, ", "))
	}
	c := chains[0]
	var files []audit.PackFile
	for _, p := range c.Segments {
		files = append(files, audit.PackFile{Role: "audit", Src: p, Name: "audit/" + filepath.Base(p)})
	}
	for _, p := range c.Checkpoints {
		files = append(files, audit.PackFile{Role: "checkpoints", Src: p, Name: "audit/" + filepath.Base(p)})
	}
	if c.Closed != nil {
		p := filepath.Join(filepath.Dir(c.Segments[0]), ship.ClosedName(c.Closed.LastSeq))
		files = append(files, audit.PackFile{Role: "closing", Src: p, Name: "audit/" + filepath.Base(p)})
	} else if c.Head != nil && len(c.Segments) > 0 {
		p := filepath.Join(filepath.Dir(c.Segments[0]), ship.HeadName(c.Head.Seq))
		files = append(files, audit.PackFile{Role: "head", Src: p, Name: "audit/" + filepath.Base(p)})
	}
	var pems []byte
	for _, k := range keys {
		b, err := audit.EncodePublicKey(k)
		if err != nil {
			return cli.Failf("%v", err)
		}
		pems = append(pems, b...)
	}
	if len(pems) > 0 {
		files = append(files, audit.PackFile{Role: "public-key", Data: pems, Name: "audit/signing-key.pub.pem"})
	}
	m, err := audit.WritePackWith(out, strings.TrimSuffix(c.Dir, "/"), files, audit.VerifyOptions{Keys: keys}, time.Now())
	if err != nil {
		return cli.Failf("%v", err)
	}
	rep, _ := c.Verify(audit.VerifyOptions{Keys: keys})
	line, ok := c.Verdict(rep)
	fmt.Fprintf(stdout, "evidence pack %s from %s: %d files; %s\n", out, c.Dir, len(m.Files), line)
	if !ok {
		return cli.Failf("the shipped chain does not verify whole: %s", line)
	}
	return nil
}
