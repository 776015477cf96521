package installer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hostPATH is the PATH of the commands run on the host: cryo's prefix
// first, then the usual places.
func (o Options) hostPATH() string {
	return "PATH=" + filepath.Join(o.Prefix, "sbin") + ":" + filepath.Join(o.Prefix, "bin") +
		":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
}

// runHost runs argv in the host's root (chroot HostRoot), so that it
// finds the host's own binaries and libraries, and returns its output.
func runHost(ctx context.Context, o Options, timeout time.Duration, argv ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{o.hostPATH(), "HOME=/root", "LANG=C"}
	cmd.Dir = "/"
	if filepath.Clean(o.HostRoot) != "/" { // "/": the installer runs on the host itself
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: o.HostRoot}
	}
	if !strings.Contains(argv[0], "/") {
		// exec looks the name up in this process's root, not the host's.
		p, err := lookHost(o, argv[0])
		if err != nil {
			return nil, err
		}
		cmd.Path = p
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// lookHost finds name in the host's PATH, as a host path.
func lookHost(o Options, name string) (string, error) {
	for _, d := range strings.Split(strings.TrimPrefix(o.hostPATH(), "PATH="), ":") {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(o.onHost(p)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on the host's PATH", name)
}

var containerdVersion = regexp.MustCompile(`\sv?([0-9]+)\.([0-9]+)\.[0-9]+`)

// containerdMajor is the major version of the host's containerd.
func containerdMajor(ctx context.Context, o Options) (int, error) {
	bin := o.Containerd
	if bin == "" {
		for _, p := range []string{"/usr/bin/containerd", "/usr/local/bin/containerd"} {
			if _, err := os.Stat(o.onHost(p)); err == nil {
				bin = p
				break
			}
		}
	}
	if bin == "" {
		return 0, stepErr("containerd config", o.ContainerdConfig, fmt.Errorf("%w: no such file, and no containerd binary found", ErrConfig),
			"name the configuration (values: containerd.config) or the binary (values: containerd.binary)")
	}
	out, err := runHost(ctx, o, 30*time.Second, bin, "--version")
	m := containerdVersion.FindSubmatch(out)
	if err != nil || m == nil {
		return 0, stepErr("containerd config", bin+" --version", fmt.Errorf("%w: %v: %s", ErrConfig, err, out),
			"set the schema (values: containerd.configVersion: 2 for 1.7, 3 for 2.x)")
	}
	major, _ := strconv.Atoi(string(m[1]))
	return major, nil
}

// restartContainerd runs the restart command and waits until containerd
// serves again on a socket it made anew.
func restartContainerd(ctx context.Context, o Options) error {
	sock := o.onHost(o.Socket)
	before := inode(sock)
	o.logf("restarting containerd: %s", strings.Join(o.Restart, " "))
	if out, err := runHost(ctx, o, 2*time.Minute, o.Restart...); err != nil {
		return stepErr("restart", strings.Join(o.Restart, " "), fmt.Errorf("%w: %s", err, bytes.TrimSpace(out)),
			"restart containerd on the node by hand, or set values: containerd.restart")
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if ino := inode(sock); ino != ([3]int64{}) && ino != before {
			if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
				c.Close()
				o.logf("containerd is back on %s", o.Socket)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return stepErr("restart", o.Socket, fmt.Errorf("containerd did not serve again within 2 minutes"),
		"check containerd's log on the node (journalctl -u containerd)")
}

// inode identifies the file at p: its inode and change time, since a new
// socket may reuse the number of the one it replaced; zero: none.
func inode(p string) [3]int64 {
	var st syscall.Stat_t
	if syscall.Stat(p, &st) != nil {
		return [3]int64{}
	}
	return [3]int64{int64(st.Ino), st.Ctim.Sec, st.Ctim.Nsec}
}

// doctorReport is the part of `cryo doctor --json` the installer reads.
type doctorReport struct {
	Checks []struct {
		Name, Status, Detail, Fix string
	} `json:"checks"`
	Summary struct {
		OK       int `json:"ok"`
		Skipped  int `json:"skipped"`
		Warnings int `json:"warnings"`
		Failed   int `json:"failed"`
	} `json:"summary"`
}

// Doctor runs the installed cryo's doctor on the host and returns the
// failed checks' reasons; an error wraps ErrDoctor.
func Doctor(ctx context.Context, o Options) error {
	o = o.Defaults()
	out, err := runHost(ctx, o, 3*time.Minute, filepath.Join(o.Prefix, "bin", "cryo"), "doctor", "--json")
	var r doctorReport
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		return stepErr("doctor", "cryo doctor", fmt.Errorf("%w: %v: %s", ErrDoctor, err, bytes.TrimSpace(out)),
			"run `cryo doctor` on the node")
	}
	o.logf("cryo doctor on the host: %d ok, %d skipped, %d warnings, %d failed",
		r.Summary.OK, r.Summary.Skipped, r.Summary.Warnings, r.Summary.Failed)
	if r.Summary.Failed == 0 {
		return nil
	}
	var why []string
	for _, c := range r.Checks {
		if c.Status == "fail" {
			why = append(why, c.Name+": "+c.Detail)
		}
	}
	return stepErr("doctor", "cryo doctor", fmt.Errorf("%w: %s", ErrDoctor, strings.Join(why, "; ")),
		"run `cryo doctor` on the node and apply the fix it prints")
}
