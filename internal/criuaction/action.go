package criuaction

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// actionTimeout bounds one action. CRIU waits for the script, and the
// container is stopped while it waits, so an action must never hang: every
// driver call also runs in a helper process with its own deadline.
const actionTimeout = 10 * time.Minute

// watchAction is the action name of the detached resume watcher (watch.go);
// CRIU never uses it.
const watchAction = "cryo-resume-watch"

// CRIUAction runs as CRIU's action script and returns the exit code. CRIU
// sets CRTOOLS_SCRIPT_ACTION, CRTOOLS_IMAGE_DIR (a /proc/<criu>/fd/<n> link
// to the image directory) and, from CRIU 4.x once it knows the dumpee or the
// restored root task, CRTOOLS_INIT_PID. A non-zero exit aborts the dump or
// restore at pre-dump and pre-restore.
func CRIUAction() int {
	action := os.Getenv("CRTOOLS_SCRIPT_ACTION")
	if os.Getenv(config.EnvOrchestrated) == "1" {
		return 0 // cryo-runc runs the orchestration itself
	}
	// The generated script names cryo-runc's environment file
	// ($CRYO_RUNC_ENV): CRIU passes on runc's environment, which Podman
	// keeps almost empty.
	cfg, err := config.Load("")
	if err != nil {
		logf("%s: %v", action, err)
		return 1
	}
	o := orchestrate.New(orchestrate.WithConfig(cfg))
	if action != watchAction && !firstRun(action) {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), actionTimeout)
	defer cancel()
	switch action {
	case "pre-dump":
		err = preDump(ctx, o)
	case "post-dump":
		err = postDump(ctx, o)
	case "pre-restore":
		err = preRestore(ctx, o)
	case "post-resume":
		err = postResume(ctx, o)
	case watchAction:
		err = watch(ctx, o)
	default:
		return 0
	}
	if err != nil {
		logf("%s: %v", action, err)
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
