package orchestrate

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/progress"
	"github.com/cryo-gpu/cryo/internal/report"
)

// ErrNoSpace: the image directory's file system has less space than the
// dump is estimated to write.
var ErrNoSpace = errors.New("not enough space for the checkpoint")

// checkSpace refuses, before anything is suspended, a checkpoint whose
// images would not fit: CRIU would otherwise write until the disk is full,
// after the suspend and the freeze, and fail with "No space left on
// device". The estimate is the dump's progress estimate, taken before the
// suspend: the processes' dumpable memory plus the GPU memory the suspend
// will move into it.
func (c *checkpoint) checkSpace() error {
	if c.o.Config.NoSpaceCheck {
		return nil
	}
	need := criu.DumpEstimate(c.pids, 0) + gpuBytes(c.m, c.toSuspend)
	free, err := availBytes(c.dir)
	if err != nil || need <= free {
		return nil // a file system that cannot be asked is CRIU's to find out
	}
	return report.WithRemedy(fmt.Errorf("%w: the dump of %s is estimated at about %s and %s has %s free; nothing was suspended",
		ErrNoSpace, plural(len(c.pids), "process", "processes"), progress.Human(need), c.dir, progress.Human(free)),
		fmt.Sprintf("free at least %s in %s, or checkpoint into a directory on a file system with that much free "+
			"(a workload whose memory is mostly zeros, which cryo's CRIU leaves out, may fit: %s=0 skips this check)", progress.Human(need-free), c.dir, config.EnvSpaceCheck))
}

// availBytes is the space available to this user on dir's file system.
func availBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
