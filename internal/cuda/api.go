// Package cuda is everything cryo knows about CUDA processes: it binds the
// driver's checkpoint API (loaded at run time, never linked), runs every driver
// call in a short-lived helper process with a deadline, finds the CUDA
// processes of a process set, suspends and resumes a set with rollback, and
// takes the GPU inventory.
package cuda

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/internal/report"
)

// State is the checkpoint state of one CUDA process, as the driver reports it
// (CUprocessState). The numeric values are the driver's.
type State int

const (
	StateRunning      State = 0
	StateLocked       State = 1
	StateCheckpointed State = 2
	StateFailed       State = 3
)

func (s State) String() string {
	switch s {
	case StateRunning:
		return "running"
	case StateLocked:
		return "locked"
	case StateCheckpointed:
		return "checkpointed"
	case StateFailed:
		return "failed"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Sentinel errors. Callers test them with errors.Is; concrete errors wrap them.
var (
	// ErrLibraryNotFound: libcuda.so.1 (or the configured path) could not be loaded.
	ErrLibraryNotFound = report.Sentinel("CUDA driver library not found", errdefs.ErrFailedPrecondition)
	// ErrNoCheckpointAPI: the driver lacks cuCheckpointProcess* (driver < 570).
	ErrNoCheckpointAPI = report.Sentinel("CUDA driver has no checkpoint API", errdefs.ErrFailedPrecondition)
	// ErrTimeout: a driver call did not return before its deadline; the helper was killed.
	ErrTimeout = report.Sentinel("CUDA driver call timed out", context.DeadlineExceeded)
	// ErrNoProcess: the pid does not exist.
	ErrNoProcess = report.Sentinel("no such process", errdefs.ErrNotFound)
	// ErrNotCUDA: the process holds no CUDA state.
	ErrNotCUDA = errors.New("process does not use CUDA")
	// ErrDriver: the driver returned an error code; see *DriverError.
	ErrDriver = errors.New("CUDA driver error")
	// ErrBadState: the process is not in the state the transition needs.
	ErrBadState = report.Sentinel("CUDA process in wrong state", errdefs.ErrFailedPrecondition)
	// ErrNVML: NVML could not be loaded or queried.
	ErrNVML = errors.New("NVML unavailable")
)

// DriverError is a failed driver call, with the driver's own code and string.
type DriverError struct {
	Op      string // "lock", "checkpoint", "restore", "unlock", "state", "restore-thread-id"
	PID     int
	Code    int    // CUresult
	Name    string // cuGetErrorName, e.g. CUDA_ERROR_INVALID_VALUE
	Message string // cuGetErrorString
}

func (e *DriverError) Error() string {
	return fmt.Sprintf("cuda %s pid %d: %s (%d): %s", e.Op, e.PID, e.Name, e.Code, e.Message)
}

// Unwrap makes errors.Is(err, ErrDriver) true, and ErrNotCUDA/ErrBadState when
// the code says so.
func (e *DriverError) Unwrap() []error {
	switch e.Code {
	case cudaErrorNotInitialized:
		// What the driver answers for a process without CUDA state.
		return []error{ErrDriver, ErrNotCUDA}
	case cudaErrorIllegalState:
		return []error{ErrDriver, ErrBadState}
	}
	return []error{ErrDriver}
}

// CUresult codes the package interprets.
const (
	cudaErrorNotInitialized = 3
	cudaErrorIllegalState   = 401
)

// GPUPair maps a GPU of the checkpointing host to one of the restoring host,
// by UUID ("GPU-xxxxxxxx-…"), for CUcheckpointRestoreArgs.gpuPairs.
type GPUPair struct {
	Old string `json:"old"`
	New string `json:"new"`
}

// Options configures a Driver.
type Options struct {
	// LibPath is the CUDA driver library; empty means "libcuda.so.1".
	LibPath string
	// NVMLPath is the NVML library; empty means "libnvidia-ml.so.1".
	NVMLPath string
	// CallTimeout bounds every driver call except the memory copies; default 30s.
	CallTimeout time.Duration
	// CopyTimeout bounds checkpoint and restore, which copy GPU memory; default 10m.
	CopyTimeout time.Duration
	// Env is the helper processes' environment (the driver libraries read
	// theirs, LD_LIBRARY_PATH among them); nil: this process's. cryo-runc
	// passes its environment file's settings here, since Podman starts it
	// with an almost empty environment.
	Env []string
	// DieWithCaller: a helper that holds a process's threads dies with its
	// caller, as every other helper does, instead of ending its call. For
	// the containerd shim: containerd kills the task of a shim that died,
	// and a helper tracing the task's threads would keep their exits from
	// being reaped until its call ended, wedging containerd's cleanup.
	DieWithCaller bool
}

// DriverInfo is what Probe learns about the driver.
type DriverInfo struct {
	LibPath       string `json:"lib_path"`
	DriverVersion int    `json:"driver_version"` // cuDriverGetVersion, e.g. 13000
	CheckpointAPI bool   `json:"checkpoint_api"`
	// Missing lists checkpoint-API symbols the library lacks.
	Missing []string `json:"missing,omitempty"`
}

// GPU is one device of the inventory.
type GPU struct {
	Index             int    `json:"index"`
	Name              string `json:"name"`
	UUID              string `json:"uuid"`
	MemoryTotal       uint64 `json:"memory_total"`       // bytes
	MemoryFree        uint64 `json:"memory_free"`        // bytes
	ComputeCapability string `json:"compute_capability"` // "9.0"
	// Minor is the GPU's device node, /dev/nvidia<Minor>; -1 if NVML
	// could not tell.
	Minor int `json:"minor"`
	// Processes are the processes NVML lists on this GPU (those holding
	// memory there), with what each holds.
	Processes []GPUProcess `json:"processes,omitempty"`
}

// GPUProcess is one process NVML lists on a GPU.
type GPUProcess struct {
	PID    int    `json:"pid"`    // host pid
	Memory uint64 `json:"memory"` // bytes of GPU memory, 0 if NVML cannot tell
}

// Inventory is the GPUs of a host and its driver.
type Inventory struct {
	DriverVersion string `json:"driver_version"` // "580.159.04"
	CUDAVersion   int    `json:"cuda_version"`   // 13000
	GPUs          []GPU  `json:"gpus"`
}

// Process is one CUDA process found by discovery.
type Process struct {
	PID   int   `json:"pid"`
	State State `json:"state"`
}

// Skipped is a process discovery looked at and left out, with the reason.
type Skipped struct {
	PID    int    `json:"pid"`
	Reason string `json:"reason"`
}

// Progress reports a step of a set operation; Done is false at its start.
type Progress struct {
	PID     int
	Step    string // "lock", "checkpoint", "restore", "unlock"
	Done    bool
	Elapsed time.Duration
	Err     error
}

// SetOptions configures Suspend and Resume of a set of processes.
type SetOptions struct {
	// LockTimeout is passed to cuCheckpointProcessLock; default 10s.
	LockTimeout time.Duration
	// GPUPairs remaps GPUs on Resume, for every process not in PIDPairs.
	GPUPairs []GPUPair
	// PIDPairs remaps GPUs on Resume per process: the driver takes only a
	// one-to-one map over exactly the GPUs each process sees, which may
	// differ between the processes of one container.
	PIDPairs map[int][]GPUPair
	// OnProgress, if set, is called at the start and end of every step,
	// never concurrently.
	OnProgress func(Progress)
	// Parallel caps the driver calls of one phase that run at once:
	// 0 is the default (up to 16), 1 is one process after another.
	Parallel int
}
