package criuimg

import (
	"errors"
	"fmt"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/stats"
)

// DumpStats are CRIU's statistics of the dump (stats-dump). Times are in
// microseconds, as CRIU records them.
type DumpStats struct {
	FreezingUS         uint32 `json:"freezing_time_us"`
	FrozenUS           uint32 `json:"frozen_time_us"`
	MemdumpUS          uint32 `json:"memdump_time_us"`
	MemwriteUS         uint32 `json:"memwrite_time_us"`
	PagesScanned       uint64 `json:"pages_scanned"`
	PagesSkippedParent uint64 `json:"pages_skipped_parent"`
	PagesWritten       uint64 `json:"pages_written"`
	PagesLazy          uint64 `json:"pages_lazy"`
}

// RestoreStats are CRIU's statistics of a restore from the directory
// (stats-restore), when one ran there.
type RestoreStats struct {
	ForkingUS       uint32 `json:"forking_time_us"`
	RestoreUS       uint32 `json:"restore_time_us"`
	PagesCompared   uint64 `json:"pages_compared"`
	PagesSkippedCow uint64 `json:"pages_skipped_cow"`
	PagesRestored   uint64 `json:"pages_restored"`
}

// stats reads stats-dump and stats-restore from the image directory or,
// failing that, from the first of StatsDirs that has them.
func (r *reader) stats() error {
	dir, err := r.statsDir(crit.StatsDump)
	if err != nil {
		return err
	}
	if dir != "" {
		var s *stats.DumpStatsEntry
		if err := decodeStats(dir, crit.StatsDump, func() (err error) { s, err = crit.GetDumpStats(dir); return err }); err != nil {
			return err
		}
		r.details.DumpStats = &DumpStats{FreezingUS: s.GetFreezingTime(), FrozenUS: s.GetFrozenTime(), MemdumpUS: s.GetMemdumpTime(), MemwriteUS: s.GetMemwriteTime(),
			PagesScanned: s.GetPagesScanned(), PagesSkippedParent: s.GetPagesSkippedParent(), PagesWritten: s.GetPagesWritten(), PagesLazy: s.GetPagesLazy()}
	}
	// No restore ran from most directories: not worth a note.
	if dir, err = r.statsDir(crit.StatsRestore); err != nil || dir == "" {
		return err
	}
	var s *stats.RestoreStatsEntry
	if err := decodeStats(dir, crit.StatsRestore, func() (err error) { s, err = crit.GetRestoreStats(dir); return err }); err != nil {
		return err
	}
	r.details.RestoreStats = &RestoreStats{ForkingUS: s.GetForkingTime(), RestoreUS: s.GetRestoreTime(),
		PagesCompared: s.GetPagesCompared(), PagesSkippedCow: s.GetPagesSkippedCow(), PagesRestored: s.GetPagesRestored()}
	return nil
}

// statsDir finds the directory holding the statistics file name, checked
// whole before crit decodes it; "" when none has it (noted as missing for
// the dump's).
func (r *reader) statsDir(name string) (string, error) {
	for _, dir := range append([]string{r.dir}, r.opts.StatsDirs...) {
		if dir == "" {
			continue
		}
		err := checkImage(dir, name)
		if errors.Is(err, errMissing) {
			continue
		}
		return dir, err
	}
	if name == crit.StatsDump {
		r.details.Missing = append(r.details.Missing, name)
	}
	return "", nil
}

// decodeStats runs one of crit's statistics readers, which index the
// first entry unchecked: an image with none is corrupt, not a crash.
func decodeStats(dir, name string, get func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &ImageError{Dir: dir, File: name, Reason: fmt.Sprint("undecodable: ", r)}
		}
	}()
	if err := get(); err != nil {
		return &ImageError{Dir: dir, File: name, Reason: err.Error()}
	}
	return nil
}

// ReadStats reads only CRIU's statistics of dir (or of the first of
// statsDirs that has them), for the result of a checkpoint or restore that
// needs no process details: both nil where CRIU wrote none, with the same
// framing checks as Read.
func ReadStats(dir string, statsDirs ...string) (*DumpStats, *RestoreStats, error) {
	r := &reader{dir: dir, opts: Options{StatsDirs: statsDirs}, details: &Details{}}
	err := r.stats()
	return r.details.DumpStats, r.details.RestoreStats, err
}
