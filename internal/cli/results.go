package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/cryo-gpu/cryo/internal/criuimg"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// checkpointResult is what `cryo checkpoint --json` prints: enough for a
// script to find the checkpoint, its CUDA processes and where the time went.
type checkpointResult struct {
	PID           int                `json:"pid"`
	Dir           string             `json:"dir"`
	Created       time.Time          `json:"created"`
	CUDAProcesses []manifest.Process `json:"cuda_processes"`
	GPUMemory     uint64             `json:"gpu_memory_bytes"`
	ImageBytes    int64              `json:"image_bytes"`
	Steps         []manifest.Step    `json:"steps"`
	Seconds       float64            `json:"seconds"`
	CRIU          *criuimg.DumpStats `json:"criu_statistics,omitempty"`
}

func newCheckpointResult(pid int, dir string, m *manifest.Manifest) checkpointResult {
	r := checkpointResult{PID: pid, Dir: dir, Created: m.Created, CUDAProcesses: m.Processes, Steps: m.Steps}
	if r.CUDAProcesses == nil {
		r.CUDAProcesses = []manifest.Process{}
	}
	for _, p := range m.Processes {
		r.GPUMemory += p.GPUMemory
	}
	r.ImageBytes = dirBytes(dir)
	r.Seconds = totalSeconds(m.Steps)
	// CRIU writes stats-dump next to its log: the image directory, or the
	// work directory the manifest names.
	r.CRIU, _, _ = criuimg.ReadStats(dir, m.CRIUWorkDir)
	return r
}

// restoreResult is what `cryo restore --json` prints.
type restoreResult struct {
	PID            int                   `json:"pid"`
	Dir            string                `json:"dir,omitempty"`
	Container      string                `json:"container,omitempty"`
	Namespace      string                `json:"namespace,omitempty"`
	TCPConnections int                   `json:"tcp_connections"`
	Steps          []manifest.Step       `json:"steps"`
	Seconds        float64               `json:"seconds"`
	CRIU           *criuimg.RestoreStats `json:"criu_statistics,omitempty"`
}

func newRestoreResult(dir string, res *orchestrate.RestoreResult) restoreResult {
	r := restoreResult{PID: res.PID, Dir: dir, TCPConnections: res.TCPConnections, Steps: []manifest.Step{}}
	if m := res.Manifest; m != nil && m.RestoreSteps != nil {
		r.Steps = m.RestoreSteps
	}
	r.Seconds = totalSeconds(r.Steps)
	_, r.CRIU, _ = criuimg.ReadStats(dir)
	return r
}

func totalSeconds(steps []manifest.Step) float64 {
	var s float64
	for _, st := range steps {
		s += st.Seconds
	}
	return s
}

// printStats is the --print-stats table: cryo's steps, then CRIU's own
// statistics (times in CRIU's microseconds, shown as durations).
func printStats(w io.Writer, steps []manifest.Step, dump *criuimg.DumpStats) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "STEP\tTIME")
	for _, s := range steps {
		line := fmt.Sprintf("%s\t%s", s.Name, s.Duration().Round(time.Millisecond))
		if s.Error != "" {
			line += "\tfailed: " + s.Error
		}
		fmt.Fprintln(tw, line)
	}
	fmt.Fprintf(tw, "total\t%s\n", (time.Duration(totalSeconds(steps) * float64(time.Second))).Round(time.Millisecond))
	if dump == nil {
		return
	}
	us := func(v uint32) time.Duration { return (time.Duration(v) * time.Microsecond).Round(time.Millisecond) }
	fmt.Fprintln(tw, "\nCRIU\t")
	fmt.Fprintf(tw, "freezing time\t%s\n", us(dump.FreezingUS))
	fmt.Fprintf(tw, "frozen time\t%s\n", us(dump.FrozenUS))
	fmt.Fprintf(tw, "memory dump time\t%s\n", us(dump.MemdumpUS))
	fmt.Fprintf(tw, "memory write time\t%s\n", us(dump.MemwriteUS))
	fmt.Fprintf(tw, "pages scanned\t%d\n", dump.PagesScanned)
	fmt.Fprintf(tw, "pages written\t%d\n", dump.PagesWritten)
}

// printRestoreStats is --print-stats for a restore.
func printRestoreStats(w io.Writer, steps []manifest.Step, rs *criuimg.RestoreStats) {
	printStats(w, steps, nil)
	if rs == nil {
		return
	}
	us := func(v uint32) time.Duration { return (time.Duration(v) * time.Microsecond).Round(time.Millisecond) }
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "\nCRIU\t")
	fmt.Fprintf(tw, "forking time\t%s\n", us(rs.ForkingUS))
	fmt.Fprintf(tw, "restore time\t%s\n", us(rs.RestoreUS))
	fmt.Fprintf(tw, "pages restored\t%d\n", rs.PagesRestored)
}

// dirBytes is the size of the files in dir (not below), 0 if unreadable.
func dirBytes(dir string) int64 {
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	var n int64
	for _, f := range files {
		if fi, err := os.Lstat(f); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}
