package cuda

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cryo-gpu/cryo/internal/config"
)

// HelperRequested reports whether this process was started as a driver
// helper: helperCommand sets config.EnvHelper in the child's environment.
func HelperRequested() bool { return os.Getenv(config.EnvHelper) == "1" }

// RunHelper is the driver helper's whole life: it reads one request from
// stdin, performs it, writes the reply and returns the exit code. The
// program that re-executes itself as the helper (helperExe) chooses it,
// before it does anything else: cryo's main does so from its init (see
// cmd/cryo), since the libraries loaded here and the threads seized under
// ptrace must meet a process that is nothing but the helper.
func RunHelper() int {
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintf(os.Stderr, "cudacr helper: bad request: %v\n", err)
		return 2
	}
	// A caller that died leaves our pipes without a reader: a write there
	// (ours, or the driver's on stderr) must fail, not kill a helper that
	// holds a process's threads.
	signal.Ignore(syscall.SIGPIPE)
	out, err := replyChannel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cudacr helper: %v\n", err)
		return 2
	}
	rep := perform(req)
	if err := json.NewEncoder(out).Encode(rep); err != nil {
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

// replyChannel keeps the reply's stdout for us alone: anything the driver
// libraries print goes to stderr instead, and cannot corrupt the JSON.
func replyChannel() (*os.File, error) {
	fd, err := syscall.Dup(1)
	if err != nil {
		return nil, fmt.Errorf("dup stdout: %w", err)
	}
	if err := syscall.Dup3(2, 1, 0); err != nil {
		return nil, fmt.Errorf("redirect stdout: %w", err)
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "reply"), nil
}
