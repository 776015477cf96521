package cuda

import (
	"errors"
	"fmt"
)

// The helper protocol: the parent writes one request as JSON on the
// child's stdin; the child writes one reply as JSON on its stdout and exits.

// Operations of the helper. They double as DriverError.Op.
const (
	opProbe     = "probe"
	opLock      = "lock"
	opCkpt      = "checkpoint"
	opRestore   = "restore"
	opUnlock    = "unlock"
	opState     = "state"
	opTID       = "restore-thread-id"
	opInventory = "inventory"
)

type request struct {
	Op        string    `json:"op"`
	PID       int       `json:"pid,omitempty"`
	Lib       string    `json:"lib,omitempty"`
	NVML      string    `json:"nvml,omitempty"`
	TimeoutMs uint32    `json:"timeout_ms,omitempty"`
	Pairs     []GPUPair `json:"pairs,omitempty"`
	// Hold: the call runs with every thread of the process held but the
	// driver's restore thread (hold.go).
	Hold bool `json:"hold,omitempty"`
	// DeadlineMs: when the helper gives up on a held action by itself
	// (Unix time, ms), should its caller be gone by then (hold.go).
	DeadlineMs int64 `json:"deadline_ms,omitempty"`
}

// heldAction: a held call that lifts the process's group stop (every call
// but the state query). Until it ends the process's threads may run, so it
// must end in a hold again: it outlives its caller, is not interrupted,
// and at a deadline the process is stopped before the helper is killed.
func (r request) heldAction() bool { return r.Hold && r.Op != opState }

type reply struct {
	State int         `json:"state"`
	TID   int         `json:"tid,omitempty"`
	Info  *DriverInfo `json:"info,omitempty"`
	Inv   *Inventory  `json:"inventory,omitempty"`
	Err   *wireError  `json:"error,omitempty"`
}

// Kinds of wireError; each maps to one sentinel error.
const (
	kindDriver  = "driver"
	kindLibrary = "library"
	kindNoAPI   = "noapi"
	kindNVML    = "nvml"
	kindInvalid = "invalid"
	kindHold    = "hold"
)

// wireError carries a typed error across the process boundary.
type wireError struct {
	Kind    string `json:"kind"`
	Code    int    `json:"code,omitempty"`
	Name    string `json:"name,omitempty"`
	Message string `json:"message,omitempty"`
}

// toError turns a reply's error back into the package's typed errors.
func (w *wireError) toError(op string, pid int) error {
	switch w.Kind {
	case kindDriver:
		return &DriverError{Op: op, PID: pid, Code: w.Code, Name: w.Name, Message: w.Message}
	case kindLibrary:
		return fmt.Errorf("%w: %s", ErrLibraryNotFound, w.Message)
	case kindNoAPI:
		return fmt.Errorf("%w: %s", ErrNoCheckpointAPI, w.Message)
	case kindNVML:
		return fmt.Errorf("%w: %s", ErrNVML, w.Message)
	case kindInvalid:
		return fmt.Errorf("%w: %s", ErrBadUUID, w.Message)
	case kindHold:
		return fmt.Errorf("%w: %s", ErrStopWorld, w.Message)
	}
	return errors.New(w.Message)
}
