// Package hooks makes a container's bundle run cryo-criu-action as CRIU's
// action script. It is the installer part of internal/criuaction, in a
// package of its own so that cryo-runc (internal/runcwrap) can install the
// script without importing another front end.
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
package hooks

// scriptName is the generated action script in the bundle.
const scriptName = "cryo-criu-action.sh"
