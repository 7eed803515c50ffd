// Command server runs an in-process HashiCorp Vault test cluster for
// airlock's tests. It is a separate Go module so that Vault's server code
// (BUSL-1.1) is never linked into the airlock binary; see README.md.
//
// It mounts KV v2 at "secret/", AppRole at "auth/approle/", Kubernetes auth at
// "auth/kubernetes/" (unconfigured: a test points it at its own TokenReview API), and a tiny
// dynamic secrets engine ("leasetest", see lease.go) at "dyn/" that hands out
// renewable leases. It prints one JSON line on stdout:
//
//	{"addr":"https://127.0.0.1:PORT","ca_cert_pem":"...","ca_cert_file":"...","root_token":"..."}
//
// and runs until its standard input is closed.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/go-hclog"
	kubeauth "github.com/hashicorp/vault-plugin-auth-kubernetes"
	kv "github.com/hashicorp/vault-plugin-secrets-kv"
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
	logger := hclog.New(&hclog.LoggerOptions{Name: "vaulttest", Level: hclog.Error, Output: os.Stderr})
	t := &tb{}
	cluster := vault.NewTestCluster(t, &vault.CoreConfig{
		Logger: logger,
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
