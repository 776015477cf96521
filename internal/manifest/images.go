package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// criuInventory is the file every CRIU dump writes first; its presence is
// what makes a directory a CRIU image directory.
const criuInventory = "inventory.img"

// IsImageDir reports whether dir holds CRIU images. Its error wraps
// ErrNotCheckpoint when dir is missing or is not a directory.
func IsImageDir(dir string) (bool, error) {
	if err := requireDir(dir); err != nil {
		return false, err
	}
	_, err := os.Stat(filepath.Join(dir, criuInventory))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// ReferencesCUDA reports whether the CRIU images of dir name a CUDA driver
// library among the dumped processes' files. CRIU records the path of every
// mapped or open regular file in files.img (reg-files.img before CRIU 3.x
// merged them), so a byte search there is enough; pages are never read.
func ReferencesCUDA(dir string) (bool, error) {
	for _, name := range []string{"files.img", "reg-files.img"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("read CRIU image %s: %w", name, err)
		}
		if bytes.Contains(data, []byte("libcuda.so")) {
			return true, nil
		}
	}
	return false, nil
}
