/*
 * frozen.c: the real driver hangs when its target's cgroup is frozen (even
 * past the lock's timeoutMs). The fake does the same, so that callers'
 * "thaw first" and kill-at-deadline paths are exercised without a GPU.
 * Included by checkpoint.c. Set CRYO_FAKE_CUDA_IGNORE_FROZEN=1 to turn it off.
 */

static int file_says(const char *path, const char *want)
{
	char buf[64] = {0};
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	return strncmp(buf, want, strlen(want)) == 0;
}

/* cgroup_frozen checks one line of /proc/PID/cgroup, v2 or v1 freezer. */
static int cgroup_frozen(char *line)
{
	char path[4096], *ctrl = strchr(line, ':'), *cg;

	if (!ctrl || !(cg = strchr(ctrl + 1, ':')))
		return 0;
	*cg++ = 0;
	cg[strcspn(cg, "\n")] = 0;
	ctrl++;
	if (!*ctrl) {
		snprintf(path, sizeof(path), "/sys/fs/cgroup%s/cgroup.freeze", cg);
		if (file_says(path, "1"))
			return 1;
		snprintf(path, sizeof(path), "/sys/fs/cgroup/unified%s/cgroup.freeze", cg);
		return file_says(path, "1");
	}
	if (strstr(ctrl, "freezer")) {
		snprintf(path, sizeof(path), "/sys/fs/cgroup/freezer%s/freezer.state", cg);
		return file_says(path, "FROZEN") || file_says(path, "FREEZING");
	}
	return 0;
}

static int is_frozen(int pid)
{
	char path[64], line[4096];
	int frozen = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", pid);
	if (!(f = fopen(path, "r")))
		return 0;
	while (!frozen && fgets(line, sizeof(line), f))
		frozen = cgroup_frozen(line);
	fclose(f);
	return frozen;
}

/* hang_if_frozen never returns while pid's cgroup is frozen. */
static void hang_if_frozen(int pid)
{
	const char *off = getenv("CRYO_FAKE_CUDA_IGNORE_FROZEN");

	if (off && *off == '1')
		return;
	while (is_frozen(pid))
		pause();
}
