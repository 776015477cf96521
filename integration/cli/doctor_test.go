package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/doctor"
)

// summaryLine is the last line of `cryo doctor`: "9 ok, 4 skipped, 3
// warnings, 0 failed (cryo VERSION)".
var summaryLine = regexp.MustCompile(`(?m)^\d+ ok, \d+ skipped, \d+ warnings?, 0 failed \(cryo \S+\)$`)

// noDriverEnv hides any driver setting of the caller, so that cryo looks
// for the real libcuda.so.1, which this host lacks.
var noDriverEnv = []string{config.EnvLibCUDA + "=", config.EnvLibNVML + "="}

// TestDoctorCPUHost runs `cryo doctor` as a user would on this GPU-less
// host: it passes (exit 0), skips the driver with the sentence that says
// CPU containers work, and ends with the summary; --json is the same
// report as JSON. With the fake driver the driver and GPU lines are ok.
func TestDoctorCPUHost(t *testing.T) {
	harness.RequireRoot(t)
	out := harness.Run(t, 2*time.Minute, noDriverEnv, harness.CryoBin(t, "cryo"), "doctor")
	harness.WantIn(t, out, "no NVIDIA driver: GPU checkpoints unavailable, CPU containers work")
	if !summaryLine.MatchString(out) {
		t.Errorf("no summary line in:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "fail" {
			t.Errorf("a check failed on this host: %s", line)
		}
	}

	out = harness.Run(t, 2*time.Minute, noDriverEnv, harness.CryoBin(t, "cryo"), "doctor", "--json")
	var r doctor.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if r.Failed() || r.Summary.OK == 0 || r.Summary.OK+r.Summary.Skipped+r.Summary.Warnings+r.Summary.Failed != len(r.Checks) || statusOf(r, "driver") != doctor.Skip || statusOf(r, "criu") != doctor.OK {
		t.Errorf("--json report %+v", r)
	}

	out = harness.Run(t, 2*time.Minute, harness.FakeDriverEnv(t, ""), harness.CryoBin(t, "cryo"), "doctor")
	for _, name := range []string{"driver", "driver version", "gpu 0"} {
		if !regexp.MustCompile(`(?m)^ok +` + regexp.QuoteMeta(name) + ` `).MatchString(out) {
			t.Errorf("with the fake driver, no ok line for %q:\n%s", name, out)
		}
	}
}

func statusOf(r doctor.Report, name string) doctor.Status {
	for _, c := range r.Checks {
		if c.Name == name {
			return c.Status
		}
	}
	return ""
}

// TestDoctorContainerd runs the doctor's library against a real containerd
// 2.x whose PATH has cryo's bin/ and whose CRI plugin has the cryo runtime
// handler of contrib/kubernetes/containerd-cri.toml: it finds the daemon in
// /proc, the shim containerd would start (this build's cryo), and the CRI
// entry through containerd's own `config dump`.
func TestDoctorContainerd(t *testing.T) {
	d := harness.NewDaemon(t, harness.CtrdVersions[1], false)
	d.CRI = fmt.Sprintf(`[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.cryo]
  runtime_type = %q
  pod_annotations = ['cryo.io/*']
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
`, harness.CryoRuntime)
	d.Start()
	pid := d.Cmd.Process.Pid

	cfg := config.FromEnv()
	cfg.LibCUDA, cfg.LibNVML = harness.FakeFile(t, "libcuda.so.1"), harness.FakeFile(t, "libnvidia-ml.so.1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	self, _ := filepath.EvalSymlinks(harness.CryoBin(t, "cryo"))
	r := doctor.Run(ctx, doctor.Options{Config: cfg, Self: self,
		Host: doctor.Host{PATH: harness.BinDir() + ":" + os.Getenv("PATH")}})
	who := fmt.Sprintf("containerd (pid %d)", pid)
	for name, fragments := range map[string][]string{
		"containerd shim": {who, filepath.Join(harness.BinDir(), "containerd-shim-cryo-v2"), "this cryo"},
		"containerd cri":  {who, `runtime handler "cryo"`, "config dump"},
		"cryo-runc":       {filepath.Join(harness.BinDir(), "cryo-runc"), "this cryo"},
		"driver":          {"checkpoint API present"},
	} {
		c, ok := checkAbout(r, name, fragments[0])
		if !ok {
			t.Errorf("no %q check about %q in %+v", name, fragments[0], r.Checks)
			continue
		}
		if c.Status != doctor.OK {
			t.Errorf("%s: %s %s (fix: %s)", name, c.Status, c.Detail, c.Fix)
		}
		for _, f := range fragments[1:] {
			if !strings.Contains(c.Detail, f) {
				t.Errorf("%s: %q lacks %q", name, c.Detail, f)
			}
		}
	}
	if r.Failed() {
		t.Errorf("the report failed: %+v", r.Checks)
	}
}

// checkAbout finds the check called name whose detail mentions about.
func checkAbout(r doctor.Report, name, about string) (doctor.Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name && strings.Contains(c.Detail, about) {
			return c, true
		}
	}
	return doctor.Check{}, false
}
