package criuimg

import (
	"fmt"

	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/fdinfo"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/pstree"
)

// The single facts that other packages take from an image directory, each
// decoded with this package's checks (readImage): the orchestration's
// restore checks and fix-ups read images that may be hostile, as the
// confinement check does. A missing image is an error wrapping
// fs.ErrNotExist.

// TreePIDs are the pids and thread ids recorded in dir's pstree.img, each
// process's pid before its other threads, in CRIU's order.
func TreePIDs(dir string) ([]int, error) {
	entries, err := readImage(dir, "pstree.img", &pstree.PstreeEntry{})
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		p := e.(*pstree.PstreeEntry)
		pids = append(pids, int(p.GetPid()))
		for _, t := range p.GetThreads() {
			if int(t) != int(p.GetPid()) {
				pids = append(pids, int(t))
			}
		}
	}
	return pids, nil
}

// Files are the file objects of dir's files.img (sockets among them).
func Files(dir string) ([]*fdinfo.FileEntry, error) {
	entries, err := readImage(dir, "files.img", &fdinfo.FileEntry{})
	if err != nil {
		return nil, err
	}
	files := make([]*fdinfo.FileEntry, 0, len(entries))
	for _, e := range entries {
		files = append(files, e.(*fdinfo.FileEntry))
	}
	return files, nil
}

// TreeProcess is a process of the dumped tree: its pid in the namespace it
// was dumped in, and its command name.
type TreeProcess struct {
	PID  int
	Comm string
}

// Tree are the processes of dir's pstree.img with their command names
// (core-PID.img, which every dumped process has), in CRIU's order: every
// parent before its children.
func Tree(dir string) ([]TreeProcess, error) {
	entries, err := readImage(dir, "pstree.img", &pstree.PstreeEntry{})
	if err != nil {
		return nil, err
	}
	out := make([]TreeProcess, 0, len(entries))
	for _, e := range entries {
		pid := int(e.(*pstree.PstreeEntry).GetPid())
		core, err := readImage(dir, fmt.Sprintf("core-%d.img", pid), &criucore.CoreEntry{})
		if err != nil {
			return nil, err
		}
		if len(core) == 0 {
			return nil, &ImageError{Dir: dir, File: fmt.Sprintf("core-%d.img", pid), Reason: "no entry"}
		}
		out = append(out, TreeProcess{PID: pid, Comm: core[0].(*criucore.CoreEntry).GetTc().GetComm()})
	}
	return out, nil
}
