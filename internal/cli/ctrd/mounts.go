package ctrd

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/criuimg"
	"github.com/cryo-gpu/cryo/internal/report"
)

// ParseMount reads one --mount as `ctr run --mount` takes it:
// type=bind,src=/host/dir,dst=/data[,options=rbind:ro]. A bind mount
// without bind or rbind among its options gets rbind. These are the only
// mounts a restored container gets besides containerd's defaults: the
// user names them, the checkpoint cannot.
func ParseMount(v string) (specs.Mount, error) {
	m := specs.Mount{Type: "bind"}
	for _, field := range strings.Split(v, ",") {
		key, val, ok := strings.Cut(field, "=")
		if !ok {
			return m, report.WithRemedy(fmt.Errorf("--mount %s: %q is not KEY=VALUE: %w", v, field, ErrMount), "write type=bind,src=HOST-DIR,dst=PATH[,options=rbind:ro]")
		}
		switch key {
		case "type":
			m.Type = val
		case "src", "source":
			m.Source = val
		case "dst", "destination", "target":
			m.Destination = val
		case "options":
			m.Options = strings.Split(val, ":")
		default:
			return m, report.WithRemedy(fmt.Errorf("--mount %s: unknown key %q: %w", v, key, ErrMount), "use type, src, dst and options")
		}
	}
	if !filepath.IsAbs(m.Destination) || (m.Type == "bind" && !filepath.IsAbs(m.Source)) {
		return m, report.WithRemedy(fmt.Errorf("--mount %s: dst (and src, for a bind mount) must be absolute paths: %w", v, ErrMount), "write type=bind,src=HOST-DIR,dst=PATH")
	}
	if m.Type == "bind" && !slices.Contains(m.Options, "bind") && !slices.Contains(m.Options, "rbind") {
		m.Options = append(m.Options, "rbind")
	}
	return m, nil
}

// noMapping is how CRIU says that a mount the checkpoint was taken with
// is missing: runc marks the container's bind mounts external at dump,
// and at restore names only those of the new spec ("mnt: No mapping for
// 110:/data mountpoint"; CRIU 4.2 prints "(null)" for the path).
var noMapping = regexp.MustCompile(`No mapping for (\d+):(\S+) mountpoint`)

// missingMount turns CRIU's failure on a mount the new spec lacks into
// the report of that mount, or returns nil for any other failure. criuDir
// holds the CRIU images, where the mount's path is when CRIU's line lacks it.
func missingMount(id, criuDir string, err error) error {
	m := noMapping.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	dst := m[2]
	if !filepath.IsAbs(dst) {
		dst = mountPoint(criuDir, m[1])
	}
	what, remedy := "a mount at "+dst, "if this host should give it one, pass --mount type=bind,src=HOST-DIR,dst="+dst+" (a directory of this host that you choose)"
	if dst == "" {
		what = "a mount (CRIU's mount " + m[1] + ")"
		remedy = "pass --mount type=bind,src=HOST-DIR,dst=PATH for each bind mount it ran with (`cryo inspect` lists its mounts)"
	}
	return &report.StepError{Op: "restore", ID: id, Step: "criu restore",
		Err:     fmt.Errorf("the checkpoint was taken with %s, which the new container lacks: a restored container gets the base image's mounts and those of --mount, never the checkpoint's: %w", what, ErrMissingMount),
		Outcome: "nothing was restored; the container and its snapshot were removed",
		Remedy:  remedy,
	}
}

// mountPoint is the path of mount mntID in the CRIU images of dir, or "".
func mountPoint(dir, mntID string) string {
	d, err := criuimg.Read(dir, criuimg.Options{NoPages: true})
	if err != nil {
		return ""
	}
	for _, mt := range d.Mounts {
		if strconv.Itoa(mt.ID) == mntID {
			return mt.MountPoint
		}
	}
	return ""
}
