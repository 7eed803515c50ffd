package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/credentials"
	"github.com/airlock-dev/airlock/policy"
)

// credReloadPolicy injects the env secret NAME into requests to api.example.com.
const credReloadPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: cred-reload
spec:
  egress:
    - name: api
      hosts: ["api.example.com"]
      inject:
        - header: Authorization
          value: 'Bearer {{ secret "NAME" }}'
  secrets:
    NAME:
      env: AIRLOCK_TEST_CRED_RELOAD_UNSET
`

// A reload rewrites placeholders.json for the new policy's secrets: the added secret gets
// its placeholder, the removed one disappears.
func TestCredentialReloadRewritesPlaceholders(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	write := func(name string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(strings.ReplaceAll(credReloadPolicy, "NAME", name)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("old")
	pol, err := policy.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	store := policy.NewStore(file, pol)
	state := filepath.Join(dir, "state")
	ph, err := credentials.LoadPlaceholders(state)
	if err != nil {
		t.Fatal(err)
	}
	broker, err := credentials.New(credentials.Config{Policy: store, Placeholders: ph})
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	cb := &credentialBroker{broker: broker, log: log, store: store, placeholders: ph, stateDir: state}
	if err := ph.Write(state, []string{"old"}); err != nil {
		t.Fatal(err)
	}

	write("fresh")
	if _, err := store.Reload(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the background prefetch has nothing to wait for
	cb.policyChanged(ctx)

	b, err := os.ReadFile(filepath.Join(state, credentials.PlaceholdersFile))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("placeholders.json: %v: %s", err, b)
	}
	if len(got) != 1 || got["fresh"] != ph.For("fresh") {
		t.Fatalf("placeholders.json after the reload: %v, want only fresh's", got)
	}
	// A broker that did not start (or no broker) is a no-op, not a panic.
	(*credentialBroker)(nil).policyChanged(ctx)
	(&credentialBroker{}).policyChanged(ctx)
}
