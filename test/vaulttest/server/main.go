// Command server runs an in-process HashiCorp Vault test cluster for
// airlock's tests. It is a separate Go module so that Vault's server code
// (BUSL-1.1) is never linked into the airlock binary; see README.md.
//
// It mounts KV v2 at "secret/", AppRole at "auth/approle/", Kubernetes auth at
// "auth/kubernetes/" (unconfigured: a test points it at its own TokenReview API), and a tiny
// dynamic secrets engine ("leasetest", see lease.go) at "dyn/" that hands out
// renewable leases. With -transit-plugin PATH it also registers that binary (Vault's own
// Transit engine, built from ../transit as an external plugin: see README.md) and mounts it at
// "transit/". It prints one JSON line on stdout:
//
//	{"addr":"https://127.0.0.1:PORT","ca_cert_pem":"...","ca_cert_file":"...","root_token":"..."}
//
// and runs until its standard input is closed.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	kubeauth "github.com/hashicorp/vault-plugin-auth-kubernetes"
	kv "github.com/hashicorp/vault-plugin-secrets-kv"
	"github.com/hashicorp/vault/api"
	"github.com/hashicorp/vault/builtin/credential/approle"
	vaulthttp "github.com/hashicorp/vault/http"
	"github.com/hashicorp/vault/sdk/logical"
	"github.com/hashicorp/vault/vault"
)

// info is what the server prints for its parent.
type info struct {
	Addr       string `json:"addr"`
	CACertPEM  string `json:"ca_cert_pem"`
	CACertFile string `json:"ca_cert_file"`
	RootToken  string `json:"root_token"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "vaulttest server:", err)
		os.Exit(1)
	}
}

func run() error {
	transitPlugin := flag.String("transit-plugin", "", "Vault's Transit engine built as an external plugin, mounted at transit/")
	flag.Parse()
	logger := hclog.New(&hclog.LoggerOptions{Name: "vaulttest", Level: hclog.Error, Output: os.Stderr})
	t := &tb{}
	pluginDir := ""
	if *transitPlugin != "" {
		// Vault runs only plugins inside its plugin directory: the binary's own, symlinks
		// resolved (.cache may be one).
		real, err := filepath.EvalSymlinks(*transitPlugin)
		if err != nil {
			return fmt.Errorf("transit plugin: %w", err)
		}
		*transitPlugin, pluginDir = real, filepath.Dir(real)
	}
	cluster := vault.NewTestCluster(t, &vault.CoreConfig{
		Logger:          logger,
		PluginDirectory: pluginDir,
		CredentialBackends: map[string]logical.Factory{
			"approle":    approle.Factory,
			"kubernetes": kubeauth.Factory,
		},
		LogicalBackends: map[string]logical.Factory{
			"kv":        kv.Factory,
			"leasetest": leaseFactory,
		},
	}, &vault.TestClusterOptions{
		HandlerFunc: vaulthttp.Handler,
		NumCores:    1,
		Logger:      logger,
	})
	cluster.Start()
	defer cluster.Cleanup()
	core := cluster.Cores[0]
	vault.TestWaitActive(t, core.Core)

	client := core.Client
	// The test cluster mounts a KV v1 at secret/; airlock's tests use KV v2 there.
	if err := client.Sys().Unmount("secret"); err != nil {
		return fmt.Errorf("unmount kv v1: %w", err)
	}
	if err := client.Sys().Mount("secret", &mountInput{Type: "kv", Options: map[string]string{"version": "2"}}); err != nil {
		return fmt.Errorf("mount kv v2: %w", err)
	}
	if err := client.Sys().Mount("dyn", &mountInput{Type: "leasetest"}); err != nil {
		return fmt.Errorf("mount leasetest: %w", err)
	}
	if err := client.Sys().EnableAuthWithOptions("approle", &authInput{Type: "approle"}); err != nil {
		return fmt.Errorf("enable approle: %w", err)
	}
	// Kubernetes auth reviews service-account tokens with a Kubernetes API server; tests
	// point auth/kubernetes/config at their own TokenReview endpoint.
	if err := client.Sys().EnableAuthWithOptions("kubernetes", &authInput{Type: "kubernetes"}); err != nil {
		return fmt.Errorf("enable kubernetes auth: %w", err)
	}
	if *transitPlugin != "" {
		if err := mountTransit(client, *transitPlugin); err != nil {
			return err
		}
	}
	out := info{
		Addr:       client.Address(),
		CACertPEM:  string(cluster.CACertPEM),
		CACertFile: cluster.CACertPEMFile,
		RootToken:  cluster.RootToken,
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return fmt.Errorf("write info: %w", err)
	}
	// Run until the parent closes stdin (or dies).
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// mountTransit registers the Transit plugin binary in Vault's plugin catalog (by its
// SHA-256, as an operator would) and mounts it at transit/.
func mountTransit(client *api.Client, bin string) error {
	b, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("transit plugin: %w", err)
	}
	sum := sha256.Sum256(b)
	name := "transit-plugin"
	if err := client.Sys().RegisterPlugin(&api.RegisterPluginInput{
		Name: name, Type: api.PluginTypeSecrets, Command: filepath.Base(bin), SHA256: hex.EncodeToString(sum[:]),
	}); err != nil {
		return fmt.Errorf("register transit plugin: %w", err)
	}
	if err := client.Sys().Mount("transit", &mountInput{Type: name}); err != nil {
		return fmt.Errorf("mount transit plugin: %w", err)
	}
	return nil
}
