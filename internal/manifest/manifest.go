// Package manifest is the checkpoint as data: the GPU manifest that cryo
// writes into a CRIU image directory (with the digests of the image files,
// which package digest takes and verifies), and the check that a host can
// take a checkpoint before anything is restored.
package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/cryo-gpu/cryo/internal/version"
)

// ManifestName is the GPU manifest's file name inside a CRIU image directory.
// It lives inside that directory so that every front end (containerd's tar,
// Podman's export, a plain copy) carries it with the images. The digests
// leave it out, which is why package digest holds the name.
const ManifestName = digest.ManifestName

// FormatVersion is the manifest format this cryo writes. Read accepts it and
// every older one; a newer one means an older cryo is reading it.
// Version 3 records, per CUDA process, the GPUs it could see and the
// memory it held on each (the restore maps each process onto the GPUs it
// will see, as the driver requires); version 2 chunked digests (see
// digest.Files); version 1 plain sha256 digests. Older versions are still
// read, verified and restored (see CheckHost).
const FormatVersion = 3

// Manifest is the GPU manifest of one checkpoint.
type Manifest struct {
	Version     int       `json:"version"`
	ContainerID string    `json:"container_id"`
	Created     time.Time `json:"created"`
	Hostname    string    `json:"hostname"`
	// CryoVersion, CRIUVersion ("4.2.1") and Kernel (the release) say what
	// took the checkpoint. Absent from manifests of cryo before they were
	// recorded, which read as unknown: not a format change.
	CryoVersion string `json:"cryo_version,omitempty"`
	CRIUVersion string `json:"criu_version,omitempty"`
	Kernel      string `json:"kernel,omitempty"`
	// Processes are the CUDA processes that were suspended (or found already
	// suspended) at checkpoint; empty for a checkpoint without CUDA.
	Processes []Process `json:"processes"`
	// Inventory is the source host's GPUs and driver, taken before the
	// suspend, while the processes still held their GPU memory.
	Inventory cuda.Inventory `json:"inventory"`
	// Needs are the GPUs a restore needs: from version 3 the GPUs the
	// processes saw, with the memory they held (for display and images);
	// before, every GPU of the source host with all the memory in use.
	Needs []GPUNeed `json:"needs,omitempty"`
	// Steps is how long each step of the checkpoint took, in order.
	Steps []Step `json:"steps"`
	// Digests maps every file of the image directory (but the manifest and
	// logs) to its digest: "sha256-chunked-16MiB:<size>:<hex>" (version 2,
	// see digest.Files) or the plain sha256 in hex (version 1). Nil until
	// the dump has completed; digest.Verify checks the files against it.
	Digests map[string]string `json:"digests,omitempty"`
	// CompletedLate is when a later cryo run (a restore or `cryo checkpoint
	// --finish`) computed the digests of a checkpoint whose dump had
	// completed but whose own run was interrupted before it hashed the
	// files: those digests vouch for the files as they were then, not as
	// CRIU wrote them. Nil for a checkpoint that finished in one run.
	CompletedLate *time.Time `json:"completed_after_interruption,omitempty"`
	// CRIUWorkDir is where CRIU wrote its dump log and stats-dump, when
	// not in the image directory (runc's --work-path under Podman).
	CRIUWorkDir string `json:"criu_work_dir,omitempty"`

	// RestorePairs maps each process's GPUs to this host's (by the
	// process's NSPID, AnyProcess for a manifest older than version 3),
	// found by the host check of a restore; RestoreSteps times the
	// restore. Neither is saved.
	RestorePairs map[int][]cuda.GPUPair `json:"-"`
	RestoreSteps []Step                 `json:"-"`
}

// Process is one CUDA process of the checkpoint.
type Process struct {
	PID int `json:"pid"`
	// State is the driver state when the checkpoint found it.
	State string `json:"state"`
	// Paused: a GPU-free pause had suspended it (State checkpointed); the
	// GPUs and memory are those it held before that suspend, and the
	// container's resume, not the checkpoint, brings it back.
	Paused bool `json:"paused,omitempty"`
	// GPUMemory is the process's GPU memory in bytes, when known.
	GPUMemory uint64 `json:"gpu_memory,omitempty"`
	// NSPID is its pid in its own pid namespace, which a container's
	// restore gives it again (version 3).
	NSPID int `json:"nspid,omitempty"`
	// GPUs are the GPUs it could see, in CUDA's order, with the memory it
	// held on each (version 3); Evidence says how they were found.
	GPUs           []cuda.ProcessGPU    `json:"gpus,omitempty"`
	Evidence       string               `json:"evidence,omitempty"`
	VisibleDevices *cuda.VisibleDevices `json:"cuda_visible_devices,omitempty"`
	NCCL           *cuda.NCCLRank       `json:"nccl,omitempty"`
}

// AnyProcess keys the RestorePairs that apply to every process (manifests
// older than version 3, which do not say which GPUs each process saw).
const AnyProcess = -1

// PairsFor returns the GPU pairs of the restored process whose NSPID is
// nspid, and whether the manifest has any for it.
func (m *Manifest) PairsFor(nspid int) ([]cuda.GPUPair, bool) {
	if p, ok := m.RestorePairs[nspid]; ok {
		return p, true
	}
	p, ok := m.RestorePairs[AnyProcess]
	return p, ok
}

// PerProcess reports whether the manifest records each process's GPUs.
func (m *Manifest) PerProcess() bool {
	if m == nil || m.Version < 3 {
		return false
	}
	for _, p := range m.Processes {
		if len(p.GPUs) == 0 {
			return false
		}
	}
	return true
}

