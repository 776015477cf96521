package installer

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// recordName is the record's file in StateDir.
const recordName = "record.json"

// change is one host path as it was before cryo first touched it.
type change struct {
	Path    string      `json:"path"` // the host's path
	Kind    string      `json:"kind"` // what cryo made there: "file", "link" or "dir"
	Existed bool        `json:"existed"`
	Mode    fs.FileMode `json:"mode,omitempty"`
	UID     int         `json:"uid,omitempty"`
	GID     int         `json:"gid,omitempty"`
	Content []byte      `json:"content,omitempty"` // a file's original bytes
	Link    string      `json:"link,omitempty"`    // a link's original target
	// Config: the path is part of containerd's configuration, so that
	// reverting it needs a restart.
	Config bool `json:"config,omitempty"`
}

// record is the list of changes, kept at StateDir/record.json on the
// host and saved before each path it names is first changed: an install
// that dies halfway can still be reverted.
type record struct {
	o       Options
	path    string   // as the pod sees it
	Changes []change `json:"changes"`
	// StateDirs are the directories made to hold the record, deepest last.
	StateDirs []string `json:"stateDirs,omitempty"`
}

func loadRecord(o Options) (*record, error) {
	r := &record{o: o, path: filepath.Join(o.onHost(o.StateDir), recordName)}
	data, err := os.ReadFile(r.path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err == nil {
		err = json.Unmarshal(data, r)
	}
	if err != nil {
		return nil, stepErr("record", r.path, err, "move the damaged record aside and revert by hand what it lists")
	}
	return r, nil
}

func (r *record) empty() bool { return len(r.Changes) == 0 }

func (r *record) has(path string) bool {
	for _, c := range r.Changes {
		if c.Path == path {
			return true
		}
	}
	return false
}

// save writes the record, making the state directory if needed.
func (r *record) save() error {
	dir := filepath.Dir(r.path)
	if len(r.StateDirs) == 0 {
		r.StateDirs = r.missingDirs(r.o.StateDir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return stepErr("record", dir, err, "make the host's state directory writable (values: paths.state)")
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err == nil {
		err = writeAtomic(r.path, data, 0o600, -1, -1)
	}
	if err != nil {
		return stepErr("record", r.path, err, "make the host's state directory writable (values: paths.state)")
	}
	return nil
}

// missingDirs are the host directories of dir and above that do not
// exist, highest first.
func (r *record) missingDirs(dir string) []string {
	var out []string
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		if _, err := os.Lstat(r.o.onHost(d)); err == nil {
			break
		}
		out = append([]string{d}, out...)
	}
	return out
}

// remember records path as it is now, once, and saves the record before
// the caller changes it. Missing parent directories are recorded (and
// made) first.
func (r *record) remember(path, kind string, config bool) error {
	if r.has(path) {
		return nil
	}
	for _, d := range r.missingDirs(filepath.Dir(path)) {
		r.Changes = append(r.Changes, change{Path: d, Kind: "dir"})
		if err := r.save(); err != nil {
			return err
		}
		if err := os.Mkdir(r.o.onHost(d), 0o755); err != nil {
			return stepErr("copy", d, err, "make the host's directory writable or choose another (values: paths)")
		}
	}
	c, err := snapshot(r.o.onHost(path))
	if errors.Is(err, syscall.ENOTDIR) {
		return stepErr("record", path, err, "move aside the file that stands where a directory of this path must be")
	}
	if err != nil {
		return stepErr("record", path, err, "check the host path's permissions")
	}
	c.Path, c.Kind, c.Config = path, kind, config
	r.Changes = append(r.Changes, c)
	return r.save()
}

// snapshot reads what is at p now.
func snapshot(p string) (change, error) {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return change{}, nil
	}
	if err != nil {
		return change{}, err
	}
	c := change{Existed: true, Mode: fi.Mode()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		c.UID, c.GID = int(st.Uid), int(st.Gid)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		c.Link, err = os.Readlink(p)
	case fi.Mode().IsRegular():
		c.Content, err = os.ReadFile(p)
	default:
		err = errors.New("neither a file nor a link: cryo leaves it alone")
	}
	return c, err
}

// writeFile makes host path hold data (mode), recording its original
// first; it reports whether anything changed.
func (r *record) writeFile(path string, data []byte, mode fs.FileMode, config bool) (bool, error) {
	p := r.o.onHost(path)
	if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, data) {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == mode.Perm() {
			return false, nil
		}
	}
	if err := r.remember(path, "file", config); err != nil {
		return false, err
	}
	uid, gid := -1, -1
	if fi, err := os.Lstat(p); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	if err := writeAtomic(p, data, mode, uid, gid); err != nil {
		return false, stepErr("copy", path, err, "make the host path writable or choose another (values: paths)")
	}
	return true, nil
}

// symlink makes host path a link to target.
func (r *record) symlink(path, target string) (bool, error) {
	p := r.o.onHost(path)
	if cur, err := os.Readlink(p); err == nil && cur == target {
		return false, nil
	}
	if err := r.remember(path, "link", false); err != nil {
		return false, err
	}
	tmp := p + ".cryo-new"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return false, stepErr("copy", path, err, "make the host path writable or choose another (values: paths)")
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return false, stepErr("copy", path, err, "make the host path writable or choose another (values: paths)")
	}
	return true, nil
}

// writeAtomic replaces p by a file of data: a running program that has p
// open or mapped (a shim of the previous version) keeps the old inode.
func writeAtomic(p string, data []byte, mode fs.FileMode, uid, gid int) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".cryo-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode.Perm())
	}
	if err == nil && uid >= 0 {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}
