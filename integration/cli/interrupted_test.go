package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// startHeldCheckpoint starts `cryo checkpoint` of p into img, held before
// step (CRYO_TEST_HOLD, in the build with failpoints), and waits until it
// is held there.
func startHeldCheckpoint(t *testing.T, env []string, p *harness.BareProc, img, step string) (*exec.Cmd, string, *testsupport.Buffer) {
	t.Helper()
	hold := filepath.Join(t.TempDir(), "hold")
	cmd := exec.Command(harness.FailpointBin(t, "cryo"), "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	out := &testsupport.Buffer{}
	cmd.Env = append(append(os.Environ(), env...), "CRYO_TEST_HOLD="+step+":"+hold)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	harness.WaitFor(t, harness.BareTimeout, "cryo to reach step "+step, func() bool {
		_, err := os.Stat(hold)
		return err == nil
	})
	return cmd, hold, out
}

// interruptHeld sends sig to a checkpoint held by startHeldCheckpoint and
// releases the hold once cryo has said it got the signal: released
// earlier, the held step could start before the interrupt is seen, and a
// dump that has started runs to its end.
func interruptHeld(t *testing.T, cmd *exec.Cmd, hold string, out *testsupport.Buffer, sig syscall.Signal) {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, harness.BareTimeout, "cryo to take the signal", func() bool {
		return strings.Contains(out.String(), "received: stopping")
	})
	os.Remove(hold)
}

// bareRestoreVerified restores img and checks that the app continues with
// its device memory intact.
func bareRestoreVerified(t *testing.T, env []string, p *harness.BareProc, img string, wants ...string) {
	t.Helper()
	before := p.LastTick(t)
	out := harness.Run(t, harness.BareTimeout, env, harness.CryoBin(t, "cryo"), "restore", "--dir", img)
	harness.WantIn(t, out, append(wants, "verifying checkpoint done", "resuming CUDA done", strconv.Itoa(p.PID))...)
	p.WaitTicks(t, before+5)
	if page, err := fakecuda.ReadPage(p.PID); err != nil || page.State != 0 || page.Restores < 1 {
		t.Fatalf("driver state after restore: %+v, %v", page, err)
	}
	bareTicksIncrease(t, p.Output())
}

// killDumped makes sure the dumped tree is gone (killing it if the
// checkpoint left it stopped) so that its pid is free for the restore.
func killDumped(t *testing.T, p *harness.BareProc) {
	t.Helper()
	if p.Alive() {
		syscall.Kill(p.PID, syscall.SIGKILL)
	}
	// Reaped, not only dead: the restore needs the pid free.
	harness.WaitFor(t, 10*time.Second, "the dumped process to be reaped", func() bool { return procfs.State(p.PID) == "" })
}

// killedBeforeDigests checkpoints a fake CUDA app and SIGKILLs cryo when
// the dump is complete and the digests are next; it returns the app's
// environment, the app and the image directory.
func killedBeforeDigests(t *testing.T) ([]string, *harness.BareProc, string) {
	t.Helper()
	harness.RequireRoot(t)
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	cmd, _, _ := startHeldCheckpoint(t, env, p, img, "digests")
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	return env, p, img
}

// cryo killed while it hashes the images: the dump is complete, the
// manifest has no digests. The restore completes the checkpoint and says so.
func TestInterruptedKilledDuringDigests(t *testing.T) {
	env, p, img := killedBeforeDigests(t)
	if m, err := manifest.Read(img); err != nil || !m.Unfinished() {
		t.Fatalf("manifest after the kill: %+v, %v", m, err)
	}
	if ok, err := manifest.DumpCompleted(img, nil); !ok || err != nil {
		t.Fatalf("DumpCompleted after a complete dump: %v, %v", ok, err)
	}
	// CRIU left the tree stopped for cryo, which died before it could kill
	// it: the workload is still there.
	if st := procfs.State(p.PID); st != "T" {
		t.Fatalf("the dumped process is in state %q after cryo was killed, want T (stopped)", st)
	}
	killDumped(t, p)
	bareRestoreVerified(t, env, p, img, "completing a checkpoint interrupted after its dump")
	m, err := manifest.Read(img)
	if err != nil || m.Unfinished() || m.CompletedLate == nil {
		t.Fatalf("manifest after the completing restore: %+v, %v", m, err)
	}
}

// cryo checkpoint --finish completes the checkpoint explicitly; a second
// --finish has nothing to do, and a partial dump is refused.
func TestInterruptedFinishCommand(t *testing.T) {
	env, p, img := killedBeforeDigests(t)
	killDumped(t, p)
	harness.WantIn(t, harness.BareCryo(t, env, "inspect", img), "interrupted after its dump", "cryo checkpoint --finish "+img)
	out := harness.BareCryo(t, env, "checkpoint", "--finish", img)
	harness.WantIn(t, out, "completed after an interruption", "hashed now")
	harness.WantIn(t, harness.BareCryo(t, env, "checkpoint", "--finish", img), "already finished")
	bareRestoreVerified(t, env, p, img)

	partial := t.TempDir()
	m := manifest.New("partial")
	if err := manifest.Write(partial, m); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(partial, "inventory.img"), []byte("x"), 0o600)
	harness.WantIn(t, harness.BareCryo(t, env, "inspect", partial), "before CRIU's dump completed", "re-take")
	harness.WantIn(t, harness.BareCryoFails(t, env, "checkpoint", "--finish", partial), "before CRIU's dump completed", "re-take the checkpoint")
	harness.WantIn(t, harness.BareCryoFails(t, env, "restore", "--dir", partial), "did not finish", "--finish")
}

