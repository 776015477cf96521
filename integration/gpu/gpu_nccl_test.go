package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"golang.org/x/sys/unix"
)

// The patterns need no line anchors, so that a log whose lines ran into
// one another still counts every step.
var allreduceRe = regexp.MustCompile(`tick (\d+) rank=(\d+) allreduce=(OK|BAD)`)

// ncclJob is contrib/workloads/allreduce: a launcher and two ranks.
type ncclJob struct {
	t        *testing.T
	log      string
	launcher int
	ranks    []int
}

var ncclPort int

// startNCCLJob starts the job with env added to its environment; with
// steps > 0 it trains for that many steps and exits.
func startNCCLJob(t *testing.T, py *hostPython, steps int, env ...string) *ncclJob {
	t.Helper()
	j := &ncclJob{t: t, log: filepath.Join(t.TempDir(), "allreduce.log")}
	ncclPort++ // a fresh port per job: the last one's may linger in TIME_WAIT
	port := strconv.Itoa(29500 + os.Getpid()%300 + ncclPort)
	script := filepath.Join(workloadsDir(t), "allreduce", "allreduce.py")
	args := append(append([]string{}, env...), "PYTHONUNBUFFERED=1", py.exe, script, "2", port, "200", "64", strconv.Itoa(steps))
	cmd := startDetached(t, j.log, "env", args...)
	j.launcher = cmd.Process.Pid
	t.Cleanup(j.Kill)
	j.waitOK(4)
	harness.WaitFor(t, 30*time.Second, "the ranks", func() bool {
		j.ranks = childPIDs(j.launcher)
		return len(j.ranks) == 2
	})
	return j
}

// waitOK waits until each rank has printed n more correct all-reduces.
func (j *ncclJob) waitOK(n int) {
	j.t.Helper()
	start := j.oks()
	harness.WaitFor(j.t, 3*time.Minute, fmt.Sprintf("%d more all-reduces per rank", n), func() bool {
		now := j.oks()
		return now[0] >= start[0]+n && now[1] >= start[1]+n
	})
}

// oks counts each rank's correct all-reduces, failing on a wrong one.
func (j *ncclJob) oks() [2]int {
	out := harness.ReadFile(j.log)
	var c [2]int
	for _, m := range allreduceRe.FindAllStringSubmatch(out, -1) {
		if m[3] != "OK" {
			j.t.Fatalf("rank %s computed a wrong all-reduce:\n%s", m[2], harness.Tail(out, 20))
		}
		if r, _ := strconv.Atoi(m[2]); r < 2 {
			c[r]++
		}
	}
	return c
}

func (j *ncclJob) Kill() {
	for _, p := range append(j.ranks, j.launcher) {
		killPid(p)
	}
}

func childPIDs(pid int) []int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	var kids []int
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		kids = append(kids, n)
	}
	return kids
}

// TestGPUNCCLIPCRefused: a 2-rank NCCL job with NCCL's default transports
// (CUDA IPC between the GPUs) is refused by `cryo checkpoint` and by `cryo
// cuda suspend` before anything is suspended, and both ranks go on
// computing correct all-reduces. The same job with NCCL on sockets
// suspends and resumes in place.
func TestGPUNCCLIPCRefused(t *testing.T) {
	gpuUUIDs(t, 2)
	py := torchPython(t)
	cryo := harness.CryoBin(t, "cryo")
	j := startNCCLJob(t, py, 0, "USE_LIBUV=0") // TCPStore without io_uring: only CUDA IPC is in the way
	out, err := harness.RunErr(2*time.Minute, nil, cryo, "checkpoint", "--pid", strconv.Itoa(j.launcher), "--dir", filepath.Join(t.TempDir(), "img"), "--leave-running")
	if err == nil || !strings.Contains(out, "CUDA IPC") || !strings.Contains(out, "NCCL_P2P_DISABLE=1") {
		t.Fatalf("checkpoint of the default NCCL job: %v\n%s", err, out)
	}
	t.Logf("refused as it should be:\n%s", out)
	ranks := []string{strconv.Itoa(j.ranks[0]), strconv.Itoa(j.ranks[1])}
	out, err = harness.RunErr(time.Minute, nil, cryo, append([]string{"cuda", "suspend"}, ranks...)...)
	if err == nil || !strings.Contains(out, "CUDA IPC") {
		t.Fatalf("cryo cuda suspend of the default NCCL job: %v\n%s", err, out)
	}
	j.waitOK(5)
	j.Kill()

	safe := startNCCLJob(t, py, 0, ncclSocketsEnv...)
	ranks = []string{strconv.Itoa(safe.ranks[0]), strconv.Itoa(safe.ranks[1])}
	report(t, "suspend 2 NCCL ranks (sockets)", harness.Timed(t, nil, cryo, append([]string{"cuda", "suspend"}, ranks...)...))
	report(t, "resume 2 NCCL ranks (sockets)", harness.Timed(t, nil, cryo, append([]string{"cuda", "resume"}, ranks...)...))
	safe.waitOK(5)
}

