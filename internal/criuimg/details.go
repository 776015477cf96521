// Package criuimg describes a CRIU image directory the way a user asks
// about a checkpoint: which processes (with their command lines), which
// files, sockets and mounts they held, how much memory was dumped, and
// what CRIU's statistics say. It reads the images with go-criu's crit and
// never loads the memory pages: a command line is read at its offset. It
// only reads: `cryo inspect` writes the details for a terminal
// (internal/cli/inspect).
//
// It is cryo's one decoder of CRIU images: the confinement check
// (ReadImage), the orchestration's prechecks and fix-ups and the OCI image
// summary (facts.go) read through it, with its checks against damaged or
// hostile images.
//
// Reading is tolerant of what a checkpoint may lack (an image that a dump
// did not need, statistics kept elsewhere): that section is empty and the
// image is named in Missing. A damaged image is an *ImageError.
package criuimg

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/cryo-gpu/cryo/internal/report"
)

// Details is what the CRIU images of one checkpoint say.
type Details struct {
	Processes    []Process     `json:"processes"`
	Mounts       []Mount       `json:"mounts,omitempty"`
	Memory       Memory        `json:"memory"`
	DumpStats    *DumpStats    `json:"dump_stats,omitempty"`
	RestoreStats *RestoreStats `json:"restore_stats,omitempty"`
	// Missing names the optional images that were not there, so that an
	// empty section can be told from one that could not be read.
	Missing []string `json:"missing_images,omitempty"`
}

// Process is one process of the dumped tree, in the pid namespace it was
// dumped in (a container's own pids).
type Process struct {
	PID     int    `json:"pid"`
	PPID    int    `json:"ppid"`
	PGID    int    `json:"pgid"`
	SID     int    `json:"sid"`
	Threads int    `json:"threads"`
	Comm    string `json:"comm"`
	// Cmdline is argv as the process's memory held it; empty when its
	// pages are not at hand (an image read without them).
	Cmdline []string `json:"cmdline,omitempty"`
	// Env is the environment as the process's memory held it (NAME=value),
	// read like Cmdline. Values may be secrets: front ends mask them.
	Env     []string `json:"env,omitempty"`
	Exe     string   `json:"exe,omitempty"`
	Cwd     string   `json:"cwd,omitempty"`
	Root    string   `json:"root,omitempty"`
	Files   []File   `json:"files,omitempty"`
	Sockets []Socket `json:"sockets,omitempty"`
	// PagesBytes is the memory the dump wrote for this process;
	// MappedBytes the size of all its mappings.
	PagesBytes  int64 `json:"pages_bytes"`
	MappedBytes int64 `json:"mapped_bytes"`
}

// File is one open file descriptor. Path describes what it is open on: a
// path for a file, "TCP 127.0.0.1:80 (LISTEN)" for a socket, "pipe:[N]".
type File struct {
	FD   int    `json:"fd"`
	Type string `json:"type"` // CRIU's fd type: REG, PIPE, INETSK, UNIXSK, …
	Path string `json:"path"`
}

// Socket is one socket descriptor.
type Socket struct {
	FD       int    `json:"fd"`
	Family   string `json:"family"` // IPv4, IPv6, UNIX, PACKET, NETLINK
	Type     string `json:"type,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	State    string `json:"state,omitempty"`
	Src      string `json:"src,omitempty"` // address, or a UNIX socket's name ("@" for abstract)
	SrcPort  int    `json:"src_port,omitempty"`
	Dst      string `json:"dst,omitempty"`
	DstPort  int    `json:"dst_port,omitempty"`
}

// Mount is one mount of a dumped mount namespace.
type Mount struct {
	Namespace  int    `json:"mnt_ns"`
	ID         int    `json:"id"`
	ParentID   int    `json:"parent_id"`
	MountPoint string `json:"mountpoint"`
	FSType     string `json:"fstype"`
	Source     string `json:"source"`
	Options    string `json:"options,omitempty"`
	// HostSource is the host path a bind mount shows, from the container's
	// spec: CRIU records the device the file system lives on (/dev/vda),
	// not the directory that was bound.
	HostSource string `json:"host_source,omitempty"`
	// Root is the directory of the source file system that is mounted,
	// when not its root: a bind mount's path within its device.
	Root string `json:"root,omitempty"`
}

// Memory sums the dumped memory: PagesBytes from the processes' page
// maps, PagesFileBytes the size of the pages images (shared memory too).
type Memory struct {
	PagesBytes     int64 `json:"pages_bytes"`
	PagesFileBytes int64 `json:"pages_file_bytes"`
}

// Options tunes Read.
type Options struct {
	// StatsDirs are further directories to look for stats-dump and
	// stats-restore in, after the image directory: runc under Podman has
	// CRIU write them to its work path, and an export keeps them at its
	// root.
	StatsDirs []string
	// NoPages: the pages images hold placeholders (an export read for its
	// metadata only), so command lines are not read from them.
	NoPages bool
}

// Read describes the CRIU image directory dir. Its error wraps
// ErrNotImageDir when dir has no pstree.img, and is an *ImageError
// (ErrCorrupt) when an image cannot be decoded.
func Read(dir string, o Options) (*Details, error) {
	if _, err := os.Stat(filepath.Join(dir, "pstree.img")); err != nil {
		return nil, report.WithRemedy(fmt.Errorf("%s: no pstree.img (%v): %w", dir, unwrapPath(err), ErrNotImageDir), "give the directory CRIU dumped into (checkpoint/ in an export)")
	}
	r := &reader{dir: dir, opts: o, details: &Details{}}
	steps := []func() error{r.processes, r.mounts, r.memory, r.stats}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	sort.Strings(r.details.Missing)
	return r.details, nil
}

// reader carries what the steps of one Read share.
type reader struct {
	dir     string
	opts    Options
	details *Details
	files   map[uint32]*fileEntry // files.img by id, read once
}

// optional turns a missing image into a note and an empty section.
func (r *reader) optional(name string, err error) error {
	if errors.Is(err, errMissing) {
		r.details.Missing = append(r.details.Missing, name)
		return nil
	}
	return err
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
