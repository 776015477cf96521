package criuaction

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// markerDir holds one empty file per action already run by a CRIU process.
var markerDir = "/run/cryo/criu-actions" // a variable for the tests

// firstRun reports whether this is the first run of action for the CRIU
// process that is our parent. CRIU 4.1 in runc's RPC mode registers the
// configuration file's action-script twice, so every action runs twice; a
// second suspend would find the processes checkpointed and rewrite the
// manifest. When the marker cannot be written, the action runs (the driver
// refuses a second suspend of a checkpointed process anyway).
func firstRun(action string) bool {
	if err := os.MkdirAll(markerDir, 0o700); err != nil {
		return true
	}
	removeStaleMarkers()
	name := criuKey() + "-" + action
	f, err := os.OpenFile(filepath.Join(markerDir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		return false
	}
	if err == nil {
		f.Close()
	}
	return true
}

// removeStaleMarkers deletes the markers of CRIU processes that are gone.
func removeStaleMarkers() {
	entries, _ := os.ReadDir(markerDir)
	for _, e := range entries {
		f := strings.SplitN(e.Name(), "-", 3)
		pid, err := strconv.Atoi(f[0])
		if err != nil || len(f) < 3 || !procfs.Alive(pid) || procfs.StartTime(pid) != f[1] {
			os.Remove(filepath.Join(markerDir, e.Name()))
		}
	}
}

// criuKey names the CRIU process that runs this action: pid and start time.
func criuKey() string {
	criu := os.Getppid()
	return strconv.Itoa(criu) + "-" + procfs.StartTime(criu)
}

// rememberImageDir records the image directory for this CRIU's later actions.
func rememberImageDir(dir string) {
	if os.MkdirAll(markerDir, 0o700) == nil {
		os.WriteFile(filepath.Join(markerDir, criuKey()+"-imagedir"), []byte(dir), 0o600)
	}
}

func rememberedImageDir() string {
	data, _ := os.ReadFile(filepath.Join(markerDir, criuKey()+"-imagedir"))
	return string(data)
}
