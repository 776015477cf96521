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
 * Every field is a uint64_t at a fixed offset so that the Go decoder
 * (fakecuda.ReadPage) can read it without cgo. Keep both in sync.
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>
#include <stdint.h>

/* High in the user address space but far below the stack and the mmap base. */
#define FAKECU_PAGE_ADDR 0x6c7d00000000ULL
#define FAKECU_PAGE_SIZE 4096
#define FAKECU_MAGIC 0x454b4146304f5943ULL /* "CYO0FAKE" little endian */
#define FAKECU_LAYOUT 1
#define FAKECU_MAX_PAIRS 8

enum {
	FAKECU_RUNNING = 0,
	FAKECU_LOCKED = 1,
	FAKECU_CHECKPOINTED = 2,
	FAKECU_FAILED = 3,
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
	uint64_t reserved[17];   /* 120..255 */
	uint8_t pairs[FAKECU_MAX_PAIRS][32]; /* 256: {oldUuid,newUuid} of the last restore */
};

_Static_assert(offsetof(struct fakecu_page, pairs) == 256, "page layout");
_Static_assert(sizeof(struct fakecu_page) <= FAKECU_PAGE_SIZE, "page size");

/* Entry points only the fake has, called by fakecuda-app in its own process. */
int fakecuInit(void);
int fakecuMemAlloc(void **dptr, size_t size);
void fakecuEnter(void);
void fakecuLeave(void);

#endif
