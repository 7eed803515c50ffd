package main

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/credentials"
)

// This file is the credential broker's part of a policy reload: placeholders.json follows
// the policy's secrets, and the new policy's secrets are fetched ahead of the first request.

// reloadPrefetchTimeout bounds the background fetch of a reloaded policy's secrets.
const reloadPrefetchTimeout = time.Minute

// policyChanged rewrites placeholders.json (atomically) for the secrets of the policy in
// force, so secrets the reload added get placeholders and removed ones disappear, then
// fetches the policy's secrets in the background so their values are cached and redacted
// before the first request needs them. The broker itself reads the policy in force on every
// request, so injection follows the reload without this; a failed fetch only means the first
// request fetches (or fails closed) as it would anyway. Nothing here is fatal: the reload
// stands, and a failed write is logged.
func (cb *credentialBroker) policyChanged(ctx context.Context) {
	if cb == nil || cb.broker == nil || cb.placeholders == nil {
		return
	}
	cb.writeMu.Lock()
	names := slices.Sorted(maps.Keys(cb.store.Current().Secrets()))
	err := cb.placeholders.Write(cb.stateDir, names)
	cb.writeMu.Unlock()
	file := cb.stateDir + "/" + credentials.PlaceholdersFile
	if err != nil {
		cb.log.WithFields(logrus.Fields{"placeholders": file, "error": err.Error()}).Error("placeholders file not updated after policy reload")
	} else {
		cb.log.WithFields(logrus.Fields{"placeholders": file, "secrets": len(names)}).Info("placeholders file updated")
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, reloadPrefetchTimeout)
		defer cancel()
		if err := cb.broker.Prefetch(ctx); err != nil && ctx.Err() == nil {
			cb.log.WithField("error", err.Error()).Warn("some secrets of the reloaded policy could not be fetched; requests needing them fail closed until they can")
		}
	}()
}
