package orchestrate

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// endCheckpoint is one EndCheckpoint.
func endCheckpoint(ctx context.Context, e env, t Target, imageDir string) (*manifest.Manifest, error) {
	m, err := manifest.Read(imageDir)
	if err != nil {
		return nil, &report.StepError{Op: "checkpoint", ID: t.ID, Step: StepDigests, Err: err,
			Outcome: "CRIU's dump went ahead without cryo's manifest", Remedy: "re-take the checkpoint"}
	}
	// Leave-running, the dump done: a failure from here on touches no
	// process.
	c := newCheckpoint(e, t, imageDir, true, nil)
	c.m = m
	release, err := c.takeLock(ctx)
	if err != nil {
		return m, e.locks.refused("checkpoint", t.ID, err)
	}
	defer release()
	c.m.AddStep(string(StepDump), dumpTime(imageDir), nil)
	r := c.runner([]step{{name: StepDigests, do: c.digests}, c.seal()})
	r.doneOutside(StepDump)
	err = r.run(ctx)
	if se, ok := err.(*report.StepError); ok {
		se.Outcome = "CRIU's dump is complete, and the checkpoint in " + imageDir + " is unfinished"
		se.Remedy = "free space in " + imageDir + " or make it writable, then run `cryo checkpoint --finish " + imageDir + "`"
	}
	return c.m, err
}

// dumpTime is how long CRIU's dump took: since the first phase wrote the
// manifest, the last thing before CRIU froze the processes.
func dumpTime(imageDir string) time.Duration {
	st, err := os.Stat(filepath.Join(imageDir, manifest.ManifestName))
	if err != nil {
		return 0
	}
	return time.Since(st.ModTime())
}
