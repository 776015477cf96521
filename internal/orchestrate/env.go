package orchestrate

import (
	"log/slog"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
)

// env is what the sequences of one entry point's call run with: the
// Orchestrator's settings and parts, resolved once (Orchestrator.env) and
// handed to each sequence as a value, so that no sequence reaches back
// into the Orchestrator or keeps a copy of its options. Each part is a
// small value of its own, with the few methods its job needs.
type env struct {
	cfg     config.Config
	log     *slog.Logger
	stepper stepper   // announces, times, draws and logs the steps
	gpu     gpu       // the driver, with the orchestration's options
	locks   locker    // the lock directory: the targets' locks, the pause records
	criu    criuCheck // the configured CRIU's version and feature gates
	host    hostCheck // a checkpoint's GPUs against this host's
	front   FrontEnd  // the words of the remedies
	// allowIPC checkpoints what the inventory would refuse
	// (Orchestrator.AllowCUDAIPC).
	allowIPC bool
	// hash takes the digests after a dump: Orchestrator.hashFiles, else
	// digest.FilesWith.
	hash func(dir string, p digest.Progress) (map[string]string, error)
}
