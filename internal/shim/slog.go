package shim

import (
	"context"
	"log/slog"

	"github.com/containerd/log"
)

// entryHandler sends the orchestration's slog records (warnings such as a
// restore that trusts an unverified image, or an unavailable GPU inventory)
// to containerd's log, as entries of the request's logger with the record's
// attributes as fields.
type entryHandler struct {
	entry *log.Entry
}

func newEntryLogger(ctx context.Context) *slog.Logger {
	return slog.New(entryHandler{entry: log.G(ctx)})
}

func (h entryHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.entry.Logger.IsLevelEnabled(logrusLevel(l))
}

func (h entryHandler) Handle(_ context.Context, r slog.Record) error {
	fields := log.Fields{}
	r.Attrs(func(a slog.Attr) bool {
		fields[a.Key] = a.Value.Any()
		return true
	})
	h.entry.WithFields(fields).Log(logrusLevel(r.Level), "cryo: "+r.Message)
	return nil
}

func (h entryHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	fields := log.Fields{}
	for _, a := range attrs {
		fields[a.Key] = a.Value.Any()
	}
	return entryHandler{entry: h.entry.WithFields(fields)}
}

// WithGroup is not used by the orchestration; groups flatten into fields.
func (h entryHandler) WithGroup(string) slog.Handler { return h }

func logrusLevel(l slog.Level) log.Level {
	switch {
	case l >= slog.LevelError:
		return log.ErrorLevel
	case l >= slog.LevelWarn:
		return log.WarnLevel
	case l >= slog.LevelInfo:
		return log.InfoLevel
	}
	return log.DebugLevel
}
