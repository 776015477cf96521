package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cryo-gpu/cryo/internal/cli/inspect"
	"github.com/cryo-gpu/cryo/internal/criuimg"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/cryo-gpu/cryo/internal/termtext"
)

// addSectionFlags are checkpointctl inspect's section flags, and cryo's
// environment ones.
func addSectionFlags(fs *pflag.FlagSet) {
	fs.Bool("ps-tree", false, "show the process tree with command lines")
	fs.Bool("files", false, "show each process's open files")
	fs.Bool("sockets", false, "show each process's sockets")
	fs.Bool("mounts", false, "show the mounts, with the host path of bind mounts")
	fs.Bool("stats", false, "show the memory dumped and CRIU's statistics")
	fs.Bool("env", false, "show the environment of each process and of the container's spec (secret-looking values masked)")
	fs.Bool("show-secrets", false, "with --env, show the values of variables whose names look secret")
	fs.Bool("all", false, "show every section, the environment included")
	fs.Int("pid", 0, "restrict the process sections to the process `N` (its pid in the checkpoint's tree)")
}

// sections are the detail sections asked for; picked is false when no
// section flag was given, so that inspect shows its usual set.
type sections struct {
	inspect.Sections
	picked      bool
	showSecrets bool
}

func sectionsOf(cmd *cobra.Command) (sections, error) {
	s := sections{showSecrets: fBool(cmd, "show-secrets")}
	if fBool(cmd, "all") {
		s.Sections = inspect.Sections{Tree: true, Files: true, Sockets: true, Env: true, Mounts: true, Stats: true}
		s.picked = true
	} else {
		s.Tree, s.Files, s.Sockets = fBool(cmd, "ps-tree"), fBool(cmd, "files"), fBool(cmd, "sockets")
		s.Mounts, s.Stats, s.Env = fBool(cmd, "mounts"), fBool(cmd, "stats"), fBool(cmd, "env")
		s.picked = s.Sections != inspect.Sections{}
	}
	s.PID = fInt(cmd, "pid")
	if s.PID < 0 {
		return s, usageErrorf(cmd, "--pid wants a pid of the checkpoint's tree, got %d", s.PID)
	}
	if s.PID != 0 && !s.picked {
		// --pid alone asks about one process: its tree entry and files.
		s.Tree, s.Files, s.picked = true, true, true
	}
	if !s.picked {
		s.Sections = inspect.DefaultSections()
	}
	return s, nil
}

// commandLines: the process tree or the environment was asked for, so an
// archive or image whose pages were not extracted is read a second time
// for the pages that hold them (the default summary does not pay that).
func (s sections) commandLines() bool { return s.picked && (s.Tree || s.Env) }

// apply shapes sum for output: the environment kept only when asked for
// (masked unless --show-secrets), and the processes cut to --pid.
func (s sections) apply(sum *ociimage.Summary) error {
	if !s.Env {
		sum.Env = nil
	}
	if !s.showSecrets {
		sum.Env = maskEnv(sum.Env)
	}
	d := sum.Details
	if d == nil {
		return nil
	}
	for i := range d.Processes {
		switch {
		case !s.Env:
			d.Processes[i].Env = nil
		case !s.showSecrets:
			d.Processes[i].Env = maskEnv(d.Processes[i].Env)
		}
	}
	if s.PID == 0 {
		return nil
	}
	for _, p := range d.Processes {
		if p.PID == s.PID {
			d.Processes = []criuimg.Process{p}
			return nil
		}
	}
	return report.WithRemedy(fmt.Errorf("%s has no process %d (its pids: %s)", sum.Source, s.PID, pidsOf(d.Processes)), "give --pid one of those")
}

func pidsOf(ps []criuimg.Process) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = strconv.Itoa(p.PID)
	}
	return strings.Join(parts, ", ")
}

// secretWords mark a variable whose value inspect masks: a checkpoint is
// copied and shown around, its environment often holds credentials.
var secretWords = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "KEY", "CREDENTIAL", "AUTH", "PRIVATE", "SESSION", "COOKIE"}

// secretName reports whether an environment variable's name looks like
// it holds a secret.
func secretName(name string) bool {
	up := strings.ToUpper(name)
	for _, w := range secretWords {
		if strings.Contains(up, w) {
			return true
		}
	}
	return false
}

// maskEnv replaces the values of secret-looking variables with "****".
func maskEnv(env []string) []string {
	if env == nil {
		return nil
	}
	out := make([]string, len(env))
	for i, e := range env {
		name, _, _ := strings.Cut(e, "=")
		if secretName(name) {
			e = name + "=****"
		}
		out[i] = e
	}
	return out
}

// writeSections writes the details after the summary: inspect's usual
// set when no section was picked, else those picked (the container spec's
// environment with the processes').
func writeSections(w io.Writer, sum *ociimage.Summary, s sections) error {
	if !s.picked {
		return inspect.WriteDetails(w, sum)
	}
	if s.Env && len(sum.Env) > 0 {
		fmt.Fprintln(w, "Environment (container spec)")
		for _, e := range sum.Env {
			fmt.Fprintf(w, "  %s\n", termtext.EscapeControl(e))
		}
	}
	if sum.Details == nil {
		_, err := fmt.Fprintf(w, "Details:   %s\n", termtext.EscapeControl(orDash(sum.DetailsNote)))
		return err
	}
	return inspect.RenderSections(w, sum.Details, s.Sections)
}
