package runcwrap

import (
	"os"
	"path/filepath"
	"strings"
)

// crValueFlags are the options of `runc checkpoint` and `runc restore` that
// take a value (runc 1.1). Knowing them is how the container id is told apart
// from an option's value; unknown options are assumed to be booleans and are
// passed to runc unchanged all the same.
var crValueFlags = map[string]bool{
	"image-path": true, "work-path": true, "parent-path": true, "status-fd": true,
	"page-server": true, "manage-cgroups-mode": true, "empty-ns": true,
	"console-socket": true, "bundle": true, "b": true, "pid-file": true,
	"lsm-profile": true, "lsm-mount-context": true,
}

// crOpts is what cryo needs to know of a checkpoint or restore command line.
type crOpts struct {
	id           string
	imagePath    string // absolute; runc's default is ./checkpoint
	workPath     string
	bundle       string // absolute; runc's default is the working directory
	leaveRunning bool
	detach       bool
	preDump      bool
	tcp          bool // --tcp-established
	help         bool
}

// parseCROpts reads the options of `runc checkpoint|restore` from rest.
func parseCROpts(rest []string) crOpts {
	var o crOpts
	var positional []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			positional = append(positional, rest[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		name, v, has := splitFlag(a)
		if crValueFlags[name] && !has && i+1 < len(rest) {
			i++
			v = rest[i]
		}
		o.set(name, v, has)
	}
	if len(positional) > 0 {
		o.id = positional[len(positional)-1]
	}
	o.imagePath = absPath(o.imagePath, "checkpoint")
	o.bundle = absPath(o.bundle, ".")
	return o
}

// set records one option; boolean flags may be written --flag=false.
func (o *crOpts) set(name, v string, has bool) {
	on := !has || v == "true" || v == "1"
	switch name {
	case "image-path":
		o.imagePath = v
	case "work-path":
		o.workPath = v
	case "bundle", "b":
		o.bundle = v
	case "leave-running":
		o.leaveRunning = on
	case "detach", "d":
		o.detach = on
	case "pre-dump":
		o.preDump = on
	case "tcp-established":
		o.tcp = on
	case "help", "h":
		o.help = on
	}
}

// absPath makes p absolute against the working directory, as runc does;
// an empty p means def.
func absPath(p, def string) string {
	if p == "" {
		p = def
	}
	if filepath.IsAbs(p) {
		return p
	}
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	return filepath.Join(wd, p)
}
