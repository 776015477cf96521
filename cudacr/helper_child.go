package cudacr

import (
	"encoding/json"
	"fmt"
	"os"
)

// EnvHelper marks a process started as the driver helper. Any binary that
// imports cudacr serves as its own helper: the package's init sees this
// variable, performs one request and exits before main runs.
const EnvHelper = "CRYO_CUDACR_HELPER"

func init() {
	if os.Getenv(EnvHelper) != "1" {
		return
	}
	os.Exit(serveHelper())
}

// serveHelper reads one request from stdin, performs it, writes the reply.
func serveHelper() int {
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintf(os.Stderr, "cudacr helper: bad request: %v\n", err)
		return 2
	}
	rep := perform(req)
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		fmt.Fprintf(os.Stderr, "cudacr helper: cannot write reply: %v\n", err)
		return 2
	}
	return 0
}

// perform dispatches a request; it runs only in the helper.
func perform(req request) reply {
	switch req.Op {
	case opProbe:
		return probe(req.Lib)
	case opInventory:
		return inventory(req.NVML)
	case opLock, opCkpt, opRestore, opUnlock, opState, opTID:
		return checkpointCall(req)
	}
	return reply{Err: &wireError{Kind: kindInvalid, Message: "unknown helper op " + req.Op}}
}
