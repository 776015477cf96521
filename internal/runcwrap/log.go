package runcwrap

import (
	"context"
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
		l.log(slog.LevelInfo, format, a...)
	}
}
func (l *logger) warn(format string, a ...any) { l.log(slog.LevelWarn, format, a...) }

// error also goes to stderr when the log is a file, as runc's fatal errors do,
// so that whoever ran the command sees why it failed.
func (l *logger) error(format string, a ...any) {
	l.log(slog.LevelError, format, a...)
	if l.w != os.Stderr {
		fmt.Fprintf(os.Stderr, "cryo-runc: %s\n", fmt.Sprintf(format, a...))
	}
}

// log writes one of cryo-runc's own lines; in text, prefixed with the
// program's name, as runc's readers show them among runc's.
func (l *logger) log(level slog.Level, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if !l.json {
		msg = "cryo-runc: " + msg
	}
	l.handler(slog.LevelInfo).Handle(context.Background(), slog.NewRecord(time.Now(), level, msg, 0))
}

// slog is a structured logger over the same destination and format, for the
// orchestration's step lines and warnings.
func (l *logger) slog() *slog.Logger {
	min := slog.LevelInfo
	if l.quiet {
		min = slog.LevelWarn
	}
	return slog.New(l.handler(min))
}

// handler writes slog records in runc's log format: JSON objects (or
// logfmt text) with level, msg and time, the level in runc's lowercase
// words and the time in RFC 3339, which is what runc's readers parse.
func (l *logger) handler(min slog.Level) slog.Handler {
	opts := &slog.HandlerOptions{Level: min, ReplaceAttr: runcAttr}
	if l.json {
		return slog.NewJSONHandler(l.w, opts)
	}
	return slog.NewTextHandler(l.w, opts)
}

func runcAttr(groups []string, a slog.Attr) slog.Attr {
	if len(groups) > 0 {
		return a
	}
	switch a.Key {
	case slog.LevelKey:
		return slog.String(slog.LevelKey, runcLevel(a.Value.Any().(slog.Level)))
	case slog.TimeKey:
		return slog.String(slog.TimeKey, a.Value.Time().UTC().Format(time.RFC3339))
	}
	return a
}

// runcLevel is logrus's word for a level, as runc writes it.
func runcLevel(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "error"
	case l >= slog.LevelWarn:
		return "warning"
	case l >= slog.LevelInfo:
		return "info"
	}
	return "debug"
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
