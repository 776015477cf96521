package cli

import (
	"github.com/spf13/cobra"
)

// Help topics: `cryo help environment` and the like. They are commands
// without a Run, which cobra lists as "Additional help topics"; the Markdown
// reference carries them too.
func topicCommands() []*cobra.Command {
	topic := func(name, short, long string) *cobra.Command {
		return &cobra.Command{Use: name, Short: short, Long: long}
	}
	return []*cobra.Command{
		topic("environment", "the variables every front end reads", environmentTopic),
		topic("interrupted", "what a killed or interrupted checkpoint leaves, and how to finish it", interruptedTopic),
		topic("locking", "one checkpoint or restore of a target at a time", lockingTopic),
		topic("digests", "how checkpoint files are hashed and verified", digestsTopic),
	}
}

const environmentTopic = `Every front end reads these once, when it starts: the cryo CLI and the shim
from their environment (the shim's is containerd's), cryo-runc and its CRIU
action script from their environment with the environment file merged
beneath it (docs/podman.md). A flag of the CLI wins over its variable.

  CRYO_LIBCUDA         the CUDA driver library (default libcuda.so.1)
  CRYO_LIBNVML         the NVML library (default libnvidia-ml.so.1)
  CRYO_CRIU            the CRIU binary (default /usr/local/sbin/criu, then PATH);
                       for runc, which looks criu up on PATH by name, cryo-runc
                       and the shim put its directory first on PATH
  CRYO_CRIU_HUGE_FILL  0: CRIU fills restored memory as stock CRIU does, without
                       cryo's huge-page fill (read by CRIU; contrib/criu)
  CRYO_CRIU_FILL_THREADS
                       N: CRIU fills each restored process's memory from up to
                       N threads (default: the online CPUs, at most 8; 1: one
                       thread, as stock CRIU; read by CRIU; contrib/criu)
  CRYO_RUNC            the runc that cryo-runc wraps (default runc on PATH)
  CRYO_GPU_MAP         OLD-UUID=NEW-UUID[,...]: the target GPUs of a restore,
                       for every front end (--gpu-map)
  CRYO_VERIFY          full: hash every image file at every restore; unset (or
                       any other value): skip the hashing of an image that
                       cryo's own record shows unchanged, and written by no
                       one, since cryo hashed it on this host (see "cryo help
                       digests")
  CRYO_SPACE_CHECK     0: checkpoint even where the dump's estimate (every
                       page, zeros included) exceeds the free space of the
                       image directory; by default that is refused before
                       anything is suspended
  CRYO_STAMP_DIR       where those records live (default /var/lib/cryo/verified;
                       must be root's alone)
  CRYO_LOCK_DIR        the per-target lock files (default /run/cryo/locks)
  CRYO_GPU_FREE_PAUSE  0: a pause (ctr task pause, podman pause) freezes only;
                       default: it suspends CUDA first and frees GPU memory
  CRYO_COPY_TIMEOUT    deadline of a driver call that copies GPU memory (default
                       10m), for every front end (--copy-timeout)
  CRYO_RESTORE_TIMEOUT deadline of CRIU's restore (default 10m), for every front
                       end, and of a whole restore from an image (pull, unpack,
                       CRIU, CUDA resume; 100s for a pod's container): CRIU and
                       what it restored are killed then, and the container's
                       runc state, mounts and cgroups removed; a value that is
                       not a positive duration refuses restores
  CRYO_UNPACK_MAX_ENTRIES, _DEPTH, _NAME, _PATH
                       bounds on each tar a restore unpacks (default 100000
                       entries, depth 32, names 255 bytes, paths 4096)
  CRYO_RESTORE_DIR     where image restores unpack (default /var/lib/cryo/restore);
                       the work directory is removed after the restore
  CRYO_DIGEST_WATCH    0: hash the image after the dump instead of while CRIU
                       writes it
  CRYO_ALLOW_CUDA_IPC  1: checkpoint NCCL ranks that cryo would refuse
                       (--allow-cuda-ipc; docs/multi-gpu.md)
  CRYO_IMAGE_STORE     the local image store (default /var/lib/cryo/images for
                       root, ~/.local/share/cryo/images otherwise; --store); the
                       shim pulls the checkpoint images that pods name into it
  CRYO_ANNOTATION_RESTORE
                       the shim's policy file (JSON) for pods that name a
                       checkpoint image (cryo.io/checkpoint-image): unset, or
                       without "enabled": true, every such pod is refused; it
                       lists the repositories each namespace may restore from
                       (docs/kubernetes.md)
  CRYO_SIGNATURE_POLICY
                       the signature policy file (JSON) of the checkpoint images
                       cryo pulls, the shim's included (default
                       /etc/cryo/policy.json when it exists; --policy): none,
                       and pulls are not verified (docs/images.md)
  CRYO_CRIU_HOOKS      1: cryo-runc prepares every container it creates so that a
                       direct "runc checkpoint" is CUDA-safe too
  CRYO_CRIU_ACTION     the action script those containers get (default
                       cryo-criu-action next to cryo-runc)
  CRYO_RUNC_ENV        cryo-runc's environment file (default /etc/cryo/cryo-runc.env)
  CONTAINERD_ADDRESS   containerd's socket, as for ctr (--address)
  CONTAINERD_NAMESPACE containerd's namespace, as for ctr (--namespace)

Registry credentials come from the files Podman and Docker use, in their
order: --authfile, $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json,
/run/containers/UID/auth.json, $XDG_CONFIG_HOME/containers/auth.json (else
~/.config/containers/auth.json), then $DOCKER_CONFIG/config.json (else
~/.docker/config.json). The shim searches the same files from containerd's
environment (containerd runs as root: /root/.docker/config.json, or
REGISTRY_AUTH_FILE in its unit), for the namespaces whose policy allows the
node's credentials; its other pulls are anonymous.`