// A full disk at the last manifest write: the dumped process, left stopped
// by CRIU, is continued with CUDA resumed and its memory intact. Its dump,
// stale once it ran on, is refused by a restore.
func TestInterruptedFullDiskKeepsRunning(t *testing.T) {
	harness.RequireRoot(t)
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	p := harness.BareStartFakeApp(t, env, nil)
	img, out := fullDiskCheckpoint(t, env, p)
	harness.WantIn(t, out, "failed at step manifest", "no space left", "left running with CUDA resumed")
	if !p.Alive() || procfs.State(p.PID) == "T" {
		t.Fatalf("the process is gone or still stopped (state %q) after the failed checkpoint:\n%s", procfs.State(p.PID), out)
	}
	p.WaitTicks(t, p.LastTick(t)+5)
	harness.WantIn(t, harness.BareCryo(t, env, "cuda", "state", strconv.Itoa(p.PID)), "running")
	bareTicksIncrease(t, p.Output())

	harness.WantIn(t, harness.BareCryoFails(t, env, "restore", "--dir", img), "did not finish", "re-take the checkpoint")
	if !p.Alive() {
		t.Fatal("the refused restore touched the running process")
	}
}

// fullDiskCheckpoint runs `cryo checkpoint` of p into a 64 MiB tmpfs that
// fills up just before the last manifest write, and returns the image
// directory and cryo's output once cryo has failed (the space freed again).
func fullDiskCheckpoint(t *testing.T, env []string, p *harness.BareProc) (string, string) {
	t.Helper()
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	img := filepath.Join(mnt, "img")
	cmd, hold, out := startHeldCheckpoint(t, env, p, img, "final")
	// Fill what is left; dd ends with ENOSPC, as it should.
	filler := filepath.Join(mnt, "filler")
	exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=1M").Run()
	os.Remove(hold)
	if err := cmd.Wait(); err == nil {
		t.Fatalf("cryo checkpoint succeeded on a full disk:\n%s", out)
	}
	os.Remove(filler)
	return img, out.String()
}

// TestInterruptedKilledAtEveryStep: `cryo checkpoint` SIGKILLed before each
// step in turn never loses the workload. Before the suspend, the process
// runs on untouched; between the suspend and the dump, it is alive with
// CUDA suspended and `cryo recover` (the remedy `cryo cuda state` points
// to) brings it back with its device memory intact; after the dump
// (which leaves it stopped), the checkpoint restores it intact.
func TestInterruptedKilledAtEveryStep(t *testing.T) {
	harness.RequireRoot(t)
	for _, step := range []string{"find", "inventory", "suspend", "manifest", "dump", "digests", "final"} {
		t.Run(step, func(t *testing.T) {
			env := append(harness.FakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
			p := harness.BareStartFakeApp(t, env, nil)
			img := filepath.Join(t.TempDir(), "img")
			cmd, _, _ := startHeldCheckpoint(t, env, p, img, step)
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			state := harness.BareCryo(t, env, "cuda", "state", strconv.Itoa(p.PID))
			switch step {
			case "find", "inventory", "suspend":
				harness.WantIn(t, state, "running")
			case "manifest", "dump":
				harness.WantIn(t, state, "checkpointed", "cryo recover "+strconv.Itoa(p.PID))
				harness.WantIn(t, harness.BareCryo(t, env, "recover", strconv.Itoa(p.PID)), "recovered: checked")
			default:
				if procfs.State(p.PID) != "T" {
					t.Fatalf("after the dump the process is in state %q, want stopped (T) for its checkpoint", procfs.State(p.PID))
				}
				killDumped(t, p)
				bareRestoreVerified(t, env, p, img, "completing a checkpoint interrupted after its dump")
				return
			}
			p.WaitTicks(t, p.LastTick(t)+5)
			bareTicksIncrease(t, p.Output())
		})
	}
}

// TestInterruptedCheckpointLeavesNoImages: Ctrl-C after CRIU's dump (the
// process stopped, its memory on disk) continues the process; the images,
// no longer needed, are removed, CRIU's log stays with a mark that says
// what happened, a restore of the directory says so, and the same --dir
// takes the next checkpoint, which restores.
func TestInterruptedCheckpointLeavesNoImages(t *testing.T) {
	harness.RequireRoot(t)
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	cmd, hold, out := startHeldCheckpoint(t, env, p, img, "digests")
	interruptHeld(t, cmd, hold, out, syscall.SIGINT)
	if code := harness.ExitCode(cmd.Wait()); code != 130 {
		t.Fatalf("interrupted checkpoint: exit %d, want 130:\n%s", code, out)
	}
	harness.WantIn(t, out.String(), "interrupted by SIGINT", "was removed", manifest.PartialName)
	p.WaitTicks(t, p.LastTick(t)+3)
	if imgs, _ := filepath.Glob(filepath.Join(img, "*.img")); len(imgs) > 0 {
		t.Fatalf("the interrupted checkpoint left %d images (%s…)", len(imgs), filepath.Base(imgs[0]))
	}
	if logs, _ := filepath.Glob(filepath.Join(img, "*.log")); len(logs) == 0 {
		t.Fatal("the interrupted checkpoint's logs were removed too")
	}
	harness.WantIn(t, harness.BareCryoFails(t, env, "restore", "--dir", img), "did not finish", "images were removed", "re-take the checkpoint")

	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	if _, err := os.Stat(filepath.Join(img, manifest.PartialName)); err == nil {
		t.Fatal("the new checkpoint kept the old partial mark")
	}
	killDumped(t, p)
	bareRestoreVerified(t, env, p, img)
}
