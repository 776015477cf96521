package confine

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// seccompLevel ranks a filter's action by what it lets the syscall do,
// most restrictive first, as the kernel ranks them: it runs every filter
// of a chain and keeps the most restrictive result, so "at least as
// strict" is "a level no higher". An ERRNO is one level whatever its
// errno: the process cannot run the syscall either way.
type seccompLevel uint8

const (
	seccompKillProcess seccompLevel = iota
	seccompKillThread
	seccompTrap
	seccompErrno
	seccompUserNotif
	seccompTrace
	seccompLog
	seccompAllow
)

// seccompRetENOSYS is what runc's stub returns for syscalls newer than
// the spec's rules.
const seccompRetENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)

// seccompLevelOf is the level of a filter's return value. The kernel
// kills the process on an action it does not know, so an unknown action is
// the strictest.
func seccompLevelOf(ret uint32) seccompLevel {
	switch ret & unix.SECCOMP_RET_ACTION_FULL {
	case unix.SECCOMP_RET_KILL_THREAD:
		return seccompKillThread
	case unix.SECCOMP_RET_TRAP:
		return seccompTrap
	case unix.SECCOMP_RET_ERRNO:
		return seccompErrno
	case unix.SECCOMP_RET_USER_NOTIF:
		return seccompUserNotif
	case unix.SECCOMP_RET_TRACE:
		return seccompTrace
	case unix.SECCOMP_RET_LOG:
		return seccompLog
	case unix.SECCOMP_RET_ALLOW:
		return seccompAllow
	}
	return seccompKillProcess
}

// seccompMin combines two filters' results as seccomp_run_filters does:
// the lower action, compared as a signed number (KILL_PROCESS is
// 0x80000000, the lowest).
func seccompMin(a, b uint32) uint32 {
	if int32(b&unix.SECCOMP_RET_ACTION_FULL) < int32(a&unix.SECCOMP_RET_ACTION_FULL) {
		return b
	}
	return a
}

// seccompActionName names a return value as seccomp(2) does.
func seccompActionName(ret uint32) string {
	data := ret & unix.SECCOMP_RET_DATA
	switch ret & unix.SECCOMP_RET_ACTION_FULL {
	case unix.SECCOMP_RET_KILL_PROCESS:
		return "KILL_PROCESS"
	case unix.SECCOMP_RET_KILL_THREAD:
		return "KILL_THREAD"
	case unix.SECCOMP_RET_TRAP:
		return "TRAP"
	case unix.SECCOMP_RET_ERRNO:
		return fmt.Sprintf("ERRNO(%d)", data)
	case unix.SECCOMP_RET_USER_NOTIF:
		return "USER_NOTIF"
	case unix.SECCOMP_RET_TRACE:
		return "TRACE"
	case unix.SECCOMP_RET_LOG:
		return "LOG"
	case unix.SECCOMP_RET_ALLOW:
		return "ALLOW"
	}
	return fmt.Sprintf("unknown action %#x (the kernel kills the process)", ret)
}

// seccompActionValues are the known actions: a filter returning one of
// its inputs must be tried with each.
var seccompActionValues = [...]uint32{
	unix.SECCOMP_RET_KILL_PROCESS, unix.SECCOMP_RET_KILL_THREAD, unix.SECCOMP_RET_TRAP,
	unix.SECCOMP_RET_ERRNO, unix.SECCOMP_RET_USER_NOTIF, unix.SECCOMP_RET_TRACE,
	unix.SECCOMP_RET_LOG, unix.SECCOMP_RET_ALLOW,
}
