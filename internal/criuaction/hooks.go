// Package criuaction holds the entry points that runc and CRIU call back into.
//
// cryo-runc (with CRYO_CRIU_HOOKS=1) prepares each container it creates so
// that a direct `runc checkpoint`/`runc restore`, which bypasses cryo-runc,
// is CUDA-safe too. Three things are written, all into the bundle directory:
//
//   - cryo-criu.conf, the bundle's CRIU configuration file (see
//     criu.AddConfig), with the line
//     `action-script <bundle>/cryo-criu-action.sh`;
//   - cryo-criu-action.sh, a two-line shell script that sets the container
//     id and cryo-runc's environment file and execs cryo-criu-action (CRIU
//     runs an action script without arguments, so this is how it learns them);
//   - the annotation org.criu.config=<bundle>/cryo-criu.conf in config.json,
//     which is how runc tells CRIU to read that configuration file.
//
// CRIU then runs cryo-criu-action at each step of a dump or restore (see
// Run). When cryo-runc runs the checkpoint or restore itself, it sets
// config.EnvOrchestrated and the action script does nothing, but for the
// check of the restored tasks at pre-resume (verify.go), which runs on
// every restore: the script carries the bundle for it, as does the one
// that cryo-runc and the shim write for each restore (outcome.Arm).
package criuaction

// scriptName is the generated action script in the bundle.
const scriptName = "cryo-criu-action.sh"
