package proxy

import (
	"errors"

	"github.com/airlock-dev/airlock/policy"
)

// asRefusal finds a Refusal in err's chain.
func asRefusal(err error) (Refusal, bool) {
	var ref Refusal
	if errors.As(err, &ref) {
		return ref, true
	}
	return nil, false
}

// refusalDecision is the denial of the exchange's request for an Injector's refusal.
func (x *exchange) refusalDecision(ref Refusal) policy.Decision {
	return policy.Decision{Verdict: policy.Deny, Reason: ref.DenyReason(), Rule: x.d.Rule,
		Host: x.d.Host, Port: x.d.Port, Detail: ref.Error()}
}
