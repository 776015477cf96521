package orchestrate

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/criuimg"
)

// noMapping is how a CRIU restore fails on a mount that the checkpoint
// holds as external and the restore does not map (criu/mount.c,
// get_mp_root): "mnt: No mapping for 93:(null) mountpoint". The number is
// the mount's ID in the checkpoint; CRIU 4.2 prints "(null)" for its path,
// which it reads only after that check.
var noMapping = regexp.MustCompile(`No mapping for (\d+):\S+ mountpoint`)

// unmappedMount explains CRIU's noMapping line by the mount of the
// checkpoint in images that it names, as text to append to the line:
// " (…)", or "" for any other line or a mount the images do not hold.
//
// runc marks external, at checkpoint, each bind mount of the container's
// spec and, on cgroup v1 without a cgroup namespace, each cgroup v1
// hierarchy that the host had mounted when the container was created (runc
// binds each into /sys/fs/cgroup); at restore it maps those of the new spec
// and the hierarchies the host has mounted then. A hierarchy mounted on the
// host when the container started and unmounted before its restore fails
// the restore with this line.
func unmappedMount(line, images string) string {
	m := noMapping.FindStringSubmatch(line)
	if m == nil || images == "" {
		return ""
	}
	id, _ := strconv.Atoi(m[1])
	d, err := criuimg.Read(images, criuimg.Options{NoPages: true})
	if err != nil {
		return ""
	}
	for _, mt := range d.Mounts {
		if mt.ID != id {
			continue
		}
		if mt.FSType == "cgroup" {
			opts := mt.Options
			if strings.HasPrefix(opts, "name=") {
				opts = "none," + opts
			}
			return fmt.Sprintf(" (mount %d is the container's %s, cgroup v1 hierarchy %s, which the host had mounted when the container started and no longer has: "+
				"runc maps at restore only the hierarchies mounted now; mount it again on a directory named %s, e.g. `mount -t cgroup -o %s cgroup /sys/fs/cgroup/%s`, and restore again)",
				id, mt.MountPoint, mt.Options, path.Base(mt.MountPoint), opts, path.Base(mt.MountPoint))
		}
		return fmt.Sprintf(" (mount %d is the container's mount at %s, which the restored container's spec does not give it: give it that mount again)", id, mt.MountPoint)
	}
	return ""
}
