// Precheck and preflight are two moments, one word each. A precheck (this
// package) runs before a checkpoint or restore touches anything: no
// process is suspended, stopped, thawed or restored, no image written
// (only the target's lock may be held). It reads the invocation and the
// host (privilege, pids, terminals, names, the checkpoint's own process
// tree), and its refusal is often the invocation's fault (Usage). The
// preflight is the dump's readiness check (internal/orchestrate's
// preflight.go): once the target is locked and its processes found, and
// before CUDA is suspended, it refuses a process set CRIU could not dump
// (a file kind CRIU cannot checkpoint), sparing the workload a pointless
// pause. It needs the processes the orchestration found, so it stays
// there.
package precheck
