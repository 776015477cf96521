package runcwrap

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"
)

// logger writes cryo-runc's messages where runc writes its own: the --log
// file in the --log-format ("text" or "json") when given, else stderr. The
// caller (Podman, conmon) reads runc's log to report errors, so cryo's lines
// must have runc's shape: json objects with level, msg and time.
type logger struct {
	w     io.Writer
	json  bool
	quiet bool // on stderr without --debug, runc prints nothing on success; neither does cryo
}

func newLogger(c cmdline) *logger {
	l := &logger{w: os.Stderr, json: c.globalValue("log-format") == "json", quiet: !hasFlag(c.globals, "debug")}
	if p := c.globalValue("log"); p != "" && p != "/dev/stderr" {
		if f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_SYNC, 0o644); err == nil {
			l.w, l.quiet = f, false
		}
	}
	return l
}

func (l *logger) info(format string, a ...any) {
	if !l.quiet {
		l.log("info", format, a...)
	}
}
func (l *logger) warn(format string, a ...any) { l.log("warning", format, a...) }

// error also goes to stderr when the log is a file, as runc's fatal errors do,
// so that whoever ran the command sees why it failed.
func (l *logger) error(format string, a ...any) {
	l.log("error", format, a...)
	if l.w != os.Stderr {
		fmt.Fprintf(os.Stderr, "cryo-runc: %s\n", fmt.Sprintf(format, a...))
	}
}

func (l *logger) log(level, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	now := time.Now().UTC().Format(time.RFC3339)
	if l.json {
		b, _ := json.Marshal(map[string]string{"level": level, "msg": msg, "time": now})
		fmt.Fprintf(l.w, "%s\n", b)
		return
	}
	fmt.Fprintf(l.w, "time=%q level=%s msg=%q\n", now, level, "cryo-runc: "+msg)
}

// slog is a structured logger over the same destination and format, for the
// orchestration's step lines.
func (l *logger) slog() *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if l.quiet {
		opts.Level = slog.LevelWarn
	}
	if l.json {
		return slog.New(slog.NewJSONHandler(l.w, opts))
	}
	return slog.New(slog.NewTextHandler(l.w, opts))
}

// hasFlag reports whether the boolean flag --name is among args.
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if n, v, has := splitFlag(a); n == name && (!has || v == "true") {
			return true
		}
	}
	return false
}
