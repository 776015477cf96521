package criuimg

import (
	"fmt"
	"sort"

	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/fs"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/mm"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/pstree"
)

// processes reads the tree (pstree.img) and, per process, its core, ids,
// fds, fs, mm and pagemap images. The tree is kept in pstree order, which
// is CRIU's: every parent before its children.
func (r *reader) processes() error {
	entries, err := readImage(r.dir, "pstree.img", &pstree.PstreeEntry{})
	if err != nil {
		return err
	}
	if err := r.loadFiles(); err != nil {
		return err
	}
	for _, e := range entries {
		pe := e.(*pstree.PstreeEntry)
		p := Process{PID: int(pe.GetPid()), PPID: int(pe.GetPpid()), PGID: int(pe.GetPgid()), SID: int(pe.GetSid()), Threads: len(pe.GetThreads())}
		if err := r.process(&p); err != nil {
			return err
		}
		r.details.Processes = append(r.details.Processes, p)
	}
	return nil
}

// process fills one process from its own images; each is optional.
func (r *reader) process(p *Process) error {
	steps := []func(*Process) error{r.core, r.fds, r.fs, r.mm}
	for _, step := range steps {
		if err := step(p); err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) core(p *Process) error {
	name := fmt.Sprintf("core-%d.img", p.PID)
	entries, err := readImage(r.dir, name, &criucore.CoreEntry{})
	if err != nil || len(entries) == 0 {
		return r.optional(name, err)
	}
	p.Comm = entries[0].(*criucore.CoreEntry).GetTc().GetComm()
	return nil
}

func (r *reader) fs(p *Process) error {
	name := fmt.Sprintf("fs-%d.img", p.PID)
	entries, err := readImage(r.dir, name, &fs.FsEntry{})
	if err != nil || len(entries) == 0 {
		return r.optional(name, err)
	}
	e := entries[0].(*fs.FsEntry)
	p.Cwd, p.Root = r.regName(e.GetCwdId()), r.regName(e.GetRootId())
	return nil
}

// mm reads the mappings (their size, the executable) and, through the
// page map, the memory dumped and the command line.
func (r *reader) mm(p *Process) error {
	name := fmt.Sprintf("mm-%d.img", p.PID)
	entries, err := readImage(r.dir, name, &mm.MmEntry{})
	if err != nil || len(entries) == 0 {
		return r.optional(name, err)
	}
	m := entries[0].(*mm.MmEntry)
	p.Exe = r.regName(m.GetExeFileId())
	for _, v := range m.GetVmas() {
		if v.GetEnd() > v.GetStart() {
			p.MappedBytes += int64(v.GetEnd() - v.GetStart())
		}
	}
	pm, err := r.pagemap(p.PID)
	if err != nil || pm == nil {
		return err
	}
	p.PagesBytes = pm.bytes()
	if !r.opts.NoPages {
		p.Cmdline = r.cmdline(pm, m.GetMmArgStart(), m.GetMmArgEnd())
		// The environment is read as the kernel's /proc/PID/environ is:
		// the block between env_start and env_end, NUL-separated.
		p.Env = r.cmdline(pm, m.GetMmEnvStart(), m.GetMmEnvEnd())
	}
	return nil
}

// ids returns a process's kernel object ids (files, mount namespace), or
// nil when its ids image is missing.
func (r *reader) ids(pid int) (*criucore.TaskKobjIdsEntry, error) {
	name := fmt.Sprintf("ids-%d.img", pid)
	entries, err := readImage(r.dir, name, &criucore.TaskKobjIdsEntry{})
	if err != nil || len(entries) == 0 {
		return nil, r.optional(name, err)
	}
	return entries[0].(*criucore.TaskKobjIdsEntry), nil
}

// Children returns the processes whose parent is pid, in tree order.
func (d *Details) Children(pid int) []Process {
	var out []Process
	for _, p := range d.Processes {
		if p.PPID == pid && p.PID != pid {
			out = append(out, p)
		}
	}
	return out
}

// Roots returns the processes whose parent is not in the tree: the
// dumped tree's root (a container's init), or several when a dump was
// given more than one tree.
func (d *Details) Roots() []Process {
	in := map[int]bool{}
	for _, p := range d.Processes {
		in[p.PID] = true
	}
	var out []Process
	for _, p := range d.Processes {
		if !in[p.PPID] || p.PPID == p.PID {
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}
