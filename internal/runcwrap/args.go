package runcwrap

import "strings"

// cryoEnvFlag is cryo-runc's only global flag of its own. It names an
// environment file (see env.go) and is removed before runc sees the command
// line. Podman passes it on every call with `--runtime-flag cryo-env=FILE`.
const cryoEnvFlag = "cryo-env"

// runcGlobalsWithValue are runc's global flags that take a value. Everything
// else that starts with "-" before the command is a boolean flag. The list
// only decides where the command word is; the flags themselves go to runc as
// they came.
var runcGlobalsWithValue = map[string]bool{
	"log": true, "log-format": true, "root": true, "criu": true, "rootless": true,
	cryoEnvFlag: true,
}

// cmdline is a runc command line split at the command word.
type cmdline struct {
	globals []string // global flags, as given, without --cryo-env
	command string   // "checkpoint", "restore", "create", …; "" if none
	rest    []string // everything after the command word, untouched
	envFile string   // value of --cryo-env
}

// parseCmdline finds the command word after runc's global flags. Unknown
// global flags are kept as they are: runc decides whether they are valid.
func parseCmdline(args []string) cmdline {
	var c cmdline
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			// No command word we know how to read: runc gets it all as it is.
			c.globals = append(c.globals, args[i:]...)
			return c
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			c.command, c.rest = a, args[i+1:]
			return c
		}
		name, value, hasValue := splitFlag(a)
		if name == cryoEnvFlag {
			if !hasValue && i+1 < len(args) {
				i++
				value = args[i]
			}
			c.envFile = value
			continue
		}
		c.globals = append(c.globals, a)
		if runcGlobalsWithValue[name] && !hasValue && i+1 < len(args) {
			i++
			c.globals = append(c.globals, args[i])
		}
	}
	return c
}

// splitFlag splits "--name=value" or "-name" into its name and value.
func splitFlag(a string) (name, value string, hasValue bool) {
	name = strings.TrimLeft(a, "-")
	if k, v, ok := strings.Cut(name, "="); ok {
		return k, v, true
	}
	return name, "", false
}

// globalValue returns the value of a global flag such as --log, or "".
func (c cmdline) globalValue(flag string) string {
	return flagValue(c.globals, flag, runcGlobalsWithValue)
}

// argv is the command line for the real runc.
func (c cmdline) argv() []string {
	out := append([]string{}, c.globals...)
	if c.command != "" {
		out = append(out, c.command)
	}
	return append(out, c.rest...)
}

// flagValue finds the last value of --flag/-flag in args, where withValue
// names the flags that take a separate value (so their values are skipped).
func flagValue(args []string, flag string, withValue map[string]bool) string {
	val := ""
	for i := 0; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "-") || args[i] == "-" {
			continue
		}
		name, v, has := splitFlag(args[i])
		if withValue[name] && !has && i+1 < len(args) {
			i++
			v = args[i]
		}
		if name == flag {
			val = v
		}
	}
	return val
}
