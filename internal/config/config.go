// Package config is cryo's configuration from the environment. Every
// variable cryo reads is named here, with one naming pattern (EnvX), and is
// read once, by an entry point (the cryo CLI, the shim, cryo-runc, the CRIU
// action script), into a typed Config that it passes down, so that a test
// or a front end states its configuration in one value. The few variables
// still read where they are used (PATH, XDG_RUNTIME_DIR, the driver
// helper's marker, a registry client's environment) are listed in
// docs/architecture.md, generated from the code.
package config

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/internal/report"
)

// The variables a user or an installer sets.
const (
	EnvLibCUDA      = "CRYO_LIBCUDA"        // the CUDA driver library; default libcuda.so.1
	EnvLibNVML      = "CRYO_LIBNVML"        // the NVML library; default libnvidia-ml.so.1
	EnvCopyTimeout  = "CRYO_COPY_TIMEOUT"   // bound on one driver copy (Go duration); default 10m
	EnvCRIU         = "CRYO_CRIU"           // the criu binary; default /usr/local/sbin/criu, then PATH
	EnvRunc         = "CRYO_RUNC"           // the real runc behind cryo-runc; default PATH
	EnvCRIUAction   = "CRYO_CRIU_ACTION"    // cryo-criu-action; default next to cryo-runc
	EnvCRIUHooks    = "CRYO_CRIU_HOOKS"     // 1: cryo-runc prepares containers for direct runc checkpoints
	EnvEnvFile      = "CRYO_RUNC_ENV"       // the environment file; default /etc/cryo/cryo-runc.env
	EnvGPUMap       = "CRYO_GPU_MAP"        // OLD-UUID=NEW-UUID[,…]: the GPUs a restore maps onto
	EnvAllowCUDAIPC = "CRYO_ALLOW_CUDA_IPC" // 1: checkpoint NCCL ranks and multi-GPU JAX processes cryo would refuse
	EnvLockDir      = "CRYO_LOCK_DIR"       // per-target lock files; default /run/cryo/locks
	EnvGPUFreePause = "CRYO_GPU_FREE_PAUSE" // 0: pause freezes only, CUDA keeps its GPU memory
	EnvDigestWatch  = "CRYO_DIGEST_WATCH"   // 0: hash after the dump instead of during it
	EnvVerify       = "CRYO_VERIFY"         // full: always re-hash; default auto (trust a valid record)
	EnvSpaceCheck   = "CRYO_SPACE_CHECK"    // 0: checkpoint even where the estimate exceeds the free space
	EnvStampDir     = "CRYO_STAMP_DIR"      // verification records; default /var/lib/cryo/verified
	EnvImageStore   = "CRYO_IMAGE_STORE"    // the local image store; default /var/lib/cryo/images
	EnvRestoreDir   = "CRYO_RESTORE_DIR"    // work directories of restores; default /var/lib/cryo/restore
	// EnvAnnotationRestore names the node's annotation restore policy (a
	// JSON file, AnnotationPolicy); unset: the shim refuses every pod that
	// names a checkpoint image in its annotations.
	EnvAnnotationRestore = "CRYO_ANNOTATION_RESTORE"
	// containerd's own variables, read by the CLI as ctr reads them.
	EnvContainerdAddress   = "CONTAINERD_ADDRESS"   // containerd's socket; default /run/containerd/containerd.sock
	EnvContainerdNamespace = "CONTAINERD_NAMESPACE" // containerd's namespace; default "default"

	// EnvRestoreTimeout bounds a whole restore: fetch, unpack, CRIU and
	// the CUDA resume (Go duration); default DefaultRestoreTime, and
	// DefaultKubernetesRestoreTime for a pod's container.
	EnvRestoreTimeout = "CRYO_RESTORE_TIMEOUT"
)

// Variables cryo sets for its own children; nobody else should.
const (
	EnvOrchestrated = "CRYO_ORCHESTRATED"  // 1: cryo-runc runs the orchestration, the action script stands by
	EnvContainerID  = "CRYO_CONTAINER_ID"  // the container an action script acts for
	EnvBundle       = "CRYO_BUNDLE"        // the bundle an action script checks the restored tasks against
	EnvOutcomeOnly  = "CRYO_OUTCOME_ONLY"  // 1: the action script only checks the restored tasks (pre-resume)
	EnvHelper       = "CRYO_CUDACR_HELPER" // 1: this process is a driver helper child
	EnvWatchDir     = "CRYO_WATCH_DIR"     // the resume watcher's image directory
	EnvWatchPID     = "CRYO_WATCH_CRIU_PID"
	EnvWatchStart   = "CRYO_WATCH_CRIU_START"
	EnvWatchPIDs    = "CRYO_WATCH_PIDS"
	// EnvCRIUSeccompDir is where cryo's CRIU writes the restored threads'
	// seccomp filters for the outcome check (contrib/criu patch 0005).
	EnvCRIUSeccompDir = "CRYO_CRIU_SECCOMP_DIR"
)

// Defaults of the paths above.
const (
	DefaultEnvFile    = "/etc/cryo/cryo-runc.env"
	DefaultLockDir    = "/run/cryo/locks"
	DefaultSeccompDir = "/run/cryo/seccomp"
	DefaultStampDir   = "/var/lib/cryo/verified"
	DefaultImageStore = "/var/lib/cryo/images"
	DefaultRestoreDir = "/var/lib/cryo/restore"
	DefaultCopyTime   = 10 * time.Minute
)

