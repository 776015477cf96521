package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagError words cobra's and pflag's flag errors for a user. Two cases
// need more than the parser knows:
//   - a mistyped command followed by flags ("cryo checkpint --pid 1"): the
//     parent cannot know --pid, but the real mistake is the command;
//   - a flag value of the wrong type, whose parser error
//     ("strconv.ParseInt: …") names Go, not the flag.
func flagError(cmd *cobra.Command, err error) error {
	if args := cmd.Flags().Args(); cmd.HasSubCommands() && len(args) > 0 {
		return noArgs(cmd, args[:1])
	}
	var bad *pflag.InvalidValueError
	if errors.As(err, &bad) {
		return &UsageError{Cmd: cmd.CommandPath(), Err: badValue(bad.GetFlag(), bad.GetValue())}
	}
	return &UsageError{Cmd: cmd.CommandPath(), Err: err}
}

// badValue says what a flag's value should have been, with the remedy
// where an example of a good value helps.
func badValue(f *pflag.Flag, v string) error {
	switch {
	case f.Name == "pid" || strings.HasSuffix(f.Name, "-pid"):
		return report.WithRemedy(fmt.Errorf("--%s: %q is not a process id", f.Name, v), "give a number such as 4242")
	case f.Value.Type() == "duration":
		return report.WithRemedy(fmt.Errorf("--%s: %q is not a duration", f.Name, v), "give one such as 90s or 5m")
	case strings.HasPrefix(f.Value.Type(), "int") || strings.HasPrefix(f.Value.Type(), "uint"):
		return fmt.Errorf("--%s: %q is not a whole number", f.Name, v)
	case f.Value.Type() == "bool":
		return fmt.Errorf("--%s: %q is not true or false", f.Name, v)
	}
	return fmt.Errorf("--%s: invalid value %q", f.Name, v)
}

// helpCommand replaces cobra's, which prints the root's help and exits 0
// for a topic it does not know: a script or a typo should see a failure.
func (ap *app) helpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND]",
		Short: "help about any command or topic",
		Long:  "Prints the help of COMMAND (e.g. \"cryo help image build\"), or of cryo itself.",
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			var names []string
			for _, sub := range c.Root().Commands() {
				if sub.IsAvailableCommand() || sub.IsAdditionalHelpTopicCommand() {
					names = append(names, sub.Name())
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := c.Root().Find(args)
			if target == nil {
				target = c.Root()
			}
			// A leaf's extra words are its arguments, as cobra's help has
			// it; a word where a command should be is a mistake.
			if len(rest) > 0 && (err != nil || target.HasSubCommands() || !target.HasParent()) {
				return noArgs(target, rest[:1])
			}
			target.InitDefaultHelpFlag()
			target.InitDefaultVersionFlag()
			return target.Help()
		},
	}
}

// plural is "1 process", "2 processes": n with the noun in its number.
func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// pluralWord is the noun alone in the number of n.
func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// onlyFlags refuses the flags a mode (such as --finish) does not use: set
// beside it they would be silently ignored.
func onlyFlags(cmd *cobra.Command, mode string, allowed ...string) error {
	var extra []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if !slices.Contains(allowed, f.Name) {
			extra = append(extra, "--"+f.Name)
		}
	})
	if len(extra) > 0 {
		return usageRemedy(cmd, fmt.Errorf("%s cannot be combined with %s", mode, strings.Join(extra, ", ")), "give "+mode+" alone")
	}
	return nil
}
