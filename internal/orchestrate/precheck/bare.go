package precheck

import (
	"fmt"

	"github.com/cryo-gpu/cryo/internal/criuimg"
)

// The prechecks of a bare process tree (`cryo checkpoint --pid`, `cryo
// restore` of such a checkpoint), which CRIU would otherwise refuse late.

// BareCheckpoint refuses, before anything is suspended, a bare checkpoint
// of pid that CRIU would refuse later: not root, a pid inside a container,
// a shell job without shellJob. tree lists pid's process tree; it is asked
// only once pid is known to be the host's.
func BareCheckpoint(pid int, shellJob bool, tree func(pid int) ([]int, error)) error {
	if err := Root("checkpoint"); err != nil {
		return err
	}
	if err := HostProcess(pid); err != nil {
		return err
	}
	pids, err := tree(pid)
	if err != nil {
		return err
	}
	return ShellJob(pid, pids, shellJob)
}

// ContainerTree refuses a bare restore of a container's checkpoint (`ctr
// task checkpoint --image-path`, runc's): its root was pid 1 of the
// container's pid namespace, and a bare restore would give it back pid 1
// of the host's, which init holds; stopping that is no remedy. A directory
// without pstree.img is left to the restore's verify step to refuse.
func ContainerTree(dir string) error {
	if !containerTree(dir) {
		return nil
	}
	return &Error{Err: ErrContainerTree, Detail: containerTreeDetail(dir), Remedy: ContainerTreeRemedy}
}

// ContainerTreeImage refuses to build an image of a container's CRIU
// directory: the image would carry no container (no spec, no rootfs) and
// restore as a process tree, which the restore then refuses.
func ContainerTreeImage(dir string) error {
	if !containerTree(dir) {
		return nil
	}
	return &Error{Err: ErrContainerTree,
		Detail: containerTreeDetail(dir) + "; an image of it would hold no container to restore it into",
		Remedy: ContainerTreeRemedy}
}

// ContainerTreeRemedy is what to do with a container's CRIU directory:
// ctr restores no directory (only containerd's Go client does, see
// docs/containerd.md), so the remedy is the checkpoint containerd and cryo
// restore from the command line.
const ContainerTreeRemedy = "checkpoint the running container as an image instead: `ctr container checkpoint --task --rw CONTAINER REF`, " +
	"then `ctr container restore --live --rw CONTAINER REF`, or `cryo image build --containerd REF IMAGE` and `cryo image restore --containerd IMAGE` " +
	"(a directory restores only through containerd's Go client: docs/containerd.md, \"the image-path route\")"

// containerTree reports whether the root of the checkpoint in dir was
// pid 1 of its pid namespace.
func containerTree(dir string) bool {
	pids, err := criuimg.TreePIDs(dir)
	return err == nil && len(pids) > 0 && pids[0] == 1
}

func containerTreeDetail(dir string) string {
	return fmt.Sprintf("the root process of the checkpoint in %s was pid 1 of its own pid namespace: it is a container's (ctr task checkpoint --image-path, runc checkpoint), not a process tree's of `cryo checkpoint`", dir)
}

// ImagePIDsFree refuses a bare restore of the checkpoint in dir whose pids
// (and thread ids) are taken: CRIU gives them back as they were and fails
// late when one is in use. A directory without pstree.img is left to the
// restore's verify step to refuse.
func ImagePIDsFree(dir string) error {
	pids, err := criuimg.TreePIDs(dir)
	if err != nil || len(pids) == 0 {
		return nil
	}
	return PIDsFree(pids)
}