// ncclSocketsEnv runs NCCL on sockets only (no CUDA IPC, which the driver
// cannot restore), and PyTorch's TCPStore without libuv, whose io_uring
// CRIU cannot dump.
var ncclSocketsEnv = []string{"NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_CUMEM_ENABLE=0", "USE_LIBUV=0"}

// TestGPUNCCLSocketsCheckpoint: a 2-rank data-parallel training job with
// NCCL on sockets, one process per GPU, is checkpointed as one process tree
// with its TCP connections (CRIU 4.2, --tcp-established) and restored; it
// trains on to its last step, and its loss at every step equals that of
// the same job run uninterrupted beside it.
func TestGPUNCCLSocketsCheckpoint(t *testing.T) {
	gpuUUIDs(t, 2)
	py := torchPython(t)
	reapOrphans(t)
	cryo := harness.CryoBin(t, "cryo")
	const steps = 40
	j := startNCCLJob(t, py, steps, ncclSocketsEnv...)
	img := filepath.Join(t.TempDir(), "img")
	t.Logf("the job's TCP sockets:\n%s", tcpSocketsOf(append([]int{j.launcher}, j.ranks...)))
	start := time.Now()
	out, err := harness.RunErr(5*time.Minute, nil, cryo, "checkpoint", "--pid", strconv.Itoa(j.launcher), "--dir", img, "--tcp-established")
	if err != nil {
		t.Fatalf("checkpoint of the NCCL job: %v\n%s", err, out)
	}
	report(t, "checkpoint of a 2-rank NCCL job (sockets)", time.Since(start))
	before := j.oks()
	if before[0] >= steps || before[1] >= steps {
		t.Fatalf("the job had ended before its checkpoint (%v): raise the step count", before)
	}
	j.waitPIDsFree()
	start = time.Now()
	// NCCL's listeners have no SO_REUSEADDR and their bootstrap
	// connections, closed at init, hold their ports in TIME_WAIT for a
	// minute: cryo waits for them (TestBareNetworkServerTimeWait).
	out, err = harness.RunErr(5*time.Minute, nil, cryo, "restore", "--dir", img, "--tcp-established")
	if err != nil {
		t.Fatalf("restore of the NCCL job: %v\n%s\nCRIU's restore log:\n%s\nCRIU's dump log:\n%s", err, out,
			criuLogLines(filepath.Join(img, "criu-restore.log"), `Error|bind|reuse|port|inet: (Restore|Open)`),
			criuLogLines(filepath.Join(img, "criu-dump.log"), `inet: |tcp: |Error`))
	}
	report(t, "restore of the NCCL job (with the wait for TIME_WAIT)", time.Since(start))
	if strings.Contains(out, "TIME_WAIT") {
		t.Logf("the restore waited for TIME_WAIT sockets on the job's listening ports")
	}
	t.Logf("steps per rank at the checkpoint %v", before)
	if !j.progresses(before, 30*time.Second) {
		t.Fatalf("the restored job made fewer than 3 steps per rank in 30 s:\n%s", j.diagnose(cryo))
	}
	got := j.waitLosses(steps)
	// The reference runs after the restored job, not beside it: a live
	// connection of another job may share a local port (connect() reuses
	// ephemeral ports across destinations), and the restore then cannot
	// bind its socket to that port.
	want := startNCCLJob(t, py, steps, ncclSocketsEnv...).waitLosses(steps)
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("rank %d step %d: loss %s after the restore, %s uninterrupted", k[0], k[1], got[k], w)
		}
	}
	t.Logf("the restored job's %d losses per rank equal the uninterrupted run's (last %s)", steps, want[[2]int{0, steps}])
	os.RemoveAll(img)
}

// tcpSocketsOf lists the TCP sockets of pids from /proc (local and remote
// address in hex, state: 01 established, 0A listening), for the log of a
// failed restore.
func tcpSocketsOf(pids []int) string {
	var keep []string
	for _, p := range pids {
		inodes := map[string]bool{}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p))
		for _, fd := range fds {
			l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p, fd.Name()))
			if ino, ok := strings.CutPrefix(l, "socket:["); ok {
				inodes[strings.TrimSuffix(ino, "]")] = true
			}
		}
		for _, table := range []string{"tcp", "tcp6"} {
			for _, line := range strings.Split(harness.ReadFile(fmt.Sprintf("/proc/%d/net/%s", p, table)), "\n") {
				if f := strings.Fields(line); len(f) > 9 && inodes[f[9]] {
					keep = append(keep, fmt.Sprintf("pid %d %s local %s remote %s state %s queues %s inode %s", p, table, f[1], f[2], f[3], f[4], f[9]))
				}
			}
		}
	}
	return strings.Join(keep, "\n")
}

