package sandbox

import (
	"fmt"
	"os"
	"strings"

	"github.com/airlock-dev/airlock/internal/trust"
)

// EnvVars is what the env file sets, in order: the proxy for every client spelling, the CA
// bundle for every TLS stack (its path inside the sandbox), and the local model API. A
// --network none sandbox has no sidecar: its env file names the sandbox only.
func (s *State) EnvVars() []string {
	if s.Network == NetworkNone {
		return []string{"AIRLOCK_SANDBOX=" + s.Name}
	}
	proxy := "http://" + s.HostAddr + ":3128"
	noProxy := strings.Join([]string{"localhost", "127.0.0.1", "::1", s.HostAddr, LLMName}, ",")
	bundle := InsideCABundle
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

// writePublic writes the files the sandbox reads into its public directory: the CA bundle, the
// env file and resolv.conf. (/etc/netns/<netns>/resolv.conf, for `ip netns exec`, is the host's:
// the files step writes it through hostOps.)
func (s *State) writePublic(bundle []byte) error {
	if err := os.MkdirAll(s.PublicDir(), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", s.PublicDir(), err)
	}
	if err := trust.Write(s.CABundle(), bundle); err != nil {
		return err
	}
	env := "# airlock sandbox " + s.Name + ": source with `set -a; . FILE`, or docker/systemd env-file\n" +
		strings.Join(s.EnvVars(), "\n") + "\n"
	if err := writeFileReplace(s.EnvFile(), []byte(env), 0o644); err != nil {
		return err
	}
	return writeFileReplace(s.ResolvConf(), s.resolvConf(), 0o644)
}

// resolvConf points the sandbox's resolver at its DNS filter; a --network none sandbox has no
// resolver to name.
func (s *State) resolvConf() []byte {
	if s.Network == NetworkNone {
		return []byte("# airlock sandbox " + s.Name + ": --network none, no resolver\n")
	}
	return []byte("# airlock sandbox " + s.Name + ": the sidecar's DNS filter\nnameserver " + s.HostAddr + "\noptions edns0\n")
}
