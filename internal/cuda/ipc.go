package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/report"
)

// ErrCUDAIPC: a process shares GPU memory with other processes (CUDA IPC),
// which driver 580 cannot restore: the suspend succeeds, the restore fails
// with CUDA_ERROR_NOT_SUPPORTED, and the job is lost.
var ErrCUDAIPC = errors.New("processes share GPU memory through CUDA IPC")

// NCCLRank is what marks a process as an NCCL rank.
type NCCLRank struct {
	// Communicator: it runs a communicator's threads (PyTorch's
	// ProcessGroupNCCL watchdog "pt_nccl_*", or NCCL's own "NCCL …").
	Communicator bool `json:"communicator"`
	// SocketsOnly: its environment keeps NCCL off CUDA IPC
	// (NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1, NCCL_CUMEM_ENABLE=0).
	SocketsOnly bool `json:"sockets_only"`
}

// NCCLSafeEnv is the environment that keeps NCCL's transports off CUDA
// IPC, the remedy the errors name. With it, a 2-rank job on 2× H200 (driver
// 580) suspended, resumed and computed correct all-reduces.
const NCCLSafeEnv = "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_CUMEM_ENABLE=0"

// ncclRank returns nil unless pid maps libnccl. Measured on 2× H200: the
// ranks of a job whose transports use CUDA IPC (P2P, SHM, cuMem) and of one
// on sockets look alike in their fds, maps and /dev/shm; only their
// environment tells them apart. PyTorch maps libnccl in every CUDA process,
// so the communicator's threads (or several ranks in one checkpoint, see
// CheckIPC) say whether NCCL is in use.
func ncclRank(pid int, env map[string]string) (*NCCLRank, error) {
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return nil, noProcess(pid, err)
	}
	if !bytes.Contains(maps, []byte("libnccl.so")) {
		return nil, nil
	}
	r := &NCCLRank{Communicator: ncclThreads(pid)}
	r.SocketsOnly = env["NCCL_P2P_DISABLE"] == "1" && env["NCCL_SHM_DISABLE"] == "1" && env["NCCL_CUMEM_ENABLE"] == "0"
	return r, nil
}

func ncclThreads(pid int) bool {
	comms, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/comm")
	for _, c := range comms {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(b))
		if strings.HasPrefix(name, "pt_nccl") || strings.HasPrefix(name, "NCCL ") {
			return true
		}
	}
	return false
}

// CheckIPC refuses, before anything is suspended, a set of CUDA processes
// whose NCCL ranks may share GPU memory: a rank running a communicator, or
// several processes of the set mapping libnccl, without the environment
// that keeps NCCL on sockets. Several NCCL-linked processes are refused
// even without visible communicator threads (plain NCCL names none): a
// false refusal costs a retry with NCCLSafeEnv, a missed one the job.
func CheckIPC(procs []ProcessGPUs) error {
	linked := 0
	for _, p := range procs {
		if p.NCCL != nil {
			linked++
		}
	}
	var risky []string
	for _, p := range procs {
		if p.NCCL == nil || p.NCCL.SocketsOnly || (!p.NCCL.Communicator && linked < 2) {
			continue
		}
		risky = append(risky, strconv.Itoa(p.PID))
	}
	if len(risky) == 0 {
		return nil
	}
	return report.WithRemedy(fmt.Errorf("%w: pid %s: NCCL rank(s) whose transports may use CUDA IPC (P2P, SHM or cuMem), which driver 580 cannot restore (the job would be lost); nothing was suspended",
		ErrCUDAIPC, strings.Join(risky, ", ")),
		"start the job with "+NCCLSafeEnv+" in its environment (NCCL then uses sockets), or use a driver that restores CUDA IPC")
}

// CheckIPCOf is CheckIPC for processes not yet described (cryo cuda
// suspend): it reads what marks an NCCL rank from /proc.
func CheckIPCOf(pids []int) error {
	var procs []ProcessGPUs
	for _, pid := range unique(pids) {
		env, err := processEnv(pid)
		if err != nil {
			return err
		}
		r, err := ncclRank(pid, env)
		if err != nil {
			return err
		}
		procs = append(procs, ProcessGPUs{PID: pid, NCCL: r})
	}
	return CheckIPC(procs)
}