// criuLogLines picks the lines of a CRIU log that match re.
func criuLogLines(path, re string) string {
	var keep []string
	r := regexp.MustCompile(re)
	for _, line := range strings.Split(harness.ReadFile(path), "\n") {
		if r.MatchString(line) {
			keep = append(keep, line)
		}
	}
	if len(keep) > 120 {
		keep = keep[len(keep)-120:]
	}
	return strings.Join(keep, "\n")
}

// progresses says whether each rank makes 3 steps beyond before within d
// (a step takes about 0.2 s).
func (j *ncclJob) progresses(before [2]int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if now := j.oks(); now[0] >= before[0]+3 && now[1] >= before[1]+3 {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

// diagnose describes a stuck job: each thread's state and wait channel,
// the driver's state of each rank, its TCP queues, and the log's end.
func (j *ncclJob) diagnose(cryo string) string {
	var b strings.Builder
	pids := append([]int{j.launcher}, j.ranks...)
	for _, p := range pids {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		fmt.Fprintf(&b, "pid %d: %d threads\n", p, len(tasks))
		for _, task := range tasks {
			dir := fmt.Sprintf("/proc/%d/task/%s/", p, task.Name())
			stat := strings.Fields(harness.ReadFile(dir + "stat"))
			state := ""
			if len(stat) > 2 {
				state = stat[2]
			}
			fmt.Fprintf(&b, "  %s %-16s %s wchan=%s\n", task.Name(), strings.TrimSpace(harness.ReadFile(dir+"comm")), state, harness.ReadFile(dir+"wchan"))
		}
	}
	out, _ := harness.RunErr(time.Minute, nil, cryo, "cuda", "state", strconv.Itoa(j.ranks[0]), strconv.Itoa(j.ranks[1]))
	fmt.Fprintf(&b, "cryo cuda state: %s\n", out)
	fmt.Fprintf(&b, "TCP sockets (tx:rx queues in the 5th column):\n%s\n", tcpSocketsOf(pids))
	fmt.Fprintf(&b, "log:\n%s", harness.Tail(harness.ReadFile(j.log), 15))
	return b.String()
}

// waitPIDsFree waits until the job's pids are free again after a dump (a
// restore needs the very same pids): the ranks, orphaned by the dump, are
// this test's (the subreaper's) to reap.
func (j *ncclJob) waitPIDsFree() {
	j.t.Helper()
	harness.WaitFor(j.t, 30*time.Second, "the job's pids to be free", func() bool {
		for _, p := range j.ranks {
			unix.Wait4(p, nil, unix.WNOHANG, nil)
		}
		for _, p := range append(j.ranks, j.launcher) {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); err == nil {
				return false
			}
		}
		return true
	})
}

var lossRe = regexp.MustCompile(`tick (\d+) rank=(\d+) allreduce=OK loss=(-?0x[0-9a-f.]+p[-+]?\d+|-?inf|nan)`)

// waitLosses waits until both ranks have printed steps training steps and
// returns each loss by (rank, step); a step printed twice must agree.
func (j *ncclJob) waitLosses(steps int) map[[2]int]string {
	j.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for now := j.oks(); now[0] < steps || now[1] < steps; now = j.oks() {
		if time.Now().After(deadline) {
			j.t.Fatalf("%v of %d training steps per rank after 3 min:\n%s", now, steps, j.diagnose(harness.CryoBin(j.t, "cryo")))
		}
		time.Sleep(200 * time.Millisecond)
	}
	losses := map[[2]int]string{}
	for _, m := range lossRe.FindAllStringSubmatch(harness.ReadFile(j.log), -1) {
		step, _ := strconv.Atoi(m[1])
		rank, _ := strconv.Atoi(m[2])
		k := [2]int{rank, step}
		if prev, ok := losses[k]; ok && prev != m[3] {
			j.t.Fatalf("rank %d printed step %d twice, with losses %s and %s", rank, step, prev, m[3])
		}
		losses[k] = m[3]
	}
	if len(losses) != 2*steps {
		j.t.Fatalf("%d losses in the log, want %d:\n%s", len(losses), 2*steps, harness.Tail(harness.ReadFile(j.log), 20))
	}
	return losses
}
