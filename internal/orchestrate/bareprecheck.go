package orchestrate

import (
	"fmt"

	"github.com/cryo-gpu/cryo/internal/criuimg"
	"github.com/cryo-gpu/cryo/internal/orchestrate/precheck"
)

// precheckProcess refuses, before anything is suspended, a bare checkpoint
// that CRIU would refuse later: not root, a pid inside a container, a shell
// job without ShellJob.
func precheckProcess(po ProcessOptions) error {
	if err := precheck.Root("checkpoint"); err != nil {
		return err
	}
	if err := precheck.HostProcess(po.PID); err != nil {
		return err
	}
	tree, err := ProcessTree(po.PID)
	if err != nil {
		return err
	}
	return precheck.ShellJob(po.PID, tree, po.ShellJob)
}

// precheckContainerTree refuses a container's checkpoint (`ctr task
// checkpoint --image-path`, runc's): its root was pid 1 of the container's
// pid namespace, and a bare restore would give it back pid 1 of the host's,
// which init holds; stopping that is no remedy. A directory without
// pstree.img is left to the verify step to refuse.
func precheckContainerTree(dir string) error {
	pids, err := criuimg.TreePIDs(dir)
	if err != nil || len(pids) == 0 || pids[0] != 1 {
		return nil
	}
	return &precheck.Error{Err: precheck.ErrContainerTree,
		Detail: fmt.Sprintf("the root process of the checkpoint in %s was pid 1 of its own pid namespace: it is a container's (ctr task checkpoint --image-path, runc checkpoint), not a process tree's of `cryo checkpoint`", dir),
		Remedy: "restore it through containerd on the cryo runtime, into a container of the same image: the Go client's container.NewTask(ctx, ioCreator, client.WithRestoreImagePath(\"" + dir + "\")) then task.Start (docs/containerd.md, \"the image-path route\")"}
}

// precheckPIDs refuses a restore whose pids (and thread ids) are taken:
// CRIU gives them back as they were and fails late when one is in use.
// A directory without pstree.img is left to the verify step to refuse.
func precheckPIDs(dir string) error {
	pids, err := criuimg.TreePIDs(dir)
	if err != nil || len(pids) == 0 {
		return nil
	}
	return precheck.PIDsFree(pids)
}
