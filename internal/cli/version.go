package cli

import (
	"cmp"
	"fmt"
	goruntime "runtime"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/version"
)

// versionInfo is `cryo version --json`: cryo's own version and those of
// the parts a checkpoint depends on, as far as this host has them.
type versionInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	CRIU    string `json:"criu,omitempty"`
	Kernel  string `json:"kernel,omitempty"`
}

func (ap *app) versionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "print cryo's version and those of CRIU and the kernel",
		Long: `Prints cryo's version and commit, and the CRIU and kernel it would use.
"cryo --version" prints the first line only. Every checkpoint's manifest
records the cryo version that wrote it (see "cryo inspect").`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := ap.jsonOutput(cmd)
			if err != nil {
				return err
			}
			v := ap.collectVersions()
			if asJSON {
				return ap.printJSON(ap.stdout, v)
			}
			fmt.Fprintln(ap.stdout, version.Long())
			fmt.Fprintf(ap.stdout, "criu:   %s\nkernel: %s\n", cmp.Or(v.CRIU, "not found"), cmp.Or(v.Kernel, "unknown"))
			return nil
		},
	}
	addFormatFlags(cmd, "{{.version}} {{.go}}")
	return cmd
}

func (ap *app) collectVersions() versionInfo {
	v := versionInfo{Version: version.String(), Commit: version.Commit, Go: goruntime.Version(), OS: goruntime.GOOS, Arch: goruntime.GOARCH}
	if info, err := orchestrate.ProbeCRIU(ap.cfg.CRIU); err == nil {
		v.CRIU = info.VersionString() + " (" + info.Path + ")"
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		v.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	return v
}