// Step is the duration of one checkpoint step.
type Step struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error,omitempty"`
}

// Duration returns the step's duration.
func (s Step) Duration() time.Duration { return time.Duration(s.Seconds * float64(time.Second)) }

// StepsText is steps on one line, "verify 0.012s, restore 3.201s, ...",
// for a log: where a slow checkpoint or restore spent its time.
func StepsText(steps []Step) string {
	parts := make([]string, len(steps))
	for i, s := range steps {
		parts[i] = fmt.Sprintf("%s %.3fs", s.Name, s.Seconds)
	}
	return strings.Join(parts, ", ")
}

// New returns a manifest for container id, stamped with now, this host,
// its kernel and this cryo. The caller, which runs CRIU, adds its version.
func New(id string) *Manifest {
	host, _ := os.Hostname()
	return &Manifest{Version: FormatVersion, ContainerID: id, Created: time.Now().UTC(), Hostname: host,
		CryoVersion: version.String(), Kernel: kernelRelease()}
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// HasCUDA reports whether the checkpoint holds CUDA processes.
func (m *Manifest) HasCUDA() bool { return m != nil && len(m.Processes) > 0 }

// AddStep records the duration (and error) of a step.
func (m *Manifest) AddStep(name string, d time.Duration, err error) {
	s := Step{Name: name, Seconds: d.Seconds()}
	if err != nil {
		s.Error = err.Error()
	}
	m.Steps = append(m.Steps, s)
}

// Write writes the manifest into dir atomically (temp file and rename), so
// that a reader never sees half a manifest, and durably (the file and then
// the directory synced): the processes may be killed as soon as it returns.
func Write(dir string, m *Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+ManifestName+".*")
	if err != nil {
		return fmt.Errorf("write manifest into %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write manifest into %s: %w", dir, err)
	}
	// Sync before the rename: after a crash the name must not point at an
	// empty file.
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync manifest in %s: %w", dir, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write manifest into %s: %w", dir, err)
	}
	if err := os.Chmod(tmp.Name(), PrivateFileMode); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, ManifestName)); err != nil {
		return fmt.Errorf("write manifest into %s: %w", dir, err)
	}
	return SyncDir(dir)
}

// Read reads the manifest of dir. Its errors wrap ErrNotCheckpoint (dir
// missing or not a directory), ErrNoManifest (no manifest) or ErrCorrupt
// (unreadable, inconsistent with itself: ErrManifestInconsistent, or from a
// newer cryo: ErrUnsupportedVersion).
func Read(dir string) (*Manifest, error) {
	if err := requireDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, ManifestName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s has no %s: %w", dir, ManifestName, ErrNoManifest)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, report.WithRemedy(fmt.Errorf("%s is not a valid cryo manifest (%v): %w", path, err, ErrCorrupt), "re-take or re-transfer the checkpoint")
	}
	if m.Version < 1 || m.Version > FormatVersion {
		return nil, report.WithRemedy(fmt.Errorf("%s has format version %d, this cryo reads 1 to %d: %w", path, m.Version, FormatVersion, ErrUnsupportedVersion), "use a cryo at least as new as the one that took the checkpoint")
	}
	if err := m.consistent(); err != nil {
		return nil, report.WithRemedy(fmt.Errorf("%s %v: %w", path, err, ErrManifestInconsistent), "re-take the checkpoint with cryo on a host whose GPU inventory (NVML) it can read, or re-transfer it if it was altered on the way")
	}
	return &m, nil
}

// consistent refuses a manifest whose CUDA processes its GPU needs do not
// cover. The restore checks the host from the needs: with none, or with
// needs that leave out a GPU a process saw, a host without that GPU would
// pass, CRIU would restore the processes, their CUDA resume would fail,
// and they would be left suspended. Every manifest cryo writes derives
// the needs from the processes (NeedsFromProcesses), so only an altered
// manifest, or one whose checkpoint could not read the GPU inventory,
// fails here.
func (m *Manifest) consistent() error {
	if !m.HasCUDA() {
		return nil
	}
	if len(m.Needs) == 0 {
		return fmt.Errorf("lists %d CUDA process(es) but no GPU needs, so no host check could run", len(m.Processes))
	}
	needs := make(map[string]GPUNeed, len(m.Needs))
	for _, n := range m.Needs {
		if _, dup := needs[n.UUID]; dup {
			return fmt.Errorf("lists GPU %s among its needs twice", n.UUID)
		}
		needs[n.UUID] = n
	}
	held := map[string]uint64{}
	for _, p := range m.Processes {
		for _, g := range p.GPUs {
			n, ok := needs[g.UUID]
			if !ok || n.Name != g.Name || n.ComputeCapability != g.ComputeCapability {
				return fmt.Errorf("says CUDA process %d saw GPU %s (%s, compute capability %s), which its needs do not list", p.PID, g.UUID, g.Name, g.ComputeCapability)
			}
			sum := held[g.UUID] + g.Memory
			if sum < held[g.UUID] || sum > n.Memory {
				return fmt.Errorf("says its CUDA processes held more memory on GPU %s than its needs ask to be free (%d bytes)", g.UUID, n.Memory)
			}
			held[g.UUID] = sum
		}
	}
	return nil
}

// requireDir returns ErrNotCheckpoint unless dir is a directory.
func requireDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("checkpoint directory %s: %v: %w", dir, unwrapPath(err), ErrNotCheckpoint)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory: %w", dir, ErrNotCheckpoint)
	}
	return nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
