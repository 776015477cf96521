package fakecuda

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
)

// The state page of a fake CUDA process; see csrc/fakecuda.h, which this
// mirrors field by field.
const (
	PageAddr = 0x6c7d00000000
	pageSize = 768 // what the decoder reads: every field of layout 2
	magic    = 0x454b4146304f5943
	maxPairs = 8
	maxGPUs  = 8

	offGPUCount = 120
	offFlags    = 128
	offReqGen   = 136
	offAckGen   = 144
	offErrno    = 152
	offRestTID  = 160 // layout 3
	offTouches  = 176
	offPairs    = 256
	offGPUs     = 512
	gpuEntry    = 32 // uuid[16], minor, memory

	flagHoldsDevices = 1
	flagIPC          = 2
)

// Page is the fake driver's state of one process.
type Page struct {
	Layout      int    // FAKECU_LAYOUT of the driver that made the page
	State       int    // 0 running, 1 locked, 2 checkpointed, 3 failed
	Busy        bool   // inside a "CUDA call"
	Locks       uint64 // successful locks
	Checkpoints uint64
	Restores    uint64
	Unlocks     uint64
	LockTimeout uint64 // timeoutMs of the last lock
	DevSize     uint64 // bytes of "device memory"
	InitPID     int    // pid when the process initialised CUDA
	RestorePID  int    // pid argument of the last restore
	// Pairs are the gpuPairs of the last restore (at most 8 kept), as
	// {old, new} raw UUIDs; PairsCount is the count the caller passed.
	PairsCount int
	Pairs      [][2][16]byte

	// GPUs are the GPUs the process sees, in CUDA's order, as the driver
	// now records them (a restore rewrites them to the new GPUs).
	GPUs []PageGPU
	// HoldsDevices: the process found GPU device nodes, so it holds
	// /dev/nvidia<Minor> open for each of its GPUs while not checkpointed.
	// False on a host without nodes, where it sees every GPU of its table.
	HoldsDevices bool
	// IPC: the process shares device memory through CUDA IPC (an NCCL rank
	// on P2P/SHM/cuMem); the driver fails its restore with
	// CUDA_ERROR_NOT_SUPPORTED and the process is lost.
	IPC bool
	// The device-fd handshake: requests the driver made, requests the
	// process answered, and the errno of its last failed open (0: none).
	Requests, Acks uint64
	OpenErrno      int
	// RestoreTID is the device thread, which the fake driver names as the
	// process's restore thread (layout 3). Touches counts the reads of the
	// driver-mapped page by the touch thread, which faults when it runs
	// while the process is checkpointed.
	RestoreTID int
	Touches    uint64
}

// PageGPU is one GPU a fake process sees.
type PageGPU struct {
	UUID   string // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
	Minor  int    // its node, /dev/nvidia<Minor>
	Memory uint64 // bytes of "device memory" the process holds on it
}

// ReadPage reads the fake driver state of pid through /proc/PID/mem.
func ReadPage(pid int) (Page, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return Page{}, err
	}
	defer f.Close()
	b := make([]byte, pageSize)
	if _, err := f.ReadAt(b, PageAddr); err != nil {
		return Page{}, fmt.Errorf("pid %d has no fake CUDA state page: %w", pid, err)
	}
	return decode(pid, b)
}

func decode(pid int, b []byte) (Page, error) {
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[i*8:]) }
	at := func(off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	if u(0) != magic {
		return Page{}, fmt.Errorf("pid %d: fake CUDA state page has a bad magic", pid)
	}
	p := Page{
		Layout: int(u(1)), State: int(u(2)), Busy: u(3) != 0, Locks: u(4), Checkpoints: u(5),
		Restores: u(6), Unlocks: u(7), LockTimeout: u(8), DevSize: u(11),
		InitPID: int(u(12)), PairsCount: int(u(13)), RestorePID: int(u(14)),
	}
	for i := 0; i < min(p.PairsCount, maxPairs); i++ {
		var pr [2][16]byte
		copy(pr[0][:], b[offPairs+32*i:])
		copy(pr[1][:], b[offPairs+32*i+16:])
		p.Pairs = append(p.Pairs, pr)
	}
	if p.Layout < 2 {
		return p, nil
	}
	flags := at(offFlags)
	p.HoldsDevices, p.IPC = flags&flagHoldsDevices != 0, flags&flagIPC != 0
	p.Requests, p.Acks, p.OpenErrno = at(offReqGen), at(offAckGen), int(at(offErrno))
	if p.Layout >= 3 {
		p.RestoreTID, p.Touches = int(at(offRestTID)), at(offTouches)
	}
	for i := 0; i < int(min(at(offGPUCount), maxGPUs)); i++ {
		e := b[offGPUs+gpuEntry*i:]
		var raw [16]byte
		copy(raw[:], e)
		p.GPUs = append(p.GPUs, PageGPU{UUID: FormatUUID(raw), Minor: int(at(offGPUs + gpuEntry*i + 16)), Memory: at(offGPUs + gpuEntry*i + 24)})
	}
	return p, nil
}

// FormatUUID formats a raw CUuuid as NVML prints it,
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
func FormatUUID(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
