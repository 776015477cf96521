package cuda

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// PIDsOfCgroup lists the processes of a cgroup directory and of all its
// descendants, sorted. It reads cgroup.procs, which v1 and v2 both have
// (v1's "tasks" lists threads, which the driver does not want).
func PIDsOfCgroup(dir string) ([]int, error) {
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return nil, fmt.Errorf("cgroup %s: no cgroup.procs (is it a cgroup directory?): %w", dir, err)
	}
	seen := map[int]bool{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return ignoreVanished(err)
		}
		if !e.IsDir() {
			return nil
		}
		return readProcs(filepath.Join(path, "cgroup.procs"), seen)
	})
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	pids := make([]int, 0, len(seen))
	for p := range seen {
		pids = append(pids, p)
	}
	sort.Ints(pids)
	return pids, nil
}

func readProcs(path string, seen map[int]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return ignoreVanished(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		pid, err := strconv.Atoi(line)
		if err != nil {
			return fmt.Errorf("%s: bad pid %q", path, line)
		}
		seen[pid] = true
	}
	return sc.Err()
}

// ignoreVanished skips child cgroups removed while we walk.
func ignoreVanished(err error) error {
	if os.IsNotExist(err) {
		return nil
	}
	return err
}
