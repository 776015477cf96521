package gpu

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/bundle"
	"github.com/cryo-gpu/cryo/internal/hook"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// llmSleep: the transformers server through cryo-runc once more, with its
// sleep and wake endpoints as the container's hooks, as a pod would name
// vLLM's (cryo.io/pre-checkpoint "POST /sleep?level=1", cryo.io/post-restore
// "POST /wake_up"): the KV-cache pool is freed before the suspend, so the
// driver and CRIU have its zeros no more to copy, and allocated again once
// the restored server runs. The restore's first output counts from the
// restore command to the first answer, which comes after the wake hook's
// answer (cryo-runc returns once the hook has answered). The GPU is free
// once its memory is back at base MiB; the same image is restored again
// with the page cache dropped, as on a fresh node. Rows "cryo with sleep
// hook …" beside the llm rows; CRYO_BENCH_LLM_SLEEP=0 skips it.
func (b *bench) llmSleep(py *hostPython, model, script string, args []string, mib, base int) {
	t := b.t
	if os.Getenv("CRYO_BENCH_LLM_SLEEP") == "0" || !slices.Contains(benchOrder(), "cryo") {
		return
	}
	const v = "cryo with sleep hook"
	dropCaches(t)
	r := runcFor(t, "cryo")
	s := startServeWith(t, runcFlavor(filepath.Base(r)), "cryo-bench-llm-sleep", py, script, model, args, r)
	s.c.CRIU = criuFor(t, "cryo")
	defer s.c.Remove()
	_, port, err := net.SplitHostPort(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	// The hooks are read from the bundle at the checkpoint and at the
	// restore: runc itself never reads config.json again once it runs.
	setAnnotations(t, s.c.Bundle, map[string]string{
		hook.AnnPreCheckpoint:        "http:POST /sleep?level=1 port=" + port,
		hook.AnnPostRestore:          "http:POST /wake_up port=" + port,
		hook.AnnPreCheckpointTimeout: "5m",
		hook.AnnPostRestoreTimeout:   "5m",
	})
	img := filepath.Join(t.TempDir(), "img")
	flushDirty(t)
	free := watchGPUFree(t, base)
	b.row("llm", mib, v+" checkpoint", s.c.Checkpoint(img).Seconds())
	b.row("llm", mib, v+" GPU free", free().Seconds())
	b.row("llm", mib, v+" image bytes", float64(harness.DirBytes(t, img)))
	for _, suffix := range []string{"", ", page cache dropped"} {
		s.c.Log = &testsupport.Buffer{}
		if suffix != "" {
			dropCaches(t)
		}
		start := b.restoreAs("llm", mib, "cryo", s.c, img, ", sleep hook"+suffix)
		first := firstAnswer(t, s.addr, "infer 1", 3*time.Minute, s.c.Log.String)
		b.row("llm", mib, v+" restore to first output"+suffix, time.Since(start).Seconds())
		if first != s.answers[0] {
			t.Fatalf("llm (sleep hook%s): after the restore %q, before %q", suffix, first, s.answers[0])
		}
		s.check(t) // the pool is back, zeroed, with its prefix cache
		s.c.Remove()
	}
	_ = os.RemoveAll(img)
}

// setAnnotations adds ann to the bundle's config.json.
func setAnnotations(t *testing.T, dir string, ann map[string]string) {
	t.Helper()
	raw, err := bundle.ReadRaw(dir)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range ann {
		raw.SetAnnotation(k, v)
	}
	if err := raw.Write(dir); err != nil {
		t.Fatal(err)
	}
}
