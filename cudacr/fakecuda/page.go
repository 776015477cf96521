package fakecuda

import (
	"encoding/binary"
	"fmt"
	"os"
)

// The state page of a fake CUDA process; see csrc/fakecuda.h, which this
// mirrors field by field.
const (
	PageAddr = 0x6c7d00000000
	pageSize = 512
	magic    = 0x454b4146304f5943
	maxPairs = 8
)

// Page is the fake driver's state of one process.
type Page struct {
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
	if u(0) != magic {
		return Page{}, fmt.Errorf("pid %d: fake CUDA state page has a bad magic", pid)
	}
	p := Page{
		State: int(u(2)), Busy: u(3) != 0, Locks: u(4), Checkpoints: u(5),
		Restores: u(6), Unlocks: u(7), LockTimeout: u(8), DevSize: u(11),
		InitPID: int(u(12)), PairsCount: int(u(13)), RestorePID: int(u(14)),
	}
	for i := 0; i < min(p.PairsCount, maxPairs); i++ {
		var pr [2][16]byte
		copy(pr[0][:], b[256+32*i:])
		copy(pr[1][:], b[256+32*i+16:])
		p.Pairs = append(p.Pairs, pr)
	}
	return p, nil
}
