package cuda

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrGPUStateLost: the driver could not bring a suspended process's GPU
// state back; the process cannot continue and must be restarted.
var ErrGPUStateLost = errors.New("GPU state lost")

// CUresult codes with which a restore was seen to fail for good on driver
// 580: NOT_SUPPORTED (CUDA IPC memory, in parallel) and OPERATING_SYSTEM
// (the same, one process at a time).
const (
	cudaErrorOperatingSystem = 304
	cudaErrorNotSupported    = 801
)

// LostPIDs asks the driver about pids after a failed resume and returns
// those whose GPU state is gone: reported failed, or still suspended after
// a restore failed with a code the driver never recovers from.
func (d *Driver) LostPIDs(ctx context.Context, pids []int, resumeErr error) []int {
	fatal := fatalRestore(resumeErr)
	var lost []int
	for _, pid := range unique(pids) {
		st, err := d.State(ctx, pid)
		if err != nil {
			continue
		}
		if st == StateFailed || (fatal && st != StateRunning) {
			lost = append(lost, pid)
		}
	}
	return lost
}

func fatalRestore(err error) bool {
	var de *DriverError
	return errors.As(err, &de) && de.Op == opRestore && (de.Code == cudaErrorNotSupported || de.Code == cudaErrorOperatingSystem)
}

// LostError says plainly which processes lost their GPU state.
func LostError(pids []int, cause error) error {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return fmt.Errorf("%w: the driver could not restore the GPU state of pid %s (%v); those processes cannot continue: restart them (processes that share GPU memory through CUDA IPC, such as NCCL ranks on P2P/SHM/cuMem transports, cannot be restored by this driver)",
		ErrGPUStateLost, strings.Join(s, ", "), cause)
}
