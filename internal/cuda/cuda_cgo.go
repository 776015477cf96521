//go:build cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// Our own declarations of the driver's checkpoint types, laid out as in the
// public cuda.h of CUDA 12.8 and 13.0 (there is no cuda.h here).
typedef int cryo_CUresult;
typedef struct { unsigned char bytes[16]; } cryo_CUuuid;
typedef struct { cryo_CUuuid oldUuid; cryo_CUuuid newUuid; } cryo_GpuPair;
typedef struct {
	unsigned int timeoutMs;
	unsigned int reserved0;
	uint64_t reserved1[7];
} cryo_LockArgs;
typedef struct { uint64_t reserved[8]; } cryo_CheckpointArgs;
typedef struct {
	cryo_GpuPair *gpuPairs;
	unsigned int gpuPairsCount;
	char reserved[52 - sizeof(cryo_GpuPair *)];
	uint64_t reserved1;
} cryo_RestoreArgs;
typedef struct { uint64_t reserved[8]; } cryo_UnlockArgs;

_Static_assert(sizeof(cryo_LockArgs) == 64, "CUcheckpointLockArgs");
_Static_assert(sizeof(cryo_CheckpointArgs) == 64, "CUcheckpointCheckpointArgs");
_Static_assert(sizeof(cryo_RestoreArgs) == 64, "CUcheckpointRestoreArgs");
_Static_assert(sizeof(cryo_GpuPair) == 32, "CUcheckpointGpuPair");

static void *cryo_open(const char *path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
static const char *cryo_dlerror(void) { return dlerror(); }
static void *cryo_sym(void *h, const char *name) { return dlsym(h, name); }

static cryo_CUresult cryo_version(void *f, int *v) {
	return ((cryo_CUresult (*)(int *))f)(v);
}
static cryo_CUresult cryo_errstr(void *f, cryo_CUresult code, const char **s) {
	*s = NULL;
	return ((cryo_CUresult (*)(cryo_CUresult, const char **))f)(code, s);
}
static cryo_CUresult cryo_lock(void *f, int pid, unsigned int ms) {
	cryo_LockArgs a;
	memset(&a, 0, sizeof(a));
	a.timeoutMs = ms;
	return ((cryo_CUresult (*)(int, cryo_LockArgs *))f)(pid, &a);
}
static cryo_CUresult cryo_checkpoint(void *f, int pid) {
	cryo_CheckpointArgs a;
	memset(&a, 0, sizeof(a));
	return ((cryo_CUresult (*)(int, cryo_CheckpointArgs *))f)(pid, &a);
}
static cryo_CUresult cryo_restore(void *f, int pid, cryo_GpuPair *pairs, unsigned int n) {
	cryo_RestoreArgs a;
	memset(&a, 0, sizeof(a));
	a.gpuPairs = n ? pairs : NULL;
	a.gpuPairsCount = n;
	return ((cryo_CUresult (*)(int, cryo_RestoreArgs *))f)(pid, &a);
}
static cryo_CUresult cryo_unlock(void *f, int pid) {
	cryo_UnlockArgs a;
	memset(&a, 0, sizeof(a));
	return ((cryo_CUresult (*)(int, cryo_UnlockArgs *))f)(pid, &a);
}
static cryo_CUresult cryo_getint(void *f, int pid, int *out) {
	return ((cryo_CUresult (*)(int, int *))f)(pid, out);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/cryo-gpu/cryo/internal/config"
)

// cudaLib is libcuda opened in the helper. It is never closed: the helper
// exits right after one call.
type cudaLib struct {
	path string
	h    unsafe.Pointer
}

// openCUDA dlopens the driver library.
func openCUDA(path string) (*cudaLib, *wireError) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	h := C.cryo_open(cpath)
	if h == nil {
		return nil, &wireError{Kind: kindLibrary, Message: fmt.Sprintf(
			"cannot load %s (%s); install the NVIDIA driver, or set %s or Options.LibPath to libcuda.so.1",
			path, C.GoString(C.cryo_dlerror()), config.EnvLibCUDA)}
	}
	return &cudaLib{path: path, h: h}, nil
}

// sym returns the address of name, or nil when the library lacks it.
func (l *cudaLib) sym(name string) unsafe.Pointer {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.cryo_sym(l.h, cname)
}

// version is cuDriverGetVersion, or 0 when it fails.
func (l *cudaLib) version() int {
	f := l.sym("cuDriverGetVersion")
	var v C.int
	if f == nil || C.cryo_version(f, &v) != 0 {
		return 0
	}
	return int(v)
}

// driverError builds a driver error with the driver's own name and text.
func (l *cudaLib) driverError(code int) *wireError {
	return &wireError{Kind: kindDriver, Code: code,
		Name:    l.errText("cuGetErrorName", code, fmt.Sprintf("CUDA_ERROR_%d", code)),
		Message: l.errText("cuGetErrorString", code, "unknown error")}
}

func (l *cudaLib) errText(fn string, code int, def string) string {
	f := l.sym(fn)
	var s *C.char
	if f == nil || C.cryo_errstr(f, C.cryo_CUresult(code), &s) != 0 || s == nil {
		return def
	}
	return C.GoString(s)
}

// invoke calls f, the entry point of req.Op. raw holds the GPU pairs of a
// restore, laid out as CUcheckpointGpuPair. out receives state or thread id.
func (l *cudaLib) invoke(f unsafe.Pointer, req request, raw []byte, out *reply) int {
	pid := C.int(req.PID)
	var v C.int
	switch req.Op {
	case opLock:
		return int(C.cryo_lock(f, pid, C.uint(req.TimeoutMs)))
	case opCkpt:
		return int(C.cryo_checkpoint(f, pid))
	case opUnlock:
		return int(C.cryo_unlock(f, pid))
	case opRestore:
		return restore(f, pid, raw)
	case opState:
		code := C.cryo_getint(f, pid, &v)
		out.State = int(v)
		return int(code)
	default: // opTID
		code := C.cryo_getint(f, pid, &v)
		out.TID = int(v)
		return int(code)
	}
}

// restore copies the pairs into C memory for the call.
func restore(f unsafe.Pointer, pid C.int, raw []byte) int {
	if len(raw) == 0 {
		return int(C.cryo_restore(f, pid, nil, 0))
	}
	buf := C.CBytes(raw)
	defer C.free(buf)
	return int(C.cryo_restore(f, pid, (*C.cryo_GpuPair)(buf), C.uint(len(raw)/32)))
}
