/*
 * Shared definitions of the fake CUDA driver: the state page that lives
 * inside every fake CUDA process.
 *
 * The real driver keeps a process's checkpoint state inside that process,
 * so it survives CRIU and pid changes. The fake does the same: fakecuInit
 * maps one page at a fixed address in the application, and the
 * cuCheckpointProcess* entry points, called from another process with a pid,
 * read and write that page through /proc/PID/mem.
 *
 * Every field is a uint64_t or raw bytes at a fixed offset so that the Go
 * decoder (fakecuda.ReadPage) can read it without cgo. Keep both in sync;
 * offsets only ever get added (FAKECU_LAYOUT counts the additions).
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>
#include <stdint.h>

/* High in the user address space but far below the stack and the mmap base. */
#define FAKECU_PAGE_ADDR 0x6c7d00000000ULL
#define FAKECU_PAGE_SIZE 4096
#define FAKECU_MAGIC 0x454b4146304f5943ULL /* "CYO0FAKE" little endian */
#define FAKECU_LAYOUT 3
#define FAKECU_MAX_PAIRS 8
#define FAKECU_MAX_GPUS 8 /* visible GPUs recorded per process */

enum {
	FAKECU_RUNNING = 0,
	FAKECU_LOCKED = 1,
	FAKECU_CHECKPOINTED = 2,
	FAKECU_FAILED = 3,
};

/* flags */
enum {
	/* The process found GPU device nodes and holds /dev/nvidia<minor> open
	 * for each visible GPU while it has GPU state (a container, or a host
	 * with nodes). Clear: no node could be opened, every GPU of the table is
	 * visible and no fd is held (a host without device isolation). */
	FAKECU_HOLDS_DEVICES = 1,
	/* The process shares device memory through CUDA IPC (an NCCL rank on
	 * the P2P, SHM or cuMem transports): driver 580 cannot restore it. */
	FAKECU_IPC = 2,
};

/* One visible GPU, in CUDA's device order. */
struct fakecu_gpu {
	uint8_t uuid[16];        /* CUuuid; a restore rewrites it to the new GPU */
	uint64_t minor;          /* /dev/nvidia<minor> */
	uint64_t memory;         /* bytes of "device memory" held on it */
};

struct fakecu_page {
	uint64_t magic;          /*   0 */
	uint64_t layout;         /*   8 */
	uint64_t state;          /*  16: FAKECU_* */
	uint64_t busy;           /*  24: 1 while the app is inside a "CUDA call" */
	uint64_t locks;          /*  32: successful locks */
	uint64_t checkpoints;    /*  40 */
	uint64_t restores;       /*  48 */
	uint64_t unlocks;        /*  56 */
	uint64_t lock_timeout;   /*  64: timeoutMs of the last lock */
	uint64_t dev_addr;       /*  72: "device memory" buffer */
	uint64_t save_addr;      /*  80: host copy made by checkpoint */
	uint64_t dev_size;       /*  88 */
	uint64_t init_pid;       /*  96: getpid() at fakecuInit */
	uint64_t pairs_count;    /* 104: gpuPairsCount of the last restore */
	uint64_t restore_pid;    /* 112: pid argument of the last restore */
	/* Layout 2. */
	uint64_t gpu_count;      /* 120: visible GPUs, entries of gpus[] */
	uint64_t flags;          /* 128: FAKECU_HOLDS_DEVICES | FAKECU_IPC */
	/*
	 * The device-fd handshake: the driver bumps req_gen after changing the
	 * state (or the GPUs); the application's device thread then closes its
	 * /dev/nvidia* fds (checkpointed) or opens those of gpus[] (otherwise),
	 * stores the errno of a failed open in open_errno (0 if none) and sets
	 * ack_gen = req_gen. The driver waits for that before it returns.
	 */
	uint64_t req_gen;        /* 136 */
	uint64_t ack_gen;        /* 144 */
	uint64_t open_errno;     /* 152 */
	/* Layout 3. */
	uint64_t restore_tid;    /* 160: the device thread, the driver's restore thread */
	uint64_t devmap_addr;    /* 168: a page the driver maps into the process */
	uint64_t touches;        /* 176: reads of it by the touch thread */
	uint64_t reserved[9];    /* 184..255 */
	uint8_t pairs[FAKECU_MAX_PAIRS][32]; /* 256: {oldUuid,newUuid} of the last restore */
	struct fakecu_gpu gpus[FAKECU_MAX_GPUS]; /* 512..767 */
};

_Static_assert(offsetof(struct fakecu_page, gpu_count) == 120, "page layout");
_Static_assert(offsetof(struct fakecu_page, open_errno) == 152, "page layout");
_Static_assert(offsetof(struct fakecu_page, restore_tid) == 160, "page layout");
_Static_assert(offsetof(struct fakecu_page, touches) == 176, "page layout");
_Static_assert(offsetof(struct fakecu_page, pairs) == 256, "page layout");
_Static_assert(offsetof(struct fakecu_page, gpus) == 512, "page layout");
_Static_assert(sizeof(struct fakecu_gpu) == 32, "page layout");
_Static_assert(sizeof(struct fakecu_page) <= FAKECU_PAGE_SIZE, "page size");

/* Entry points only the fake has, called by fakecuda-app in its own process. */
int fakecuInit(void);
int fakecuMemAlloc(void **dptr, size_t size);
int fakecuMemSpread(void);
void fakecuIpcExport(void);
const char *fakecuDeviceList(void);
void fakecuEnter(void);
void fakecuLeave(void);

#endif
