//go:build cgo

package cuda

import (
	"fmt"
	"strings"
	"time"
)

// symbolOf names the driver entry point behind each helper op.
var symbolOf = map[string]string{
	opLock:    "cuCheckpointProcessLock",
	opCkpt:    "cuCheckpointProcessCheckpoint",
	opRestore: "cuCheckpointProcessRestore",
	opUnlock:  "cuCheckpointProcessUnlock",
	opState:   "cuCheckpointProcessGetState",
	opTID:     "cuCheckpointProcessGetRestoreThreadId",
}

// checkpointSymbols are the entry points cryo needs, in a stable order.
var checkpointSymbols = []string{
	"cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint",
	"cuCheckpointProcessRestore", "cuCheckpointProcessUnlock",
	"cuCheckpointProcessGetState", "cuCheckpointProcessGetRestoreThreadId",
}

// probe loads the library and lists what it offers.
func probe(path string) reply {
	lib, werr := openCUDA(path)
	if werr != nil {
		return reply{Err: werr}
	}
	info := DriverInfo{LibPath: path, DriverVersion: lib.version()}
	for _, s := range checkpointSymbols {
		if lib.sym(s) == nil {
			info.Missing = append(info.Missing, s)
		}
	}
	info.CheckpointAPI = len(info.Missing) == 0
	rep := reply{Info: &info}
	if !info.CheckpointAPI {
		rep.Err = noAPI(lib, info.Missing)
	}
	return rep
}

// noAPI explains a driver without the checkpoint API.
func noAPI(lib *cudaLib, missing []string) *wireError {
	return &wireError{Kind: kindNoAPI, Message: fmt.Sprintf(
		"%s (CUDA driver API %s) lacks %s; cryo needs NVIDIA driver 570 or newer (CUDA 12.8 or newer): upgrade the driver",
		lib.path, FormatCUDAVersion(lib.version()), strings.Join(missing, ", "))}
}

// checkpointCall performs one cuCheckpointProcess* call.
func checkpointCall(req request) reply {
	lib, werr := openCUDA(req.Lib)
	if werr != nil {
		return reply{Err: werr}
	}
	f := lib.sym(symbolOf[req.Op])
	if f == nil {
		return reply{Err: noAPI(lib, []string{symbolOf[req.Op]})}
	}
	raw, err := pairBytes(req.Pairs)
	if err != nil {
		return reply{Err: &wireError{Kind: kindInvalid, Message: err.Error()}}
	}
	call := func() reply {
		var rep reply
		if code := lib.invoke(f, req, raw, &rep); code != 0 {
			return reply{Err: lib.driverError(code)}
		}
		return rep
	}
	if !req.Hold {
		return call()
	}
	// The restore thread is asked first: the driver names it whatever the
	// process's threads do (CRIU's CUDA plugin asks it of a stopped task).
	ftid := lib.sym(symbolOf[opTID])
	if ftid == nil {
		return reply{Err: noAPI(lib, []string{symbolOf[opTID]})}
	}
	var t reply
	if code := lib.invoke(ftid, request{Op: opTID, PID: req.PID}, nil, &t); code != 0 {
		return reply{Err: lib.driverError(code)}
	}
	var deadline time.Time
	if req.DeadlineMs > 0 {
		deadline = time.UnixMilli(req.DeadlineMs)
	}
	return heldCall(req.Op, req.PID, t.TID, deadline, call)
}
