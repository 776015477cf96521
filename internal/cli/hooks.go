package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cryo-gpu/cryo/internal/hook"
)

// addHookFlag adds --NAME-hook and its deadline --NAME-hook-timeout.
func addHookFlag(fs *pflag.FlagSet, name, what string) {
	fs.String(name+"-hook", "", what+": `HOOK` is "+hook.Syntax)
	fs.Duration(name+"-hook-timeout", hook.DefaultTimeout, "deadline of --"+name+"-hook; past it the hook has failed")
}

// hookFlag is the hook --NAME-hook gives, nil without one; a hook that
// does not parse, or a deadline without a hook, is a usage error.
func hookFlag(cmd *cobra.Command, name string) (*hook.Spec, error) {
	text, timeout := fString(cmd, name+"-hook"), name+"-hook-timeout"
	if text == "" {
		if cmd.Flags().Changed(timeout) {
			return nil, usageErrorf(cmd, "--%s without --%s-hook", timeout, name)
		}
		return nil, nil
	}
	s, err := hook.Parse(text)
	if err != nil {
		return nil, usageRemedy(cmd, fmt.Errorf("--%s-hook: %w", name, err), `for example --`+name+`-hook "http:POST /sleep?level=1 port=8000"`)
	}
	if s.Timeout, err = positive(cmd, timeout, "30s or 2m"); err != nil {
		return nil, err
	}
	return &s, nil
}
