package orchestrate

import (
	"errors"
	"path/filepath"
	"strings"

	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/report"
)

// KeepCRIULogs saves the evidence of a failed restore from a work directory
// about to be removed: every CRIU log that err names under dir is copied
// into keep (owner-only). It returns the copies, and err pointed at them
// (the messages of its chain, formatted when it was wrapped, name them).
func KeepCRIULogs(err error, dir, keep string) ([]string, error) {
	kept := relocateLogs(err, dir, keep)
	if len(kept) == 0 {
		return nil, err
	}
	msg := err.Error()
	for from, to := range kept {
		msg = strings.ReplaceAll(msg, from, to)
	}
	var copies []string
	for _, to := range kept {
		copies = append(copies, to)
	}
	return copies, &relocated{err: err, msg: msg}
}

// relocated is an error whose message names the kept logs.
type relocated struct {
	err error
	msg string
}

func (r *relocated) Error() string { return r.msg }
func (r *relocated) Unwrap() error { return r.err }

// relocateLogs copies the logs and points the chain's LogPath fields at
// the copies; it returns old path → copy.
func relocateLogs(err error, dir, keep string) map[string]string {
	copied := map[string]string{} // a step and its CRIU error name one log
	for _, p := range logPathsOf(err) {
		if to, ok := copied[*p]; ok {
			*p = to
			continue
		}
		if !within(*p, dir) {
			continue
		}
		to := filepath.Join(keep, filepath.Base(dir)+"-"+filepath.Base(*p))
		if criu.CopyLog(*p, to) == nil {
			copied[*p], *p = to, to
		}
	}
	return copied
}

// logPathsOf are the LogPath fields of the errors in err's chain.
func logPathsOf(err error) []*string {
	var out []*string
	switch x := err.(type) {
	case nil:
		return nil
	case *CRIUError:
		out = append(out, &x.LogPath)
	case *report.StepError:
		out = append(out, &x.LogPath)
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, logPathsOf(e)...)
		}
		return out
	}
	return append(out, logPathsOf(errors.Unwrap(err))...)
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return path != "" && err == nil && !strings.HasPrefix(rel, "..")
}
