package installer

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Names are the names the one binary answers to on the host, besides
// cryo itself: containerd derives the shim's from the runtime type, Podman
// runs cryo-runc, and cryo-runc's bundles exec cryo-criu-action.
var Names = []string{"containerd-shim-cryo-v2", "cryo-runc", "cryo-criu-action"}

// source is the directory that holds bin/cryo in the image.
func (o Options) source() (string, error) {
	if o.Source != "" {
		return o.Source, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Dir(filepath.Dir(exe)), nil
}

// installFiles copies cryo (and CRIU, when the image ships one) under
// Prefix and links cryo's names to it.
func installFiles(o Options, rec *record, res *Result) error {
	src, err := o.source()
	if err != nil {
		return stepErr("copy", "cryo", err, "give --source, the directory that holds bin/cryo")
	}
	bin := filepath.Join(o.Prefix, "bin")
	if err := copyIn(o, rec, res, filepath.Join(src, "bin", "cryo"), filepath.Join(bin, "cryo"), true); err != nil {
		return err
	}
	for _, n := range Names {
		changed, err := rec.symlink(filepath.Join(bin, n), "cryo")
		if err != nil {
			return err
		}
		if changed {
			res.Files = append(res.Files, filepath.Join(bin, n))
		}
	}
	return copyIn(o, rec, res, filepath.Join(src, "sbin", "criu"), filepath.Join(o.Prefix, "sbin", "criu"), false)
}

// copyIn copies the image's file from onto the host path to; a missing
// file is an error only if it is required.
func copyIn(o Options, rec *record, res *Result, from, to string, required bool) error {
	data, err := os.ReadFile(from)
	if errors.Is(err, fs.ErrNotExist) && !required {
		// An earlier release may have shipped it (an upgrade to an image
		// without CRIU, a rollback): what cryo put there goes back to what
		// the node had, so that the node holds nothing this release does
		// not own.
		return forget(o, rec, res, to)
	}
	if err != nil {
		return stepErr("copy", from, err, "run the installer from cryo's installer image (make installer-image)")
	}
	changed, err := rec.writeFile(to, data, 0o755, false)
	if err != nil {
		return err
	}
	if changed {
		o.logf("installed %s", to)
		res.Files = append(res.Files, to)
	}
	return nil
}

// forget puts the host path to back as it was before cryo, if the record
// holds it, and drops it from the record.
func forget(o Options, rec *record, res *Result, to string) error {
	for i, c := range rec.Changes {
		if c.Path != to {
			continue
		}
		if err := rec.revertOne(c); err != nil {
			return stepErr("revert", to, err, "restore it by hand from "+rec.path)
		}
		rec.Changes = append(rec.Changes[:i:i], rec.Changes[i+1:]...)
		o.logf("reverted %s: this release ships none", to)
		res.Files = append(res.Files, to)
		return rec.save()
	}
	return nil
}
