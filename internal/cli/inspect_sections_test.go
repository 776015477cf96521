package cli

import (
	"bytes"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/cli/inspect"
	"github.com/cryo-gpu/cryo/internal/criuimg"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
)

func TestMaskEnv(t *testing.T) {
	got := maskEnv([]string{"PATH=/bin", "API_TOKEN=t", "db_password=p", "AWS_SECRET_ACCESS_KEY=k", "GH_CREDENTIALS=c", "NOVALUE", "HOME=/root"})
	want := []string{"PATH=/bin", "API_TOKEN=****", "db_password=****", "AWS_SECRET_ACCESS_KEY=****", "GH_CREDENTIALS=****", "NOVALUE", "HOME=/root"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("maskEnv = %q, want %q", got, want)
	}
}

func testSummary() *ociimage.Summary {
	return &ociimage.Summary{Source: "ckpt", Env: []string{"API_KEY=k"}, Details: &criuimg.Details{Processes: []criuimg.Process{
		{PID: 1, Env: []string{"PASSWORD=p", "A=1"}}, {PID: 7, PPID: 1},
	}}}
}

// The environment leaves the summary unless asked for, masked unless
// --show-secrets; --pid keeps one process and names the others when the
// pid is not there.
func TestSectionsApply(t *testing.T) {
	sum := testSummary()
	if err := (sections{Sections: inspect.DefaultSections()}).apply(sum); err != nil || sum.Env != nil || sum.Details.Processes[0].Env != nil {
		t.Fatalf("default: %v, env %v %v", err, sum.Env, sum.Details.Processes[0].Env)
	}
	sum = testSummary()
	if err := (sections{Sections: inspect.Sections{Env: true}}).apply(sum); err != nil || sum.Env[0] != "API_KEY=****" || sum.Details.Processes[0].Env[0] != "PASSWORD=****" {
		t.Fatalf("--env: %v, env %v %v", err, sum.Env, sum.Details.Processes[0].Env)
	}
	sum = testSummary()
	if err := (sections{Sections: inspect.Sections{Env: true}, showSecrets: true}).apply(sum); err != nil || sum.Env[0] != "API_KEY=k" || sum.Details.Processes[0].Env[0] != "PASSWORD=p" {
		t.Fatalf("--show-secrets: %v, env %v", err, sum.Env)
	}
	sum = testSummary()
	if err := (sections{Sections: inspect.Sections{PID: 7}}).apply(sum); err != nil || len(sum.Details.Processes) != 1 || sum.Details.Processes[0].PID != 7 {
		t.Fatalf("--pid 7: %v, %+v", err, sum.Details.Processes)
	}
	err := (sections{Sections: inspect.Sections{PID: 9}}).apply(testSummary())
	if err == nil || !strings.Contains(err.Error(), "1, 7") || !strings.Contains(err.Error(), "remedy") {
		t.Fatalf("--pid 9: %v", err)
	}
}

// The head rows keep the alignment scripts match ("Kind:" then the value
// at column 14); the container's id, runtime, creation time and
// annotations show; a junk GPU count reads as unreadable, not "none".
func TestPrintSummaryContainer(t *testing.T) {
	sum := ociimage.FromManifest(ocispec.Manifest{Annotations: map[string]string{ociimage.AnnKind: "containerd", ociimage.AnnGPUCount: "junk"}})
	sum.ContainerID, sum.Runtime = "abc", "io.containerd.runc.v2"
	created := sum.Created.AddDate(2026, 0, 0)
	sum.ContainerCreated = &created
	sum.ContainerAnnotations = map[string]string{"b": "2", "a": "1"}
	var out bytes.Buffer
	printSummary(&out, sum)
	s := out.String()
	for _, want := range []string{"Kind:         containerd", "ID:           abc", "Runtime:      io.containerd.runc.v2", "Created:", "Checkpointed:", "Annotations:", "a=1\n", "b=2", "unreadable"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "none needed") {
		t.Errorf("a junk GPU count printed as none needed:\n%s", s)
	}
}

func TestUnfinishedStates(t *testing.T) {
	for st, want := range map[manifest.DumpState]string{
		manifest.DumpNotStarted: "holds no CRIU images",
		manifest.DumpPartial:    "images are partial",
		manifest.DumpAbandoned:  "abandoned after its dump completed",
		manifest.DumpComplete:   "cryo checkpoint --finish",
	} {
		s := &ociimage.Summary{Source: "d", Unfinished: true, Interruption: st, Finishable: st == manifest.DumpComplete}
		if got := unfinishedState(s); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", st, got, want)
		}
	}
}

// A directory marked partial says whether its dump had completed, and that
// its images were removed.
func TestPartialStates(t *testing.T) {
	p := &manifest.Partial{Error: "interrupted by SIGINT", Kept: []string{"criu-dump.log"}}
	s := &ociimage.Summary{Unfinished: true, Partial: p, Interruption: manifest.DumpFailedRemoved}
	if got := unfinishedState(s); !strings.Contains(got, "failed before CRIU's dump completed") || !strings.Contains(got, "interrupted by SIGINT") || !strings.Contains(got, "criu-dump.log") {
		t.Errorf("failed: %q", got)
	}
	s.Interruption = manifest.DumpStaleRemoved
	if got := unfinishedState(s); !strings.Contains(got, "dump completed, then the run failed") || strings.Contains(got, "before CRIU's dump completed") {
		t.Errorf("stale: %q", got)
	}
}
