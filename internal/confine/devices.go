package confine

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// A container's /dev is a tmpfs, and CRIU restores a tmpfs from the tar it
// dumped: the device nodes in it come back as they were. A privileged
// source had every host device there; the new spec's devices are what the
// restored container may have. runc creates these for every container.
var runcDevices = []specs.LinuxDevice{
	{Path: "/dev/null", Type: "c", Major: 1, Minor: 3}, {Path: "/dev/zero", Type: "c", Major: 1, Minor: 5},
	{Path: "/dev/full", Type: "c", Major: 1, Minor: 7}, {Path: "/dev/random", Type: "c", Major: 1, Minor: 8},
	{Path: "/dev/urandom", Type: "c", Major: 1, Minor: 9}, {Path: "/dev/tty", Type: "c", Major: 5, Minor: 0},
}

// nvidiaMajor is the major number of the GPUs' device nodes.
const nvidiaMajor = 195

// maxTarEntries bounds the walk of a hostile tmpfs dump.
const maxTarEntries = 1 << 16

// checkDevices checks every device node of every tmpfs the image holds,
// in the dump CRIU will read for it (tmpfsDump: under either name).
// A GPU's node is the one exception: cryo replaces the image's GPU nodes
// with the spec's after the restore (the checkpoint's GPUs are rarely the
// new container's), so one passes when the spec grants some GPU.
func checkDevices(im *image, spec *specs.Spec) error {
	allowed := append(append([]specs.LinuxDevice{}, runcDevices...), specDevices(spec)...)
	for _, m := range im.mounts {
		typ := m.GetFstype()
		if (typ != uint32(mnt.Fstype_TMPFS) && typ != uint32(mnt.Fstype_DEVTMPFS)) || m.GetExtKey() != "" {
			continue
		}
		dump, ok := im.tmpfsDump(m)
		if !ok {
			continue // CRIU fails the restore of a tmpfs it has no dump of
		}
		base := path.Clean("/" + m.GetMountpoint())
		if err := checkTmpfsDump(dump, base, allowed, grantsGPU(spec)); err != nil {
			return err
		}
	}
	return nil
}

func checkTmpfsDump(dump, base string, allowed []specs.LinuxDevice, gpu bool) error {
	f, err := os.Open(dump)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return &imageError{file: filepath.Base(dump), reason: err.Error()}
	}
	tr := tar.NewReader(gz)
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil || n > maxTarEntries {
			return &imageError{file: filepath.Base(dump), reason: fmt.Sprint("unreadable tmpfs dump: ", err)}
		}
		if h.Typeflag != tar.TypeChar && h.Typeflag != tar.TypeBlock {
			continue
		}
		if err := checkNode(h, path.Join(base, h.Name), allowed, gpu); err != nil {
			return err
		}
	}
}

// tmpfsEmpty: the dump holds the root directory alone, as a mask's does.
func tmpfsEmpty(dump string) (bool, error) {
	f, err := os.Open(dump)
	if err != nil {
		return false, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return false, err
	}
	tr := tar.NewReader(gz)
	for n := 0; n < 2; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil || path.Clean(h.Name) != "." || h.Typeflag != tar.TypeDir {
			return false, err
		}
	}
	return false, nil
}

func checkNode(h *tar.Header, p string, allowed []specs.LinuxDevice, gpu bool) error {
	typ := "c"
	if h.Typeflag == tar.TypeBlock {
		typ = "b"
	}
	for _, d := range allowed {
		if d.Type == typ && d.Major == h.Devmajor && d.Minor == h.Devminor {
			return nil
		}
	}
	if typ == "c" && isGPUNode(p, h.Devmajor) {
		if gpu && (h.Devmajor == nvidiaMajor || namedIn(p, allowed)) {
			return nil
		}
		return &Violation{Task: "the checkpoint", Field: "device " + p, Image: fmt.Sprintf("GPU device node %d:%d", h.Devmajor, h.Devminor),
			Spec: "no GPU (the spec names no GPU device)"}
	}
	return &Violation{Task: "the checkpoint", Field: "device " + p, Image: fmt.Sprintf("%s %d:%d", typ, h.Devmajor, h.Devminor),
		Spec: "no such device (linux.devices)"}
}

// namedIn: the spec names a device at p. nvidia-uvm's and nvidia-caps'
// majors are chosen at module load, so they may differ between the source
// host and this one; the spec's device rules still decide what opens.
func namedIn(p string, allowed []specs.LinuxDevice) bool {
	for _, d := range allowed {
		if path.Clean(d.Path) == p {
			return true
		}
	}
	return false
}

func specDevices(spec *specs.Spec) []specs.LinuxDevice {
	if spec.Linux == nil {
		return nil
	}
	return spec.Linux.Devices
}

// grantsGPU: the spec names a GPU's device node.
func grantsGPU(spec *specs.Spec) bool {
	for _, d := range specDevices(spec) {
		if isGPUNode(d.Path, d.Major) && d.Type == "c" {
			return true
		}
	}
	return false
}

// isGPUNode: an NVIDIA device node, by major number or by name (nvidiaN,
// nvidiactl, nvidia-uvm, nvidia-caps/…, whose majors vary by host).
func isGPUNode(p string, major int64) bool {
	if major == nvidiaMajor {
		return true
	}
	ok, _ := path.Match("/dev/nvidia*", p)
	sub, _ := path.Match("/dev/nvidia-caps/*", p)
	return ok || sub
}
