package doctor

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/cryo-gpu/cryo/internal/imagetrust"
)

const signatureCheck = "image signatures"

// checkSignaturePolicy says whether the checkpoint images cryo pulls by
// itself must be signed (internal/imagetrust): without a policy they are
// not verified, so whoever can push to a registry that a pull names can
// have their process memory restored here. It reads this environment's
// policy; the shim reads the one of containerd's.
func (e *env) checkSignaturePolicy() Check {
	environ := e.cfg.Environ
	if environ == nil {
		environ = []string{}
	}
	path, _ := imagetrust.PolicyPath("", environ)
	p, err := imagetrust.LoadConfigured("", environ)
	switch {
	case err != nil:
		return Check{signatureCheck, Fail, err.Error() + ": every pull it governs is refused",
			"fix " + path + " (docs/images.md, \"Verifying signatures\"), or unset " + imagetrust.EnvPolicy}
	case p == nil:
		return Check{signatureCheck, Warn, "no signature policy ($" + imagetrust.EnvPolicy + " unset, no " + imagetrust.DefaultPolicy +
			"): the checkpoint images cryo pulls (cryo image pull, --pull, cryo inspect REF, the shim's annotation restores) are not verified",
			"write a policy that requires signatures (docs/images.md, \"Verifying signatures\"), or pass --signature-key to each pull"}
	}
	return Check{Name: signatureCheck, Status: OK, Detail: path + ": " + describeRules(p)}
}

// describeRules lists each prefix with its signer, and the default.
func describeRules(p *imagetrust.Policy) string {
	var parts []string
	for _, r := range p.Rules {
		parts = append(parts, fmt.Sprintf("%s → %s", cmp.Or(r.Repository, "every repository"), ruleSigner(r)))
	}
	def := "other repositories are refused"
	if p.Default == "accept" {
		def = "other repositories are pulled unverified"
	}
	if len(parts) == 0 {
		return "no rule; " + def
	}
	return strings.Join(parts, "; ") + "; " + def
}

func ruleSigner(r imagetrust.Rule) string {
	switch {
	case r.AcceptUnsigned:
		return "unsigned accepted"
	case r.Key != "":
		return "signed by " + r.Key
	}
	return "signed keyless (" + r.Identity.String() + ")"
}