// Config is the whole configuration of one cryo process.
type Config struct {
	LibCUDA, LibNVML string
	// CopyTimeout is zero when unset or invalid (see Problems): the
	// driver's default applies.
	CopyTimeout  time.Duration
	CRIU         string
	Runc         string
	CRIUAction   string
	CRIUHooks    bool
	GPUMap       string
	AllowCUDAIPC bool
	LockDir      string
	// FreezeOnlyPause turns the GPU-free pause off: a pause freezes the
	// container and CUDA keeps its GPU memory, as with runc.
	FreezeOnlyPause bool
	// HashAfterDump hashes the images after the dump instead of while CRIU
	// writes them.
	HashAfterDump bool
	VerifyFull    bool
	// NoSpaceCheck skips the refusal of a checkpoint whose estimate
	// exceeds the free space: the estimate counts every page, and cryo's
	// CRIU leaves all-zero ones out (an inference server's KV cache).
	NoSpaceCheck bool
	StampDir     string
	ImageStore   string
	RestoreDir   string
	// AnnotationRestore is the annotation restore policy's file ("": off);
	// LoadAnnotationPolicy reads it.
	AnnotationRestore string
	// ContainerdAddress and ContainerdNamespace are ctr's variables, ""
	// when unset (the CLI's flags then default to containerd's own).
	ContainerdAddress, ContainerdNamespace string
	// RestoreTimeout bounds every restore (see RestoreLimit). RestoreTimeoutErr
	// is set when the variable is not a positive duration: every restore
	// is then refused, naming it, rather than run with a bound nobody chose.
	RestoreTimeout    time.Duration
	RestoreTimeoutErr error
	// RestoreTimeoutSet: CRYO_RESTORE_TIMEOUT was given (RestoreLimit).
	RestoreTimeoutSet bool
	// Unpack bounds the tars of a checkpoint image unpacked for a restore
	// (CRYO_UNPACK_MAX_*).
	Unpack UnpackLimits
	// AuthFiles are the registry auth files to search, in order.
	AuthFiles []string
	// EnvFile is the environment file merged beneath the environment ("" if
	// none was).
	EnvFile string
	// Environ is the process's environment with the file's settings added:
	// what cryo-runc hands the real runc, and through it CRIU and the
	// action script.
	Environ []string
	// CopyTimeoutErr is set when CRYO_COPY_TIMEOUT is set but not a positive
	// duration: a command that would use it refuses to run (it is also
	// among Problems, for the doctor).
	CopyTimeoutErr error
	// Problems are values that were set but invalid; their defaults apply,
	// and `cryo doctor` shows them.
	Problems []error
}

// Lookup is the value of key in environ (KEY=VALUE pairs, the first one
// found), "" if unset: for an environment that is not this process's, such
// as Config.Environ or a daemon's.
func Lookup(environ []string, key string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// FromEnv reads the configuration from the process environment.
func FromEnv() Config { return parse(os.Environ()) }

// parse builds a Config from KEY=VALUE pairs; a later pair wins.
func parse(environ []string) Config {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	c := Config{
		LibCUDA: env[EnvLibCUDA], LibNVML: env[EnvLibNVML],
		CRIU: env[EnvCRIU], Runc: env[EnvRunc], CRIUAction: env[EnvCRIUAction],
		CRIUHooks:           env[EnvCRIUHooks] == "1",
		GPUMap:              env[EnvGPUMap],
		AllowCUDAIPC:        env[EnvAllowCUDAIPC] == "1",
		LockDir:             cmp.Or(env[EnvLockDir], DefaultLockDir),
		FreezeOnlyPause:     env[EnvGPUFreePause] == "0",
		HashAfterDump:       env[EnvDigestWatch] == "0",
		VerifyFull:          env[EnvVerify] == "full",
		NoSpaceCheck:        env[EnvSpaceCheck] == "0",
		StampDir:            cmp.Or(env[EnvStampDir], DefaultStampDir),
		ImageStore:          imageStore(env),
		RestoreDir:          cmp.Or(env[EnvRestoreDir], DefaultRestoreDir),
		AnnotationRestore:   env[EnvAnnotationRestore],
		ContainerdAddress:   env[EnvContainerdAddress],
		ContainerdNamespace: env[EnvContainerdNamespace],
		AuthFiles:           authFiles(env),
		Environ:             environ,
	}
	c.CopyTimeout, c.Problems = copyTimeout(env[EnvCopyTimeout])
	if len(c.Problems) > 0 {
		c.CopyTimeoutErr = fmt.Errorf("%s=%q: %w (a Go duration such as 90s or 5m)", EnvCopyTimeout, env[EnvCopyTimeout], ErrBadDuration)
	}
	c.RestoreTimeout, c.RestoreTimeoutErr = restoreTimeout(env[EnvRestoreTimeout])
	c.RestoreTimeoutSet = env[EnvRestoreTimeout] != ""
	var unpack []error
	c.Unpack, unpack = unpackLimits(env)
	c.Problems = append(c.Problems, unpack...)
	return c
}

// copyTimeout parses $CRYO_COPY_TIMEOUT: zero when unset; zero and a
// problem when it is not a positive duration.
func copyTimeout(v string) (time.Duration, []error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, []error{report.WithRemedy(fmt.Errorf("%s=%q is not a positive duration, so the default %s applies", EnvCopyTimeout, v, DefaultCopyTime), "give one such as 90s or 5m")}
	}
	return d, nil
}

// imageStore is $CRYO_IMAGE_STORE, else /var/lib/cryo/images for root and
// $XDG_DATA_HOME/cryo/images (~/.local/share/cryo/images) for anyone else,
// who cannot write under /var/lib.
func imageStore(env map[string]string) string {
	if d := env[EnvImageStore]; d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return DefaultImageStore
	}
	if d := env["XDG_DATA_HOME"]; d != "" {
		return filepath.Join(d, "cryo", "images")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "cryo", "images")
	}
	return DefaultImageStore
}
