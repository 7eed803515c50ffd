package approval

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the airlock_approval_* metrics.
type metrics struct {
	asks            prometheus.Counter
	grants          *prometheus.CounterVec // by scope
	denials         prometheus.Counter
	expiries        prometheus.Counter
	revocations     prometheus.Counter
	notAsked        *prometheus.CounterVec // by why: ineligible, address, bound
	webhookFailures prometheus.Counter
	notHeld         prometheus.Counter
	open            prometheus.Gauge
}

func newMetrics() *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "airlock_approval_" + name, Help: help})
	}
	return &metrics{
		asks:            c("asks_total", "Asks made to the operator."),
		grants:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_approval_grants_total", Help: "Asks granted, by scope."}, []string{"scope"}),
		denials:         c("denials_total", "Asks denied (by an approver, or the webhook failing closed)."),
		expiries:        c("expiries_total", "Grants and pending asks that ended by time, and once grants used."),
		revocations:     c("revocations_total", "Grants revoked by the operator or ended by a policy reload."),
		notAsked:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_approval_not_asked_total", Help: "Misses of an asking policy that were not asked about, by why."}, []string{"why"}),
		notHeld:         c("not_held_total", "Misses on an open ask answered at once because MaxWaiting requests were held already."),
		webhookFailures: c("webhook_failures_total", "Webhook exchanges that failed, each denying its ask (fail closed)."),
		open:            prometheus.NewGauge(prometheus.GaugeOpts{Name: "airlock_approval_open_asks", Help: "Asks pending now."}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	if r == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{m.asks, m.grants, m.denials, m.expiries, m.revocations, m.notAsked, m.webhookFailures, m.notHeld, m.open} {
		if err := r.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}
