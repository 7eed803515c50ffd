package sidecar

import (
	"context"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// reloader is the one goroutine that reloads the policy. SIGHUP (Config.ReloadSignal) and
// changes of the policy file (policy.Store.Notify: the file, the files it extends, and the
// kubelet's swap of a ConfigMap's ..data symlink) only ask for a reload; the reloader loads
// the file and applies the new policy to the DNS filter, the credential broker and the
// kernel, in that order, tagged with the next generation number. Reloads therefore never
// overlap, and no component sees an older policy after a newer one (each also refuses a
// generation older than the last it applied).
type reloader struct {
	s *Sidecar

	// trigger holds at most one pending request: requests that arrive during a reload are
	// served by one more reload, which reads the file as it is then.
	trigger chan struct{}
	// watchErrs carries file watcher errors to the reload goroutine, which reports them.
	watchErrs chan error
	// gen is the generation of the policy in force; only the reload goroutine touches it.
	gen uint64
	// synced receives requests to answer once every earlier trigger has been served (tests).
	synced chan chan struct{}
	// grants holds at most one request to apply the effective policy again after the
	// approval stage's live grants changed.
	grants chan struct{}

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newReloader(s *Sidecar) *reloader {
	return &reloader{s: s, trigger: make(chan struct{}, 1), watchErrs: make(chan error, 1),
		synced: make(chan chan struct{}), grants: make(chan struct{}, 1)}
}

func (r *reloader) name() string { return "policy reloader" }

// start starts the reload goroutine and the file watch, and returns once the watch is in
// place (or has failed, which is logged: SIGHUP still reloads), so that any later change of
// the file is seen.
func (r *reloader) start(ctx context.Context) error {
	ctx, r.cancel = context.WithCancel(ctx)
	watchDone := make(chan struct{})
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		r.run(ctx)
	}()
	go func() {
		defer r.wg.Done()
		defer close(watchDone)
		r.watch(ctx)
	}()
	select {
	case <-r.s.store.Watching():
	case <-watchDone:
	}
	return nil
}

// Reload asks for a policy reload; it does not wait for it.
func (s *Sidecar) Reload() { s.reload.request() }

// request asks the reload goroutine for a reload; it never blocks.
func (r *reloader) request() {
	select {
	case r.trigger <- struct{}{}:
	default: // one is pending already; it will read the file as it is then
	}
}

// watch turns changes of the policy file into reload requests until ctx ends.
func (r *reloader) watch(ctx context.Context) {
	err := r.s.store.Notify(ctx, func(err error) {
		if err == nil {
			r.request()
			return
		}
		select {
		case r.watchErrs <- err:
		case <-ctx.Done():
		}
	})
	if err != nil && ctx.Err() == nil {
		r.s.log.WithError(err).Warn("policy file watch stopped; reload with SIGHUP")
	}
}

// run is the reload goroutine.
func (r *reloader) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.s.cfg.ReloadSignal: // a nil channel never fires
			r.request()
		case <-r.trigger:
			r.reload()
		case <-r.grants:
			r.applyGrants()
		case err := <-r.watchErrs:
			r.report(nil, err)
		case done := <-r.synced:
			if len(r.trigger) > 0 {
				<-r.trigger
				r.reload()
			}
			if len(r.grants) > 0 {
				<-r.grants
				r.applyGrants()
			}
			close(done)
		}
	}
}

// reload loads the policy file and, when it loads, ends the grants it no longer allows and
// applies the effective policy (the loaded one with the remaining grants) everywhere under
// the next generation; a policy that does not load leaves the old one in force everywhere.
func (r *reloader) reload() {
	p, err := r.s.store.Reload()
	if err == nil {
		r.s.appr.stage.PolicyChanged(p)
		r.gen++
		r.apply(r.gen, r.s.appr.stage.Current())
	}
	r.report(p, err)
}

// applyGrants applies the effective policy after the live grants changed. Only the DNS
// filter keeps state derived from grants (the allow-map entries of their answers); the
// credential broker and the kernel's CIDR rules do not change with them.
func (r *reloader) applyGrants() {
	r.gen++
	r.s.dns.applyPolicy(r.gen, r.s.appr.stage.Current())
}

// grantsChanged asks the reload goroutine to apply the effective policy again (a grant
// started or ended: the DNS filter then revokes the allow-map entries of an ended one). It
// never blocks.
func (r *reloader) grantsChanged() {
	select {
	case r.grants <- struct{}{}:
	default:
	}
}

// apply hands the policy of generation gen to every component that keeps state derived from
// it, in a fixed order. (The proxy, the DNS filter's decisions and the model API read the
// store on every request.)
func (r *reloader) apply(gen uint64, p *policy.Policy) {
	r.s.dns.applyPolicy(gen, p)
	r.s.creds.applyPolicy(gen, p)
	r.s.kernel.applyPolicy(gen, p)
}

// report logs and audits a reload attempt.
func (r *reloader) report(p *policy.Policy, err error) {
	s := r.s
	file := s.cfg.PolicyFile
	ev := audit.Event{Kind: audit.KindPolicy, Destination: file}
	if err != nil {
		s.log.WithField("policy_file", file).WithField("error", err.Error()).Error("policy reload failed; keeping the previous policy")
		ev.Decision, ev.Error, ev.Policy = audit.DecisionDeny, err.Error(), s.store.Current().Name()
	} else {
		s.log.WithFields(logrus.Fields{"policy": p.Name(), "mode": p.Mode(), "generation": r.gen}).Info("policy reloaded")
		if ierr := p.CheckIdentityMap(s.cfg.IdentityContainers); ierr != nil {
			s.log.WithField("error", ierr.Error()).Error("the reloaded policy lacks an identity of --identity-containers: that container's requests are refused (identity_unknown) until the policy defines it")
		}
		ev.Decision, ev.Policy = audit.DecisionAllow, p.Name()
		if name, aerr := s.archivePolicy(); aerr != nil {
			s.log.WithError(aerr).Warn("policy not archived for evidence packs")
		} else {
			ev.Detail = "archived as " + name
		}
	}
	s.audit.Log(ev)
}

// sync waits until every reload requested before it has been applied.
func (r *reloader) sync(ctx context.Context) {
	done := make(chan struct{})
	select {
	case r.synced <- done:
		<-done
	case <-ctx.Done():
	}
}

// close stops watching and reloading and waits for the goroutines.
func (r *reloader) close(context.Context) error {
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
	return nil
}
