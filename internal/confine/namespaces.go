package confine

import (
	"fmt"

	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// CRIU decides which namespaces to create (or to take from runc) by
// comparing the root task's namespace ids with the ids of its own
// namespaces at dump time (inventory.img's root_ids): a namespace the
// task shared with CRIU is not restored, and the restored task inherits
// CRIU's, which is the host's. A checkpoint of a hostNetwork pod therefore
// comes back in the host's network namespace whatever the new spec says.
// Every namespace the spec asks for must be one the image has of its own.
var nsKinds = []struct {
	typ  specs.LinuxNamespaceType
	name string
	id   func(*criucore.TaskKobjIdsEntry) uint32
}{
	{specs.PIDNamespace, "pid namespace", (*criucore.TaskKobjIdsEntry).GetPidNsId},
	{specs.NetworkNamespace, "network namespace", (*criucore.TaskKobjIdsEntry).GetNetNsId},
	{specs.IPCNamespace, "IPC namespace", (*criucore.TaskKobjIdsEntry).GetIpcNsId},
	{specs.UTSNamespace, "UTS namespace", (*criucore.TaskKobjIdsEntry).GetUtsNsId},
	{specs.MountNamespace, "mount namespace", (*criucore.TaskKobjIdsEntry).GetMntNsId},
	{specs.UserNamespace, "user namespace", (*criucore.TaskKobjIdsEntry).GetUserNsId},
	{specs.TimeNamespace, "time namespace", (*criucore.TaskKobjIdsEntry).GetTimeNsId},
}

// SharedWithHost lists the namespaces that the checkpoint in dir (its
// CRIU images) shared with the host: a restore brings the process back in
// the host's own, so its new spec must not ask for one of the container's.
func SharedWithHost(dir string) ([]specs.LinuxNamespaceType, error) {
	im, err := readImage(dir)
	if err != nil {
		return nil, err
	}
	var shared []specs.LinuxNamespaceType
	for _, k := range nsKinds {
		if k.id(im.taskIDs) == k.id(im.rootIDs) {
			shared = append(shared, k.typ)
		}
	}
	return shared, nil
}

func checkNamespaces(im *image, spec *specs.Spec) error {
	asked := map[specs.LinuxNamespaceType]bool{}
	if spec.Linux != nil {
		for _, ns := range spec.Linux.Namespaces {
			asked[ns.Type] = true
		}
	}
	for _, k := range nsKinds {
		own := k.id(im.taskIDs) != k.id(im.rootIDs)
		if asked[k.typ] && !own {
			return &Violation{Task: "the checkpoint", Field: k.name, Image: "the host's (the checkpointed container shared it with the host)",
				Spec: fmt.Sprintf("a %s of the container's own", k.name)}
		}
		// CRIU restores every process into the namespaces of its own ids:
		// a child that names CRIU's would come back in the host's.
		for _, p := range im.procIDs[1:] {
			if asked[k.typ] && k.id(p.ids) == k.id(im.rootIDs) {
				return &Violation{Task: fmt.Sprintf("process %d", p.pid), Field: k.name, Image: "the host's",
					Spec: fmt.Sprintf("the container's %s", k.name)}
			}
		}
		if k.typ == specs.UserNamespace && own && !asked[k.typ] {
			// CRIU would create it with the image's uid and gid maps,
			// which the spec did not choose.
			return &Violation{Task: "the checkpoint", Field: k.name, Image: "one of its own, with the image's id maps",
				Spec: "none (the spec asks for no user namespace)"}
		}
	}
	return nil
}