const interruptedTopic = `Without --leave-running, CRIU leaves the dumped tree stopped, not killed: cryo
kills it only after the digests and the manifest are written, the file
system is synced and the manifest reads back complete. A failure after the
dump (a full disk at the last write, say) gives the tree back (CUDA resumed
first, then SIGCONT), so the workload runs on; its dump is then stale and is
marked so (stats-dump removed), and a restore refuses it. With
--tcp-established the tree is killed by CRIU as before: CRIU keeps the
network locked for a stopped tree.

Signals. Ctrl-C (SIGINT), SIGTERM and SIGHUP are caught, whether they come
to cryo's pid or to its whole process group (a terminal's Ctrl-C, "timeout
-s INT", systemd, CI runners): CRIU, runc and the driver helper run in
sessions (or process groups) of their own and never get them. cryo finishes
the step under way (CRIU's dump and the driver's copy are never cut short:
stopped halfway they would lose the workload), then rolls back: CUDA
resumed, the processes continued. Once a dump has ended the processes
(--tcp-established), an interrupt completes the checkpoint instead. Further
signals during the rollback are ignored. A signal that comes once the
command can no longer be undone (the last write of a checkpoint, a restore
whose CRIU part is done) lets it complete, exit 0, and says so: "SIGINT
came once the command could no longer be undone: it completed". A closed
pipe on cryo's output ("cryo checkpoint ... | head -c1") is no signal at
all: the output is dropped and the command runs to its end.

What cryo says is checked: before it prints that the processes were
returned to running, it looks at each one (alive, not stopped) and asks the
driver whether their CUDA runs; "complete" is printed once the manifest
reads back with its digests and every file in place. When a check fails the
message says which pids died or wait stopped, after which step, and the one
remedy. The exit status says what became of the workload:
  0    done
  1    failed; the workload runs on, or waits for the remedy given
  3    a process died; a complete checkpoint holds the workload
  4    a process died; no complete checkpoint holds it
  130  interrupted by Ctrl-C (128+signal for SIGTERM, SIGHUP): rolled back,
       and checked running
cryo-runc exits with the same statuses for the same outcomes (Podman and
CRI-O show a runtime's status: "exit status 143"): 3 and 4 for the fates,
128+signal when interrupted with the container left running, checked;
its other failures keep runc's status, or 1.

An interrupted restore ("cryo restore", "cryo image restore", "cryo-runc
restore") leaves nothing half-restored. Before CRIU starts it stops
between steps; during CRIU's restore, CRIU is stopped and the processes it
had restored are killed (a container's runc state, mounts and cgroups go
too; "cryo image restore" removes its work directory). A restore writes
none of the checkpoint's files (but to complete one interrupted after its
dump, below), so the message says it is whole and gives the command to run
again, as it was typed:
  cryo: restore of checkpoint DIR failed: restore interrupted: interrupted
  by SIGINT; CRIU was stopped and the processes it had restored were
  killed; ...; remedy: the checkpoint was not changed and is whole: run
  ` + "`cryo restore --dir DIR`" + ` to restore it again
Once CRIU is done, the CUDA resume is not interrupted: the restore
completes and exits 0. A cryo killed there leaves the tree stopped with
CUDA checkpointed: "cryo recover PID" lets it run on.

"cryo image restore --containerd" fills containerd before the shim runs
CRIU: a lease and its blobs, the container, its task. Interrupted before
the task starts, it removes all of them and prints the command to run
again, as above. The start (the shim's CRIU restore and CUDA resume) is
not cut short: the restore completes and exits 0. A cryo killed before the
start leaves a container that has run nothing; the same command, run
again, removes it (and the lease) and restores.

A GPU-free pause (ctr task pause, podman pause, cryo-runc pause)
interrupted before it froze the container rolls back, CUDA resumed; a
resume is never interrupted (it only gives back: stopped between the
thaw and the CUDA resume it would leave the processes held).

Under containerd, a Ctrl-C on "ctr task checkpoint" reaches ctr's group
only: the shim's CRIU runs on and ends its dump. containerd paused the
task for the checkpoint and resumes it on ctr's request, which is gone:
the task stays paused, and "ctr task resume" brings it back, CUDA first.
A Ctrl-C on "ctr container restore" reaches ctr alone too. During the
shim's checks of the checkpoint (the task's Create), containerd cancels the
create and shuts the shim down: no task is left. Once the task starts, the
shim ends the restore it was asked for and the task runs, CUDA resumed. A
shim killed mid-restore (containerd's SIGTERM and SIGKILL to its group)
leaves no restored process, running or stopped, and containerd reports the
task failed.

A SIGKILL has no rollback. Sent to cryo's whole process group ("kill -9
-PGID", a supervisor that gives up), it ends cryo alone all the same:
CRIU, runc and the driver helper live on in their groups and end what
they do. The workload then runs on, or waits stopped with CUDA
checkpointed, and "cryo ps" names the one command: "cryo recover PID".

If cryo itself is killed after the dump (or, under Podman, cryo-runc), the
images are whole but the manifest has no digests. Such a checkpoint is not
lost:
  - "cryo restore" (and the shim and cryo-runc restores) completes it first,
    printing "completing a checkpoint interrupted after its dump: hashing its
    files as they are now". The manifest then records
    completed_after_interruption: its digests vouch for the files as they
    were when hashed, not as CRIU wrote them.
  - "cryo checkpoint --finish DIR" does the same without restoring.

A bare tree whose cryo was killed (during the driver's copy, the dump, or
the digests) is still there, stopped, with CUDA checkpointed: "cryo ps"
shows "stopped, CUDA checkpointed: run cryo recover PID". Either run "cryo
recover PID" to let it run on (CUDA is resumed first, then the processes
continue, then checked; its dump is then stale: take a new checkpoint), or
kill it and restore the checkpoint. Do not SIGCONT it yourself: its threads
would run on a checkpointed GPU, and it crashes. cryo completes a checkpoint
only when CRIU's dump completed (stats-dump and inventory.img present, and
"Dumping finished successfully" in the dump log); anything else is refused
with "did not finish ... re-take the checkpoint". "cryo inspect DIR" says
which of the two a checkpoint is.

Killed before the dump, cryo leaves nothing to finish: killed before the
suspend, the processes were never touched; killed between the suspend and
the dump, they are stopped with CUDA checkpointed, and "cryo recover PID"
brings them back as they were.`

