package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// systemBundles are the trust stores a sandbox's CA bundle starts from when SSL_CERT_FILE is
// not set, in the order Go's crypto/x509 tries them.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// baseTrust returns the PEM roots the sandbox should trust besides the sidecar CA: the file
// SSL_CERT_FILE names in env, else the first system bundle found. Nothing found is not an
// error: the bundle then holds only the sidecar CA.
func baseTrust(env []string) ([]byte, error) {
	for _, kv := range env {
		if f, ok := strings.CutPrefix(kv, "SSL_CERT_FILE="); ok && f != "" {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("read SSL_CERT_FILE %s: %w", f, err)
			}
			return data, nil
		}
	}
	for _, f := range systemBundles {
		if data, err := os.ReadFile(f); err == nil {
			return data, nil
		}
	}
	return nil, nil
}

// EnvVars is what the env file sets, in order: the proxy for every client spelling, the CA
// bundle for every TLS stack, and the local model API.
func (s *State) EnvVars() []string {
	proxy := "http://" + s.HostAddr + ":3128"
	noProxy := strings.Join([]string{"localhost", "127.0.0.1", "::1", s.HostAddr, LLMName}, ",")
	bundle := s.CABundle()
	return []string{
		"HTTP_PROXY=" + proxy, "HTTPS_PROXY=" + proxy, "http_proxy=" + proxy, "https_proxy=" + proxy,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy,
		"SSL_CERT_FILE=" + bundle, "NODE_EXTRA_CA_CERTS=" + bundle, "REQUESTS_CA_BUNDLE=" + bundle,
		"GIT_SSL_CAINFO=" + bundle, "CURL_CA_BUNDLE=" + bundle,
		"OPENAI_BASE_URL=http://" + s.HostAddr + ":4000/v1",
		"ANTHROPIC_BASE_URL=http://" + s.HostAddr + ":4000",
		"AIRLOCK_SANDBOX=" + s.Name,
	}
}

// LLMName is the name the DNS filter answers with the model API's address.
const LLMName = "llm.airlock.internal"

// proxyEnvKeys are the variables `exec --no-env` removes from the caller's environment, so a
// transparent-mode command does not pick up a proxy or trust store from outside.
var proxyEnvKeys = []string{
	"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE",
	"OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
}

// writePublic writes the files the sandbox reads: the CA bundle (base roots + the sidecar CA),
// the env file and resolv.conf; and /etc/netns/<netns>/resolv.conf so that `ip netns exec`
// gets the DNS filter too.
func (s *State) writePublic(caPEM, base []byte) error {
	if err := os.MkdirAll(s.PublicDir(), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", s.PublicDir(), err)
	}
	var bundle bytes.Buffer
	bundle.Write(base)
	if len(base) > 0 && !bytes.HasSuffix(base, []byte("\n")) {
		bundle.WriteByte('\n')
	}
	bundle.WriteString("# airlock sidecar CA of sandbox " + s.Name + "\n")
	bundle.Write(caPEM)
	if err := writeFileReplace(s.CABundle(), bundle.Bytes(), 0o644); err != nil {
		return err
	}
	env := "# airlock sandbox " + s.Name + ": source with `set -a; . FILE`, or docker/systemd env-file\n" +
		strings.Join(s.EnvVars(), "\n") + "\n"
	if err := writeFileReplace(s.EnvFile(), []byte(env), 0o644); err != nil {
		return err
	}
	resolv := []byte("# airlock sandbox " + s.Name + ": the sidecar's DNS filter\nnameserver " + s.HostAddr + "\noptions edns0\n")
	if err := writeFileReplace(s.ResolvConf(), resolv, 0o644); err != nil {
		return err
	}
	dir := filepath.Join(etcNetnsDir, s.Netns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return writeFileReplace(filepath.Join(dir, "resolv.conf"), resolv, 0o644)
}
