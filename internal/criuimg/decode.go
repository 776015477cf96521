package criuimg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	"github.com/checkpoint-restore/go-criu/v7/magic"
	"google.golang.org/protobuf/proto"
)

// maxImageSize bounds the metadata images this package decodes: they are
// kilobytes, and a larger one is damaged or hostile, not worth the memory.
// Pages are never decoded, only read at the offsets their pagemap gives.
const maxImageSize = 64 << 20

// errMissing marks an image that is not there: an empty section, not a
// failure.
var errMissing = fs.ErrNotExist

// readImage decodes the image name of dir into entries of msg's type with
// go-criu's crit. The image is first checked whole (magic, and every
// entry's length within the file) because crit trusts the lengths it
// reads: a damaged length would make it allocate up to 4 GiB, or decode
// the zeros past a short read. Images with payloads after their entries
// (pipe data, socket queues) are not read here.
func readImage(dir, name string, msg proto.Message) (out []proto.Message, err error) {
	path := filepath.Join(dir, name)
	if err := checkImage(dir, name); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read CRIU image %s: %w", path, err)
	}
	defer f.Close()
	// crit indexes and asserts on what it decodes; damage it did not
	// foresee must be this image's error, not the caller's crash.
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, &ImageError{Dir: dir, File: name, Reason: fmt.Sprint("undecodable: ", r)}
		}
	}()
	img, err := crit.New(f, nil, "", false, true).Decode(msg)
	if err != nil {
		return nil, &ImageError{Dir: dir, File: name, Reason: err.Error()}
	}
	for _, e := range img.Entries {
		out = append(out, e.Message)
	}
	return out, nil
}

// checkImage checks an image's framing: a known magic (after the common
// or service prefix), then entries of a 32-bit little-endian length and
// that many bytes, ending exactly at the end of the file. A missing image
// returns an error wrapping errMissing.
func checkImage(dir, name string) error {
	path := filepath.Join(dir, name)
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("CRIU image %s: %w", path, errMissing)
	}
	if err != nil {
		return fmt.Errorf("read CRIU image %s: %w", path, err)
	}
	if st.Size() > maxImageSize {
		return &ImageError{Dir: dir, File: name, Reason: fmt.Sprintf("%d bytes, more than any CRIU metadata image holds", st.Size())}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read CRIU image %s: %w", path, err)
	}
	if reason := framing(data); reason != "" {
		return &ImageError{Dir: dir, File: name, Reason: reason}
	}
	return nil
}

var magics = magic.LoadMagic()

func framing(data []byte) string {
	off, err := skipMagic(data)
	if err != "" {
		return err
	}
	for n := 1; off < len(data); n++ {
		if len(data)-off < 4 {
			return fmt.Sprintf("truncated: entry %d has %d of the 4 bytes of its length", n, len(data)-off)
		}
		size := int(binary.LittleEndian.Uint32(data[off:]))
		off += 4
		if size > len(data)-off {
			return fmt.Sprintf("truncated: entry %d needs %d bytes, %d left", n, size, len(data)-off)
		}
		off += size
	}
	return ""
}

func skipMagic(data []byte) (int, string) {
	word := func(off int) (uint64, bool) {
		if len(data) < off+4 {
			return 0, false
		}
		return uint64(binary.LittleEndian.Uint32(data[off:])), true
	}
	m, ok := word(0)
	if !ok {
		return 0, "too short for a magic number"
	}
	off := 4
	if m == magics.ByName["IMG_COMMON"] || m == magics.ByName["IMG_SERVICE"] {
		if m, ok = word(4); !ok {
			return 0, "too short for a magic number"
		}
		off = 8
	}
	if _, known := magics.ByValue[m]; !known {
		return 0, fmt.Sprintf("unknown magic 0x%x: not a CRIU image", m)
	}
	return off, ""
}

// ReadImage decodes the CRIU image name of dir into entries of msg's type,
// with the same checks as the package's own reads: callers outside this
// package (the restore's confinement check) read hostile images too. A
// missing image is an error wrapping fs.ErrNotExist.
func ReadImage(dir, name string, msg proto.Message) ([]proto.Message, error) {
	return readImage(dir, name, msg)
}
