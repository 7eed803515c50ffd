// Package credentials is airlock's credential broker: it resolves the secrets a policy names
// (spec.secrets) from their sources, caches them with a TTL, adds them to the requests the
// allowing rule binds them to (inject), swaps opaque placeholders for real values where a rule
// allows it and refuses them everywhere else, and redacts every known secret value from what
// flows back to the sandbox and into logs.
//
// It owns the Source interface and the development sources (env, file); the Vault source
// lives in the sub-package credentials/vault, the only importer of vault/api, so the rest of
// airlock depends on the interface only. It imports policy (for secret references and
// inject rules) and audit (for credential events); proxy and llmproxy never import it: cmd
// passes a *Broker to them as proxy.Injector and as the LLM proxy's key source.
package credentials
