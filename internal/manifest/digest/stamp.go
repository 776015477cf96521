package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/config"
)

// Verification stamps let a restore skip re-hashing an image directory that
// cryo itself hashed on this host (when it wrote the checkpoint, or on an
// earlier verification) and that nobody has changed since.
//
// A stamp records each digested file's identity: device, inode, size,
// mtime and ctime in nanoseconds. No system call sets a ctime back, and
// every change of a file's bytes that starts after the stamp moves it: a
// write(2), or the first write through a new shared mapping. A write
// through a mapping that was already open, into a page it had already
// dirtied, moves nothing, so stamps are only taken of files that nobody
// holds open for writing (see lease.go); then an unchanged identity means
// that the bytes hashed are the bytes there now. What a stamp cannot see
// is the storage itself corrupting data under the file system;
// Records.Full (CRYO_VERIFY=full) re-hashes every restore. Stamps live in
// a root-only directory of this host, never in the image directory: a
// stamp that travelled with the image would prove nothing.
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

// stampVersion is the format of the stamps this cryo writes and trusts:
// version 2 is taken under read leases. Stamps of earlier versions were
// taken without them and prove nothing.
const stampVersion = 2

type stamp struct {
	Version int               `json:"version"`
	Dir     string            `json:"dir"`
	Files   map[string]fileID `json:"files"`
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
// this process a moment ago (while it wrote them: a checkpoint's, in a
// directory that only root could open meanwhile). It is best effort:
// without a writable stamp directory (not root), or while a file is open
// for writing, it writes none, and the next restore simply hashes again.
func (r Records) Stamp(dir string, digests map[string]string) error {
	if len(digests) == 0 || !timesTrack(dir) {
		return nil
	}
	held, err := r.quiesce(dir, digests)
	if err != nil {
		return err
	}
	defer held.release()
	return r.writeStamp(dir, digests, held)
}

// quiesced are the read leases on an image's files and the identities the
// files had once they were held.
type quiesced struct {
	*readLeases
	ids map[string]fileID
}

// release lets go of the leases; nothing for a nil q (none were taken).
func (q *quiesced) release() {
	if q != nil {
		q.readLeases.release()
	}
}

// quiesce takes read leases on the digested files of dir, then their
// identities: from then on, until the leases are released, nobody can
// change them without the leases breaking.
func (r Records) quiesce(dir string, digests map[string]string) (*quiesced, error) {
	names := make([]string, 0, len(digests))
	for name := range digests {
		names = append(names, name)
	}
	sort.Strings(names)
	l, err := holdReadLeases(dir, names)
	if err != nil {
		return nil, fmt.Errorf("no verification stamp: %w", err)
	}
	q := &quiesced{readLeases: l, ids: make(map[string]fileID, len(names))}
	for _, name := range names {
		if q.ids[name], err = identify(filepath.Join(dir, name)); err != nil {
			l.release()
			return nil, err
		}
	}
	return q, nil
}

// writeStamp records held's identities as dir's stamp for digests, if the
// leases held throughout and a later write could not keep a ctime.
func (r Records) writeStamp(dir string, digests map[string]string, held *quiesced) error {
	if !held.intact() {
		return errors.New("no verification stamp: an image file was opened for writing while it was hashed")
	}
	if !settled(held.ids) {
		return errors.New("no verification stamp: an image file changed within the last tick of the file system's clock")
	}
	path, err := r.stampPath(dir, digests)
	if err != nil {
		return err
	}
	s := stamp{Version: stampVersion, Dir: dir, Files: held.ids}
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
	if json.Unmarshal(data, &s) != nil || s.Version != stampVersion || len(s.Files) != len(digests) {
		return false
	}
	names := make([]string, 0, len(digests))
	for name := range digests {
		id, err := identify(filepath.Join(dir, name))
		if err != nil || id != s.Files[name] {
			return false
		}
		names = append(names, name)
	}
	// A file open for writing now may be changed by a mapping whose next
	// writes move no time: hash it.
	return noWriters(dir, names)
}

// File systems whose files move their ctime on the first write through
// each new shared mapping (page_mkwrite), as on every write(2), and whose
// files are all on this host, where a read lease sees every writer: ext4
// (ext2 and ext3 too), XFS and Btrfs. Elsewhere a stamp proves nothing
// (tmpfs and ramfs move no time for a write through a mapping; a network
// or FUSE file system's writers may be on other hosts), and every restore
// hashes.
var timedFS = map[int64]bool{unix.EXT4_SUPER_MAGIC: true, unix.XFS_SUPER_MAGIC: true, unix.BTRFS_SUPER_MAGIC: true}

// timesTrack reports whether dir's file system is one of timedFS, which
// stamps rely on.
func timesTrack(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return timedFS[int64(st.Type)]
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

// VerifyStampedWith is Verify, skipping the hashing when dir has a valid
// stamp (see above) and stamping it after a full verification, reporting
// the bytes hashed to p (none when the stamp spares the hashing; p may be
// nil). It reports whether the stamp was used.
func (r Records) VerifyStampedWith(dir string, digests map[string]string, p Progress) (bool, error) {
	return r.VerifyStampedVouched(dir, digests, p, nil)
}

// VerifyStampedVouched is VerifyStampedWith, not hashing the files that
// vouched names (relative to dir): their bytes were verified as they were
// laid out, against a digest that the image pins (a runnable image's pages
// blob, linked from containerd's content store, which checked the blob's
// digest when it stored it). The stamp then covers them as it covers the
// files hashed. Full (CRYO_VERIFY=full) hashes them too.
func (r Records) VerifyStampedVouched(dir string, digests map[string]string, p Progress, vouched map[string]bool) (bool, error) {
	if r.Full {
		vouched = nil
	}
	if err := confined(dir, digests); err != nil {
		return false, err
	}
	if digests != nil && r.stamped(dir, digests) {
		if err := uncovered(dir, digests); err != nil {
			return false, err
		}
		return true, nil
	}
	// The leases are taken before the hashing, so that the stamp vouches
	// for the bytes hashed: none of the files could change meanwhile.
	var held *quiesced
	if len(digests) > 0 && timesTrack(dir) {
		held, _ = r.quiesce(dir, digests) // nil: hashed, but not stamped
	}
	defer held.release()
	if err := verifyWith(dir, digests, p, vouched); err != nil {
		r.dropStamp(dir, digests) // what failed must be hashed again next time
		return false, err
	}
	if held != nil {
		_ = r.writeStamp(dir, digests, held) // best effort: without it only a speed-up is lost
	}
	return false, nil
}
