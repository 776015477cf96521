/*
 * faults.c: fault injection of the fake driver. Included by checkpoint.c.
 *
 * With CRYO_FAKE_CUDA_FAULTS=<dir>, an entry point named op (lock,
 * checkpoint, restore, unlock, state, tid) first looks for <dir>/<op>.<pid>,
 * then <dir>/<op>. The file holds words:
 *   error <code>   return that CUresult without touching the process
 *   hang           never return (tests the caller's kill deadline)
 *   delay <ms>     sleep, then go on normally
 *   midway <ms>    sleep halfway through the call's work: a checkpoint with
 *                  its copy done and half the device memory released, a
 *                  restore with half the memory copied back
 *   failed         mark the process failed (state 3), return CUDA_ERROR_UNKNOWN
 *   once           delete the file when it fires
 */

static int fault_file(const char *op, int pid, char *path, size_t n)
{
	const char *dir = getenv("CRYO_FAKE_CUDA_FAULTS");

	if (!dir || !*dir)
		return -1;
	snprintf(path, n, "%s/%s.%d", dir, op, pid);
	if (access(path, F_OK) == 0)
		return 0;
	snprintf(path, n, "%s/%s", dir, op);
	return access(path, F_OK);
}

static void mark_failed(int pid)
{
	int fd;

	if (proc_open(pid, &fd) == CUDA_SUCCESS) {
		put_u64(fd, FIELD(state), FAKECU_FAILED);
		close(fd);
	}
}

/* fault returns the CUresult to fail with, or CUDA_SUCCESS to go on. */
static CUresult fault(const char *op, int pid)
{
	char path[4096], text[256] = {0}, *tok, *save = NULL;
	CUresult r = CUDA_SUCCESS;
	int hang = 0, failed = 0;
	FILE *f;

	if (fault_file(op, pid, path, sizeof(path)))
		return CUDA_SUCCESS;
	f = fopen(path, "r");
	if (!f)
		return CUDA_SUCCESS;
	if (!fgets(text, sizeof(text), f))
		text[0] = 0;
	fclose(f);
	for (tok = strtok_r(text, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
		if (!strcmp(tok, "error") && (tok = strtok_r(NULL, " \t\n", &save)))
			r = atoi(tok);
		else if (!strcmp(tok, "delay") && (tok = strtok_r(NULL, " \t\n", &save)))
			usleep((useconds_t)atoi(tok) * 1000);
		else if (!strcmp(tok, "midway") && (tok = strtok_r(NULL, " \t\n", &save)))
			midway_ms = (unsigned int)atoi(tok);
		else if (!strcmp(tok, "hang"))
			hang = 1;
		else if (!strcmp(tok, "failed"))
			failed = 1;
		else if (!strcmp(tok, "once"))
			unlink(path);
	}
	while (hang)
		pause();
	if (failed) {
		mark_failed(pid);
		return CUDA_ERROR_UNKNOWN;
	}
	return r;
}
