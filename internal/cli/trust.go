package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cryo-gpu/cryo/internal/imagetrust"
	"github.com/cryo-gpu/cryo/internal/ociimage"
)

// addTrustFlags are the signature options of the commands that pull.
func addTrustFlags(fs *pflag.FlagSet) {
	fs.String("policy", "", "signature policy `FILE` for what is pulled (default $"+imagetrust.EnvPolicy+", else "+imagetrust.DefaultPolicy+" when it exists; none: pulls are not verified; docs/images.md)")
	fs.String("signature-key", "", "require a cosign signature of the image's digest by this public key `FILE` (cosign.pub), in place of the policy")
}

// trustVerifier checks each pull of cmd against the signature policy and
// records on stderr the digest it verified; nil for a command without the
// flags (push).
func (ap *app) trustVerifier(cmd *cobra.Command, op string) *imagetrust.Verifier {
	if cmd.Flags().Lookup("policy") == nil {
		return nil
	}
	return &imagetrust.Verifier{
		PolicyFile: fString(cmd, "policy"), KeyFile: fString(cmd, "signature-key"),
		Environ: ap.cfg.Environ, Op: op,
		Log: func(f string, a ...any) { fmt.Fprintf(ap.messages(), f+"\n", a...) },
	}
}

// pullVerifier is trustVerifier as a transfer's Verify: no interface
// holding a nil pointer.
func (ap *app) pullVerifier(cmd *cobra.Command) ociimage.Verifier {
	if v := ap.trustVerifier(cmd, "pull"); v != nil {
		return v
	}
	return nil
}
