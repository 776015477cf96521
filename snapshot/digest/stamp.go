package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cryo-gpu/cryo/config"
)

// Verification stamps let a restore skip re-hashing an image directory that
// cryo itself hashed on this host (when it wrote the checkpoint, or on an
// earlier verification) and that nobody has changed since.
//
// A stamp records each digested file's identity: device, inode, size,
// mtime and ctime in nanoseconds. The kernel sets a file's ctime to the
// current time on every change of its content or metadata, and no system
// call sets it back, so an unchanged identity means that the bytes hashed
// then are the bytes there now. What a stamp cannot see is the storage
// itself corrupting data under the file system; Records.Full (CRYO_VERIFY=full)
// re-hashes every restore. Stamps live in a root-only directory of this host, never
// in the image directory: a stamp that travelled with the image would
// prove nothing.
const (
	stampMaxAge = 14 * 24 * time.Hour // older stamps are pruned when one is written
	maxStamps   = 1000                // and the oldest beyond these
)

// fileID is what a stamp records of one file.
type fileID struct {
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime_ns"`
	Ctime int64  `json:"ctime_ns"`
}

type stamp struct {
	Dir   string            `json:"dir"`
	Files map[string]fileID `json:"files"`
}

// Records is where verification records live and whether to trust them,
// as the entry point's configuration says.
type Records struct {
	// Dir holds the stamps (config: CRYO_STAMP_DIR); empty: the default.
	Dir string
	// Full never trusts a stamp: every verification hashes every file
	// (config: CRYO_VERIFY=full).
	Full bool
}

// RecordsFrom are the verification records c configures.
func RecordsFrom(c config.Config) Records { return Records{Dir: c.StampDir, Full: c.VerifyFull} }

func (r Records) stampDir() string {
	if r.Dir != "" {
		return r.Dir
	}
	return config.DefaultStampDir
}

// stampPath names the stamp of dir with these digests: a different image
// in the same directory, or the same image elsewhere, has another stamp.
func (r Records) stampPath(dir string, digests map[string]string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(digests))
	for n := range digests {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", abs)
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%s\x00", n, digests[n])
	}
	return filepath.Join(r.stampDir(), hex.EncodeToString(h.Sum(nil))+".json"), nil
}

func identify(path string) (fileID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, err
	}
	return fileID{Dev: st.Dev, Ino: st.Ino, Size: st.Size,
		Mtime: st.Mtim.Sec*1e9 + st.Mtim.Nsec, Ctime: st.Ctim.Sec*1e9 + st.Ctim.Nsec}, nil
}

// Stamp records that the files of dir have the given digests, as hashed by
// this process a moment ago. It is best effort: without a writable stamp
// directory (not root) the next restore simply hashes again.
func (r Records) Stamp(dir string, digests map[string]string) error {
	if len(digests) == 0 || !timesTrack(dir) {
		return nil
	}
	path, err := r.stampPath(dir, digests)
	if err != nil {
		return err
	}
	s := stamp{Dir: dir, Files: map[string]fileID{}}
	for name := range digests {
		if s.Files[name], err = identify(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(r.stampDir(), 0o700); err != nil {
		return err
	}
	r.pruneStamps()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// stamped reports whether dir has a valid stamp for digests: the stamp
// directory is root's alone, and every file's identity is unchanged.
func (r Records) stamped(dir string, digests map[string]string) bool {
	if r.Full || len(digests) == 0 || !r.trustedStampDir() || !timesTrack(dir) {
		return false
	}
	path, err := r.stampPath(dir, digests)
	if err != nil {
		return false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var s stamp
	if json.Unmarshal(data, &s) != nil || len(s.Files) != len(digests) {
		return false
	}
	for name := range digests {
		id, err := identify(filepath.Join(dir, name))
		if err != nil || id != s.Files[name] {
			return false
		}
	}
	return true
}

// File systems on which a write through a shared mapping changes a file's
// bytes without moving its mtime or ctime: tmpfs (and /dev/shm) and ramfs.
// A stamp's identity proves nothing there.
var untimedFS = map[int64]bool{0x01021994: true, 0x858458f6: true}

// timesTrack reports whether dir's file system moves a file's ctime with
// every change of its bytes, which stamps rely on.
func timesTrack(dir string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false
	}
	return !untimedFS[int64(st.Type)]
}

// dropStamp removes dir's stamp for digests, if any.
func (r Records) dropStamp(dir string, digests map[string]string) {
	if path, err := r.stampPath(dir, digests); err == nil {
		_ = os.Remove(path)
	}
}

// trustedStampDir: a stamp counts only if nobody but root could have
// written it.
func (r Records) trustedStampDir() bool {
	var st syscall.Stat_t
	if err := syscall.Stat(r.stampDir(), &st); err != nil {
		return false
	}
	return st.Uid == 0 && st.Mode&0o022 == 0
}

// pruneStamps removes stamps not written for stampMaxAge, and the oldest
// beyond maxStamps (a host that checkpoints every few minutes, into work
// directories that come and go, must not grow the directory without end).
func (r Records) pruneStamps() {
	entries, err := os.ReadDir(r.stampDir())
	if err != nil {
		return
	}
	type aged struct {
		name string
		mod  time.Time
	}
	var keep []aged
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		if time.Since(info.ModTime()) > stampMaxAge {
			_ = os.Remove(filepath.Join(r.stampDir(), e.Name()))
			continue
		}
		keep = append(keep, aged{e.Name(), info.ModTime()})
	}
	sort.Slice(keep, func(i, j int) bool { return keep[i].mod.After(keep[j].mod) })
	for _, a := range keep[min(len(keep), maxStamps):] {
		_ = os.Remove(filepath.Join(r.stampDir(), a.name))
	}
}

// VerifyStamped is Verify, skipping the hashing when dir has a valid stamp
// (see above) and stamping it after a full verification. It reports whether
// the stamp was used.
func (r Records) VerifyStamped(dir string, digests map[string]string) (bool, error) {
	return r.VerifyStampedWith(dir, digests, nil)
}

// VerifyStampedWith is VerifyStamped, reporting the bytes hashed to p
// (none when the stamp spares the hashing).
func (r Records) VerifyStampedWith(dir string, digests map[string]string, p Progress) (bool, error) {
	if err := confined(dir, digests); err != nil {
		return false, err
	}
	if digests != nil && r.stamped(dir, digests) {
		if err := uncovered(dir, digests); err != nil {
			return false, err
		}
		return true, nil
	}
	if err := VerifyWith(dir, digests, p); err != nil {
		r.dropStamp(dir, digests) // what failed must be hashed again next time
		return false, err
	}
	_ = r.Stamp(dir, digests) // best effort: without it only a speed-up is lost
	return false, nil
}
