// Package criuaction holds the entry points that runc and CRIU call back into.
//
// cryo-runc (with CRYO_CRIU_HOOKS=1) makes each container it creates run
// cryo-criu-action as CRIU's action script (see internal/criuaction/hooks,
// which writes it into the bundle), so that a direct `runc checkpoint`/`runc
// restore`, which bypasses cryo-runc, is CUDA-safe too. CRIU then runs
// cryo-criu-action at each step of a dump or restore (see Run). When
// cryo-runc runs the checkpoint or restore itself, it sets
// config.EnvOrchestrated and the action script does nothing, but for the
// check of the restored tasks at pre-resume (verify.go), which runs on
// every restore: the script carries the bundle for it, as does the one
// that cryo-runc and the shim write for each restore (outcome.Arm).
package criuaction
