package ociimage

import (
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/internal/criuimg"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// Summary is what `cryo inspect` shows, and what build stores in the
// manifest's annotations so that it can be read without pulling layers.
type Summary struct {
	Source    string             `json:"source"`
	Kind      Kind               `json:"kind"`
	Name      string             `json:"name,omitempty"`
	BaseImage string             `json:"base_image,omitempty"`
	Created   time.Time          `json:"created"`
	Host      string             `json:"host,omitempty"`
	Processes []ProcessInfo      `json:"processes"`
	GPUs      []manifest.GPUNeed `json:"gpus,omitempty"`
	// GPUsUnknown, when set, says why GPUs is not the answer: a checkpoint
	// that cryo's manifest does not describe, or an image that cryo did not
	// build, whose manifest sits inside its layer ("pull to read"). Show
	// "unknown (GPUsUnknown)" then, never "none needed".
	GPUsUnknown string `json:"gpus_unknown,omitempty"`
	Driver      string `json:"driver,omitempty"`
	CUDA        int    `json:"cuda_version,omitempty"`
	Sizes       Sizes  `json:"sizes"`
	Encrypted   bool   `json:"encrypted,omitempty"`
	// Unfinished: the cryo run that took the checkpoint stopped after
	// CRIU's dump (Finishable: the dump completed, so `cryo checkpoint
	// --finish` or a restore completes it; otherwise it must be re-taken).
	Unfinished bool              `json:"unfinished,omitempty"`
	Finishable bool              `json:"finishable,omitempty"`
	Digest     string            `json:"digest,omitempty"`
	Layers     []LayerInfo       `json:"layers,omitempty"`
	Annotation map[string]string `json:"annotations,omitempty"`
	// Versions are what took the checkpoint, from cryo's manifest or the
	// image's annotations.
	Versions Versions `json:"versions"`
	// Details are what the CRIU images say: the process tree with command
	// lines, open files, sockets, mounts, CRIU's statistics. Nil when they
	// were not read (an image in a registry), and DetailsNote says why.
	Details     *criuimg.Details `json:"details,omitempty"`
	DetailsNote string           `json:"details_note,omitempty"`

	// Interruption says, for an Unfinished checkpoint, what its dump left
	// (manifest.UnfinishedState), so that its remedy can be named.
	Interruption manifest.DumpState `json:"interruption,omitempty"`
	// Partial is the mark of a checkpoint that failed while its processes
	// ran on, whose images were removed (manifest.MarkPartial).
	Partial *manifest.Partial `json:"partial,omitempty"`
	// Checkpointed is when the checkpoint was taken (Created, kept under
	// its old name); ContainerCreated when the container was created, as
	// an export's config.dump records it.
	Checkpointed     time.Time  `json:"checkpointed,omitzero"`
	ContainerCreated *time.Time `json:"container_created,omitempty"`
	// ContainerID and Runtime are the container's, from config.dump or
	// cryo's manifest; ContainerAnnotations, Env and Mounts its spec's
	// (spec.dump). Env values may be secrets: front ends mask them.
	ContainerID          string            `json:"container_id,omitempty"`
	Runtime              string            `json:"runtime,omitempty"`
	ContainerAnnotations map[string]string `json:"container_annotations,omitempty"`
	Env                  []string          `json:"env,omitempty"`
	Mounts               []SpecMount       `json:"spec_mounts,omitempty"`
}

// Versions are the software that took a checkpoint; "" is unknown (a
// checkpoint of a cryo before they were recorded, or not taken by cryo).
type Versions struct {
	Cryo   string `json:"cryo,omitempty"`
	CRIU   string `json:"criu,omitempty"`
	Kernel string `json:"kernel,omitempty"`
	Driver string `json:"gpu_driver,omitempty"`
}

// Reasons of Summary.GPUsUnknown.
const (
	GPUsNoManifest = "no cryo manifest in the checkpoint: it was taken without cryo"
	GPUsPullToRead = "pull to read"
	GPUsEncrypted  = "the layer holding cryo's manifest is encrypted"
)

// ProcessInfo is one checkpointed process.
type ProcessInfo struct {
	PID       int    `json:"pid"`
	Comm      string `json:"comm,omitempty"`
	CUDA      bool   `json:"cuda"`
	GPUMemory uint64 `json:"gpu_memory,omitempty"`
}

// Sizes splits the checkpoint's bytes. GPU memory lands in CRIU's pages
// (the driver moves it into host memory before the dump), so HostMemory is
// the pages minus the GPU share.
type Sizes struct {
	GPUMemory  int64   `json:"gpu_memory"`
	HostMemory int64   `json:"host_memory"`
	RootfsDiff int64   `json:"rootfs_diff"`
	Other      int64   `json:"other"`
	Total      int64   `json:"total"`
	Compressed int64   `json:"compressed,omitempty"`
	Ratio      float64 `json:"compression_ratio,omitempty"`
}

// LayerInfo is one layer of an image.
type LayerInfo struct {
	Part      string `json:"part"`
	MediaType string `json:"media_type"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// Summarize reads a source: sizes from its files, processes from CRIU's
// pstree (internal/criuimg), GPU needs from cryo's manifest.
func Summarize(s *Source) (*Summary, error) {
	sum := &Summary{Kind: s.Kind, Name: s.Name, BaseImage: s.BaseImage}
	if err := sumSizes(s, &sum.Sizes); err != nil {
		return nil, err
	}
	sum.Processes = criuProcesses(s.CRIU)
	if m := s.Manifest; m != nil {
		addManifest(sum, m)
		sum.Unfinished = m.Unfinished()
		addInterruption(sum, s)
	} else {
		sum.GPUsUnknown = GPUsNoManifest
		if st, err := os.Stat(s.CRIU + "/inventory.img"); err == nil {
			sum.Created = st.ModTime().UTC()
		}
	}
	sum.Sizes.HostMemory -= sum.Sizes.GPUMemory
	if sum.Sizes.HostMemory < 0 {
		sum.Sizes.HostMemory = 0
	}
	return sum, nil
}

func sumSizes(s *Source, z *Sizes) error {
	for _, f := range s.Files {
		st, err := os.Stat(f.Path)
		if err != nil {
			return fmt.Errorf("summarize checkpoint: %w", err)
		}
		switch base := path.Base(f.Name); {
		case isPages(base):
			z.HostMemory += st.Size()
		case f.Name == RootfsDiffName:
			z.RootfsDiff += st.Size()
		default:
			z.Other += st.Size()
		}
		z.Total += st.Size()
	}
	return nil
}

func isPages(base string) bool {
	return strings.HasPrefix(base, "pages-") && strings.HasSuffix(base, ".img")
}

func addManifest(sum *Summary, m *manifest.Manifest) {
	sum.Created, sum.Host = m.Created, m.Hostname
	sum.Driver, sum.CUDA = m.Inventory.DriverVersion, m.Inventory.CUDAVersion
	sum.Versions = Versions{Cryo: m.CryoVersion, CRIU: m.CRIUVersion, Kernel: m.Kernel, Driver: m.Inventory.DriverVersion}
	sum.GPUs = m.Needs
	// CRIU's pstree names a container's processes by their pids in the
	// container's pid namespace; the manifest has both, host and NSPID.
	cuda := map[int]manifest.Process{}
	for _, p := range m.Processes {
		cuda[treePID(p)] = p
		sum.Sizes.GPUMemory += int64(p.GPUMemory)
	}
	if sum.Sizes.GPUMemory == 0 {
		for _, n := range m.Needs {
			sum.Sizes.GPUMemory += int64(n.Memory)
		}
	}
	for i := range sum.Processes {
		if p, ok := cuda[sum.Processes[i].PID]; ok {
			sum.Processes[i].CUDA, sum.Processes[i].GPUMemory = true, p.GPUMemory
			delete(cuda, sum.Processes[i].PID)
		}
	}
	for pid, p := range cuda {
		sum.Processes = append(sum.Processes, ProcessInfo{PID: pid, CUDA: true, GPUMemory: p.GPUMemory})
	}
	sort.Slice(sum.Processes, func(i, j int) bool { return sum.Processes[i].PID < sum.Processes[j].PID })
}

// treePID is a CUDA process's pid as CRIU's pstree records it: its pid in
// its own namespace, or, in a manifest older than version 3 (no NSPID), the
// host pid, which is the same for a process outside any container.
func treePID(p manifest.Process) int {
	if p.NSPID != 0 {
		return p.NSPID
	}
	return p.PID
}

// criuProcesses lists CRIU's process tree; a checkpoint whose pstree
// cannot be decoded still gets a summary, just without names.
func criuProcesses(dir string) []ProcessInfo {
	tree, err := criuimg.Tree(dir)
	if err != nil {
		return nil
	}
	out := make([]ProcessInfo, 0, len(tree))
	for _, p := range tree {
		out = append(out, ProcessInfo{PID: p.PID, Comm: p.Comm})
	}
	return out
}

// annotations renders the summary as manifest annotations.
func (sum *Summary) annotations() map[string]string {
	a := map[string]string{
		AnnKind: string(sum.Kind), AnnOCICreated: sum.Created.Format(time.RFC3339),
		AnnSizeGPU: itoa(sum.Sizes.GPUMemory), AnnSizeHost: itoa(sum.Sizes.HostMemory),
		AnnSizeRootfs: itoa(sum.Sizes.RootfsDiff), AnnSizeTotal: itoa(sum.Sizes.Total),
		AnnProcesses: formatProcesses(sum.Processes),
	}
	setIf(a, AnnHost, sum.Host)
	setIf(a, AnnName, sum.Name)
	if len(sum.GPUs) > 0 {
		a[AnnGPUModel] = sum.GPUs[0].Name
		a[AnnGPUCompute] = sum.GPUs[0].ComputeCapability
		a[AnnGPUCount] = strconv.Itoa(len(sum.GPUs))
		var mem uint64
		for _, g := range sum.GPUs {
			mem += g.Memory
		}
		a[AnnGPUMemory] = strconv.FormatUint(mem, 10)
	}
	setIf(a, AnnGPUDriver, sum.Driver)
	setIf(a, AnnCryoVersion, sum.Versions.Cryo)
	setIf(a, AnnCRIUVersion, sum.Versions.CRIU)
	setIf(a, AnnKernel, sum.Versions.Kernel)
	if sum.CUDA != 0 {
		a[AnnCUDAVersion] = strconv.Itoa(sum.CUDA)
	}
	return a
}

func setIf(a map[string]string, k, v string) {
	if v != "" {
		a[k] = v
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func formatProcesses(ps []ProcessInfo) string {
	parts := make([]string, 0, len(ps))
	for _, p := range ps {
		s := strconv.Itoa(p.PID) + ":" + strings.NewReplacer(",", "_", ":", "_").Replace(p.Comm)
		if p.CUDA {
			s += "*"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}
