package criuaction

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/words"
)

// actionTimeout bounds one action. CRIU waits for the script, and the
// container is stopped while it waits, so an action must never hang: every
// driver call also runs in a helper process with its own deadline.
const actionTimeout = 10 * time.Minute

// BinaryName is the name CRIU runs cryo under as its action script: the
// generated script execs it (see internal/criuaction/hooks), and cmd/cryo chooses Run by it.
const BinaryName = "cryo-criu-action"

// WatcherName is the resume watcher's argv[0] (see startWatcher): cmd/cryo
// chooses RunWatcher by it. It also names the watcher in its log lines.
const WatcherName = "cryo-resume-watch"

// step is one action's work, on the orchestrator of this run.
type step func(context.Context, *orchestrate.Orchestrator) error

// steps are the CRIU actions that cryo acts on; CRIU's others are no-ops.
var steps = map[string]step{
	"pre-dump":    preDump,
	"post-dump":   postDump,
	"pre-restore": preRestore,
	"post-resume": postResume,
}

// Run runs as CRIU's action script and returns the exit code. CRIU sets
// CRTOOLS_SCRIPT_ACTION, CRTOOLS_IMAGE_DIR (a /proc/<criu>/fd/<n> link
// to the image directory) and, from CRIU 4.x once it knows the dumpee or the
// restored root task, CRTOOLS_INIT_PID. A non-zero exit aborts the dump or
// restore at pre-dump and pre-restore.
func Run() int {
	// The script runs in CRIU's process group, which is runc's: a Ctrl-C
	// or hangup meant for the runtime's caller (or its supervisor's
	// SIGTERM) reaches it too. An action stopped halfway (CUDA half
	// suspended, the resume watcher not started) is worse than one that
	// ends: each is bounded by actionTimeout and its driver calls by their
	// deadlines, and CRIU, if the signal ended it, leaves the rest to the
	// resume watcher (its own session). So the script lets them pass.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGPIPE)
	env := envNow()
	action := env.action
	switch decide(env) {
	case doVerify:
		return verify(env.bundle) // whoever orchestrates: see verify
	case doNothing:
		return 0
	}
	o, err := newOrchestrator()
	if err != nil {
		logf("%s: %v", action, err)
		return 1
	}
	if !firstRun(action) {
		return 0
	}
	return runStep(action, o, steps[action])
}

// decision is what one run of the action script does.
type decision int

const (
	doNothing decision = iota // an action cryo does not act on, or one it leaves to cryo-runc
	doVerify                  // the outcome check at pre-resume
	doStep                    // one of steps, the orchestration's part of a direct runc checkpoint or restore
)

// actionEnv is what decide reads: CRIU's variable and cryo's.
type actionEnv struct {
	action       string // CRTOOLS_SCRIPT_ACTION
	bundle       string // CRYO_BUNDLE: the bundle the outcome check reads
	orchestrated string // CRYO_ORCHESTRATED
	outcomeOnly  string // CRYO_OUTCOME_ONLY
}

func envNow() actionEnv {
	return actionEnv{action: os.Getenv("CRTOOLS_SCRIPT_ACTION"), bundle: os.Getenv(config.EnvBundle),
		orchestrated: os.Getenv(config.EnvOrchestrated), outcomeOnly: os.Getenv(config.EnvOutcomeOnly)}
}

// decide chooses: the outcome check at pre-resume wherever a bundle is
// named, whoever orchestrates; nothing else when cryo-runc orchestrates
// the run itself or the script exists only for the check; else the step
// for the action, if cryo has one.
func decide(e actionEnv) decision {
	if e.action == verifyAction && e.bundle != "" {
		return doVerify
	}
	if e.orchestrated == "1" || e.outcomeOnly == "1" || steps[e.action] == nil {
		return doNothing
	}
	return doStep
}

// RunWatcher runs the resume watcher that pre-dump starts (startWatcher)
// and returns the exit code. Nobody reads it: the watcher is detached, and
// its failures go to cryo-action.log.
func RunWatcher() int {
	o, err := newOrchestrator()
	if err != nil {
		logf("%s: %v", WatcherName, err)
		return 1
	}
	return runStep(WatcherName, o, watch)
}

// newOrchestrator reads cryo's configuration and words remedies as the
// cryo CLI does, as it always has. The generated script names
// cryo-runc's environment file ($CRYO_RUNC_ENV): CRIU passes on runc's
// environment, which Podman keeps almost empty.
func newOrchestrator() (*orchestrate.Orchestrator, error) {
	cfg, err := config.Load("")
	if err != nil {
		return nil, err
	}
	return orchestrate.New(orchestrate.WithConfig(cfg), orchestrate.WithFrontEnd(words.Remedies)), nil
}

// runStep runs f within actionTimeout and logs its failure as name's.
func runStep(name string, o *orchestrate.Orchestrator, f step) int {
	ctx, cancel := context.WithTimeout(context.Background(), actionTimeout)
	defer cancel()
	if err := f(ctx, o); err != nil {
		logf("%s: %v", name, err)
		return 1
	}
	return 0
}

// containerID names the container in messages: the id the generated script
// carries, else the root pid.
func containerID() string {
	if id := os.Getenv(config.EnvContainerID); id != "" {
		return id
	}
	return "pid " + os.Getenv("CRTOOLS_INIT_PID")
}

// initPID is the container's root task, from CRIU.
func initPID() (int, error) {
	pid, err := strconv.Atoi(os.Getenv("CRTOOLS_INIT_PID"))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("CRIU passed no CRTOOLS_INIT_PID (CRIU 4.0 or newer is needed for CUDA-safe direct runc checkpoints; or checkpoint through cryo-runc)")
	}
	return pid, nil
}

// imageDir is CRIU's image directory, resolved to a real path so that it
// stays valid after CRIU exits. CRIU closes the directory before its last
// actions (post-resume), so the path resolved by an earlier action of the
// same CRIU process is used then.
func imageDir() (string, error) {
	if d := os.Getenv("CRTOOLS_IMAGE_DIR"); d != "" {
		if p, err := filepath.EvalSymlinks(d); err == nil {
			rememberImageDir(p)
			return p, nil
		}
	}
	if p := rememberedImageDir(); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("CRIU passed no usable CRTOOLS_IMAGE_DIR")
}

// logf writes to stderr, which CRIU passes on to its caller's log, and to
// cryo-action.log in the image directory, which outlives the run.
func logf(format string, a ...any) {
	msg := fmt.Sprintf("cryo-criu-action: container %s: "+format+"\n", append([]any{containerID()}, a...)...)
	os.Stderr.WriteString(msg)
	dir, err := imageDir()
	if err != nil {
		dir = os.Getenv(config.EnvWatchDir)
	}
	if dir == "" {
		return
	}
	if f, err := os.OpenFile(filepath.Join(dir, "cryo-action.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
		f.WriteString(time.Now().UTC().Format(time.RFC3339) + " " + msg)
		f.Close()
	}
}
