// Package fixup repairs a restored container where CRIU leaves it unlike
// what its new spec asks: the loopback of its network namespace, the
// cgroup of its processes, the GPU device nodes of its /dev, and, before
// the restore, the wait for TIME_WAIT sockets on its listening ports. Each
// fix-up is a plain function of the facts it needs, logging what it could
// not do: the orchestration decides when each runs.
package fixup

import (
	"fmt"
	"log/slog"
	"os"
	stdruntime "runtime"

	"golang.org/x/sys/unix"
)

// UpLoopback brings up the loopback of the restored container id whose
// init is initPID, when it has a network namespace of its own. CRIU 4.2
// restores a container's namespace with its loopback down (seen with runc
// and with Podman's --network none): a server restored there answers
// "network is unreachable" on 127.0.0.1. A container on the host's network
// is left alone.
func UpLoopback(log *slog.Logger, id string, initPID int) {
	if initPID <= 0 {
		return
	}
	own, err := ownNetns(initPID)
	if err != nil || !own {
		return
	}
	if err := inNetns(initPID, setLoopbackUp); err != nil {
		log.Warn("loopback of the restored container left down", "id", id, "error", err)
	}
}

// ownNetns reports whether pid's network namespace is not this process's.
func ownNetns(pid int) (bool, error) {
	theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return false, err
	}
	ours, err := os.Readlink("/proc/self/ns/net")
	return theirs != ours, err
}

// inNetns runs f on an OS thread that has joined pid's network namespace.
// The thread is never handed back to the Go scheduler: it exits with the
// goroutine, so no other code runs in that namespace by accident.
func inNetns(pid int, f func() error) error {
	done := make(chan error, 1)
	go func() {
		stdruntime.LockOSThread()
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err == nil {
			err = f()
		}
		done <- err
	}()
	return <-done
}

func setLoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("read the flags of lo: %w", err)
	}
	flags := ifr.Uint16()
	if flags&unix.IFF_UP != 0 {
		return nil
	}
	ifr.SetUint16(flags | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}
