package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"syscall"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// nvidiaMajor is the character-device major of the NVIDIA GPU nodes
// (/dev/nvidiaN is 195:N, /dev/nvidiactl 195:255).
const nvidiaMajor = 195

// IsGPUDevice reports whether major:minor is a GPU's own node (195:N,
// N < 254), not nvidia-modeset (254) or nvidiactl (255), which every GPU
// container keeps whichever GPUs it has.
func IsGPUDevice(major, minor int64) bool {
	return major == nvidiaMajor && minor >= 0 && minor < 254
}

// gpuNode matches a GPU's device node, not nvidiactl, nvidia-uvm or
// nvidia-caps: the driver names each GPU's node after its minor number.
var gpuNode = regexp.MustCompile(`^/dev/nvidia([0-9]+)$`)

// NodeMinor returns the GPU minor number of a device node path, or false
// for a path that is not a GPU node.
func NodeMinor(path string) (int, bool) {
	m := gpuNode.FindStringSubmatch(path)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

// heldMinors returns the GPU minors whose device nodes pid holds open,
// sorted. A CUDA process holds a node for every GPU it can see (measured on
// driver 580: all GPUs with CUDA_VISIBLE_DEVICES unset, only the named ones
// with it set), and none once checkpointed. The device number of the open
// file is the truth (a container may name its node differently); the path
// is used when the file is not an NVIDIA device (the fake driver's nodes).
func heldMinors(pid int) ([]int, error) {
	fds, err := procfs.FDs(pid)
	if err != nil {
		return nil, noProcess(pid, err)
	}
	seen := map[int]bool{}
	for _, fd := range fds {
		if n, ok := fdMinor(fd.Path, fd.Target); ok {
			seen[n] = true
		}
	}
	return sortedKeys(seen), nil
}

func fdMinor(fdPath, target string) (int, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(fdPath, &st); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFCHR {
		if major(st.Rdev) == nvidiaMajor {
			n := minor(st.Rdev)
			return n, n < 254 // 254 nvidia-modeset, 255 nvidiactl
		}
	}
	return NodeMinor(target)
}

// nodeMinors returns the GPU minors that have a device node under root's
// /dev (a container's /proc/PID/root, or "/" for the host), sorted.
func nodeMinors(root string) []int {
	entries, err := os.ReadDir(filepath.Join(root, "dev"))
	if err != nil {
		return nil
	}
	seen := map[int]bool{}
	for _, e := range entries {
		if n, ok := NodeMinor("/dev/" + e.Name()); ok {
			seen[n] = true
		}
	}
	return sortedKeys(seen)
}

func major(rdev uint64) int { return int((rdev >> 8) & 0xfff) }
func minor(rdev uint64) int { return int((rdev & 0xff) | ((rdev >> 12) & 0xfff00)) }

func sortedKeys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
