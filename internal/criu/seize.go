package criu

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cryo-gpu/cryo/internal/report"
)

// ErrCannotHold: the CRIU that runc runs cannot dump a container whose
// CUDA processes cryo holds stopped.
var ErrCannotHold = errors.New("CRIU cannot dump held CUDA processes")

// seizeFeature is the `criu check --feature` name of cryo's CRIU patch 0003
// (contrib/criu): the stopped tasks of a cgroup runc asks it to freeze are
// seized by interrupt. cryo holds every thread of a CUDA process in a group
// stop from the driver's checkpoint until its restore; a stock CRIU freezes
// the container's cgroup first, and its seize of a stopped task in a frozen
// cgroup waits in the kernel for ever (Linux 6.18).
const seizeFeature = "cryo_seize_stopped"

// seizeChecks caches the answer per CRIU binary: it does not change while
// a front end runs.
var seizeChecks sync.Map // path → error (nil: supported)

// CheckSeizeStopped refuses, before any CUDA process is suspended, the
// checkpoint of a container (whose dump freezes its cgroup) with a CRIU
// at path that lacks patch 0003.
func CheckSeizeStopped(ctx context.Context, path string) error {
	if v, ok := seizeChecks.Load(path); ok {
		err, _ := v.(error)
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, path, "check", "--feature", seizeFeature).CombinedOutput()
	err = seizeVerdict(out, err)
	if err != nil && errors.Is(err, syscall.ECHILD) {
		return report.WithRemedy(fmt.Errorf("%s check --feature %s: its answer was lost (%w)", path, seizeFeature, err), "retry") // not cached
	}
	if err != nil {
		if cctx.Err() != nil {
			return fmt.Errorf("%s check --feature %s: %w", path, seizeFeature, cctx.Err()) // not cached
		}
		err = report.WithRemedy(fmt.Errorf("%w: %s lacks cryo's patch 0003 (`criu check --feature %s`: %s): runc's dump would freeze the container and wait for ever on its stopped CUDA processes",
			ErrCannotHold, path, seizeFeature, strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])),
			"install cryo's CRIU (`make deps`, or the bundle's sbin/criu) ahead of any other criu on PATH, or set CRYO_CRIU to it")
	}
	seizeChecks.Store(path, err)
	return err
}

// seizeVerdict is the check's answer. In the containerd shim a reaper
// waits for every child and may reap the check before its Wait does
// ("wait: no child processes"): CRIU's own verdict, printed on success,
// decides then.
func seizeVerdict(out []byte, err error) error {
	if err != nil && strings.Contains(string(out), seizeFeature+" is supported") {
		return nil
	}
	return err
}