const lockingTopic = `Every front end (cryo checkpoint and restore, cryo cuda suspend and resume,
cryo-runc, the containerd shim, the CRIU action script) locks its target for
the whole run: the container id, and each pid of its processes, so that
"cryo checkpoint --pid" on a container's process and "cryo-runc checkpoint"
of that container collide too. A second request for a target that is busy
does not wait and touches nothing (no thaw, no suspend, no resume); it fails
at once with:

  cryo: checkpoint of pid 7000 failed at step lock: a checkpoint of pid 7000
  is in progress (pid 6812 of cryo); nothing was done, the processes were not
  touched; remedy: wait for that run to finish, then retry

The first run completes normally. Through containerd, the shim also refuses
the Pause that containerd sends before a second checkpoint of a task whose
checkpoint is in progress, so that the first run's driver calls never meet a
frozen cgroup. The locks are flocks on files in /run/cryo/locks
(CRYO_LOCK_DIR); the kernel drops them when their holder exits, so a killed
cryo leaves nothing to clean up.

cryo suspends only CUDA processes it finds running, and a failed run resumes
only those it suspended itself. A process already locked stops a checkpoint
before anything is touched ("cryo cuda state PID" says why). A process you
suspended yourself with "cryo cuda suspend" is dumped as it is and left
suspended: "cryo checkpoint --leave-running" and cryo-runc then say so, with
the "cryo cuda resume" to run.`

const digestsTopic = `Every image file is recorded in the manifest as sha256-chunked-16MiB:SIZE:HEX:
the sha256 of the sha256s of its 16 MiB chunks, so that hashing uses every
core. Manifests of format 1 (plain sha256) are still verified.

A checkpoint hashes the page images while CRIU writes them (CRIU only appends
to them; each chunk is hashed once it lies below the file's end), so the
digests are ready a few hundredths of a second after the dump: 0.11 s for a
17.8 GB image, where a second pass took 1.1 s. CRYO_DIGEST_WATCH=0 hashes
after the dump instead.

A restore verifies every file against the manifest before anything is
restored. An image that cryo itself hashed on this host (it wrote the
checkpoint, or verified it before) is not read again if none of its files has
changed since: cryo keeps, in the root-only directory /var/lib/cryo/verified
(CRYO_STAMP_DIR), each file's device, inode, size, mtime and ctime as they
were when it hashed them. The kernel moves ctime on every write, and on the
first write through each new shared mapping, but not on a later write
through a mapping into a page that it had already dirtied: so cryo keeps a
record only while no process has any of the files open for writing (a
mapping holds its file open), which read leases on the files, held from
before the hashing until the record is written, prove; and it trusts a
record only while that still holds and no file's identity has changed.
Records are kept on ext4, XFS and Btrfs; elsewhere (tmpfs, NFS, FUSE...),
and while a file is open for writing, every restore hashes. Copies,
extractions and edits all change the record and are hashed in full.
CRYO_VERIFY=full hashes every restore, for storage that might corrupt data
underneath the file system. Records older than 14 days are pruned.
"cryo inspect --verify" checks a checkpoint's files without restoring it.`
