package policy

import (
	"fmt"
	"maps"
	"slices"
)

// validateRefs checks the references of a document against the effective policy, parents
// included: inject templates and llm apiKeys must name a secret of the merged spec.secrets,
// models a provider of the merged spec.llm.providers.
func validateRefs(d *decoder, doc *Document, secrets map[string]Secret, providers map[string]Provider) {
	names := slices.Sorted(maps.Keys(secrets))
	for i, r := range doc.Spec.Egress {
		for j, in := range r.Inject {
			for _, s := range in.Secrets() {
				if _, ok := secrets[s]; !ok {
					d.errorf(fmt.Sprintf("spec.egress[%d].inject[%d].value", i, j), "%s", undefinedSecret(s, names))
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Spec.LLM.Providers)) {
		s := doc.Spec.LLM.Providers[name].APIKey.Secret
		if _, ok := secrets[s]; s != "" && !ok {
			d.errorf(joinKey("spec.llm.providers", name)+".apiKey.secret", "%s", undefinedSecret(s, names))
		}
	}
	pnames := slices.Sorted(maps.Keys(providers))
	for i, m := range doc.Spec.LLM.Models {
		if _, ok := providers[m.Provider]; m.Provider != "" && !ok {
			msg := fmt.Sprintf("provider %q is not defined in spec.llm.providers", m.Provider)
			if s := suggest(m.Provider, pnames); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			} else {
				msg += "; define it there"
			}
			d.errorf(joinIndex("spec.llm.models", i)+".provider", "%s", msg)
		}
	}
	validateFallbacks(d, doc.Spec.LLM.Models, providers)
}

// undefinedSecret is the message for a reference to a secret that is not defined.
func undefinedSecret(name string, defined []string) string {
	msg := fmt.Sprintf("secret %q is not defined in spec.secrets", name)
	if s := suggest(name, defined); s != "" {
		return msg + fmt.Sprintf("; did you mean %q?", s)
	}
	return msg + "; define it there"
}
