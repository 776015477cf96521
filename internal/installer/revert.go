package installer

import (
	"errors"
	"io/fs"
	"os"
)

// revert puts every recorded path back as it was, newest first.
func (r *record) revert() (Result, error) {
	var res Result
	for i := len(r.Changes) - 1; i >= 0; i-- {
		c := r.Changes[i]
		if err := r.revertOne(c); err != nil {
			return res, stepErr("revert", c.Path, err, "restore it by hand from "+r.path)
		}
		res.Files = append(res.Files, c.Path)
		res.Changed = res.Changed || c.Config
		// Forget it at once: a revert that stops halfway resumes here.
		r.Changes = r.Changes[:i]
		if err := r.save(); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (r *record) revertOne(c change) error {
	p := r.o.onHost(c.Path)
	switch {
	case c.Kind == "dir":
		err := os.Remove(p)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			r.o.logf("left %s: %v (it holds what cryo did not put there)", c.Path, err)
		}
		return nil
	case !c.Existed:
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	case c.Mode&fs.ModeSymlink != 0:
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return os.Symlink(c.Link, p)
	default:
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return writeAtomic(p, c.Content, c.Mode, c.UID, c.GID)
	}
}

// remove deletes the record and the state directories it made.
func (r *record) remove() error {
	if err := os.Remove(r.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return stepErr("record", r.path, err, "remove it by hand")
	}
	for i := len(r.StateDirs) - 1; i >= 0; i-- {
		_ = os.Remove(r.o.onHost(r.StateDirs[i]))
	}
	return nil
}
