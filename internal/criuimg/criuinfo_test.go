package criuimg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/pagemap"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	"google.golang.org/protobuf/proto"
)

const tinyDir = "testdata/tiny"

func readTiny(t *testing.T, dir string, o Options) *Details {
	t.Helper()
	d, err := Read(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestReadProcessTree(t *testing.T) {
	d := readTiny(t, tinyDir, Options{})
	if len(d.Processes) != 2 {
		t.Fatalf("processes = %+v, want the parent and its child", d.Processes)
	}
	parent, child := d.Processes[0], d.Processes[1]
	if parent.PID != 21088 || parent.PPID != 0 || child.PID != 21091 || child.PPID != 21088 {
		t.Errorf("tree: parent %d (ppid %d), child %d (ppid %d)", parent.PID, parent.PPID, child.PID, child.PPID)
	}
	if want := []string{"./tiny", "--listen", "47311", "two words"}; !slices.Equal(parent.Cmdline, want) {
		t.Errorf("parent cmdline = %q, want %q (read from pages-1.img)", parent.Cmdline, want)
	}
	// The child's pages image was removed from the test data.
	if child.Cmdline != nil || child.Comm != "tiny" || child.CommandLine() != "[tiny]" {
		t.Errorf("child: cmdline %q comm %q, want no cmdline and comm tiny", child.Cmdline, child.Comm)
	}
	if parent.Exe != "/tmp/criuinfo/tiny" || parent.Cwd != "/tmp/criuinfo" || parent.Root != "/" || parent.Threads != 1 {
		t.Errorf("parent: exe %q cwd %q root %q threads %d", parent.Exe, parent.Cwd, parent.Root, parent.Threads)
	}
	if roots := d.Roots(); len(roots) != 1 || roots[0].PID != parent.PID {
		t.Errorf("roots = %+v", roots)
	}
}

func TestReadFilesAndSockets(t *testing.T) {
	p := readTiny(t, tinyDir, Options{}).Processes[0]
	want := []File{
		{FD: 0, Type: "REG", Path: "/tmp/criuinfo/held.txt"},
		{FD: 1, Type: "INETSK", Path: "TCP 127.0.0.1:47311 (LISTEN)"},
		{FD: 2, Type: "UNIXSK", Path: "UNIX STREAM /tmp/criuinfo/app.sock (LISTEN)"},
	}
	if len(p.Files) < 3 || !slices.Equal(p.Files[:3], want) {
		t.Errorf("files = %+v, want first %+v", p.Files, want)
	}
	wantSk := []Socket{
		{FD: 1, Family: "IPv4", Type: "STREAM", Protocol: "TCP", State: "LISTEN", Src: "127.0.0.1", SrcPort: 47311},
		{FD: 2, Family: "UNIX", Type: "STREAM", State: "LISTEN", Src: "/tmp/criuinfo/app.sock"},
	}
	if !slices.Equal(p.Sockets, wantSk) {
		t.Errorf("sockets = %+v, want %+v", p.Sockets, wantSk)
	}
}

func TestReadMountsMemoryStats(t *testing.T) {
	d := readTiny(t, tinyDir, Options{})
	i := slices.IndexFunc(d.Mounts, func(m Mount) bool { return m.MountPoint == "/mnt" })
	if len(d.Mounts) != 6 || i < 0 || d.Mounts[i].FSType != "tmpfs" || d.Mounts[i].Source != "cryo-test" || d.Mounts[i].Namespace != 9 {
		t.Errorf("mounts = %+v, want 6 with /mnt on tmpfs cryo-test in namespace 9", d.Mounts)
	}
	// Five pages per process by their page maps (CRIU 4.2's 64-bit
	// nr_pages); one pages image of five pages is left.
	if d.Processes[0].PagesBytes != 5*int64(pageSize) || d.Memory.PagesBytes != 10*int64(pageSize) || d.Memory.PagesFileBytes != 20480 {
		t.Errorf("memory = %+v, parent %d", d.Memory, d.Processes[0].PagesBytes)
	}
	s := d.DumpStats
	if s == nil || s.PagesWritten != 10 || s.PagesScanned != 16 || s.FrozenUS == 0 {
		t.Errorf("dump stats = %+v", s)
	}
	if d.RestoreStats != nil || len(d.Missing) != 0 {
		t.Errorf("restore stats %+v, missing %q: want none", d.RestoreStats, d.Missing)
	}
}

func TestReadNoPages(t *testing.T) {
	for _, p := range readTiny(t, tinyDir, Options{NoPages: true}).Processes {
		if p.Cmdline != nil {
			t.Errorf("pid %d: cmdline %q read with NoPages", p.PID, p.Cmdline)
		}
	}
}

// copyTiny copies the test images into a temporary directory to damage.
func copyTiny(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	testsupport.CopyFiles(t, tinyDir, dir)
	return dir
}

func TestReadMissingOptionalImages(t *testing.T) {
	dir := copyTiny(t)
	gone := []string{"core-21091.img", "files.img", "mountpoints-9.img", "stats-dump", "mm-21088.img"}
	for _, name := range gone {
		os.Remove(filepath.Join(dir, name))
	}
	d := readTiny(t, dir, Options{})
	if len(d.Processes) != 2 || d.Processes[1].Comm != "" || d.Processes[0].Comm != "tiny" {
		t.Errorf("processes = %+v", d.Processes)
	}
	if d.Processes[0].Cmdline != nil || d.Processes[0].Exe != "" || d.Mounts != nil || d.DumpStats != nil {
		t.Errorf("sections of missing images are not empty: %+v", d)
	}
	if f := d.Processes[0].Files; len(f) == 0 || f[0].Path != "?" {
		t.Errorf("fds without files.img = %+v, want their numbers with path ?", f)
	}
	want := []string{"core-21091.img", "files.img", "mm-21088.img", "stats-dump"}
	if !slices.Equal(d.Missing, want) {
		t.Errorf("missing = %q, want %q", d.Missing, want)
	}
}

func TestStatsFromAnotherDir(t *testing.T) {
	dir, work := copyTiny(t), t.TempDir()
	if err := os.Rename(filepath.Join(dir, "stats-dump"), filepath.Join(work, "stats-dump")); err != nil {
		t.Fatal(err)
	}
	d := readTiny(t, dir, Options{StatsDirs: []string{"", work}})
	if d.DumpStats == nil || d.DumpStats.PagesWritten != 10 {
		t.Errorf("dump stats from the work directory = %+v", d.DumpStats)
	}
}

func TestReadCorruptImages(t *testing.T) {
	cases := map[string]func([]byte) []byte{
		"truncated":    func(b []byte) []byte { return b[:len(b)-7] },
		"huge length":  func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 0xfffffff0); return b },
		"not an image": func(b []byte) []byte { return []byte("#!/bin/sh\nrm -rf /\n") },
		"bad payload":  func(b []byte) []byte { return append(b[:12:12], bytes.Repeat([]byte{0xff}, len(b)-12)...) },
	}
	for _, file := range []string{"core-21088.img", "pstree.img", "mountpoints-9.img", "stats-dump", "pagemap-21088.img"} {
		for name, damage := range cases {
			t.Run(file+"/"+name, func(t *testing.T) {
				dir := copyTiny(t)
				path := filepath.Join(dir, file)
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, damage(data), 0o600); err != nil {
					t.Fatal(err)
				}
				_, err = Read(dir, Options{})
				var ie *ImageError
				if !errors.As(err, &ie) || ie.File != file || !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Read = %v, want an *ImageError naming %s", err, file)
				}
			})
		}
	}
}

// An image that is only its magic decodes to no entries; crit's
// statistics reader would index the first one.
func TestReadStatsWithoutEntries(t *testing.T) {
	dir := copyTiny(t)
	data, err := os.ReadFile(filepath.Join(dir, "stats-dump"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stats-dump"), data[:8], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read = %v, want ErrCorrupt", err)
	}
}

func TestReadNotImageDir(t *testing.T) {
	if _, err := Read(t.TempDir(), Options{}); !errors.Is(err, ErrNotImageDir) {
		t.Fatalf("Read(empty dir) = %v, want ErrNotImageDir", err)
	}
}

// CRIU before 4.2 writes a range's length in field 2 alone.
func TestNrPagesBothFormats(t *testing.T) {
	old := &pagemap.PagemapEntry{Vaddr: proto.Uint64(0x1000), NrPages: proto.Uint32(3)}
	if n := nrPages(old); n != 3 {
		t.Errorf("nr_pages (field 2) = %d, want 3", n)
	}
	d := readTiny(t, tinyDir, Options{})
	if d.Processes[1].PagesBytes == 0 {
		t.Error("CRIU 4.2's nr_pages (field 5) read as 0")
	}
}
